//! Stream-ordered memory pools (acl_rt_memory_soma.h); the model is in `crate::pool`.

use std::ffi::c_void;
use std::sync::Arc;

use npu_sys::*;

use super::check::optional;
use super::memory::{quiesce, reserved_size};
use crate::context;
use crate::error::{Res, ensure, fail, guard, non_null, write_out};
use crate::handle;
use crate::pool::{Pool, Reuse};
use crate::sim::sim;

fn resolve(pool: aclrtMemPool) -> Res<Arc<Pool>> {
    non_null(pool, "memPool")?;
    sim()?.pools.resolve(handle::from_ptr(pool))
}

/// Creates a pool of device memory on `poolProps->location.id`: allocType PINNED, handleType
/// NONE (POSIX sharing → 207000), location type DEVICE, reserved bytes zero (otherwise
/// 107000); maxSize 0 means the device's capacity.
///
/// # Safety
/// `memPool` must be NULL or valid for a write; `poolProps` NULL or a valid struct.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemPoolCreate(
    memPool: *mut aclrtMemPool,
    poolProps: *const aclrtMemPoolProps,
) -> aclError {
    guard("aclrtMemPoolCreate", || {
        non_null(memPool, "memPool")?;
        let Some(props) = optional(poolProps) else {
            fail!(ACL_ERROR_INVALID_PARAM, "poolProps is NULL");
        };
        ensure!(
            props.allocType == ACL_MEM_ALLOCATION_TYPE_PINNED,
            ACL_ERROR_RT_PARAM_INVALID,
            "allocType {} is not ACL_MEM_ALLOCATION_TYPE_PINNED",
            props.allocType
        );
        ensure!(
            props.location.type_ == ACL_MEM_LOCATION_TYPE_DEVICE,
            ACL_ERROR_RT_PARAM_INVALID,
            "location type {} is not ACL_MEM_LOCATION_TYPE_DEVICE",
            props.location.type_
        );
        ensure!(
            props.reserved.iter().all(|&b| b == 0),
            ACL_ERROR_RT_PARAM_INVALID,
            "poolProps->reserved must be all zero"
        );
        match props.handleType {
            ACL_MEM_HANDLE_TYPE_NONE => {}
            ACL_MEM_HANDLE_TYPE_POSIX => fail!(
                ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                "pools shared between processes (ACL_MEM_HANDLE_TYPE_POSIX) are not supported"
            ),
            other => fail!(ACL_ERROR_RT_PARAM_INVALID, "unknown handleType {other}"),
        }
        let sim = sim()?;
        let device = sim.device(props.location.id.into())?;
        device.check_alive()?;
        let max_size = match props.maxSize as u64 {
            0 => device.capacity,
            bytes => bytes,
        };
        let pool = sim.pools.create(device, max_size)?;
        write_out(memPool, "memPool", handle::to_ptr(pool))
    })
}

/// Synchronises the pool's device (every stream's running tasks, as aclrtFreeWithDevSync), then
/// releases all the pool's memory, including blocks never returned with FreeAsync.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemPoolDestroy(memPool: aclrtMemPool) -> aclError {
    guard("aclrtMemPoolDestroy", || {
        let pool = resolve(memPool)?;
        let sim = sim()?;
        quiesce(sim, &[pool.device.id])?;
        sim.pools.destroy(&sim.memory, &pool)
    })
}

/// The reuse switch an attribute names, if it names one.
fn reuse_of(attr: aclrtMemPoolAttr) -> Option<Reuse> {
    match attr {
        ACL_RT_MEM_POOL_REUSE_FOLLOW_EVENT_DEPENDENCIES => Some(Reuse::FollowEvents),
        ACL_RT_MEM_POOL_REUSE_ALLOW_OPPORTUNISTIC => Some(Reuse::Opportunistic),
        ACL_RT_MEM_POOL_REUSE_ALLOW_INTERNAL_DEPENDENCIES => Some(Reuse::InternalDependencies),
        _ => None,
    }
}

/// The checks aclrtMemPoolSetAttr and GetAttr share: the pool, a value pointer, and the reuse
/// switch the attribute names, if it names one.
fn attr_target(
    pool: aclrtMemPool,
    attr: aclrtMemPoolAttr,
    value: *mut c_void,
) -> Res<(Arc<Pool>, Option<Reuse>)> {
    non_null(pool, "memPool")?;
    non_null(value, "value")?;
    Ok((resolve(pool)?, reuse_of(attr)))
}

/// Reads the attribute's value (uint32_t for the reuse switches, uint64_t otherwise).
fn read_value<T: Copy>(value: *mut c_void) -> T {
    // SAFETY: the caller checked `value` is non-NULL; by the API contract it points at a value
    // of the attribute's type, which may be unaligned in packed C code.
    unsafe { value.cast::<T>().read_unaligned() }
}

/// Sets an attribute: a reuse switch (uint32_t 0 or 1), the release threshold (uint64_t), or
/// a high-water mark (uint64_t, only 0: reset to the current value). The CURRENT counters are
/// read-only; they and unknown attributes → 107000.
///
/// # Safety
/// `value` must be NULL or point at a value of the attribute's type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemPoolSetAttr(
    memPool: aclrtMemPool,
    attr: aclrtMemPoolAttr,
    value: *mut c_void,
) -> aclError {
    guard("aclrtMemPoolSetAttr", || {
        let (pool, reuse) = attr_target(memPool, attr, value)?;
        if let Some(reuse) = reuse {
            let on: u32 = read_value(value);
            ensure!(
                on <= 1,
                ACL_ERROR_RT_PARAM_INVALID,
                "reuse switch {attr} takes 0 or 1, not {on}"
            );
            pool.set_reuse(reuse, on == 1);
            return Ok(());
        }
        match attr {
            ACL_RT_MEM_POOL_ATTR_RELEASE_THRESHOLD => {
                pool.set_release_threshold(read_value(value));
            }
            ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_HIGH | ACL_RT_MEM_POOL_ATTR_USED_MEM_HIGH => {
                let reset: u64 = read_value(value);
                ensure!(
                    reset == 0,
                    ACL_ERROR_RT_PARAM_INVALID,
                    "a high-water mark can only be reset with 0, not {reset}"
                );
                pool.reset_high(attr == ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_HIGH);
            }
            ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_CURRENT | ACL_RT_MEM_POOL_ATTR_USED_MEM_CURRENT => {
                fail!(ACL_ERROR_RT_PARAM_INVALID, "attribute {attr} is read-only")
            }
            other => fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "unknown memory pool attribute {other}"
            ),
        }
        Ok(())
    })
}

/// Reads an attribute (uint32_t for the reuse switches, uint64_t otherwise); unknown → 107000.
///
/// # Safety
/// `value` must be NULL or valid for a write of the attribute's type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemPoolGetAttr(
    memPool: aclrtMemPool,
    attr: aclrtMemPoolAttr,
    value: *mut c_void,
) -> aclError {
    guard("aclrtMemPoolGetAttr", || {
        let (pool, reuse) = attr_target(memPool, attr, value)?;
        if let Some(reuse) = reuse {
            return write_out(value.cast::<u32>(), "value", u32::from(pool.reuse(reuse)));
        }
        let usage = pool.usage();
        let number = match attr {
            ACL_RT_MEM_POOL_ATTR_RELEASE_THRESHOLD => pool.release_threshold(),
            ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_CURRENT => usage.reserved,
            ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_HIGH => usage.reserved_high,
            ACL_RT_MEM_POOL_ATTR_USED_MEM_CURRENT => usage.used,
            ACL_RT_MEM_POOL_ATTR_USED_MEM_HIGH => usage.used_high,
            other => fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "unknown memory pool attribute {other}"
            ),
        };
        write_out(value.cast::<u64>(), "value", number)
    })
}

/// Refuses (207000) pool allocation and return on a stream whose tasks go into a model runtime
/// instance (being captured, or bound to an instance being built). The pool's bookkeeping
/// happens when the call is made, but a captured task runs only when the instance executes,
/// perhaps never or many times: a captured FreeAsync handed its block to other streams while the
/// instance's tasks, which had not run yet, still used it.
fn check_not_in_model(stream: &crate::stream::Stream, api: &str) -> Res<()> {
    ensure!(
        stream.capture().is_none() && stream.bound_model().is_none(),
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "{api} cannot be part of a model runtime instance (stream {} is being captured or is \
         bound to one)",
        stream.id
    );
    Ok(())
}

/// Allocates `size` bytes from the pool for use on `stream` (rounded as aclrtMalloc rounds),
/// reusing memory freed earlier where the pool's reuse rules order the reuse after the free.
/// The stream must belong to the current context (107003) and to the pool's device (107000);
/// a pool that cannot grow → 207001; a stream being captured or bound to a model runtime
/// instance → 207000.
///
/// # Safety
/// `ptr` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemPoolMallocAsync(
    ptr: *mut *mut c_void,
    size: usize,
    memPool: aclrtMemPool,
    stream: aclrtStream,
) -> aclError {
    guard("aclrtMemPoolMallocAsync", || {
        non_null(ptr, "ptr")?;
        ensure!(size != 0, ACL_ERROR_INVALID_PARAM, "size is 0");
        let pool = resolve(memPool)?;
        let sim = sim()?;
        let stream = context::submit_stream(sim, stream)?;
        ensure!(
            stream.device.id == pool.device.id,
            ACL_ERROR_RT_PARAM_INVALID,
            "the pool is on device {} but the stream on device {}",
            pool.device.id,
            stream.device.id
        );
        check_not_in_model(&stream, "aclrtMemPoolMallocAsync")?;
        pool.device.check_alive()?;
        let bytes = reserved_size(size, true)?;
        let address = sim.pools.malloc(&sim.memory, &pool, &stream, bytes)?;
        write_out(ptr, "ptr", address as *mut c_void)
    })
}

/// Returns pool memory to its pool once `stream` reaches this point; memory that is not a
/// live pool allocation (or already returned) → 207002; a stream being captured or bound to a
/// model runtime instance → 207000.
///
/// # Safety
/// No preconditions beyond the ACL contract (pointers are looked up, never trusted).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemPoolFreeAsync(ptr: *mut c_void, stream: aclrtStream) -> aclError {
    guard("aclrtMemPoolFreeAsync", || {
        non_null(ptr, "ptr")?;
        let sim = sim()?;
        let stream = context::submit_stream(sim, stream)?;
        let pool = sim.pools.owner(ptr as usize)?;
        ensure!(
            stream.device.id == pool.device.id,
            ACL_ERROR_RT_PARAM_INVALID,
            "the pool is on device {} but the stream on device {}",
            pool.device.id,
            stream.device.id
        );
        check_not_in_model(&stream, "aclrtMemPoolFreeAsync")?;
        sim.pools.free(&pool, ptr as usize, &stream)
    })
}

/// Releases idle memory (blocks whose frees have executed on the device) until the pool
/// holds at most `minBytesToKeep` bytes; memory in use is never released.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemPoolTrimTo(
    memPool: aclrtMemPool,
    minBytesToKeep: usize,
) -> aclError {
    guard("aclrtMemPoolTrimTo", || {
        let pool = resolve(memPool)?;
        let sim = sim()?;
        sim.pools.trim(&sim.memory, &pool, minBytesToKeep as u64);
        Ok(())
    })
}

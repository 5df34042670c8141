//! Cache maintenance operations (aclrtCmo*). The simulator's device memory is host memory that
//! host and device see alike, so a prefetch moves nothing: each operation is checked as CANN
//! checks it and queued as a task that only keeps its place in stream order. An Atlas A2
//! supports prefetching only, and none of the barrier forms.

use std::ffi::c_void;
use std::sync::Arc;

use npu_sys::*;

use super::check::unsupported_on_stream;
use crate::context;
use crate::error::{Res, ensure, fail, guard, non_null, write_out};
use crate::event::Record;
use crate::indirect::{check_on_device, device_of_range, write_descriptor};
use crate::sim::sim;
use crate::stream::Stream;
use crate::task::{Op, Task};

/// The simulator's CMO descriptor: the operated memory's address and size, as two u64s.
const DESC_SIZE: usize = 16;

/// Queues a task that does nothing but keep its place in `stream`'s order.
pub(super) fn ordering_only(stream: &Arc<Stream>) -> Res<()> {
    let marker = Arc::new(Record::new(stream.clone()));
    stream.submit(Task::new(Op::Record(marker)))
}

/// The operation types an Atlas A2 performs: prefetch only (the others → 207000, an unknown
/// value → 107000).
fn check_type(cmo_type: aclrtCmoType) -> Res<()> {
    match cmo_type {
        ACL_RT_CMO_TYPE_PREFETCH => Ok(()),
        ACL_RT_CMO_TYPE_WRITEBACK | ACL_RT_CMO_TYPE_INVALID | ACL_RT_CMO_TYPE_FLUSH => fail!(
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "cache operation type {cmo_type} is not supported on an Atlas A2 (only \
             ACL_RT_CMO_TYPE_PREFETCH is)"
        ),
        other => fail!(
            ACL_ERROR_RT_PARAM_INVALID,
            "unknown cache operation type {other}"
        ),
    }
}

/// Prefetches device memory of the stream's device into the cache: a stream task with no
/// effect. NULL src or size 0 → 100000; memory not of the stream's device → 107000; another
/// type → 207000.
///
/// # Safety
/// No preconditions beyond the ACL contract (addresses are looked up, never trusted).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCmoAsync(
    src: *mut c_void,
    size: usize,
    cmoType: aclrtCmoType,
    stream: aclrtStream,
) -> aclError {
    guard("aclrtCmoAsync", || {
        non_null(src, "src")?;
        ensure!(size != 0, ACL_ERROR_INVALID_PARAM, "size is 0");
        check_type(cmoType)?;
        let sim = sim()?;
        let stream = context::submit_stream(sim, stream)?;
        check_on_device(&sim.memory, src as usize, size, stream.device.id, "src")?;
        ordering_only(&stream)
    })
}

/// Not supported on an Atlas A2: NULL `src` → 100000, the stream's lookup (no context →
/// 107002, destroyed → 107017, another context's → 107003), else 207000.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI (`src` is not touched).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCmoAsyncWithBarrier(
    src: *mut c_void,
    size: usize,
    cmoType: aclrtCmoType,
    barrierId: u32,
    stream: aclrtStream,
) -> aclError {
    let _ = (size, cmoType, barrierId);
    guard("aclrtCmoAsyncWithBarrier", || {
        non_null(src, "src")?;
        unsupported_on_stream(stream, "cache operations with barriers")
    })
}

/// Not supported on an Atlas A2: NULL `taskInfo` → 100000, the stream's lookup (no context →
/// 107002, destroyed → 107017, another context's → 107003), else 207000.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI (`taskInfo` is not read).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCmoWaitBarrier(
    taskInfo: *mut aclrtBarrierTaskInfo,
    stream: aclrtStream,
    flag: u32,
) -> aclError {
    let _ = flag;
    guard("aclrtCmoWaitBarrier", || {
        non_null(taskInfo, "taskInfo")?;
        unsupported_on_stream(stream, "waiting for cache operation barriers")
    })
}

/// The size of a CMO descriptor: 16 bytes (the address and size of the memory). NULL → 100000.
///
/// # Safety
/// `size` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCmoGetDescSize(size: *mut usize) -> aclError {
    guard("aclrtCmoGetDescSize", || {
        non_null(size, "size")?;
        write_out(size, "size", DESC_SIZE)
    })
}

/// Records `src` and `size` in a CMO descriptor held in device memory (written now). NULL
/// pointers or size 0 → 100000; a descriptor not in device memory, or `src` not in device
/// memory of the descriptor's device → 107000.
///
/// # Safety
/// No preconditions beyond the ACL contract (addresses are looked up, never trusted).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCmoSetDesc(
    cmoDesc: *mut c_void,
    src: *mut c_void,
    size: usize,
) -> aclError {
    guard("aclrtCmoSetDesc", || {
        non_null(cmoDesc, "cmoDesc")?;
        non_null(src, "src")?;
        ensure!(size != 0, ACL_ERROR_INVALID_PARAM, "size is 0");
        let memory = &sim()?.memory;
        let device = device_of_range(memory, cmoDesc as usize, DESC_SIZE, "cmoDesc")?;
        check_on_device(memory, src as usize, size, device, "src")?;
        write_descriptor(memory, cmoDesc as usize, &[src as u64, size as u64])
    })
}

/// Prefetches the memory a CMO descriptor names, as a stream task with no effect. The
/// descriptor must be device memory of the stream's device (107000); its contents are the
/// device's to read when the task runs, and a prefetch reads nothing. `reserve` must be NULL
/// (100000); another type → 207000.
///
/// # Safety
/// No preconditions beyond the ACL contract (addresses are looked up, never trusted).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCmoAsyncWithDesc(
    cmoDesc: *mut c_void,
    cmoType: aclrtCmoType,
    stream: aclrtStream,
    reserve: *const c_void,
) -> aclError {
    guard("aclrtCmoAsyncWithDesc", || {
        non_null(cmoDesc, "cmoDesc")?;
        ensure!(
            reserve.is_null(),
            ACL_ERROR_INVALID_PARAM,
            "reserve must be NULL"
        );
        check_type(cmoType)?;
        let sim = sim()?;
        let stream = context::submit_stream(sim, stream)?;
        check_on_device(
            &sim.memory,
            cmoDesc as usize,
            DESC_SIZE,
            stream.device.id,
            "cmoDesc",
        )?;
        ordering_only(&stream)
    })
}

/// Flushes the current device's L2 cache. `rsv` must be NULL (100000), and the thread needs a
/// current context (107002). The simulator's device memory is host memory that host and device
/// see alike, so nothing is written back.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI (`rsv` is not
/// dereferenced).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDeviceL2CacheFlush(rsv: *mut c_void) -> aclError {
    guard("aclrtDeviceL2CacheFlush", || {
        ensure!(
            rsv.is_null(),
            ACL_ERROR_INVALID_PARAM,
            "rsv must be NULL (the only value supported)"
        );
        context::current(sim()?).map(drop)
    })
}

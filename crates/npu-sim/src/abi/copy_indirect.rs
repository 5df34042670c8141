//! Copies within a device whose addresses the device reads when the copy runs: through a
//! memcpy descriptor in device memory (aclrtGetMemcpyDescSize, aclrtSetMemcpyDesc,
//! aclrtMemcpyAsyncWithDesc) or through base pointers held in device memory
//! (aclrtMemcpyAsyncWithOffset). See `crate::indirect` for how they run.

use std::ffi::c_void;

use npu_sys::*;

use crate::context;
use crate::error::{Res, ensure, guard, non_null, write_out};
use crate::indirect::{
    Indirect, IndirectCopy, MEMCPY_DESC_SIZE, check_on_device, device_of_range, write_descriptor,
};
use crate::sim::sim;
use crate::task::{Op, Task};

/// These copies take ACL_MEMCPY_INNER_DEVICE_TO_DEVICE only: another kind → 207000, a value
/// that is no aclrtMemcpyKind → 100000, as every other copy answers it (the reference names
/// no code for these four functions).
fn check_kind(kind: aclrtMemcpyKind) -> Res<()> {
    check_kind_value(kind)?;
    check_kind_supported(kind)
}

/// The ACL layer's half of `check_kind`: a value that is no aclrtMemcpyKind → 100000.
fn check_kind_value(kind: aclrtMemcpyKind) -> Res<()> {
    ensure!(
        kind <= ACL_MEMCPY_INTER_DEVICE_TO_DEVICE,
        ACL_ERROR_INVALID_PARAM,
        "copy kind {kind} is not an aclrtMemcpyKind"
    );
    Ok(())
}

/// The runtime's half of `check_kind`: a kind other than INNER_DEVICE_TO_DEVICE → 207000.
fn check_kind_supported(kind: aclrtMemcpyKind) -> Res<()> {
    ensure!(
        kind == ACL_MEMCPY_INNER_DEVICE_TO_DEVICE,
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "copy kind {kind} is not supported: only ACL_MEMCPY_INNER_DEVICE_TO_DEVICE is"
    );
    Ok(())
}

/// Queues an indirect copy on `stream` after checking that the device memory it reads its
/// addresses from (`reads`: address, bytes, what) belongs to the stream's device (107000).
fn submit(stream: aclrtStream, reads: &[(usize, usize, &str)], how: Indirect) -> Res<()> {
    let sim = sim()?;
    let stream = context::submit_stream(sim, stream)?;
    let device = stream.device.id;
    for &(at, len, what) in reads {
        check_on_device(&sim.memory, at, len, device, what)?;
    }
    stream.submit(Task::new(Op::IndirectCopy(IndirectCopy { device, how })))
}

/// The size of a memcpy descriptor: 32 bytes. NULL → 100000, before the kind is checked.
///
/// # Safety
/// `descSize` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetMemcpyDescSize(
    kind: aclrtMemcpyKind,
    descSize: *mut usize,
) -> aclError {
    guard("aclrtGetMemcpyDescSize", || {
        non_null(descSize, "descSize")?;
        check_kind(kind)?;
        write_out(descSize, "descSize", MEMCPY_DESC_SIZE)
    })
}

/// Records a copy of `count` bytes from `srcAddr` to `dstAddr` in a descriptor held in device
/// memory (written now). The descriptor and both ranges must be memory of one device (107000);
/// NULL pointers → 100000 (before the kind), a non-NULL `config` → 100000.
///
/// # Safety
/// No preconditions beyond the ACL contract (addresses are looked up, never trusted).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetMemcpyDesc(
    desc: *mut c_void,
    kind: aclrtMemcpyKind,
    srcAddr: *mut c_void,
    dstAddr: *mut c_void,
    count: usize,
    config: *mut c_void,
) -> aclError {
    guard("aclrtSetMemcpyDesc", || {
        non_null(desc, "desc")?;
        non_null(srcAddr, "srcAddr")?;
        non_null(dstAddr, "dstAddr")?;
        check_kind(kind)?;
        ensure!(
            config.is_null(),
            ACL_ERROR_INVALID_PARAM,
            "config is reserved and must be NULL"
        );
        let memory = &sim()?.memory;
        let device = device_of_range(memory, desc as usize, MEMCPY_DESC_SIZE, "desc")?;
        check_on_device(memory, srcAddr as usize, count, device, "srcAddr")?;
        check_on_device(memory, dstAddr as usize, count, device, "dstAddr")?;
        let words = [srcAddr as u64, dstAddr as u64, count as u64, 0];
        write_descriptor(memory, desc as usize, &words)
    })
}

/// Queues the copy a descriptor describes on `stream`; the descriptor (device memory of the
/// stream's device, else 107000) is read when the copy runs, and a descriptor naming memory
/// that is not the device's then fails the task with 507013.
///
/// # Safety
/// No preconditions beyond the ACL contract (addresses are looked up, never trusted).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemcpyAsyncWithDesc(
    desc: *mut c_void,
    kind: aclrtMemcpyKind,
    stream: aclrtStream,
) -> aclError {
    guard("aclrtMemcpyAsyncWithDesc", || {
        non_null(desc, "desc")?;
        check_kind(kind)?;
        let at = desc as usize;
        submit(
            stream,
            &[(at, MEMCPY_DESC_SIZE, "desc")],
            Indirect::Desc(at),
        )
    })
}

/// Queues a copy of `count` bytes from `*src + srcDataOffset` to `*dst + dstDataOffset`:
/// `dst` and `src` are device memory of the stream's device holding the base addresses
/// (107000 otherwise), read when the copy runs (memory that is not the device's then fails the
/// task with 507013). count > destMax → 107000; count 0 queues nothing (the stream is still
/// looked up).
///
/// # Safety
/// No preconditions beyond the ACL contract (addresses are looked up, never trusted).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemcpyAsyncWithOffset(
    dst: *mut *mut c_void,
    destMax: usize,
    dstDataOffset: usize,
    src: *mut *const c_void,
    count: usize,
    srcDataOffset: usize,
    kind: aclrtMemcpyKind,
    stream: aclrtStream,
) -> aclError {
    guard("aclrtMemcpyAsyncWithOffset", || {
        non_null(dst, "dst")?;
        non_null(src, "src")?;
        check_kind_value(kind)?;
        // destMax and count precede kind among the parameters, and aclrtMemcpyAsync too
        // refuses count > destMax before a kind it does not support.
        ensure!(
            count <= destMax,
            ACL_ERROR_RT_PARAM_INVALID,
            "count ({count}) is greater than destMax ({destMax})"
        );
        check_kind_supported(kind)?;
        if count == 0 {
            return super::copy::nothing_to_do(Some(stream));
        }
        let (dst, src) = (dst as usize, src as usize);
        let how = Indirect::Offset {
            dst,
            dst_offset: dstDataOffset,
            src,
            src_offset: srcDataOffset,
            count,
        };
        let reads = [(dst, 8, "dst"), (src, 8, "src")];
        submit(stream, &reads, how)
    })
}

//! Stream memory operations: aclrtValueWrite / aclrtValueWait on a 64-bit word of device
//! memory.

use npu_sys::*;

use crate::context;
use crate::error::{Res, ensure, guard, non_null};
use crate::memory::PtrClass;
use crate::sim::sim;
use crate::task::{Compare, Op, Task};

/// Queues on `stream` the operation `op` builds for the word at `addr`, once `addr` is checked
/// to be an 8-byte aligned word of device memory of the stream's device.
fn submit_on_word(addr: usize, stream: aclrtStream, op: impl FnOnce(usize) -> Op) -> Res<()> {
    check_aligned(addr, 8, "devAddr")?;
    let stream = context::submit_stream(sim()?, stream)?;
    check_word(addr, 8, stream.device.id, "devAddr")?;
    stream.submit(Task::new(op(addr)))
}

/// The `width`-byte word at `addr` (the argument `what`) is aligned to its width (else
/// 107000): an argument check, which the functions taking a word make before they look up the
/// stream (or list) that says whose memory it must be.
pub(super) fn check_aligned(addr: usize, width: usize, what: &str) -> Res<()> {
    ensure!(
        addr.is_multiple_of(width),
        ACL_ERROR_RT_PARAM_INVALID,
        "{what} {addr:#x} is not {width}-byte aligned"
    );
    Ok(())
}

/// The `width`-byte word at `addr` (the argument `what`) is device memory of `device`,
/// aligned to its width (else 107000).
pub(super) fn check_word(addr: usize, width: usize, device: i32, what: &str) -> Res<()> {
    check_aligned(addr, width, what)?;
    let located = sim()?.memory.locate(addr);
    ensure!(
        located.class == PtrClass::Device(device),
        ACL_ERROR_RT_PARAM_INVALID,
        "{what} {addr:#x} is not device memory of device {device}"
    );
    located.check_range(addr, width, what).map(drop)
}

/// Queues a store of `value` to the 8-byte aligned 64-bit word at `devAddr` (device memory of
/// the stream's device; else 107000). flag is reserved: 0 (else 100000). NULL stream is the
/// default stream. The flag, then the alignment, are checked before the stream is looked up.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtValueWrite(
    devAddr: *mut std::ffi::c_void,
    value: u64,
    flag: u32,
    stream: aclrtStream,
) -> aclError {
    guard("aclrtValueWrite", || {
        non_null(devAddr, "devAddr")?;
        ensure!(
            flag == 0,
            ACL_ERROR_INVALID_PARAM,
            "flag {flag:#x} is reserved and must be 0"
        );
        submit_on_word(devAddr as usize, stream, |dst| Op::ValueWrite {
            dst,
            value,
        })
    })
}

/// Holds the stream's later work until the 64-bit word at `devAddr` satisfies the flag's
/// comparison with `value` (ACL_STREAM_WAIT_VALUE_GEQ / EQ / AND / NOR; others → 100000).
/// `devAddr` as for aclrtValueWrite. The word is re-read whenever a task or a synchronous
/// operation of the device writes memory.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtValueWait(
    devAddr: *mut std::ffi::c_void,
    value: u64,
    flag: u32,
    stream: aclrtStream,
) -> aclError {
    guard("aclrtValueWait", || {
        non_null(devAddr, "devAddr")?;
        let Some(cmp) = Compare::from_flag(flag) else {
            crate::error::fail!(
                ACL_ERROR_INVALID_PARAM,
                "flag {flag:#x} is not an ACL_STREAM_WAIT_VALUE_* comparison"
            );
        };
        submit_on_word(devAddr as usize, stream, |src| Op::ValueWait {
            src,
            value,
            cmp,
        })
    })
}

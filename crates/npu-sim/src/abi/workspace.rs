//! The addresses of the device memory the runtime keeps for the current context: the float
//! overflow flags and the words Cube and Vector cores synchronise through. Each is allocated
//! in the context's device at the first call, reads zeros (no task of the simulator overflows
//! or synchronises cores through it) and is freed with the context.

use std::ffi::c_void;

use npu_sys::*;

use super::overflow::OVERFLOW_STATUS_BYTES;
use crate::context::{self, Workspace};
use crate::error::{Res, guard, non_null, write_out};
use crate::sim::sim;

/// Bytes of the hardware synchronisation words: the reference gives no size, so one cache line.
const HARDWARE_SYNC_BYTES: usize = 64;

/// Writes the address of the current context's `which` workspace to `out`.
fn write_address(out: *mut *mut c_void, name: &str, which: Workspace, bytes: usize) -> Res<()> {
    non_null(out, name)?;
    let sim = sim()?;
    let ctx = context::current(sim)?;
    ctx.device.check_alive()?;
    let address = ctx.workspace(sim, which, bytes)?;
    write_out(out, name, address as *mut c_void)
}

/// The device address of the current context's float overflow flags, the workspace that AI
/// Core operators report saturation-mode overflows in: 64 bytes of device memory of the
/// context's device. NULL → 100000; no context → 107002.
///
/// # Safety
/// `overflowAddr` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCtxGetFloatOverflowAddr(overflowAddr: *mut *mut c_void) -> aclError {
    guard("aclrtCtxGetFloatOverflowAddr", || {
        write_address(
            overflowAddr,
            "overflowAddr",
            Workspace::OverflowFlags,
            OVERFLOW_STATUS_BYTES,
        )
    })
}

/// The device address Cube and Vector cores synchronise through, which mixed kernels take as
/// an argument: 64 bytes of device memory of the current context's device, the same address
/// for every call in the context. NULL → 100000; no context → 107002.
///
/// # Safety
/// `addr` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetHardwareSyncAddr(addr: *mut *mut c_void) -> aclError {
    guard("aclrtGetHardwareSyncAddr", || {
        write_address(addr, "addr", Workspace::HardwareSync, HARDWARE_SYNC_BYTES)
    })
}

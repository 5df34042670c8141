//! Floating-point overflow: the stream's overflow detection switch, the device's overflow
//! mode and the process's overflow status. The simulator's kernels are host code with no
//! overflow detection: the settings are kept and reported, and the status never shows an
//! overflow.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use npu_sys::*;

use crate::context;
use crate::error::{Res, ensure, guard, non_null, write_out};
use crate::event::Record;
use crate::memory::PtrClass;
use crate::sim::sim;
use crate::sync::lock;
use crate::task::{Op, Task};

/// The size of the overflow status aclrtGetOverflowStatus writes.
pub(super) const OVERFLOW_STATUS_BYTES: usize = 64;

/// Turns a stream's overflow detection off (0) or on (1) for the tasks submitted after it, as
/// aclrtSetStreamAttribute(FLOAT_OVERFLOW_CHECK) does. NULL is the default stream; a stream of
/// another context → 107003; another flag → 100000, checked before the stream is looked up.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetStreamOverflowSwitch(stream: aclrtStream, flag: u32) -> aclError {
    guard("aclrtSetStreamOverflowSwitch", || {
        let flag = super::stream_config::switch("flag", flag)?;
        let (_, target) = context::owned_stream(sim()?, stream)?;
        lock(&target.attributes).overflow_switch = flag;
        Ok(())
    })
}

/// A stream's overflow detection switch (0 until turned on). NULL is the default stream.
///
/// # Safety
/// `flag` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetStreamOverflowSwitch(
    stream: aclrtStream,
    flag: *mut u32,
) -> aclError {
    guard("aclrtGetStreamOverflowSwitch", || {
        non_null(flag, "flag")?;
        let target = context::any_stream(sim()?, stream)?;
        let switch = lock(&target.attributes).overflow_switch;
        write_out(flag, "flag", switch)
    })
}

/// Sets the current device's float overflow mode, SATURATION or INFNAN (the default); streams
/// created afterwards use it. Another value → 100000; no context → 107002.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetDeviceSatMode(mode: aclrtFloatOverflowMode) -> aclError {
    guard("aclrtSetDeviceSatMode", || {
        ensure!(
            mode == ACL_RT_OVERFLOW_MODE_SATURATION || mode == ACL_RT_OVERFLOW_MODE_INFNAN,
            ACL_ERROR_INVALID_PARAM,
            "mode {mode} is neither ACL_RT_OVERFLOW_MODE_SATURATION nor ACL_RT_OVERFLOW_MODE_INFNAN"
        );
        let ctx = context::current(sim()?)?;
        ctx.device.check_alive()?;
        ctx.device.sat_mode.store(mode, Ordering::Relaxed);
        Ok(())
    })
}

/// The current device's float overflow mode. NULL → 100000; no context → 107002.
///
/// # Safety
/// `mode` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetDeviceSatMode(mode: *mut aclrtFloatOverflowMode) -> aclError {
    guard("aclrtGetDeviceSatMode", || {
        non_null(mode, "mode")?;
        let ctx = context::current(sim()?)?;
        write_out(mode, "mode", ctx.device.sat_mode.load(Ordering::Relaxed))
    })
}

/// Queues on `stream` a task that copies the process's overflow status into the 64 bytes at
/// `outputAddr` (device memory of the stream's device, else 107000): all zeros, as no task of
/// the simulator ever overflows. NULL `outputAddr` → 100000; `outputSize` other than 64 →
/// 107000; a stream of another context → 107003. Read it after synchronising the stream.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetOverflowStatus(
    outputAddr: *mut std::ffi::c_void,
    outputSize: usize,
    stream: aclrtStream,
) -> aclError {
    guard("aclrtGetOverflowStatus", || {
        non_null(outputAddr, "outputAddr")?;
        ensure!(
            outputSize == OVERFLOW_STATUS_BYTES,
            ACL_ERROR_RT_PARAM_INVALID,
            "outputSize is {outputSize}, not the status's {OVERFLOW_STATUS_BYTES} bytes"
        );
        write_status(outputAddr, outputSize, stream)
    })
}

/// Queues on `stream` a task writing a status of `size` bytes, all zeros (no task of the
/// simulator overflows), to `output`: device memory of the stream's device whose allocation
/// holds the whole range (else 107000). A stream of another context → 107003.
fn write_status(output: *mut std::ffi::c_void, size: usize, stream: aclrtStream) -> Res<()> {
    let sim = sim()?;
    let stream = context::submit_stream(sim, stream)?;
    let addr = output as usize;
    let located = sim.memory.locate(addr);
    ensure!(
        located.class == PtrClass::Device(stream.device.id),
        ACL_ERROR_RT_PARAM_INVALID,
        "outputAddr {addr:#x} is not device memory of device {}",
        stream.device.id
    );
    let owned = located.check_range(addr, size, "outputAddr")?;
    stream.submit(Task::new(Op::Memset {
        dst: addr,
        len: size,
        value: 0,
        width: 1,
        owned,
    }))
}

/// Queues on `stream` a task that clears an overflow status (which the simulator never
/// sets; the task keeps the stream's order). A stream of another context → 107003.
fn clear_status(stream: aclrtStream) -> Res<()> {
    let stream = context::submit_stream(sim()?, stream)?;
    let marker = Arc::new(Record::new(stream.clone()));
    stream.submit(Task::new(Op::Record(marker)))
}

/// The checks of the float status getters: NULL output or size 0 → 100000, a size beyond the
/// address space → 107000.
fn float_status(output: *mut std::ffi::c_void, size: u64, stream: aclrtStream) -> Res<()> {
    non_null(output, "outputAddr")?;
    ensure!(size != 0, ACL_ERROR_INVALID_PARAM, "outputSize is 0");
    let size = usize::try_from(size).map_err(|_| {
        crate::error::SimError::new(
            ACL_ERROR_RT_PARAM_INVALID,
            format!("outputSize {size} is larger than the address space"),
        )
    })?;
    write_status(output, size, stream)
}

/// Queues on `stream` a task that clears the process's overflow status (which the simulator
/// never sets; the task keeps the stream's order). A stream of another context → 107003.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtResetOverflowStatus(stream: aclrtStream) -> aclError {
    guard("aclrtResetOverflowStatus", || clear_status(stream))
}

/// Queues on `stream` a task writing the device's saturation status into the `outputSize`
/// bytes at `outputAddr`: all zeros, as no task of the simulator overflows. NULL `outputAddr`
/// or `outputSize` 0 → 100000; memory that is not the stream's device's, or a range past its
/// allocation → 107000; a stream of another context → 107003.
///
/// # Safety
/// No preconditions; `outputAddr` is looked up, never trusted.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetFloatOverflowStatus(
    outputAddr: *mut std::ffi::c_void,
    outputSize: u64,
    stream: aclrtStream,
) -> aclError {
    guard("aclrtGetFloatOverflowStatus", || {
        float_status(outputAddr, outputSize, stream)
    })
}

/// Queues on `stream` a task clearing the device's saturation status. A stream of another
/// context → 107003.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtResetFloatOverflowStatus(stream: aclrtStream) -> aclError {
    guard("aclrtResetFloatOverflowStatus", || clear_status(stream))
}

/// aclrtGetFloatOverflowStatus for a check mode: the header defines no modes, so every
/// `checkMode` reads the same status (zeros).
///
/// # Safety
/// No preconditions; `outputAddr` is looked up, never trusted.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtNpuGetFloatOverFlowStatus(
    outputAddr: *mut std::ffi::c_void,
    outputSize: u64,
    _checkMode: u32,
    stream: aclrtStream,
) -> aclError {
    guard("aclrtNpuGetFloatOverFlowStatus", || {
        float_status(outputAddr, outputSize, stream)
    })
}

/// aclrtResetFloatOverflowStatus for a check mode (any `checkMode`, as for the getter).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtNpuClearFloatOverFlowStatus(
    _checkMode: u32,
    stream: aclrtStream,
) -> aclError {
    guard("aclrtNpuClearFloatOverFlowStatus", || clear_status(stream))
}

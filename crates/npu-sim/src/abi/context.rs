//! Context management.

use npu_sys::*;

use crate::context::{self, Context};
use crate::error::{ensure, guard, non_null, write_out};
use crate::handle;
use crate::sim::sim;

/// Creates a context (with its own default stream) on a device and makes it the calling
/// thread's current context.
///
/// # Safety
/// `context` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateContext(context: *mut aclrtContext, deviceId: i32) -> aclError {
    guard("aclrtCreateContext", || {
        non_null(context, "context")?;
        let sim = sim()?;
        let device = sim.device(deviceId.into())?;
        device.check_alive()?;
        // Counted first: the first context of a device no aclrtSetDevice holds binds the
        // device's default stream too, and its own default stream must fit beside it.
        device.count_explicit_context(true)?;
        let ctx = Context::create(sim, device, false).inspect_err(|_| {
            let _ = device.count_explicit_context(false);
        })?;
        context::bind_explicit(ctx.handle);
        ctx.announce_default_stream();
        write_out(context, "context", handle::to_ptr(ctx.handle))
    })
}

/// Destroys a context made by aclrtCreateContext (its streams' work finishes first). The
/// primary context of aclrtSetDevice is rejected with 107002.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDestroyContext(context: aclrtContext) -> aclError {
    guard("aclrtDestroyContext", || {
        non_null(context, "context")?;
        let sim = sim()?;
        let ctx = sim.contexts.resolve(handle::from_ptr(context))?;
        ensure!(
            !ctx.primary,
            ACL_ERROR_RT_CONTEXT_NULL,
            "the primary context of device {} is released with aclrtResetDevice, not destroyed",
            ctx.device.id
        );
        ctx.refuse_self_wait()?;
        ctx.destroy(sim)?;
        ctx.device.count_explicit_context(false)
    })
}

/// Makes a context current on the calling thread. NULL → 100000; a destroyed context (or the
/// primary context of a device reset since) → 107017 ACL_ERROR_RT_INVALID_HANDLE, as
/// aclrtDestroyContext answers.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetCurrentContext(context: aclrtContext) -> aclError {
    guard("aclrtSetCurrentContext", || {
        non_null(context, "context")?;
        let ctx = sim()?.contexts.resolve(handle::from_ptr(context))?;
        context::bind_explicit(ctx.handle);
        Ok(())
    })
}

/// The calling thread's current context (explicit, else the primary one of its device).
///
/// # Safety
/// `context` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetCurrentContext(context: *mut aclrtContext) -> aclError {
    guard("aclrtGetCurrentContext", || {
        non_null(context, "context")?;
        let ctx = context::current(sim()?)?;
        write_out(context, "context", handle::to_ptr(ctx.handle))
    })
}

/// The default stream of the calling thread's current context.
///
/// # Safety
/// `stream` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCtxGetCurrentDefaultStream(stream: *mut aclrtStream) -> aclError {
    guard("aclrtCtxGetCurrentDefaultStream", || {
        non_null(stream, "stream")?;
        let ctx = context::current(sim()?)?;
        write_out(stream, "stream", handle::to_ptr(ctx.default_stream.handle))
    })
}

/// Whether a device's primary context is active (1: it exists, made by aclrtSetDevice or the
/// default device and not yet released by aclrtResetDevice), else 0. `flags` is reserved and
/// must be NULL (else 100000); NULL `active` → 100000; an unknown device → 107001.
///
/// # Safety
/// `active` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetPrimaryCtxState(
    deviceId: i32,
    flags: *mut u32,
    active: *mut i32,
) -> aclError {
    guard("aclrtGetPrimaryCtxState", || {
        ensure!(
            flags.is_null(),
            ACL_ERROR_INVALID_PARAM,
            "flags is reserved and must be NULL"
        );
        non_null(active, "active")?;
        let device = sim()?.device(deviceId.into())?;
        let exists = crate::sync::lock(&device.primary).ctx.is_some();
        write_out(active, "active", i32::from(exists))
    })
}

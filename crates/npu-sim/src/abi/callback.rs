//! Host callbacks and host functions.

use std::ffi::c_void;

use npu_sys::*;

use super::check::deadline;
use crate::context;
use crate::error::{ensure, fail, guard};
use crate::sim::sim;
use crate::task::{Op, Task};

/// Binds a stream's callbacks to the thread `threadId` (its `pthread_self()` value), which
/// runs them in aclrtProcessReport. A stream takes one thread (107011); a thread serves streams
/// of one device (107012).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSubscribeReport(threadId: u64, stream: aclrtStream) -> aclError {
    guard("aclrtSubscribeReport", || {
        let sim = sim()?;
        let stream = context::any_stream(sim, stream)?;
        sim.reports.subscribe(threadId, &stream)
    })
}

/// Undoes aclrtSubscribeReport (stream not subscribed → 107011 ACL_ERROR_RT_STREAM_SUBSCRIBE,
/// subscribed by another thread → 107012). Callbacks of the stream still queued for the thread
/// are dropped.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtUnSubscribeReport(threadId: u64, stream: aclrtStream) -> aclError {
    guard("aclrtUnSubscribeReport", || {
        let sim = sim()?;
        let stream = context::any_stream(sim, stream)?;
        sim.reports.unsubscribe(threadId, &stream)
    })
}

/// Queues a host callback on a stream; it runs in the subscribed thread's aclrtProcessReport
/// when the stream reaches it. BLOCK holds the stream's later work until it has run. Stream
/// without a subscribed thread → 107015.
///
/// # Safety
/// `fn_` must be a valid callback for `userData`, callable from another thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtLaunchCallback(
    fn_: aclrtCallback,
    userData: *mut c_void,
    blockType: aclrtCallbackBlockType,
    stream: aclrtStream,
) -> aclError {
    guard("aclrtLaunchCallback", || {
        let Some(func) = fn_ else {
            fail!(ACL_ERROR_INVALID_PARAM, "fn is NULL")
        };
        ensure!(
            matches!(blockType, ACL_CALLBACK_NO_BLOCK | ACL_CALLBACK_BLOCK),
            ACL_ERROR_INVALID_PARAM,
            "block type {blockType} is neither ACL_CALLBACK_NO_BLOCK nor ACL_CALLBACK_BLOCK"
        );
        let sim = sim()?;
        let stream = context::submit_stream(sim, stream)?;
        ensure!(
            sim.reports.is_subscribed(stream.handle),
            ACL_ERROR_RT_STREAM_NO_CB_REG,
            "stream {} has no thread subscribed with aclrtSubscribeReport",
            stream.id
        );
        let block = blockType == ACL_CALLBACK_BLOCK;
        stream.submit(Task::new(Op::Callback {
            func,
            data: userData as usize,
            block,
        }))
    })
}

/// Runs one callback queued for the calling thread, waiting up to `timeout` ms (-1 = forever;
/// 0 and < -1 → 100000). Not subscribed → 107012; nothing arrived → 507012.
///
/// # Safety
/// No preconditions; callbacks run on the calling thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtProcessReport(timeout: i32) -> aclError {
    guard("aclrtProcessReport", || {
        let deadline = deadline(timeout, ACL_ERROR_INVALID_PARAM)?;
        sim()?.reports.process(deadline)
    })
}

/// Queues a host function on a stream; the runtime runs it on its own thread (the stream's
/// worker) when the stream reaches it, holding the stream's later work until it returns.
///
/// # Safety
/// `fn_` must be a valid function for `args`, callable from another thread, and must not call
/// ACL functions that wait for the same stream.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtLaunchHostFunc(
    stream: aclrtStream,
    fn_: aclrtHostFunc,
    args: *mut c_void,
) -> aclError {
    guard("aclrtLaunchHostFunc", || {
        let Some(func) = fn_ else {
            fail!(ACL_ERROR_INVALID_PARAM, "fn is NULL")
        };
        let stream = context::submit_stream(sim()?, stream)?;
        stream.submit(Task::new(Op::HostFunc {
            func,
            data: args as usize,
        }))
    })
}

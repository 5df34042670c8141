//! Exception callbacks (aclrtSetExceptionInfoCallback, aclrtExceptionInfoCallbackRegister,
//! aclrtBinarySetExceptionCallback) and the device's error detail (aclrtGetErrorVerbose).
//!
//! When a task fails on a stream, every callback is called on the stream's worker with an
//! [`ExceptionInfo`] describing the task: the process-wide ones, then, for a kernel, its
//! binary's. The info lives on the worker's stack for the calls
//! only; getters accept only the address of an info being delivered, so a stale or forged
//! pointer is refused instead of read.

use std::collections::BTreeSet;
use std::sync::Mutex;

use npu_sys::*;

use crate::error::SimError;
use crate::handle::Handle;
use crate::stream::Stream;
use crate::sync::lock;
use crate::task::{Op, Task};

type Callback = unsafe extern "C" fn(*mut aclrtExceptionInfo);

/// What the getters report about a failed task.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ExceptionInfo {
    pub(crate) task_id: u32,
    pub(crate) stream_id: u32,
    pub(crate) thread_id: u32,
    pub(crate) device_id: u32,
    pub(crate) error_code: u32,
    /// A kernel launch's argument pointer and length, and its function handle.
    pub(crate) kernel: Option<(usize, u32, Handle)>,
}

#[derive(Default)]
struct Registry {
    /// The deprecated aclrtSetExceptionInfoCallback's one callback.
    set: Option<Callback>,
    /// aclrtExceptionInfoCallbackRegister's callbacks, each once.
    registered: Vec<Callback>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    set: None,
    registered: Vec::new(),
});
/// Addresses of the infos being delivered now.
static LIVE: Mutex<BTreeSet<usize>> = Mutex::new(BTreeSet::new());

/// aclrtSetExceptionInfoCallback: replaces (or with `None` clears) the deprecated callback.
pub(crate) fn set(callback: Option<Callback>) {
    lock(&REGISTRY).set = callback;
}

/// aclrtExceptionInfoCallbackRegister: adds a callback (registering it again keeps one entry).
pub(crate) fn register(callback: Callback) {
    let mut registry = lock(&REGISTRY);
    registry
        .registered
        .retain(|&c| !std::ptr::fn_addr_eq(c, callback));
    registry.registered.push(callback);
}

/// aclrtExceptionInfoCallbackUnregister: removes a callback (an unknown one is ignored).
pub(crate) fn unregister(callback: Callback) {
    lock(&REGISTRY)
        .registered
        .retain(|&c| !std::ptr::fn_addr_eq(c, callback));
}

/// Reports a failed task to the callbacks, on the calling (worker) thread, outside every lock.
pub(crate) fn raise(stream: &Stream, task: &Task, error: &SimError) {
    stream.device.record_fault(error.code);
    let callbacks: Vec<Callback> = {
        let registry = lock(&REGISTRY);
        registry
            .set
            .iter()
            .chain(&registry.registered)
            .copied()
            .collect()
    };
    let (kernel, binary_callback) = match &task.op {
        Op::Kernel(launch) => {
            let (args, len) = launch.args();
            let kernel = (args as usize, len as u32, launch.handle);
            (Some(kernel), launch.function.exception_callback())
        }
        _ => (None, None),
    };
    if callbacks.is_empty() && binary_callback.is_none() {
        return;
    }
    let mut info = ExceptionInfo {
        task_id: task.position as u32,
        stream_id: stream.id as u32,
        thread_id: task.thread_id,
        device_id: stream.device.id as u32,
        error_code: error.code as u32,
        kernel,
    };
    let address = (&raw mut info) as usize;
    lock(&LIVE).insert(address);
    // The callbacks run on the stream's worker, which cannot move on until they return: like a
    // host function, they are a host task of the stream (a wait for the stream from inside
    // fails instead of waiting for itself, and a snapshot lock's gate lets their calls pass,
    // since the lock's holder may be waiting for this very stream).
    crate::host_task::run(stream.handle, task.position, || {
        for callback in callbacks {
            // SAFETY: a C callback the user registered; the info stays valid for the call.
            unsafe { callback(address as *mut aclrtExceptionInfo) };
        }
        // The failing kernel's binary's own callback comes after the process-wide ones.
        if let Some(binary) = binary_callback {
            // SAFETY: a C callback the user set on the binary, with the user data it gave;
            // the info stays valid for the call.
            unsafe {
                (binary.func)(
                    address as *mut aclrtExceptionInfo,
                    binary.user_data as *mut std::ffi::c_void,
                )
            };
        }
    });
    lock(&LIVE).remove(&address);
}

/// The info at `info`, if it is one being delivered.
pub(crate) fn read(info: *const aclrtExceptionInfo) -> Option<ExceptionInfo> {
    let live = lock(&LIVE);
    // SAFETY: a live address is an ExceptionInfo on the stack of a worker that is inside
    // `raise`, which removes the address (under this lock) before the info goes away.
    live.contains(&(info as usize))
        .then(|| unsafe { info.cast::<ExceptionInfo>().read() })
}

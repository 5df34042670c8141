//! IPC events (aclrtIpcGetEventHandle, aclrtIpcOpenEventHandle): an ACL_EVENT_IPC event's
//! records in one process satisfy the waits of the events other processes opened from its
//! handle, and the other way round. The handle carries the export's key, NUL-terminated.

use std::sync::Arc;

use npu_sys::*;

use crate::context;
use crate::error::{Res, ensure, fail, guard, non_null, write_out};
use crate::event::Event;
use crate::handle;
use crate::ipc::{self, Kind, SharedEvent};
use crate::sim::sim;

const HANDLE_SIZE: usize = ACL_IPC_EVENT_HANDLE_SIZE as usize;

/// Makes an aclrtCreateEventExWithFlag(ACL_EVENT_IPC) event openable by other processes and
/// writes its handle. NULL event or handle → 100000; a stale event → 107017; any other event
/// → 107000. Every call for one event gives the same handle.
///
/// # Safety
/// `handle` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtIpcGetEventHandle(
    event: aclrtEvent,
    handle: *mut aclrtIpcEventHandle,
) -> aclError {
    guard("aclrtIpcGetEventHandle", || {
        non_null(event, "event")?;
        non_null(handle, "handle")?;
        let sim = sim()?;
        let owner = handle::from_ptr(event);
        let exported = sim.events.resolve(owner)?;
        exported.device.check_alive()?;
        ensure!(
            exported.ex && exported.flags == ACL_EVENT_IPC,
            ACL_ERROR_RT_PARAM_INVALID,
            "only an event made by aclrtCreateEventExWithFlag with ACL_EVENT_IPC alone can be \
             shared (this one has flags {:#x}{})",
            exported.flags,
            if exported.ex { "" } else { ", not an Ex event" }
        );
        let device = exported.device.id;
        let key = exported.export(|shared| sim.ipc.export_event(owner as usize, device, shared))?;
        write_out(handle, "handle", to_handle(&key))
    })
}

/// A key in a handle, NUL-terminated and zero-padded.
fn to_handle(key: &str) -> aclrtIpcEventHandle {
    let mut handle = aclrtIpcEventHandle {
        reserved: [0; HANDLE_SIZE],
    };
    // Keys are at most 59 bytes (prefix, pid, nonce, serial), so the NUL always fits.
    for (slot, byte) in handle.reserved.iter_mut().zip(key.bytes()) {
        *slot = byte as std::ffi::c_char;
    }
    handle
}

/// The key a handle carries: the bytes before its first NUL (none → 107000).
fn from_handle(handle: &aclrtIpcEventHandle) -> Res<String> {
    let bytes: Vec<u8> = handle.reserved.iter().map(|&byte| byte as u8).collect();
    let key = std::ffi::CStr::from_bytes_until_nul(&bytes).ok();
    match key.and_then(|key| key.to_str().ok()) {
        Some(key) => Ok(key.to_owned()),
        None => fail!(
            ACL_ERROR_RT_PARAM_INVALID,
            "the handle holds no key from aclrtIpcGetEventHandle"
        ),
    }
}

/// Opens another process's IPC event handle as an event of the current device, whose waits
/// and syncs see the records of every process that has the event. NULL event → 100000; a
/// handle that holds no key, a key of this process, of something else than an event, or of
/// an event its exporter destroyed → 107000; an exporter that is gone → 507022. Needs a
/// current context (107002). Destroy it with aclrtDestroyEvent.
///
/// # Safety
/// `event` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtIpcOpenEventHandle(
    handle: aclrtIpcEventHandle,
    event: *mut aclrtEvent,
) -> aclError {
    guard("aclrtIpcOpenEventHandle", || {
        non_null(event, "event")?;
        let key = from_handle(&handle)?;
        let sim = sim()?;
        let ctx = context::current(sim)?;
        ctx.device.check_alive()?;
        let (_, file) = ipc::fetch(&key, Kind::Event)?;
        let shared = SharedEvent::map(Arc::new(file))?;
        let opened = sim
            .events
            .insert(Arc::new(Event::opened(ctx.device.clone(), shared)?))?;
        write_out(event, "event", handle::to_ptr(opened))
    })
}

//! IPC memory sharing between processes on one server (aclrtIpcMem*): export a device range
//! under a key, whitelist the importers, import by key, close. The super-node (Atlas A3)
//! functions are refused as on an Atlas A2.

use std::ffi::{c_char, c_void};

use npu_sys::*;

use super::check::{array, c_str};
use crate::context;
use crate::error::{Res, ensure, fail, guard, non_null, write_out};
use crate::ipc::KEY_LEN;
use crate::memory::PtrClass;
use crate::sim::sim;

/// Checks a flags argument that takes 0 or one bit (anything else → 107000).
fn check_flags(flags: u64, allowed: u64, what: &str) -> Res<()> {
    ensure!(
        flags & !allowed == 0,
        ACL_ERROR_RT_PARAM_INVALID,
        "flags {flags:#x} are not valid {what} flags (0 or {allowed:#x})"
    );
    Ok(())
}

/// Makes `[devPtr, devPtr+size)` of an aclrtMalloc allocation shareable and writes its key
/// (NUL-terminated) into `key`. NULL devPtr or key, or size 0 → 100000; len below 65, unknown
/// flags, memory that is not an aclrtMalloc allocation or a range past its end → 107000.
/// With ACL_RT_IPC_MEM_EXPORT_FLAG_DEFAULT only whitelisted processes may import it.
///
/// # Safety
/// `key` must be NULL or valid for `len` bytes of writes; `devPtr` is looked up, never trusted.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtIpcMemGetExportKey(
    devPtr: *mut c_void,
    size: usize,
    key: *mut c_char,
    len: usize,
    flags: u64,
) -> aclError {
    guard("aclrtIpcMemGetExportKey", || {
        non_null(devPtr, "devPtr")?;
        non_null(key, "key")?;
        ensure!(size != 0, ACL_ERROR_INVALID_PARAM, "size is 0");
        ensure!(
            len >= KEY_LEN,
            ACL_ERROR_RT_PARAM_INVALID,
            "len {len} is too short for a key: it must be {KEY_LEN}"
        );
        check_flags(
            flags,
            ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION as u64,
            "export",
        )?;
        let sim = sim()?;
        ensure!(
            !sim.pools.owns(devPtr as usize) && !super::managed::is_managed(sim, devPtr as usize),
            ACL_ERROR_RT_PARAM_INVALID,
            "{devPtr:p} is pool or managed memory, which aclrtIpcMemGetExportKey cannot share \
             (only aclrtMalloc memory)"
        );
        let exported = sim.ipc.export_memory(
            &sim.memory,
            devPtr as usize,
            size,
            flags == ACL_RT_IPC_MEM_EXPORT_FLAG_DEFAULT as u64,
        )?;
        write_key(exported, key);
        Ok(())
    })
}

/// Adds `num` pids to the whitelist of a key this process exported (a key exported without
/// pid validation accepts them and needs none). NULL key or pid, or num 0 → 100000; a key this
/// process does not export, or a pid that is not positive → 107000.
///
/// # Safety
/// `key` must be NULL or a NUL-terminated string; `pid` NULL or valid for `num` reads.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtIpcMemSetImportPid(
    key: *const c_char,
    pid: *mut i32,
    num: usize,
) -> aclError {
    guard("aclrtIpcMemSetImportPid", || {
        let key = c_str(key, "key")?;
        non_null(pid, "pid")?;
        ensure!(num != 0, ACL_ERROR_INVALID_PARAM, "num is 0");
        let pids = array(pid.cast_const(), num, "pid")?;
        sim()?.ipc.allow(key, crate::ipc::Kind::Memory, pids)
    })
}

/// Maps the memory another process exported under `key` into this process, as device memory
/// of the exporter's device, and writes its device pointer. NULL devPtr or key → 100000;
/// unknown flags, a malformed key, a key this process exported or already imported, or one
/// its exporter no longer exports → 107000; not whitelisted → 207006; an exporter that is gone
/// → 507022. Needs a current context.
///
/// # Safety
/// `devPtr` must be NULL or valid for a write; `key` NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtIpcMemImportByKey(
    devPtr: *mut *mut c_void,
    key: *const c_char,
    flags: u64,
) -> aclError {
    guard("aclrtIpcMemImportByKey", || {
        non_null(devPtr, "devPtr")?;
        let key = c_str(key, "key")?;
        check_flags(
            flags,
            ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS as u64,
            "import",
        )?;
        let sim = sim()?;
        let device = context::current(sim)?.device.clone();
        device.check_alive()?;
        let address = sim.ipc.import_memory(&sim.memory, key, sim.devices.len())?;
        // The flag stands for aclrtDeviceEnablePeerAccess: the current device may then reach
        // the memory's device (when they differ) without a call of its own.
        if flags & u64::from(ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS) != 0
            && let PtrClass::Device(owner) = sim.memory.locate(address).class
            && owner != device.id
        {
            device.enable_peer(owner);
        }
        write_out(devPtr, "devPtr", address as *mut c_void)
    })
}

/// Closes a key in this process: an imported mapping is released once no task touches it; an
/// exported key stops being importable (the memory itself stays until aclrtFree, and what
/// other processes imported stays mapped). NULL key → 100000; a key neither exported nor
/// imported here (or already closed) → 107000.
///
/// # Safety
/// `key` must be NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtIpcMemClose(key: *const c_char) -> aclError {
    guard("aclrtIpcMemClose", || {
        let key = c_str(key, "key")?;
        let sim = sim()?;
        sim.ipc.close(&sim.memory, key)
    })
}

/// Writes a key and its NUL into a caller's buffer checked to hold KEY_LEN bytes.
pub(super) fn write_key(exported: String, key: *mut c_char) {
    let mut bytes = exported.into_bytes();
    bytes.push(0);
    // SAFETY: `key` holds at least KEY_LEN writable bytes (checked against `len` by the
    // caller, by the API contract), and a key with its NUL is shorter than KEY_LEN.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), key.cast::<u8>(), bytes.len()) };
}

/// Refuses a super-node (Atlas A3) IPC function, which an Atlas A2 does not support.
fn super_node_only(api: &str) -> Res<()> {
    fail!(
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "{api} is an Atlas A3 super-node function, which an Atlas A2 does not support"
    )
}

/// The rest of an inter-server whitelist call (memory or notify) once its handle is checked:
/// NULL `serverPids` with a non-zero `num` → 100000, else refused as [`super_node_only`].
pub(super) fn inter_server_pids(
    api: &str,
    server_pids: *mut aclrtServerPid,
    num: usize,
) -> Res<()> {
    if num != 0 {
        non_null(server_pids, "serverPids")?;
    }
    super_node_only(api)
}

/// Not supported on an Atlas A2: NULL key → 100000, else 207000.
///
/// # Safety
/// No preconditions; the key is only checked for NULL.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtIpcMemSetAttr(
    key: *const c_char,
    _type: aclrtIpcMemAttrType,
    _attr: u64,
) -> aclError {
    guard("aclrtIpcMemSetAttr", || {
        non_null(key, "key")?;
        super_node_only("aclrtIpcMemSetAttr")
    })
}

/// Not supported on an Atlas A2: NULL key, or NULL serverPids with a non-zero num → 100000,
/// else 207000.
///
/// # Safety
/// No preconditions; the pointers are only checked for NULL.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtIpcMemImportPidInterServer(
    key: *const c_char,
    serverPids: *mut aclrtServerPid,
    num: usize,
) -> aclError {
    guard("aclrtIpcMemImportPidInterServer", || {
        non_null(key, "key")?;
        inter_server_pids("aclrtIpcMemImportPidInterServer", serverPids, num)
    })
}

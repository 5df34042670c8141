//! IPC notifies (aclrtNotifyGetExportKey, aclrtNotifySetImportPid, aclrtNotifyImportByKey):
//! a record in one process satisfies a wait in another. The super-node (Atlas A3) whitelist
//! is refused as on an Atlas A2.

use std::ffi::c_char;

use npu_sys::*;

use super::check::{array, c_str};
use super::notify::lookup;
use crate::context;
use crate::error::{ensure, guard, non_null, write_out};
use crate::handle;
use crate::ipc::{self, KEY_LEN, Kind, SharedFlag};
use crate::notify::Notify;
use crate::sim::sim;

/// Checks an IPC notify flags argument: 0 or `allowed` (anything else → 107000).
fn check_flags(flags: u64, allowed: u32, what: &str) -> crate::error::Res<()> {
    ensure!(
        flags == 0 || flags == u64::from(allowed),
        ACL_ERROR_RT_PARAM_INVALID,
        "flags {flags:#x} are not valid {what} flags (0 or {allowed:#x})"
    );
    Ok(())
}

/// Shares the notify with other processes and writes its key (NUL-terminated) into `key`.
/// NULL notify or key → 100000, then len below 65 or unknown flags → 107000, all before the
/// notify is looked up (a stale notify → 107017). With ACL_RT_NOTIFY_EXPORT_FLAG_DEFAULT only
/// whitelisted processes may import it.
///
/// # Safety
/// `key` must be NULL or valid for `len` bytes of writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtNotifyGetExportKey(
    notify: aclrtNotify,
    key: *mut c_char,
    len: usize,
    flags: u64,
) -> aclError {
    guard("aclrtNotifyGetExportKey", || {
        non_null(notify, "notify")?;
        non_null(key, "key")?;
        ensure!(
            len >= KEY_LEN,
            ACL_ERROR_RT_PARAM_INVALID,
            "len {len} is too short for a key: it must be at least {KEY_LEN}"
        );
        check_flags(
            flags,
            ACL_RT_NOTIFY_EXPORT_FLAG_DISABLE_PID_VALIDATION,
            "export",
        )?;
        let shared = lookup(notify)?;
        let flag = shared.share()?;
        let exported = sim()?.ipc.export_notify(
            handle::from_ptr(notify) as usize,
            shared.device.id,
            &flag,
            flags == u64::from(ACL_RT_NOTIFY_EXPORT_FLAG_DEFAULT),
        )?;
        super::ipc::write_key(exported, key);
        Ok(())
    })
}

/// Adds `num` pids to the whitelist of an exported notify. NULL notify or pid, or num 0 →
/// 100000 (before the notify is looked up); a stale notify → 107017; a notify this process did not export, or a pid that is
/// not positive → 107000.
///
/// # Safety
/// `pid` must be NULL or valid for `num` reads.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtNotifySetImportPid(
    notify: aclrtNotify,
    pid: *mut i32,
    num: usize,
) -> aclError {
    guard("aclrtNotifySetImportPid", || {
        non_null(notify, "notify")?;
        non_null(pid, "pid")?;
        ensure!(num != 0, ACL_ERROR_INVALID_PARAM, "num is 0");
        let pids = array(pid.cast_const(), num, "pid")?;
        lookup(notify)?;
        sim()?
            .ipc
            .allow_notify(handle::from_ptr(notify) as usize, pids)
    })
}

/// Creates a notify of the current device that shares the flag of the notify another process
/// exported under `key`: its records satisfy the exporter's waits and the other way round.
/// NULL notify or key → 100000; unknown flags, a malformed key, a key of this process, of
/// memory, or one its exporter no longer exports → 107000; not whitelisted → 207006; an
/// exporter that is gone → 507022. Needs a current context. Destroy it with
/// aclrtDestroyNotify.
///
/// # Safety
/// `notify` must be NULL or valid for a write; `key` NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtNotifyImportByKey(
    notify: *mut aclrtNotify,
    key: *const c_char,
    flags: u64,
) -> aclError {
    guard("aclrtNotifyImportByKey", || {
        non_null(notify, "notify")?;
        let key = c_str(key, "key")?;
        check_flags(
            flags,
            ACL_RT_NOTIFY_IMPORT_FLAG_ENABLE_PEER_ACCESS,
            "import",
        )?;
        let sim = sim()?;
        let ctx = context::current(sim)?;
        ctx.device.check_alive()?;
        let (_, file) = ipc::fetch(key, Kind::Notify)?;
        let flag = SharedFlag::map(std::sync::Arc::new(file))?;
        let handle = sim.notifies.insert(Notify::imported(&ctx.device, flag)?)?;
        write_out(notify, "notify", handle::to_ptr(handle))
    })
}

/// Not supported on an Atlas A2: NULL notify, or NULL serverPids with a non-zero num →
/// 100000, else 207000.
///
/// # Safety
/// No preconditions; the pointers are only checked for NULL.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtNotifySetImportPidInterServer(
    notify: aclrtNotify,
    serverPids: *mut aclrtServerPid,
    num: usize,
) -> aclError {
    guard("aclrtNotifySetImportPidInterServer", || {
        non_null(notify, "notify")?;
        super::ipc::inter_server_pids("aclrtNotifySetImportPidInterServer", serverPids, num)
    })
}

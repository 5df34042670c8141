//! Dump configuration: aclmdlInitDump, aclmdlSetDump, aclmdlFinalizeDump (see `crate::dump`).
//! Nothing is ever dumped: the simulator runs no models or operators.

use std::ffi::c_char;

use npu_sys::*;

use super::check::c_path;
use super::init::while_initialised;
use crate::dump;
use crate::error::{guard, non_null};
use crate::sim::sim;
use crate::sync::lock;

/// Opens a dump session, between aclInit and aclFinalize (otherwise 100001). aclInit's file
/// turned a dump on → 100044 ACL_ERROR_DUMP_ALREADY_RUN; a session open already → 100002
/// ACL_ERROR_REPEAT_INITIALIZE. After aclmdlFinalizeDump a new session may be opened.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlInitDump() -> aclError {
    guard("aclmdlInitDump", || while_initialised(dump::begin))
}

/// Gives the open session the dump configuration in the JSON file at `dumpCfgPath`,
/// replacing the one set before. NULL → 100000; outside aclInit .. aclFinalize → 100001; no
/// session → 100045 ACL_ERROR_DUMP_NOT_RUN; a file that cannot be read → 100003, larger than
/// 10 MiB → 100005, not JSON or nested deeper than 10 → 100006; a `"dump"` section CANN
/// would refuse (a value of the wrong type or outside its choices, a dump without the
/// `dump_path` it needs, kinds of dump that exclude each other) → 100009
/// ACL_ERROR_INVALID_DUMP_CONFIG. A refused file leaves the configuration as it was.
///
/// # Safety
/// `dumpCfgPath` must be NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlSetDump(dumpCfgPath: *const c_char) -> aclError {
    guard("aclmdlSetDump", || {
        non_null(dumpCfgPath, "dumpCfgPath")?;
        while_initialised(|| {
            dump::check_session()?;
            let path = c_path(dumpCfgPath, "dumpCfgPath")?;
            let json = dump::read_config_file(path)?;
            let settings = dump::parse_section(&json)?.settle(any_device_set()?);
            dump::set(settings)
        })
    })
}

/// Closes the dump session (outside aclInit .. aclFinalize → 100001; none open → 100045) and
/// drops its configuration, except a detail exception dump (`aic_err_detail_dump`), which
/// CANN documents aclmdlFinalizeDump cannot undo: it stays until aclFinalize.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlFinalizeDump() -> aclError {
    guard("aclmdlFinalizeDump", || while_initialised(dump::end))
}

/// Whether a device of the process has been set (its primary context exists): a detail
/// exception dump must be asked for before that.
pub(super) fn any_device_set() -> crate::error::Res<bool> {
    Ok(sim()?
        .devices
        .iter()
        .any(|device| lock(&device.primary).ctx.is_some()))
}

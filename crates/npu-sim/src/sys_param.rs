//! Runtime parameters (aclSysParamOpt): the process's (aclrtSetSysParamOpt) and each
//! context's (aclrtCtxSetSysParamOpt). They select how operators compute (deterministic
//! computation, out-of-bounds checks of global memory, early kernel start); the simulator runs
//! no operators, so they are kept and reported.

use std::sync::Mutex;

use npu_sys::*;

use crate::error::{Res, ensure, fail};
use crate::sync::lock;

/// The values each option admits: DETERMINISTIC 0 to 3 (off, deterministic, strong
/// consistency, batch consistency), the others off (0) or on (1).
fn admits(opt: aclSysParamOpt, value: i64) -> bool {
    match opt {
        ACL_OPT_DETERMINISTIC => (0..4).contains(&value),
        _ => value == 0 || value == 1,
    }
}

/// The slot of an option (an unknown option → 100000).
pub(crate) fn index(opt: aclSysParamOpt) -> Res<usize> {
    match opt {
        ACL_OPT_DETERMINISTIC
        | ACL_OPT_ENABLE_DEBUG_KERNEL
        | ACL_OPT_STRONG_CONSISTENCY
        | ACL_OPT_ENABLE_KERNEL_EARLY_START => Ok(opt as usize),
        _ => fail!(
            ACL_ERROR_INVALID_PARAM,
            "opt {opt} is not an aclSysParamOpt"
        ),
    }
}

/// The slot of an option after checking the option and a value for it (100000 otherwise): the
/// ACL layer's checks, which the context functions make before they look the context up.
pub(crate) fn checked(opt: aclSysParamOpt, value: i64) -> Res<usize> {
    let at = index(opt)?;
    ensure!(
        admits(opt, value),
        ACL_ERROR_INVALID_PARAM,
        "{value} is not a value of option {opt}"
    );
    Ok(at)
}

/// One set of runtime parameters; `None` for an option never set.
#[derive(Default)]
pub(crate) struct SysParams(Mutex<[Option<i64>; 4]>);

/// The process's parameters.
pub(crate) static PROCESS: SysParams = SysParams(Mutex::new([None; 4]));

impl SysParams {
    /// Sets an option after checking it and its value (100000 otherwise).
    pub(crate) fn set(&self, opt: aclSysParamOpt, value: i64) -> Res<()> {
        let at = checked(opt, value)?;
        lock(&self.0)[at] = Some(value);
        Ok(())
    }

    /// An option's value, `None` if it was never set.
    pub(crate) fn get(&self, opt: aclSysParamOpt) -> Res<Option<i64>> {
        let at = index(opt)?;
        Ok(lock(&self.0)[at])
    }
}

//! Runtime parameters of the process and of the current context (aclSysParamOpt).

use npu_sys::*;

use crate::context;
use crate::error::{fail, guard, non_null, write_out};
use crate::sim::sim;
use crate::sys_param::PROCESS;

/// Sets a runtime parameter of the process (the last setting wins). An unknown option, or a
/// value it does not admit (DETERMINISTIC: 0 to 3; the others: 0 or 1) → 100000.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetSysParamOpt(opt: aclSysParamOpt, value: i64) -> aclError {
    guard("aclrtSetSysParamOpt", || PROCESS.set(opt, value))
}

/// A runtime parameter of the process: the last setting, 0 (off) before any. NULL → 100000;
/// unknown option → 100000.
///
/// # Safety
/// `value` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetSysParamOpt(opt: aclSysParamOpt, value: *mut i64) -> aclError {
    guard("aclrtGetSysParamOpt", || {
        non_null(value, "value")?;
        let set = PROCESS.get(opt)?;
        write_out(value, "value", set.unwrap_or(0))
    })
}

/// Sets a runtime parameter of the calling thread's current context; options and values as
/// aclrtSetSysParamOpt (100000 otherwise), checked before the context is looked up (none →
/// 107002).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCtxSetSysParamOpt(opt: aclSysParamOpt, value: i64) -> aclError {
    guard("aclrtCtxSetSysParamOpt", || {
        crate::sys_param::checked(opt, value)?;
        let ctx = context::current(sim()?)?;
        ctx.sys_params.set(opt, value)
    })
}

/// A runtime parameter of the current context. Context parameters have no default: one the
/// context never set → 107021 (ACL_ERROR_RT_SYSPARAMOPT_NOT_SET). NULL or an unknown option →
/// 100000, before the context is looked up (none → 107002).
///
/// # Safety
/// `value` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCtxGetSysParamOpt(opt: aclSysParamOpt, value: *mut i64) -> aclError {
    guard("aclrtCtxGetSysParamOpt", || {
        non_null(value, "value")?;
        crate::sys_param::index(opt)?;
        let ctx = context::current(sim()?)?;
        match ctx.sys_params.get(opt)? {
            Some(set) => write_out(value, "value", set),
            None => fail!(
                ACL_ERROR_RT_SYSPARAMOPT_NOT_SET,
                "option {opt} was never set on the current context (context parameters have no default)"
            ),
        }
    })
}

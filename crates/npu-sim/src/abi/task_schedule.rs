//! The choice of Task Schedule (aclrtSetTsDevice).

use npu_sys::*;

use crate::error::{ensure, guard};

/// Chooses the Task Schedule the calling thread's work is dispatched by. The reference says
/// the choice has no effect on a processor without a separate VECTOR Core Task Schedule, whose
/// work the AI CORE one dispatches: an Atlas A2 is such a processor (one scheduler dispatches
/// to its cube and vector cores alike), so ACL_TS_ID_AICORE and ACL_TS_ID_AIVECTOR are both
/// accepted and change nothing. ACL_TS_ID_RESERVED or a value that is no aclrtTsId → 100000.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetTsDevice(tsId: aclrtTsId) -> aclError {
    guard("aclrtSetTsDevice", || {
        ensure!(
            matches!(tsId, ACL_TS_ID_AICORE | ACL_TS_ID_AIVECTOR),
            ACL_ERROR_INVALID_PARAM,
            "tsId {tsId} is neither ACL_TS_ID_AICORE (0) nor ACL_TS_ID_AIVECTOR (1)"
        );
        Ok(())
    })
}

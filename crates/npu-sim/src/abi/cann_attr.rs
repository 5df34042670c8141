//! CANN feature attributes: what this environment supports.

use npu_sys::*;

use crate::error::{ensure, guard, non_null, write_out};

/// The features the simulated environment supports: Inf/NaN overflow mode and bf16, as an
/// Atlas A2 does; not JIT operator compilation, since the simulator compiles no operators.
static SUPPORTED: [aclCannAttr; 2] = [ACL_CANN_ATTR_INF_NAN, ACL_CANN_ATTR_BF16];

/// The supported features: `*cannAttrList` points to a list owned by the library for the whole
/// process, `*num` is its length.
///
/// # Safety
/// `cannAttrList` and `num` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclGetCannAttributeList(
    cannAttrList: *mut *const aclCannAttr,
    num: *mut usize,
) -> aclError {
    guard("aclGetCannAttributeList", || {
        non_null(cannAttrList, "cannAttrList")?;
        non_null(num, "num")?;
        write_out(cannAttrList, "cannAttrList", SUPPORTED.as_ptr())?;
        write_out(num, "num", SUPPORTED.len())
    })
}

/// Whether one feature is supported (1) or not (0); ACL_CANN_ATTR_UNDEFINED or a value outside
/// the enum → 100000.
///
/// # Safety
/// `value` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclGetCannAttribute(cannAttr: aclCannAttr, value: *mut i32) -> aclError {
    guard("aclGetCannAttribute", || {
        non_null(value, "value")?;
        ensure!(
            matches!(
                cannAttr,
                ACL_CANN_ATTR_INF_NAN | ACL_CANN_ATTR_BF16 | ACL_CANN_ATTR_JIT_COMPILE
            ),
            ACL_ERROR_INVALID_PARAM,
            "{cannAttr} is not a CANN attribute"
        );
        write_out(value, "value", i32::from(SUPPORTED.contains(&cannAttr)))
    })
}

//! Errors of the simulator's controls as npu-rs errors (feature `sim`).

use crate::{AclCode, AclError, Error};

/// A refused simulator control becomes the ACL error its C form returns, under the name
/// `npu-sim control`, so test code can use `?` on controls in functions returning
/// [`Result`](crate::Result).
///
/// ```
/// use npu_core::{AclCode, Error};
///
/// fn lose_missing_device() -> npu_core::Result<()> {
///     npu_sim::control::lose_device(99)?; // there is no device 99
///     Ok(())
/// }
/// let err = lose_missing_device().unwrap_err();
/// assert_eq!(err.acl_code(), Some(AclCode(107001)));
/// assert!(matches!(err, Error::Acl(ref e) if e.api == "npu-sim control"), "{err}");
/// ```
impl From<npu_sim::control::ControlError> for Error {
    fn from(err: npu_sim::control::ControlError) -> Self {
        Error::Acl(AclError::new(
            "npu-sim control",
            AclCode(err.code),
            Some(err.message),
        ))
    }
}

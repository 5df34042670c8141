//! ACL return codes: symbolic names, classes and one-line explanations.

use std::fmt;

use crate::ffi;

/// A raw ACL return code (`aclError`), with its symbolic name and class.
///
/// ```
/// use npu_core::{AclCode, ErrorClass};
///
/// let code = AclCode(107003);
/// assert_eq!(code.name(), Some("ACL_ERROR_RT_STREAM_CONTEXT"));
/// assert_eq!(code.class(), ErrorClass::Caller);
/// assert_eq!(code.to_string(), "ACL_ERROR_RT_STREAM_CONTEXT (107003)");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AclCode(pub i32);

/// Who is at fault, by ACL's code-class rule (the leading digit of the code).
///
/// ```
/// use npu_core::{AclCode, ErrorClass};
///
/// let out_of_memory = AclCode(207001);
/// assert_eq!(out_of_memory.class(), ErrorClass::Resource);
/// assert_eq!(out_of_memory.class().to_string(), "resource error");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// 1xxxxx: the caller passed something invalid or called in the wrong state.
    Caller,
    /// 2xxxxx: a resource ran out, or the runtime or device lacks a feature.
    Resource,
    /// 3xxxxx: a business-state condition, such as a full queue.
    Business,
    /// 5xxxxx: the runtime, driver or device failed.
    Internal,
    /// A code outside ACL's documented ranges; ACL itself treats these as internal errors.
    Unknown,
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorClass::Caller => "caller error",
            ErrorClass::Resource => "resource error",
            ErrorClass::Business => "business-state error",
            ErrorClass::Internal => "internal error",
            ErrorClass::Unknown => "unknown error",
        })
    }
}

impl AclCode {
    /// `ACL_SUCCESS`.
    ///
    /// ```
    /// use npu_core::AclCode;
    ///
    /// assert_eq!(AclCode::SUCCESS, AclCode(0));
    /// assert_eq!(AclCode::SUCCESS.name(), Some("ACL_SUCCESS"));
    /// ```
    pub const SUCCESS: AclCode = AclCode(ffi::ACL_SUCCESS);

    /// The symbolic name, e.g. `ACL_ERROR_RT_STREAM_CONTEXT`, for every documented code.
    ///
    /// ```
    /// use npu_core::AclCode;
    ///
    /// assert_eq!(AclCode(507010).name(), Some("ACL_ERROR_RT_LOST_HEARTBEAT"));
    /// assert_eq!(AclCode(42).name(), None);
    /// ```
    pub fn name(self) -> Option<&'static str> {
        ffi::code_info(self.0).map(|info| info.name)
    }

    /// A short explanation of what the code means, for every documented code.
    ///
    /// ```
    /// use npu_core::AclCode;
    ///
    /// assert_eq!(AclCode(207001).description(), Some("device out of memory"));
    /// assert_eq!(AclCode(42).description(), None);
    /// ```
    pub fn description(self) -> Option<&'static str> {
        ffi::code_info(self.0).map(|info| info.description)
    }

    /// The code's class by ACL's leading-digit rule.
    ///
    /// ```
    /// use npu_core::{AclCode, ErrorClass};
    ///
    /// assert_eq!(AclCode(100000).class(), ErrorClass::Caller);
    /// assert_eq!(AclCode(507015).class(), ErrorClass::Internal);
    /// assert_eq!(AclCode(42).class(), ErrorClass::Unknown);
    /// ```
    pub fn class(self) -> ErrorClass {
        match self.0 / 100_000 {
            1 => ErrorClass::Caller,
            2 => ErrorClass::Resource,
            3 => ErrorClass::Business,
            5 => ErrorClass::Internal,
            _ => ErrorClass::Unknown,
        }
    }
}

impl fmt::Display for AclCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "{name} ({})", self.0),
            None => write!(f, "unknown ACL error ({})", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_follow_the_leading_digit() {
        assert_eq!(AclCode(100000).class(), ErrorClass::Caller);
        assert_eq!(AclCode(207001).class(), ErrorClass::Resource);
        assert_eq!(AclCode(300000).class(), ErrorClass::Business);
        assert_eq!(AclCode(507015).class(), ErrorClass::Internal);
        assert_eq!(AclCode(42).class(), ErrorClass::Unknown);
        assert_eq!(AclCode(42).to_string(), "unknown ACL error (42)");
    }
}

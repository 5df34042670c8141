//! Fault detail: what the runtime reports about a task that failed on the device.
//!
//! Once per loaded runtime, npu-core registers an exception callback
//! (`aclrtExceptionInfoCallbackRegister`, or the deprecated `aclrtSetExceptionInfoCallback`
//! on runtimes without it) and a stream-state callback (`aclrtRegStreamStateCallback`). The
//! exception callback records a [`DeviceFault`] per stream ([`table`]) and tells whoever
//! watches that stream; npu-stream attaches the fault to the error of the operation that
//! failed. The stream-state callback forgets a stream's faults when it is created or
//! destroyed, so a stream id the runtime hands out again does not inherit them.

mod callbacks;
mod table;

use std::fmt;

use crate::code::AclCode;
use crate::ffi;

pub(crate) use callbacks::register;
pub(crate) use table::FaultTable;
pub use table::FaultWatch;

/// What the runtime reported about a task that failed on the device: which task, where, with
/// which code, and the device's error detail (`aclrtGetErrorVerbose`).
///
/// Carried by the error of the operation that failed ([`crate::Error::fault`]). Its `Display`
/// says where the fault happened and what kind it was, without the code, which the error
/// around it already shows.
///
/// ```
/// use npu_core::{AclCode, DeviceFault, FaultKind};
///
/// let mut fault = DeviceFault::new(AclCode::AICORE_EXCEPTION);
/// (fault.task_id, fault.stream_id, fault.device_id) = (3, 7, 1);
/// fault.kind = Some(FaultKind::Other);
/// assert_eq!(fault.to_string(), "task 3 of stream 7 on device 1 (other error)");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct DeviceFault {
    /// The runtime's id of the failed task (`aclrtGetTaskIdFromExceptionInfo`).
    pub task_id: u32,
    /// The failed task's stream, as `aclrtStreamGetId` (and npu-stream's `Stream::id`, of the
    /// same type, so the two compare directly) names it.
    pub stream_id: u64,
    /// The device the task failed on.
    pub device_id: u32,
    /// The host thread that submitted the task (`aclrtGetThreadIdFromExceptionInfo`).
    pub thread_id: u32,
    /// The code the task failed with.
    pub code: AclCode,
    /// The device's error detail at the time of the fault (`aclrtGetErrorVerbose`), when the
    /// runtime has the function and reported an error.
    pub kind: Option<FaultKind>,
}

impl DeviceFault {
    /// A fault with `code` and every other field zero or `None`, to fill in field by field:
    /// for tests of code that handles faults. The runtime's faults come filled in; the struct
    /// is `#[non_exhaustive]`, so that what the runtime reports can grow, and this is how code
    /// outside npu-core makes one.
    ///
    /// ```
    /// use npu_core::{AclCode, DeviceFault};
    ///
    /// let mut fault = DeviceFault::new(AclCode::AICORE_EXCEPTION);
    /// fault.task_id = 2;
    /// assert_eq!(fault.to_string(), "task 2 of stream 0 on device 0");
    /// ```
    pub fn new(code: AclCode) -> Self {
        DeviceFault {
            task_id: 0,
            stream_id: 0,
            device_id: 0,
            thread_id: 0,
            code,
            kind: None,
        }
    }
}

impl fmt::Display for DeviceFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "task {} of stream {} on device {}",
            self.task_id, self.stream_id, self.device_id
        )?;
        if let Some(kind) = self.kind {
            write!(f, " ({kind})")?;
        }
        Ok(())
    }
}

/// The device's error type after a fault (`aclrtErrorType`, from `aclrtGetErrorVerbose`).
/// An Atlas A2 or A3 reports only [`Memory`](FaultKind::Memory) and
/// [`Other`](FaultKind::Other).
///
/// ```
/// use npu_core::FaultKind;
///
/// assert_eq!(FaultKind::Memory.to_string(), "memory error");
/// assert_eq!(FaultKind::Unrecognised(9).to_string(), "error type 9");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FaultKind {
    /// `ACL_RT_ERROR_MEMORY`: a memory error (an access to memory that is not there, an
    /// uncorrectable ECC error).
    Memory,
    /// `ACL_RT_ERROR_L2`: an L2 buffer error.
    L2,
    /// `ACL_RT_ERROR_AICORE`: an AI Core error.
    AiCore,
    /// `ACL_RT_ERROR_LINK`: a network (link) error.
    Link,
    /// `ACL_RT_ERROR_L3_PORT`: an L3 port error.
    L3Port,
    /// `ACL_RT_ERROR_OTHERS`: any other error.
    Other,
    /// A type this version of npu-rs does not know.
    Unrecognised(u32),
}

impl FaultKind {
    /// The kind of an `aclrtErrorType`; `None` for `ACL_RT_NO_ERROR`.
    fn from_raw(raw: ffi::aclrtErrorType) -> Option<FaultKind> {
        Some(match raw {
            ffi::ACL_RT_NO_ERROR => return None,
            ffi::ACL_RT_ERROR_MEMORY => FaultKind::Memory,
            ffi::ACL_RT_ERROR_L2 => FaultKind::L2,
            ffi::ACL_RT_ERROR_AICORE => FaultKind::AiCore,
            ffi::ACL_RT_ERROR_LINK => FaultKind::Link,
            ffi::ACL_RT_ERROR_L3_PORT => FaultKind::L3Port,
            ffi::ACL_RT_ERROR_OTHERS => FaultKind::Other,
            other => FaultKind::Unrecognised(other),
        })
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FaultKind::Memory => f.write_str("memory error"),
            FaultKind::L2 => f.write_str("L2 buffer error"),
            FaultKind::AiCore => f.write_str("AI Core error"),
            FaultKind::Link => f.write_str("link error"),
            FaultKind::L3Port => f.write_str("L3 port error"),
            FaultKind::Other => f.write_str("other error"),
            FaultKind::Unrecognised(raw) => write!(f, "error type {raw}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_types_map_to_kinds() {
        assert_eq!(FaultKind::from_raw(ffi::ACL_RT_NO_ERROR), None);
        assert_eq!(
            FaultKind::from_raw(ffi::ACL_RT_ERROR_MEMORY),
            Some(FaultKind::Memory)
        );
        assert_eq!(
            FaultKind::from_raw(ffi::ACL_RT_ERROR_OTHERS),
            Some(FaultKind::Other)
        );
        assert_eq!(FaultKind::from_raw(77), Some(FaultKind::Unrecognised(77)));
        for raw in 1..=5 {
            assert!(!matches!(
                FaultKind::from_raw(raw),
                Some(FaultKind::Unrecognised(_))
            ));
        }
    }
}

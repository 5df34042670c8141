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
#[non_exhaustive]
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

/// What a device memory error ([`AclCode::is_memory_error`]) leaves of the memory: whether
/// CANN can repair it. Ordered from the least to the most severe, so the worst of several is
/// their maximum.
///
/// ```
/// use npu_core::{AclCode, MemoryErrorKind};
///
/// let kinds = [AclCode::DEVICE_MEM_ERROR, AclCode::HBM_MULTI_BIT_ECC_ERROR]
///     .map(|code| code.memory_error_kind().unwrap());
/// assert_eq!(kinds.into_iter().max(), Some(MemoryErrorKind::Unrepairable));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum MemoryErrorKind {
    /// An uncorrectable error (UCE) that the runtime lists (`aclrtGetMemUceInfo`) and may
    /// repair (`aclrtMemUceRepair`): `ACL_ERROR_RT_DEVICE_MEM_ERROR` (507053) and
    /// `ACL_ERROR_RT_SUSPECT_DEVICE_MEM_ERROR` (507055).
    Repairable,
    /// An error with no repair: `ACL_ERROR_RT_HBM_MULTI_BIT_ECC_ERROR` (507054), for which
    /// the reference's remedy is to collect the logs and contact support. Memory that saw it
    /// is not to be used again.
    Unrepairable,
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
    /// An AI Core (cube) task trapped: `ACL_ERROR_RT_AICORE_EXCEPTION`.
    ///
    /// ```
    /// use npu_core::{AclCode, ErrorClass};
    ///
    /// assert_eq!(AclCode::AICORE_EXCEPTION, AclCode(507015));
    /// assert_eq!(AclCode::AICORE_EXCEPTION.name(), Some("ACL_ERROR_RT_AICORE_EXCEPTION"));
    /// // The kernel failed on the device, not the call that launched it.
    /// assert_eq!(AclCode::AICORE_EXCEPTION.class(), ErrorClass::Internal);
    /// ```
    pub const AICORE_EXCEPTION: AclCode = AclCode(ffi::ACL_ERROR_RT_AICORE_EXCEPTION);
    /// The device stopped answering: `ACL_ERROR_RT_LOST_HEARTBEAT`.
    ///
    /// ```
    /// use npu_core::AclCode;
    ///
    /// assert_eq!(AclCode::DEVICE_LOST, AclCode(507010));
    /// assert_eq!(AclCode::DEVICE_LOST.name(), Some("ACL_ERROR_RT_LOST_HEARTBEAT"));
    /// // Unlike a timeout, nothing to retry on the same device.
    /// assert!(AclCode::DEVICE_LOST.is_device_lost());
    /// ```
    pub const DEVICE_LOST: AclCode = AclCode(ffi::ACL_ERROR_RT_LOST_HEARTBEAT);
    /// Device memory ran out: `ACL_ERROR_RT_MEMORY_ALLOCATION`.
    ///
    /// ```
    /// use npu_core::{AclCode, ErrorClass};
    ///
    /// assert_eq!(AclCode::MEMORY_ALLOCATION, AclCode(207001));
    /// assert_eq!(AclCode::MEMORY_ALLOCATION.name(), Some("ACL_ERROR_RT_MEMORY_ALLOCATION"));
    /// // Worth a retry once other buffers are freed.
    /// assert!(AclCode::MEMORY_ALLOCATION.is_out_of_memory());
    /// assert_eq!(AclCode::MEMORY_ALLOCATION.class(), ErrorClass::Resource);
    /// ```
    pub const MEMORY_ALLOCATION: AclCode = AclCode(ffi::ACL_ERROR_RT_MEMORY_ALLOCATION);
    /// The device ran out of memory while running a task: `ACL_ERROR_RT_DEVICE_OOM`.
    ///
    /// ```
    /// use npu_core::AclCode;
    ///
    /// assert_eq!(AclCode::DEVICE_OOM, AclCode(207018));
    /// assert_eq!(AclCode::DEVICE_OOM.name(), Some("ACL_ERROR_RT_DEVICE_OOM"));
    /// assert!(AclCode::DEVICE_OOM.is_out_of_memory());
    /// ```
    pub const DEVICE_OOM: AclCode = AclCode(ffi::ACL_ERROR_RT_DEVICE_OOM);
    /// Host memory ran out: `ACL_ERROR_BAD_ALLOC`.
    ///
    /// ```
    /// use npu_core::AclCode;
    ///
    /// assert_eq!(AclCode::BAD_ALLOC, AclCode(200000));
    /// assert_eq!(AclCode::BAD_ALLOC.name(), Some("ACL_ERROR_BAD_ALLOC"));
    /// // Host memory counts as out of memory as well as device memory does.
    /// assert!(AclCode::BAD_ALLOC.is_out_of_memory());
    /// ```
    pub const BAD_ALLOC: AclCode = AclCode(ffi::ACL_ERROR_BAD_ALLOC);
    /// The stream's work was discarded by `aclrtStreamAbort`: `ACL_ERROR_RT_STREAM_ABORT`.
    ///
    /// ```
    /// use npu_core::AclCode;
    ///
    /// assert_eq!(AclCode::STREAM_ABORT, AclCode(107023));
    /// assert_eq!(AclCode::STREAM_ABORT.name(), Some("ACL_ERROR_RT_STREAM_ABORT"));
    /// // The work was discarded on purpose, not failed by the device.
    /// assert!(AclCode::STREAM_ABORT.is_aborted());
    /// assert!(!AclCode::STREAM_ABORT.is_device_lost());
    /// ```
    pub const STREAM_ABORT: AclCode = AclCode(ffi::ACL_ERROR_RT_STREAM_ABORT);
    /// A device task was aborted: `ACL_ERROR_RT_DEVICE_TASK_ABORT`.
    ///
    /// ```
    /// use npu_core::AclCode;
    ///
    /// assert_eq!(AclCode::DEVICE_TASK_ABORT, AclCode(107022));
    /// assert_eq!(AclCode::DEVICE_TASK_ABORT.name(), Some("ACL_ERROR_RT_DEVICE_TASK_ABORT"));
    /// assert!(AclCode::DEVICE_TASK_ABORT.is_aborted());
    /// ```
    pub const DEVICE_TASK_ABORT: AclCode = AclCode(ffi::ACL_ERROR_RT_DEVICE_TASK_ABORT);
    /// A wait timed out: `ACL_ERROR_RT_WAIT_TIMEOUT`.
    ///
    /// ```
    /// use npu_core::AclCode;
    ///
    /// assert_eq!(AclCode::WAIT_TIMEOUT, AclCode(107019));
    /// assert_eq!(AclCode::WAIT_TIMEOUT.name(), Some("ACL_ERROR_RT_WAIT_TIMEOUT"));
    /// assert!(AclCode::WAIT_TIMEOUT.is_timeout());
    /// ```
    pub const WAIT_TIMEOUT: AclCode = AclCode(ffi::ACL_ERROR_RT_WAIT_TIMEOUT);
    /// A task ran past its time limit: `ACL_ERROR_RT_TASK_TIMEOUT`.
    ///
    /// ```
    /// use npu_core::AclCode;
    ///
    /// assert_eq!(AclCode::TASK_TIMEOUT, AclCode(107020));
    /// assert_eq!(AclCode::TASK_TIMEOUT.name(), Some("ACL_ERROR_RT_TASK_TIMEOUT"));
    /// assert!(AclCode::TASK_TIMEOUT.is_timeout());
    /// ```
    pub const TASK_TIMEOUT: AclCode = AclCode(ffi::ACL_ERROR_RT_TASK_TIMEOUT);
    /// A timed stream synchronisation expired: `ACL_ERROR_RT_STREAM_SYNC_TIMEOUT`.
    ///
    /// ```
    /// use npu_core::AclCode;
    ///
    /// assert_eq!(AclCode::STREAM_SYNC_TIMEOUT, AclCode(507046));
    /// assert_eq!(AclCode::STREAM_SYNC_TIMEOUT.name(), Some("ACL_ERROR_RT_STREAM_SYNC_TIMEOUT"));
    /// // Only the wait expired: the stream's work may still finish.
    /// assert!(AclCode::STREAM_SYNC_TIMEOUT.is_timeout());
    /// ```
    pub const STREAM_SYNC_TIMEOUT: AclCode = AclCode(ffi::ACL_ERROR_RT_STREAM_SYNC_TIMEOUT);
    /// A timed event synchronisation expired: `ACL_ERROR_RT_EVENT_SYNC_TIMEOUT`.
    ///
    /// ```
    /// use npu_core::AclCode;
    ///
    /// assert_eq!(AclCode::EVENT_SYNC_TIMEOUT, AclCode(507047));
    /// assert_eq!(AclCode::EVENT_SYNC_TIMEOUT.name(), Some("ACL_ERROR_RT_EVENT_SYNC_TIMEOUT"));
    /// assert!(AclCode::EVENT_SYNC_TIMEOUT.is_timeout());
    /// ```
    pub const EVENT_SYNC_TIMEOUT: AclCode = AclCode(ffi::ACL_ERROR_RT_EVENT_SYNC_TIMEOUT);
    /// A task touched device memory with an uncorrectable error (UCE, memory the hardware
    /// cannot correct): `ACL_ERROR_RT_DEVICE_MEM_ERROR`. `aclrtGetMemUceInfo` lists the bad
    /// ranges and `aclrtMemUceRepair` repairs them; a `DevicePool` does both for its blocks.
    /// ```
    /// use npu_core::AclCode;
    /// assert_eq!(AclCode::DEVICE_MEM_ERROR, AclCode(507053));
    /// assert_eq!(AclCode::DEVICE_MEM_ERROR.name(), Some("ACL_ERROR_RT_DEVICE_MEM_ERROR"));
    /// assert!(AclCode::DEVICE_MEM_ERROR.is_memory_error());
    /// ```
    pub const DEVICE_MEM_ERROR: AclCode = AclCode(ffi::ACL_ERROR_RT_DEVICE_MEM_ERROR);
    /// A task touched device memory whose HBM found a multi-bit ECC error:
    /// `ACL_ERROR_RT_HBM_MULTI_BIT_ECC_ERROR`. CANN has no repair for it (the reference's
    /// remedy is to collect the logs and contact support), so memory that saw it must not be
    /// used again: a `DevicePool` quarantines such a block at once.
    /// ```
    /// use npu_core::{AclCode, MemoryErrorKind};
    /// assert_eq!(AclCode::HBM_MULTI_BIT_ECC_ERROR, AclCode(507054));
    /// assert!(AclCode::HBM_MULTI_BIT_ECC_ERROR.is_memory_error());
    /// assert_eq!(
    ///     AclCode::HBM_MULTI_BIT_ECC_ERROR.memory_error_kind(),
    ///     Some(MemoryErrorKind::Unrepairable)
    /// );
    /// ```
    pub const HBM_MULTI_BIT_ECC_ERROR: AclCode = AclCode(ffi::ACL_ERROR_RT_HBM_MULTI_BIT_ECC_ERROR);
    /// A task may have touched device memory with an uncorrectable error on a peer device
    /// (several devices or processes): `ACL_ERROR_RT_SUSPECT_DEVICE_MEM_ERROR`.
    /// ```
    /// use npu_core::AclCode;
    /// assert_eq!(AclCode::SUSPECT_DEVICE_MEM_ERROR, AclCode(507055));
    /// assert!(AclCode::SUSPECT_DEVICE_MEM_ERROR.is_memory_error());
    /// ```
    pub const SUSPECT_DEVICE_MEM_ERROR: AclCode =
        AclCode(ffi::ACL_ERROR_RT_SUSPECT_DEVICE_MEM_ERROR);

    /// Whether the code says memory (device or host) ran out.
    ///
    /// ```
    /// use npu_core::AclCode;
    ///
    /// assert!(AclCode::MEMORY_ALLOCATION.is_out_of_memory());
    /// assert!(!AclCode::AICORE_EXCEPTION.is_out_of_memory());
    /// ```
    pub fn is_out_of_memory(self) -> bool {
        [Self::MEMORY_ALLOCATION, Self::DEVICE_OOM, Self::BAD_ALLOC].contains(&self)
    }

    /// Whether the code says the device is lost (no heartbeat).
    ///
    /// ```
    /// use npu_core::AclCode;
    ///
    /// assert!(AclCode(507010).is_device_lost());
    /// ```
    pub fn is_device_lost(self) -> bool {
        self == Self::DEVICE_LOST
    }

    /// Whether the code says a wait, a synchronisation or a task timed out.
    ///
    /// ```
    /// use npu_core::AclCode;
    ///
    /// assert!(AclCode::EVENT_SYNC_TIMEOUT.is_timeout());
    /// assert!(!AclCode::DEVICE_LOST.is_timeout());
    /// ```
    pub fn is_timeout(self) -> bool {
        [
            Self::WAIT_TIMEOUT,
            Self::TASK_TIMEOUT,
            Self::STREAM_SYNC_TIMEOUT,
            Self::EVENT_SYNC_TIMEOUT,
            AclCode(ffi::ACL_ERROR_RT_AICORE_TIMEOUT),
            AclCode(ffi::ACL_ERROR_RT_AICPU_TIMEOUT),
            AclCode(ffi::ACL_ERROR_RT_VECTOR_CORE_TIMEOUT),
            AclCode(ffi::ACL_ERROR_RT_TIMEOUT),
        ]
        .contains(&self)
    }

    /// Whether the code says the work was aborted (`aclrtStreamAbort`, a task abort).
    ///
    /// ```
    /// use npu_core::AclCode;
    ///
    /// assert!(AclCode::STREAM_ABORT.is_aborted());
    /// ```
    pub fn is_aborted(self) -> bool {
        [
            Self::STREAM_ABORT,
            Self::DEVICE_TASK_ABORT,
            AclCode(ffi::ACL_ERROR_RT_TASK_ABORT_STOP),
        ]
        .contains(&self)
    }

    /// Whether the code says device memory has an uncorrectable error, on this device or a
    /// peer's: [`DEVICE_MEM_ERROR`](Self::DEVICE_MEM_ERROR),
    /// [`SUSPECT_DEVICE_MEM_ERROR`](Self::SUSPECT_DEVICE_MEM_ERROR) or
    /// [`HBM_MULTI_BIT_ECC_ERROR`](Self::HBM_MULTI_BIT_ECC_ERROR)
    /// ([`memory_error_kind`](Self::memory_error_kind) says which can be repaired).
    /// ```
    /// use npu_core::AclCode;
    /// assert!(AclCode(507053).is_memory_error());
    /// assert!(AclCode(507054).is_memory_error());
    /// assert!(!AclCode::AICORE_EXCEPTION.is_memory_error());
    /// ```
    pub fn is_memory_error(self) -> bool {
        self.memory_error_kind().is_some()
    }

    /// The kind of device memory error the code reports, if it reports one: whether CANN's
    /// repair (`aclrtGetMemUceInfo`, `aclrtMemUceRepair`) applies to it.
    /// ```
    /// use npu_core::{AclCode, MemoryErrorKind};
    /// assert_eq!(AclCode::DEVICE_MEM_ERROR.memory_error_kind(), Some(MemoryErrorKind::Repairable));
    /// assert_eq!(AclCode(507055).memory_error_kind(), Some(MemoryErrorKind::Repairable));
    /// assert_eq!(AclCode(507054).memory_error_kind(), Some(MemoryErrorKind::Unrepairable));
    /// assert_eq!(AclCode::AICORE_EXCEPTION.memory_error_kind(), None);
    /// ```
    pub fn memory_error_kind(self) -> Option<MemoryErrorKind> {
        match self {
            Self::DEVICE_MEM_ERROR | Self::SUSPECT_DEVICE_MEM_ERROR => {
                Some(MemoryErrorKind::Repairable)
            }
            Self::HBM_MULTI_BIT_ECC_ERROR => Some(MemoryErrorKind::Unrepairable),
            _ => None,
        }
    }

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

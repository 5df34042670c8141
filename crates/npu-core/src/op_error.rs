//! The error of an operation that owned values: the failure, with the values handed back.

use std::fmt;

use crate::error::Error;

/// A failed operation's error together with the values it had taken (its buffers), so that a
/// caller can retry with them or reuse them, as tokio-uring hands buffers back.
///
/// An operation completes only once the device is done with its memory, successfully or not,
/// so a stream operation's `value` is `Some` for every failure: a rejected argument, a failed
/// submission and a device-side fault alike. It is `None` only when there was nothing left to
/// hand back (a future polled again after it resolved).
///
/// `op.await?` works in functions returning [`crate::Result`]: `?` converts through
/// `From<OpError<T>> for Error`, dropping the values.
///
/// ```
/// use npu_core::{Error, OpError};
///
/// let failed = OpError::new(Error::invalid("resize", "len", "must not be 0"), vec![1u8, 2]);
/// assert_eq!(failed.to_string(), "resize: invalid argument `len`: must not be 0");
/// let (error, value) = failed.into_parts();
/// assert!(matches!(error, Error::InvalidArgument { argument: "len", .. }));
/// assert_eq!(value, Some(vec![1, 2])); // the buffer is still ours
///
/// fn caller() -> npu_core::Result<()> {
///     Err(OpError::new(Error::invalid("resize", "len", "must not be 0"), ()))?
/// }
/// assert!(caller().is_err());
/// ```
pub struct OpError<T> {
    /// What went wrong.
    pub error: Error,
    /// The values the operation had taken, handed back.
    pub value: Option<T>,
}

impl<T> OpError<T> {
    /// An error handing `value` back.
    ///
    /// ```
    /// use npu_core::{Error, OpError};
    ///
    /// let failed = OpError::new(Error::invalid("copy", "dst", "too short"), [0u32; 4]);
    /// assert_eq!(failed.value, Some([0; 4]));
    /// ```
    pub fn new(error: Error, value: T) -> Self {
        OpError {
            error,
            value: Some(value),
        }
    }

    /// An error with nothing to hand back.
    ///
    /// ```
    /// use npu_core::{Error, OpError};
    ///
    /// let failed = OpError::<Vec<u8>>::without_value(Error::invalid("copy", "self", "polled twice"));
    /// assert!(failed.value.is_none());
    /// ```
    pub fn without_value(error: Error) -> Self {
        OpError { error, value: None }
    }

    /// The error, dropping the values.
    ///
    /// ```
    /// use npu_core::{Error, OpError};
    ///
    /// let failed = OpError::new(Error::invalid("copy", "dst", "too short"), vec![0u8; 4]);
    /// assert_eq!(failed.into_error().to_string(), "copy: invalid argument `dst`: too short");
    /// ```
    pub fn into_error(self) -> Error {
        self.error
    }

    /// The error and the values.
    ///
    /// ```
    /// use npu_core::{Error, OpError};
    ///
    /// let (error, value) = OpError::new(Error::invalid("f", "x", "bad"), 7).into_parts();
    /// assert_eq!((error.to_string().as_str(), value), ("f: invalid argument `x`: bad", Some(7)));
    /// ```
    pub fn into_parts(self) -> (Error, Option<T>) {
        (self.error, self.value)
    }

    /// The same error with the values mapped (a wrapper's values to the caller's).
    ///
    /// ```
    /// use npu_core::{Error, OpError};
    ///
    /// let pair = OpError::new(Error::invalid("f", "x", "bad"), (1, 2));
    /// assert_eq!(pair.map_value(|(_, b)| b).value, Some(2));
    /// ```
    pub fn map_value<U>(self, f: impl FnOnce(T) -> U) -> OpError<U> {
        OpError {
            error: self.error,
            value: self.value.map(f),
        }
    }
}

impl<T> OpError<T> {
    /// The ACL return code of the error, as [`Error::acl_code`].
    ///
    /// ```
    /// use npu_core::{AclCode, AclError, OpError};
    ///
    /// let err = OpError::new(AclError::new("aclrtMemsetAsync", AclCode(507015), None).into(), ());
    /// assert_eq!(err.acl_code(), Some(AclCode::AICORE_EXCEPTION));
    /// ```
    pub fn acl_code(&self) -> Option<crate::AclCode> {
        self.error.acl_code()
    }

    /// As [`Error::fault`]: the device-side fault behind the failure, when the runtime
    /// reported one.
    ///
    /// ```
    /// use npu_core::{AclCode, AclError, DeviceFault, OpError};
    ///
    /// let mut fault = DeviceFault::new(AclCode(507015));
    /// (fault.task_id, fault.stream_id) = (2, 4);
    /// let acl = AclError::new("aclrtMemsetAsync", AclCode(507015), None).with_fault(fault);
    /// assert_eq!(OpError::new(acl.into(), ()).fault().map(|f| f.stream_id), Some(4));
    /// ```
    pub fn fault(&self) -> Option<&crate::DeviceFault> {
        self.error.fault()
    }

    /// As [`Error::is_out_of_memory`].
    ///
    /// ```
    /// use npu_core::{AclCode, AclError, OpError};
    ///
    /// let err = OpError::new(AclError::new("aclrtMalloc", AclCode::MEMORY_ALLOCATION, None).into(), ());
    /// assert!(err.is_out_of_memory());
    /// ```
    pub fn is_out_of_memory(&self) -> bool {
        self.error.is_out_of_memory()
    }

    /// As [`Error::is_device_lost`].
    ///
    /// ```
    /// use npu_core::{AclCode, AclError, OpError};
    ///
    /// let err = OpError::new(AclError::new("aclrtMemcpyAsync", AclCode::DEVICE_LOST, None).into(), ());
    /// assert!(err.is_device_lost());
    /// ```
    pub fn is_device_lost(&self) -> bool {
        self.error.is_device_lost()
    }

    /// As [`Error::is_timeout`].
    ///
    /// ```
    /// use npu_core::{AclCode, AclError, OpError};
    ///
    /// let err = OpError::new(AclError::new("aclrtMemcpyAsync", AclCode::TASK_TIMEOUT, None).into(), ());
    /// assert!(err.is_timeout());
    /// ```
    pub fn is_timeout(&self) -> bool {
        self.error.is_timeout()
    }

    /// As [`Error::is_memory_error`].
    ///
    /// ```
    /// use npu_core::{AclCode, AclError, OpError};
    ///
    /// let err = OpError::new(AclError::new("aclrtMemsetAsync", AclCode::DEVICE_MEM_ERROR, None).into(), ());
    /// assert!(err.is_memory_error());
    /// ```
    pub fn is_memory_error(&self) -> bool {
        self.error.is_memory_error()
    }

    /// As [`Error::memory_error_kind`].
    ///
    /// ```
    /// use npu_core::{AclCode, AclError, MemoryErrorKind, OpError};
    ///
    /// let code = AclCode::HBM_MULTI_BIT_ECC_ERROR;
    /// let err = OpError::new(AclError::new("aclrtMemsetAsync", code, None).into(), ());
    /// assert_eq!(err.memory_error_kind(), Some(MemoryErrorKind::Unrepairable));
    /// ```
    pub fn memory_error_kind(&self) -> Option<crate::MemoryErrorKind> {
        self.error.memory_error_kind()
    }

    /// As [`Error::is_aborted`].
    ///
    /// ```
    /// use npu_core::{Error, OpError};
    ///
    /// let err = OpError::new(Error::Aborted { api: "aclrtMemsetAsync" }, ());
    /// assert!(err.is_aborted());
    /// ```
    pub fn is_aborted(&self) -> bool {
        self.error.is_aborted()
    }
}

impl<T> From<OpError<T>> for Error {
    fn from(failed: OpError<T>) -> Error {
        failed.error
    }
}

// Not derived: the values (device buffers, pool blocks) need not be `Debug`, and a panic
// message from `unwrap` should show the error, not megabytes of data.
impl<T> fmt::Debug for OpError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpError")
            .field("error", &self.error)
            .field(
                "value",
                &self.value.as_ref().map(|_| std::any::type_name::<T>()),
            )
            .finish()
    }
}

impl<T> fmt::Display for OpError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl<T> std::error::Error for OpError<T> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.error)
    }
}

//! Errors: one [`Error`] type for every npu-rs call.
//!
//! An ACL call that fails is an [`AclError`] (the function, its [`AclCode`] and ACL's own
//! message); an argument npu-rs refuses before calling ACL is
//! [`Error::InvalidArgument`], naming the API, the argument and the rule; a runtime that
//! cannot be loaded is a [`LoadError`]. [`ErrorClass`] groups codes by what a caller can do
//! about them (retry, fix the input, give up on the device).
//!
//! A task that fails on the device carries what the runtime's exception callback reported
//! about it, a [`DeviceFault`] (task, stream, device, code and the device's [`FaultKind`]):
//! [`Error::fault`], [`OpError::fault`].
//!
//! ```
//! use npu::prelude::*;
//! use npu::error::Error;
//!
//! let ctx = Device::open(0)?.primary_context().clone();
//! let buffer = DeviceBuffer::<u8>::new(&ctx, 64)?;
//! let err = buffer.view(10..100).unwrap_err(); // refused before any ACL call
//! assert!(matches!(err.error, Error::InvalidArgument { .. }), "{err}");
//! assert_eq!(err.acl_code(), None);
//! assert!(err.value.is_some(), "the buffer comes back");
//! # Ok::<(), npu::Error>(())
//! ```

pub use npu_core::{
    AclCode, AclError, DeviceFault, Error, ErrorClass, FaultKind, LoadAttempt, LoadError,
    LoadFailure, MemoryErrorKind, OpError, Result,
};

/// What npu-stream's streams install to be told of their faults: made only by a hidden
/// runtime method, so it is not part of the documented surface.
#[doc(hidden)]
pub use npu_core::FaultWatch;

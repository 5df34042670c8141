//! Errors: one [`Error`] type for every npu-rs call.
//!
//! An ACL call that fails is an [`AclError`] (the function, its [`AclCode`] and ACL's own
//! message); an argument npu-rs refuses before calling ACL is
//! [`Error::InvalidArgument`], naming the API, the argument and the rule; a runtime that
//! cannot be loaded is a [`LoadError`]. [`ErrorClass`] is ACL's class of a code, by its
//! leading digit: who is at fault (the caller, a resource, the runtime or device). It does not
//! say whether the device is still usable: a kernel's trap and a lost device are both
//! [`ErrorClass::Internal`]. For that, ask the error itself (below).
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
//!
//! # Answering a failed request
//!
//! A server tells three failures apart, each its own answer: a request the device failed (its
//! task faulted: [`Error::fault`] says where; the device and the stream go on serving), a
//! device that is gone ([`Error::is_device_lost`]: every later operation on it fails the same way,
//! so fail the health check and stop routing to it; [`Device::status`](crate::Device::status)
//! reports it too), and memory that ran out ([`Error::is_out_of_memory`]: overload, retry
//! later). Ask for the loss first: an operation the loss ended may carry the device's report
//! as well.
//!
//! ```
//! use npu::prelude::*;
//! use npu::device::DeviceStatus;
//! use npu::error::{AclCode, ErrorClass};
//!
//! # tokio_test::block_on(async {
//! let device = Device::open(0)?;
//! let ctx = device.primary_context();
//! let stream = NpuStream::new(ctx)?;
//! npu::sim::fail_task(&stream, 1, AclCode::AICORE_EXCEPTION)?; // the next task traps
//! let trap = stream.memset(DeviceBuffer::<u8>::new(ctx, 64)?, 0).await.unwrap_err().error;
//! assert!(trap.fault().is_some() && !trap.is_device_lost());
//! assert_eq!(trap.acl_code().map(AclCode::class), Some(ErrorClass::Internal));
//! assert_eq!(device.status()?, DeviceStatus::Normal, "one request failed, not the device");
//! stream.synchronize().await.unwrap_err(); // the stream reports its fault once more
//! stream.memset(DeviceBuffer::<u8>::new(ctx, 64)?, 0).await?; // and serves the next
//!
//! npu::sim::fail_next_alloc(&device)?;
//! assert!(DeviceBuffer::<u8>::new(ctx, 64).unwrap_err().is_out_of_memory());
//! # Ok::<(), npu::Error>(())
//! # })?;
//! # Ok::<(), npu::Error>(())
//! ```
//!
//! A lost device (losing one is final for the process, so this example runs alone):
//!
//! ```standalone_crate
//! use npu::prelude::*;
//! use npu::device::DeviceStatus;
//! use npu::error::{AclCode, ErrorClass};
//!
//! # tokio_test::block_on(async {
//! let device = Device::open(1)?;
//! let ctx = device.primary_context();
//! let stream = NpuStream::new(ctx)?;
//! let buffer = DeviceBuffer::<u8>::new(ctx, 64)?;
//! npu::sim::lose(&device)?;
//! let lost = stream.memset(buffer, 0).await.unwrap_err().error;
//! assert!(lost.is_device_lost(), "{lost}");
//! assert_eq!(lost.acl_code().map(AclCode::class), Some(ErrorClass::Internal), "as a trap's");
//! assert_eq!(device.status()?, DeviceStatus::Abnormal);
//! # Ok::<(), npu::Error>(())
//! # })?;
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

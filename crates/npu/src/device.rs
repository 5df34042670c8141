//! Devices and contexts: opening an NPU, its attributes and memory, peer access.
//!
//! [`Device::open`] opens a device of the global runtime; its
//! [`primary_context`](Device::primary_context) is the [`Context`] most programs use.
//! Every object that lives on a device (streams, buffers, modules) holds its context and makes
//! it current on whichever thread uses it, so Tokio may move tasks between threads freely.
//! Device ids are `u32` throughout npu-rs. [`Device::status`] is the device's health
//! (`aclrtQueryDeviceStatus`), for a server's health check: [`DeviceStatus::Abnormal`] once it
//! is lost (module [`error`](crate::error) tells a lost device from a failed request). On a
//! runtime without `aclrtQueryDeviceStatus` it fails with [`Error::Unsupported`](crate::Error::Unsupported): a health
//! check then falls back on the errors of the device's work ([`Error::is_device_lost`](crate::Error::is_device_lost)).
//!
//! ```
//! use npu::device::{Device, DeviceStatus, MemAttr};
//!
//! let device = Device::open(0)?;
//! assert_eq!(device.id(), 0);
//! let memory = device.memory_info(MemAttr::Normal)?;
//! assert!(memory.free <= memory.total);
//! assert_eq!(device.status()?, DeviceStatus::Normal);
//! # Ok::<(), npu::Error>(())
//! ```

pub use npu_core::{
    Context, Device, DeviceAttr, DeviceStatus, MemAttr, MemInfo, PeerAccess, PriorityRange,
};

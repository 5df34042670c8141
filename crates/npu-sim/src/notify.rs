//! Notifies: one-shot flags between streams of a device (aclrtRecordNotify sets one,
//! aclrtWaitAndResetNotify waits for it on another stream and clears it).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use npu_sys::*;

use crate::device::Device;
use crate::error::Res;
use crate::sync::{Bell, Listen};

/// Notifies per device (Atlas A2).
pub(crate) const MAX_NOTIFIES_PER_DEVICE: u64 = 8192;

pub(crate) struct Notify {
    pub(crate) device: Arc<Device>,
    pub(crate) id: u32,
    pub(crate) flags: u64,
    set: AtomicBool,
    /// Rung when the notify is set.
    bell: Bell,
}

impl Notify {
    /// A cleared notify of `device`, counted against the device's notify limit.
    pub(crate) fn new(device: &Arc<Device>, flags: u64) -> Res<Self> {
        device.take_slot(
            &device.live_notifies,
            MAX_NOTIFIES_PER_DEVICE,
            ACL_ERROR_RT_NO_NOTIFY_RESOURCE,
            "notifies",
        )?;
        Ok(Self {
            device: device.clone(),
            id: device.next_notify_id.fetch_add(1, Ordering::Relaxed),
            flags,
            set: AtomicBool::new(false),
            bell: Bell::new(),
        })
    }

    /// An executed aclrtRecordNotify.
    pub(crate) fn set(&self) {
        self.set.store(true, Ordering::Release);
        self.bell.ring();
    }

    /// Clears the notify if it is set; whether it was.
    pub(crate) fn take(&self) -> bool {
        self.set.swap(false, Ordering::AcqRel)
    }

    /// What a wait for the notify listens to.
    pub(crate) fn listen(&self) -> Listen<'_> {
        self.bell.any()
    }
}

impl Drop for Notify {
    fn drop(&mut self) {
        self.device.live_notifies.fetch_sub(1, Ordering::AcqRel);
    }
}

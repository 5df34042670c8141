//! Notifies: one-shot flags between streams of a device (aclrtRecordNotify sets one,
//! aclrtWaitAndResetNotify waits for it on another stream and clears it). An exported or
//! imported notify keeps its flag in memory shared with the other processes
//! ([`SharedFlag`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use npu_sys::*;

use crate::device::Device;
use crate::error::Res;
use crate::ipc::SharedFlag;
use crate::sync::{Bell, Listen};

/// Notifies per device (Atlas A2).
pub(crate) const MAX_NOTIFIES_PER_DEVICE: u64 = 8192;

pub(crate) struct Notify {
    pub(crate) device: Arc<Device>,
    pub(crate) id: u32,
    pub(crate) flags: u64,
    set: AtomicBool,
    /// Rung when the notify is set (by another process too, through the flag's watcher).
    bell: Bell,
    /// The flag shared with other processes, once exported or imported.
    shared: OnceLock<Arc<SharedFlag>>,
    /// Whether the notify still takes one of the device's places: from its creation until
    /// aclrtDestroyNotify (or its drop, if it never was destroyed), not until the last task
    /// naming it is dropped, which a worker may do just after the stream's synchronisation
    /// returned (a program that synchronised, destroyed and created again found the place
    /// still taken).
    counted: AtomicBool,
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
            shared: OnceLock::new(),
            counted: AtomicBool::new(true),
        })
    }

    /// Gives the notify's place on the device back (aclrtDestroyNotify), once.
    pub(crate) fn release_place(&self) {
        if self.counted.swap(false, Ordering::AcqRel) {
            self.device.live_notifies.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// A notify of `device` whose flag is `flag`, shared with the process that exported it.
    pub(crate) fn imported(device: &Arc<Device>, flag: SharedFlag) -> Res<Arc<Self>> {
        let notify = Arc::new(Self::new(device, u64::from(ACL_NOTIFY_DEFAULT))?);
        let flag = Arc::new(flag);
        flag.watch(Arc::downgrade(&notify), |notify: &Notify| {
            notify.bell.ring()
        })?;
        let _ = notify.shared.set(flag);
        Ok(notify)
    }

    /// The notify's flag in shared memory, created (and watched) at the first export. A
    /// record made before that stays in the local flag, which waits check too.
    pub(crate) fn share(self: &Arc<Self>) -> Res<Arc<SharedFlag>> {
        static SHARING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one_at_a_time = crate::sync::lock(&SHARING);
        if let Some(flag) = self.shared.get() {
            return Ok(flag.clone());
        }
        let flag = Arc::new(SharedFlag::create()?);
        flag.watch(Arc::downgrade(self), |notify: &Notify| notify.bell.ring())?;
        let _ = self.shared.set(flag.clone());
        Ok(flag)
    }

    /// An executed aclrtRecordNotify.
    pub(crate) fn set(&self) {
        match self.shared.get() {
            Some(flag) => flag.set(),
            None => self.set.store(true, Ordering::Release),
        }
        self.bell.ring();
    }

    /// Clears the notify if it is set; whether it was.
    pub(crate) fn take(&self) -> bool {
        self.set.swap(false, Ordering::AcqRel) || self.shared.get().is_some_and(|flag| flag.take())
    }

    /// What a wait for the notify listens to.
    pub(crate) fn listen(&self) -> Listen<'_> {
        self.bell.any()
    }
}

impl Drop for Notify {
    fn drop(&mut self) {
        self.release_place();
    }
}

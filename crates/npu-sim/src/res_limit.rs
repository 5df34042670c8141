//! Core limits: a device's process-level ones (aclrtSetDeviceResLimit), the hardware's counts
//! until the process sets a lower one, and again after a reset; and a stream's
//! (aclrtSetStreamResLimit), which come before the device's where they are set. A thread uses
//! one stream's limits after aclrtUseStreamResInCurrentThread.

use std::sync::atomic::{AtomicU32, Ordering};

use npu_sys::*;

use crate::error::{Res, fail};
use crate::handle::Handle;
use crate::hardware::{CUBE_CORES, VECTOR_CORES};

/// The limit of each [`aclrtDevResLimitType`]; 0 means "not set" (the hardware's count).
#[derive(Default)]
pub(crate) struct ResLimits {
    cube: AtomicU32,
    vector: AtomicU32,
}

impl ResLimits {
    /// The limit slot and the hardware count of a resource type; an unknown type → 107000.
    fn slot(&self, kind: aclrtDevResLimitType) -> Res<(&AtomicU32, u32)> {
        let hardware = hardware_count(kind)?;
        let slot = match kind {
            ACL_RT_DEV_RES_CUBE_CORE => &self.cube,
            ACL_RT_DEV_RES_VECTOR_CORE => &self.vector,
            _ => unreachable!("hardware_count refuses type {kind}"),
        };
        Ok((slot, hardware))
    }

    /// Limits the cores of one type to `value`, from 1 to the hardware's count (107000 outside).
    pub(crate) fn set(&self, kind: aclrtDevResLimitType, value: u32) -> Res<()> {
        let (slot, hardware) = self.slot(kind)?;
        if value == 0 || value > hardware {
            fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "limit {value} is outside 1 to {hardware}, the device's count of that core type"
            );
        }
        slot.store(value, Ordering::Release);
        Ok(())
    }

    /// The limit in force: the process's, or the hardware's count.
    pub(crate) fn get(&self, kind: aclrtDevResLimitType) -> Res<u32> {
        let (_, hardware) = self.slot(kind)?;
        Ok(self.get_set(kind)?.unwrap_or(hardware))
    }

    /// The limit set, `None` if none is.
    pub(crate) fn get_set(&self, kind: aclrtDevResLimitType) -> Res<Option<u32>> {
        let (slot, _) = self.slot(kind)?;
        Ok(match slot.load(Ordering::Acquire) {
            0 => None,
            set => Some(set),
        })
    }

    /// Whether any limit is set.
    pub(crate) fn any_set(&self) -> bool {
        self.cube.load(Ordering::Acquire) != 0 || self.vector.load(Ordering::Acquire) != 0
    }

    /// Back to the hardware's counts.
    pub(crate) fn reset(&self) {
        self.cube.store(0, Ordering::Release);
        self.vector.store(0, Ordering::Release);
    }
}

/// The hardware count of a resource type; an unknown type → 107000 (checked by the functions
/// that take a type before they look up the context or stream whose limit they read).
pub(crate) fn hardware_count(kind: aclrtDevResLimitType) -> Res<u32> {
    match kind {
        ACL_RT_DEV_RES_CUBE_CORE => Ok(CUBE_CORES),
        ACL_RT_DEV_RES_VECTOR_CORE => Ok(VECTOR_CORES),
        other => fail!(ACL_ERROR_RT_PARAM_INVALID, "unknown resource type {other}"),
    }
}

thread_local! {
    /// The stream whose limits the thread uses (aclrtUseStreamResInCurrentThread).
    static IN_USE: std::cell::Cell<Option<Handle>> = const { std::cell::Cell::new(None) };
}

/// Makes the thread use a stream's limits.
pub(crate) fn use_in_thread(stream: Handle) {
    IN_USE.set(Some(stream));
}

/// Stops the thread using `stream`'s limits; whether it was using them.
pub(crate) fn unuse_in_thread(stream: Handle) -> bool {
    let using = IN_USE.get() == Some(stream);
    if using {
        IN_USE.set(None);
    }
    using
}

/// The stream whose limits the thread uses, if any.
pub(crate) fn in_thread() -> Option<Handle> {
    IN_USE.get()
}

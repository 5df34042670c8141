//! A device's process-level core limits (aclrtSetDeviceResLimit): the hardware's counts until
//! the process sets a lower one, and again after a reset.

use std::sync::atomic::{AtomicU32, Ordering};

use npu_sys::*;

use crate::error::{Res, fail};
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
        match kind {
            ACL_RT_DEV_RES_CUBE_CORE => Ok((&self.cube, CUBE_CORES)),
            ACL_RT_DEV_RES_VECTOR_CORE => Ok((&self.vector, VECTOR_CORES)),
            other => fail!(ACL_ERROR_RT_PARAM_INVALID, "unknown resource type {other}"),
        }
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
        let (slot, hardware) = self.slot(kind)?;
        Ok(match slot.load(Ordering::Acquire) {
            0 => hardware,
            set => set,
        })
    }

    /// Back to the hardware's counts.
    pub(crate) fn reset(&self) {
        self.cube.store(0, Ordering::Release);
        self.vector.store(0, Ordering::Release);
    }
}

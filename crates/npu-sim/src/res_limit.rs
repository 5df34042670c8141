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

/// A resource type, checked to be one of [`aclrtDevResLimitType`]'s (107000 otherwise). The
/// functions that take one check it before they look up the device, context or stream whose
/// limits they touch: it is a value no lookup decides.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    Cube,
    Vector,
}

impl Kind {
    pub(crate) fn of(kind: aclrtDevResLimitType) -> Res<Kind> {
        match kind {
            ACL_RT_DEV_RES_CUBE_CORE => Ok(Kind::Cube),
            ACL_RT_DEV_RES_VECTOR_CORE => Ok(Kind::Vector),
            other => fail!(ACL_ERROR_RT_PARAM_INVALID, "unknown resource type {other}"),
        }
    }

    /// The hardware's count of cores of this type: every simulated device has the same.
    fn hardware(self) -> u32 {
        match self {
            Kind::Cube => CUBE_CORES,
            Kind::Vector => VECTOR_CORES,
        }
    }
}

/// A limit checked before anything is looked up: a known type, and a value from 1 to the
/// hardware's count of cores of that type (107000 outside: a limit of no cores, or of more
/// than the hardware has, cannot be honoured).
#[derive(Clone, Copy)]
pub(crate) struct Limit {
    kind: Kind,
    value: u32,
}

impl Limit {
    pub(crate) fn new(kind: aclrtDevResLimitType, value: u32) -> Res<Limit> {
        let kind = Kind::of(kind)?;
        let hardware = kind.hardware();
        if value == 0 || value > hardware {
            fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "limit {value} is outside 1 to {hardware}, the device's count of that core type"
            );
        }
        Ok(Limit { kind, value })
    }
}

impl ResLimits {
    fn slot(&self, kind: Kind) -> &AtomicU32 {
        match kind {
            Kind::Cube => &self.cube,
            Kind::Vector => &self.vector,
        }
    }

    /// Sets a limit; the last setting wins.
    pub(crate) fn set(&self, limit: Limit) {
        self.slot(limit.kind).store(limit.value, Ordering::Release);
    }

    /// The limit in force: the process's, or the hardware's count.
    pub(crate) fn get(&self, kind: Kind) -> u32 {
        self.get_set(kind).unwrap_or(kind.hardware())
    }

    /// The limit set, `None` if none is.
    pub(crate) fn get_set(&self, kind: Kind) -> Option<u32> {
        match self.slot(kind).load(Ordering::Acquire) {
            0 => None,
            set => Some(set),
        }
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

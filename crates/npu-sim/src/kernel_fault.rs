//! Injected kernel failures (npusimFailKernel): the nth launch of a kernel name on a device,
//! on whichever of its streams, fails instead of running.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use npu_sys::aclError;

use crate::sync::lock;

/// One armed fault: the launch of `name` that brings `remaining` to 0 fails with `code`.
struct Armed {
    name: String,
    remaining: u64,
    code: aclError,
}

/// A device's armed kernel faults.
#[derive(Default)]
pub(crate) struct KernelFaults {
    /// How many are armed, read without the lock: every launch asks, almost always of none.
    count: AtomicUsize,
    armed: Mutex<Vec<Armed>>,
}

impl KernelFaults {
    /// Arms a fault for the `nth` launch of `name` from now on (`nth` ≥ 1, checked by the
    /// caller). Each fault counts on its own, so two armed for one launch both fire with it.
    pub(crate) fn arm(&self, name: &str, nth: u64, code: aclError) {
        let mut armed = lock(&self.armed);
        armed.push(Armed {
            name: name.to_owned(),
            remaining: nth,
            code,
        });
        self.count.store(armed.len(), Ordering::Release);
    }

    /// Counts a launch of `name`: the code it fails with, if a fault fires on it (the first
    /// armed, when several do). Called under the submitting stream's lock, so the launches
    /// of one stream count in their order; those of racing streams in the lock's.
    pub(crate) fn launch(&self, name: &str) -> Option<aclError> {
        if self.count.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut armed = lock(&self.armed);
        let mut fired = None;
        armed.retain_mut(|fault| {
            if fault.name != name {
                return true;
            }
            fault.remaining -= 1;
            if fault.remaining > 0 {
                return true;
            }
            fired.get_or_insert(fault.code);
            false
        });
        self.count.store(armed.len(), Ordering::Release);
        fired
    }

    /// Disarms every fault that has not fired; returns how many there were.
    pub(crate) fn clear(&self) -> usize {
        let mut armed = lock(&self.armed);
        let cleared = armed.len();
        armed.clear();
        self.count.store(0, Ordering::Release);
        cleared
    }
}

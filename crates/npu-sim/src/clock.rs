//! The simulated device clock and the timing model in force on a device.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::config::TimingModel;
use crate::sync::{read, write};

/// A device's clock: nanoseconds since the simulator started, on the host's monotonic clock.
///
/// Without a timing model, task times are read from it as the tasks run. With one, task times
/// are computed (start = max(stream ready, dependencies, submission, hold release), end =
/// start plus duration) and the workers sleep until the wall-clock instant of `end`, so
/// simulated time and wall time agree and overlap is observable in both.
pub(crate) struct Clock {
    epoch: Instant,
    timing: RwLock<Option<Arc<TimingModel>>>,
}

impl Clock {
    pub(crate) fn new(epoch: Instant, timing: Option<TimingModel>) -> Self {
        Self {
            epoch,
            timing: RwLock::new(timing.map(Arc::new)),
        }
    }

    /// Now, in simulated ns.
    pub(crate) fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// The wall-clock instant of a simulated time.
    pub(crate) fn instant_of(&self, ns: u64) -> Instant {
        self.epoch + Duration::from_nanos(ns)
    }

    /// The timing model in force, if any.
    pub(crate) fn timing(&self) -> Option<Arc<TimingModel>> {
        read(&self.timing).clone()
    }

    /// Replaces (or clears) the timing model. Tasks already started keep their times.
    pub(crate) fn set_timing(&self, model: Option<TimingModel>) {
        *write(&self.timing) = model.map(Arc::new);
    }

    /// Replaces the model's costs but keeps the per-kernel durations in force (what C's
    /// `npusimSetTiming` does), under one lock so a concurrent [`set_kernel_ns`] is not lost;
    /// `None` clears the model.
    ///
    /// [`set_kernel_ns`]: Clock::set_kernel_ns
    pub(crate) fn set_costs(&self, model: Option<TimingModel>) {
        let mut timing = write(&self.timing);
        *timing = model.map(|mut model| {
            if let Some(current) = timing.as_deref() {
                model.kernel_ns = current.kernel_ns.clone();
            }
            Arc::new(model)
        });
    }

    /// Sets one kernel's duration, turning the timing model on (with no other costs) if it was
    /// off.
    pub(crate) fn set_kernel_ns(&self, name: &str, ns: u64) {
        let mut timing = write(&self.timing);
        let mut model = timing.as_deref().cloned().unwrap_or_default();
        model.kernel_ns.insert(name.to_owned(), ns);
        *timing = Some(Arc::new(model));
    }
}

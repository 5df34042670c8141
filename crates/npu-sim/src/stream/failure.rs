//! The stream's failure mode (aclrtSetStreamFailureMode) and injected task failures.

use std::sync::atomic::Ordering;

use npu_sys::*;

use crate::error::{Res, ensure, fail};
use crate::sync::lock;

use super::Stream;

impl Stream {
    pub(crate) fn set_failure_mode(&self, mode: u64) {
        if mode == u64::from(ACL_STOP_ON_FAILURE) {
            self.health.stop_on_failure();
        }
        self.failure_mode.store(mode, Ordering::Release);
    }

    /// aclrtSetStreamFailureMode's choice, which the reference allows once per stream.
    pub(crate) fn choose_failure_mode(&self, mode: u64) -> Res<()> {
        ensure!(
            !self.failure_mode_chosen.swap(true, Ordering::AcqRel),
            ACL_ERROR_RT_PARAM_INVALID,
            "the failure mode of stream {} was set already (once per stream)",
            self.id
        );
        self.set_failure_mode(mode);
        Ok(())
    }

    /// The stream's failure mode in effect: its own choice, or STOP once any stream of its
    /// context chose STOP.
    pub(crate) fn failure_mode(&self) -> u64 {
        if self.health.stops_on_failure() {
            return u64::from(ACL_STOP_ON_FAILURE);
        }
        self.failure_mode.load(Ordering::Acquire)
    }

    /// Injects a failure into the `nth` device task submitted from now on (1 = the next one).
    /// Refuses an `nth` past the last task number the stream can give (a `u64` counts them):
    /// the sum would overflow, which panics, or, wrapped, names a task already submitted.
    pub(crate) fn inject_failure(&self, nth: u64, code: aclError) -> Res<()> {
        let mut state = lock(&self.state);
        let seq = state.device_seq;
        let Some(target) = seq.checked_add(nth) else {
            fail!(
                ACL_ERROR_INVALID_PARAM,
                "nth {nth} counts past the last task stream {} can number ({seq} submitted so far)",
                self.id
            );
        };
        state.injections.push((target, code));
        Ok(())
    }

    /// Disarms the failures injected that have not fired; returns how many there were.
    pub(crate) fn clear_injections(&self) -> usize {
        let mut state = lock(&self.state);
        let cleared = state.injections.len();
        state.injections.clear();
        cleared
    }
}

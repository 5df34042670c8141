//! The stream's failure mode (aclrtSetStreamFailureMode) and injected task failures.

use std::sync::atomic::Ordering;

use npu_sys::*;

use crate::error::{Res, ensure};
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
    pub(crate) fn inject_failure(&self, nth: u64, code: aclError) {
        let mut state = lock(&self.state);
        let target = state.device_seq + nth;
        state.injections.push((target, code));
    }
}

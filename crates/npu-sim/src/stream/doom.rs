//! Why a stream's work cannot complete (its doom), and what a wait for it listens to.

use std::sync::atomic::Ordering;

use npu_sys::*;

use crate::error::SimError;
use crate::sync::Listen;

use super::Stream;

/// Why work of a doomed stream cannot complete, for messages.
pub(crate) fn doom_reason(code: aclError) -> String {
    match code {
        ACL_ERROR_RT_STREAM_ABORT => {
            "was aborted (aclrtStreamAbort or aclrtDestroyStreamForce)".to_owned()
        }
        ACL_ERROR_RT_INTERNAL_ERROR => "was stopped with aclrtStreamStop".to_owned(),
        _ => {
            format!("stopped: a task of its context failed with {code} in ACL_STOP_ON_FAILURE mode")
        }
    }
}

impl Stream {
    /// Why work on this stream cannot complete: device lost, context stopped, the stream
    /// aborted (being aborted, or force-destroyed past a blocked task) or stopped.
    pub(crate) fn doom(&self) -> Option<aclError> {
        if let Some(code) = self.discarding() {
            Some(code)
        } else if self.stopped.load(Ordering::SeqCst) {
            Some(ACL_ERROR_RT_INTERNAL_ERROR)
        } else {
            None
        }
    }

    /// Why the worker drops the tasks it has not run: the stream's doom, except a stop, which
    /// only pauses it.
    pub(crate) fn discarding(&self) -> Option<aclError> {
        if self.device.is_lost() {
            Some(ACL_ERROR_RT_LOST_HEARTBEAT)
        } else if let Some(code) = self.health.stopped() {
            Some(code)
        } else if self.aborted.load(Ordering::SeqCst) || self.aborting.load(Ordering::SeqCst) {
            Some(ACL_ERROR_RT_STREAM_ABORT)
        } else {
            None
        }
    }

    /// The stream's doom as the host may see it: only once no task of it is running.
    ///
    /// On hardware a stopped stream's running task is halted before the runtime reports the
    /// stop; here a task is a host function (a kernel, a copy) that cannot be interrupted, so
    /// until it returns the stream counts as still running, and nothing waiting on the stream
    /// learns of the doom. This is what keeps a program that frees memory once its waits have
    /// failed from freeing it under a kernel that is still writing.
    ///
    /// The doom is read before `running` (its flags with `SeqCst`, as the worker sets `running`
    /// and then reads the doom in [`Self::start_running`]): either this sees the task running,
    /// or the worker sees the doom this reports and does not start the task.
    pub(crate) fn settled_doom(&self) -> Option<aclError> {
        let doom = self.doom()?;
        (!self.running.load(Ordering::SeqCst)).then_some(doom)
    }

    /// Whether a task that must wait gives up instead: the stream is discarding its work or
    /// being force-destroyed (which runs only the work that can run).
    pub(crate) fn gives_up_waiting(&self) -> bool {
        self.discarding().is_some() || self.draining.load(Ordering::Acquire)
    }

    /// What a wait for this stream's first `mark` tasks listens to (with
    /// [`Bell::RING_ONLY`]: a wait for the stream's doom alone): the stream finishing them
    /// (or being force-destroyed, aborted or stopped), its context stopping, its device being
    /// lost. Every state change [`Self::doom`] reports rings one of them.
    ///
    /// [`Bell::RING_ONLY`]: crate::sync::Bell::RING_ONLY
    pub(crate) fn listens(&self, mark: u64) -> [Listen<'_>; 3] {
        [
            self.bell.at(mark),
            self.health.bell.any(),
            self.device.lost_bell.any(),
        ]
    }

    /// The error for a doomed stream.
    pub(crate) fn doom_error(&self, code: aclError) -> SimError {
        if code == ACL_ERROR_RT_LOST_HEARTBEAT {
            return self.device.loss_error();
        }
        SimError::new(
            code,
            format!(
                "stream {} of device {} {}",
                self.id,
                self.device.id,
                doom_reason(code)
            ),
        )
    }
}

//! What a stream does after a task fails, and the failure record `synchronize` reports.

use std::sync::atomic::Ordering;

use npu_core::{Result, ffi};

use super::StreamShared;
use crate::strategy::OpInfo;

/// What a context does after one of its tasks fails (`aclrtSetStreamFailureMode`).
///
/// ```
/// use npu_core::Device;
/// use npu_mem::DeviceBuffer;
/// use npu_stream::{FailureMode, Stream};
///
/// # tokio_test::block_on(async {
/// let ctx = Device::open(1)?.primary_context().clone();
/// let stream = Stream::new(&ctx)?;
/// assert_eq!(FailureMode::default(), FailureMode::Continue); // what a new stream uses
/// npu_sim::control::fail_task(stream.as_raw(), 1, 507015).unwrap();
/// let failing = stream.memset(DeviceBuffer::<u8>::new(&ctx, 4)?, 0);
/// let later = stream.memset(DeviceBuffer::<u8>::new(&ctx, 4)?, 9);
/// assert!(failing.await.is_err());
/// assert_eq!(later.await?.to_vec_blocking()?, [9; 4], "later work still runs");
/// # Ok::<(), npu_core::Error>(())
/// # })?;
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum FailureMode {
    /// Later tasks still run; the failure is reported to the failed task's operation.
    #[default]
    Continue,
    /// Every stream of the context stops; pending operations fail.
    Stop,
}

impl FailureMode {
    pub(super) fn raw(self) -> u64 {
        match self {
            FailureMode::Continue => u64::from(ffi::ACL_CONTINUE_ON_FAILURE),
            FailureMode::Stop => u64::from(ffi::ACL_STOP_ON_FAILURE),
        }
    }
}

impl StreamShared {
    /// Passes an operation's result through the stream's failure record, in completion order:
    /// an ordinary operation's failure is remembered for the next `synchronize`; a
    /// `synchronize` reports (and clears) the first one remembered.
    pub(crate) fn finish(&self, op: OpInfo, result: Result<()>) -> Result<()> {
        // An operation no strategy watched, submitted before this one, is over by now: it
        // completes first.
        self.drains.end_before(op.seq);
        let failure = || self.failure.lock().unwrap_or_else(|e| e.into_inner());
        // An ordinary operation that succeeded changes nothing: no lock on the common path.
        if !op.synchronizes {
            // What an abort discarded is the caller's doing, not a device failure to report.
            if let Err(err) = &result
                && !self.aborted(op)
            {
                failure().get_or_insert_with(|| err.clone());
            }
            return result;
        }
        match (result, failure().take()) {
            (Err(err), _) | (Ok(()), Some(err)) => Err(err),
            (Ok(()), None) => Ok(()),
        }
    }

    /// Whether an abort discarded `op`.
    pub(crate) fn aborted(&self, op: OpInfo) -> bool {
        op.seq != 0 && op.seq <= self.aborted_through.load(Ordering::Acquire)
    }

    /// The error of an operation an abort discarded: `Error::Aborted`, unless a device fault
    /// had stopped the stream before the abort began (the operation's task faulted, or the
    /// fault stopped it before it ran): then the fault's error, as it would have been had the
    /// strategy settled it before the abort, which is a race the user cannot see.
    pub(crate) fn aborted_error(&self, op: OpInfo) -> npu_core::Error {
        let faulted = self
            .faulted_at_abort
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let range = faulted
            .iter()
            .find(|at| op.seq > at.after && op.seq <= at.through);
        match range.map(|at| at.error.clone()) {
            Some(npu_core::Error::Acl(mut acl)) => {
                acl.api = op.api;
                npu_core::Error::Acl(acl)
            }
            Some(other) => other,
            None => npu_core::Error::Aborted { api: op.api },
        }
    }

    /// Whether an abort of this stream whose runtime call has begun may have discarded `op`
    /// (once one has, an operation the stream could not watch, `seq` 0, is counted in:
    /// nothing tells when it came). The runtime's `ACL_ERROR_RT_STREAM_ABORT` means a discard
    /// of this stream's work only then: otherwise the operation ran and failed with it (a wait
    /// on a record that another stream's abort dropped).
    pub(crate) fn abort_may_have_discarded(&self, op: OpInfo) -> bool {
        let through = self.aborting_through.load(Ordering::Acquire);
        through > 0 && (op.seq == 0 || op.seq <= through)
    }
}

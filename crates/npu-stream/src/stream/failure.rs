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

/// What a stream's failure record holds: the first device-side failure since the last
/// `synchronize` completed, and how many aborts had marked their work when it was recorded.
///
/// An abort clears the record with the runtime's queue, but not a failure that a task which
/// ran reported before the abort began (it carries a `DeviceFault`, and was recorded before
/// the abort marked its work): the abort discards work not yet run and cannot undo a fault of
/// work that ran. That failure may be reported nowhere else: the fault of work drained without
/// a completion event, which a fence captured, or of an operation whose future was dropped.
/// What the abort did discard, and what a stop left undone (failures with no fault of their
/// own), goes with the queue, as does a failure recorded once the abort had begun, which may
/// be the abort's own doing.
#[derive(Debug)]
pub(crate) struct Failure {
    error: npu_core::Error,
    aborts_marked: u64,
}

impl Failure {
    /// Whether the failure outlives the abort that was the `marked`-th to mark its work.
    pub(super) fn outlives_abort(&self, marked: u64) -> bool {
        self.aborts_marked < marked
            && matches!(&self.error, npu_core::Error::Acl(acl) if acl.fault.is_some())
    }
}

impl StreamShared {
    /// Passes an operation's result through the stream's failure record, in completion order:
    /// an ordinary operation's failure is remembered for the next `synchronize`, unless one is
    /// remembered already (the first one is kept, as `aclrtSynchronizeStream` reports the
    /// first task error since the last synchronisation); a `synchronize` reports (and clears)
    /// it. A `synchronize` this stream's abort discarded reports `Error::Aborted` and leaves
    /// the record to the next one.
    pub(crate) fn finish(&self, op: OpInfo, result: Result<()>) -> Result<()> {
        // An operation no strategy watched, submitted before this one, is over by now: it
        // completes first.
        self.drains.end_before(op.seq);
        let failure = || self.failure.lock().unwrap_or_else(|e| e.into_inner());
        // An ordinary operation that succeeded changes nothing: no lock on the common path.
        if !op.synchronizes {
            // What an abort discarded is the caller's doing, not a device failure to report;
            // nor is an `Aborted` whose operation finished in the abort's window before the
            // abort had marked it discarded.
            if let Err(err) = &result
                && !self.aborted(op)
                && !matches!(err, npu_core::Error::Aborted { .. })
            {
                let aborts_marked = self.aborts_marked.load(Ordering::Acquire);
                failure().get_or_insert_with(|| Failure {
                    error: err.clone(),
                    aborts_marked,
                });
            }
            return result;
        }
        match result {
            // Discarded by an abort of this stream (its own, or its device's that the runtime's
            // device task abort callback reported), it synchronised nothing: the failure stays
            // for the next one. (Only `Error::Aborted`, which npu-rs also gives a
            // synchronisation an abort it did not hear of discarded, once it finds the stream
            // idle: a runtime abort code fails the synchronisation as any other error does. A
            // discarded one whose stream a fault had stopped gets that fault, and reports the
            // record.)
            err @ Err(npu_core::Error::Aborted { .. }) => err,
            Err(err) => {
                failure().take();
                Err(err)
            }
            Ok(()) => failure()
                .take()
                .map_or(Ok(()), |failure| Err(failure.error)),
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

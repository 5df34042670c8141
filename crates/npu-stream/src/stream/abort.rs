//! Stopping and aborting a stream's work, and the state an abort keeps under the stream's
//! submission lock.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use npu_core::contain::Rank;
use npu_core::{Completer, Completion, Error, Result, acl_call_opt};

use super::{Stream, StreamShared, reentered};
use crate::strategy;

/// The wait of an abort refused before it began: its completion, already failed with `err`.
fn refused(err: Error) -> npu_core::Wait {
    // SAFETY: no memory is recorded against this completion and nothing is deferred on it; it
    // completes here.
    let completer = unsafe { Completer::new() };
    let wait = completer.completion().wait();
    completer.complete(Err(err));
    wait
}

impl Stream {
    /// Discards the work queued on the stream (`aclrtStreamAbort`) and resolves once the
    /// device has confirmed it: the task running at that moment has finished, the others will
    /// never run. Every operation submitted before the call and not yet completed then fails
    /// with [`Error::Aborted`](npu_core::Error::Aborted) (its buffers released safely, since the
    /// device is done with them), and the stream is usable again. The operation whose task was
    /// running is among them: the device ran that task to its end and only the record after
    /// it was dropped, so what its buffers hold is unspecified (see `Error::Aborted`). Work a
    /// device fault had already stopped when the abort began (the faulted task and what it
    /// stopped) fails with that fault's error instead, as it would had it been noticed first.
    /// A failure the next [`synchronize`](Stream::synchronize) would report is cleared with
    /// the queue, unless it is the fault of a task whose operation completed before the abort
    /// began: that one is still reported.
    ///
    /// The runtime call waits for the running task, so it runs on a thread of its own
    /// (`npu-abort`), never on the caller's, an executor's or Tokio's blocking pool. It starts
    /// when `abort` is called, like every operation, not when the future is first polled:
    /// dropping the future, polled or not, or the Tokio runtime, leaves the abort to finish
    /// there and waits for nothing. Work submitted to the stream
    /// while the abort is in progress is not queued behind it (which would block the submitting
    /// thread for as long as the device's task runs): it fails at once with
    /// [`Error::Aborted`](npu_core::Error::Aborted), without reaching the device, as the abort
    /// would have discarded it, and [`Event::record`](crate::Event::record) on the stream
    /// returns that error. The abort is in progress from the moment its thread marks what it
    /// discards, just before its runtime call: work submitted between `abort` returning and
    /// that mark is queued as usual and discarded with the earlier work (its future fails with
    /// `Error::Aborted`; a record made then succeeds, and the event then stands for a record
    /// that is never reached, so [`Event::wait`](crate::Event::wait) fails with
    /// `Error::Aborted`). An abort called while another is in progress on the stream shares
    /// it (it would discard nothing more), so aborts called in a loop while a task runs take
    /// one thread, not one each; only an abort called after [`stop`](Stream::stop) returned
    /// starts its own, since it must clear that stop.
    ///
    /// Cancel safety: not cancel-safe in Tokio's sense, since the abort is not undone:
    /// dropping the future only stops waiting for the device's confirmation; the abort still
    /// runs to its end on its thread, and the discarded operations fail as above.
    ///
    /// The future is `Unpin` (`select!` on `&mut abort` needs no `pin!`).
    ///
    /// In a process forked from one that used npu-rs it resolves at once with
    /// [`Error::Forked`](npu_core::Error::Forked): the stream's work is the parent's.
    ///
    /// An `aclrtDeviceTaskAbort` of the stream's device made through the raw API ends the
    /// stream's discarded operations the same way (`Error::Aborted`, or the fault that had
    /// stopped the stream), where the runtime has `aclrtSetDeviceTaskAbortCallback`: npu-rs
    /// marks the stream's work before the runtime's discard and confirms it after. Without
    /// that function, when such an abort outlives its timeout, or after an `aclrtStreamAbort`
    /// of [`as_raw`](Stream::as_raw) made through the raw API, npu-rs hears of no discard:
    /// the discarded operations fail with `Error::Aborted` once a health check of the stream,
    /// which comes after an operation has made no progress for 10 ms or more, finds the
    /// stream idle (`aclrtStreamQuery` reports it complete) and then their events not
    /// complete. On a runtime without `aclrtStreamQuery` they stay pending. Such an abort
    /// must not land inside a submission to the stream on another thread: npu-rs queues an
    /// operation's work and then its completion record, and an abort between the two
    /// discards the work but not the record, so the operation succeeds although its work
    /// never ran (its memory is safe: the device no longer touches it). This abort takes
    /// the stream's submission lock, as npu-rs's device task abort callback does.
    ///
    /// ```
    /// # use npu_core::Device;
    /// use npu_mem::DeviceBuffer;
    /// use npu_stream::Stream;
    ///
    /// # tokio_test::block_on(async {
    /// # let ctx = Device::open(1)?.primary_context().clone();
    /// let stream = Stream::new(&ctx)?;
    /// npu_sim::control::hold(1).unwrap(); // npu-sim: nothing on device 1 starts until release
    /// let queued = stream.memset(DeviceBuffer::<u8>::new(&ctx, 64)?, 1);
    /// stream.abort().await?;
    /// assert!(queued.await.unwrap_err().error.is_aborted());
    /// npu_sim::control::release(1).unwrap();
    /// let buffer = stream.memset(DeviceBuffer::<u8>::new(&ctx, 64)?, 2).await?; // usable again
    /// assert_eq!(buffer.to_vec_blocking()?, [2; 64]);
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    // Beside the `Future` trait's own "futures do nothing unless polled", which is not so
    // here: what an unused abort loses is its result.
    //
    // `use<>`: the future borrows nothing of `self` (it owns what it waits on), and says so.
    // Without it, Rust 2024 captures `&self`'s lifetime in the hidden type, and the borrow
    // checker then refuses the very uses `'static` promises: returning the future from a
    // scope (a thread, a function) whose stream handle is dropped first, or keeping it past
    // the handle's drop.
    #[must_use = "the abort runs whether or not this is awaited; await it to learn its result"]
    pub fn abort(&self) -> impl Future<Output = Result<()>> + Send + Unpin + 'static + use<> {
        'wait: {
            // In a forked child the submission lock may belong to a thread of the parent that
            // was inside a submission at the fork, which does not exist here and would never
            // let it go: refused before the lock, as the runtime call would be.
            if let Err(err) = npu_core::fork::refuse(crate::SEAL, "Stream::abort") {
                break 'wait refused(err);
            }
            let Some(mut aborting) =
                npu_core::contain::lock_here(crate::SEAL, &self.shared.submit, Rank::Submission)
            else {
                // This thread is submitting to the stream (a tracing subscriber called from
                // inside the submission's ACL call), or would wait for another while holding a
                // lock that ranks as high: refused, as a submission would be.
                break 'wait refused(reentered(("Stream::abort", "self")));
            };
            let stops = self.shared.stops.load(Ordering::Acquire);
            match &aborting.shared {
                // That abort discards all this one would: it marks its horizon after this
                // call, or marked it before and has refused every submission since. And no
                // `stop` has returned since its runtime call began, so what it leaves running
                // is what this one would. So this one waits for it instead of taking another
                // thread.
                Some(running) if running.stops_at_call.is_none_or(|at| at == stops) => {
                    running.completion.wait()
                }
                _ => {
                    // SAFETY: no memory is recorded against this completion and nothing is
                    // deferred on it; it completes once the runtime's abort call has returned.
                    let completer = unsafe { Completer::new() };
                    let wait = completer.completion().wait();
                    aborting.shared = Some(SharedAbort {
                        completion: completer.completion(),
                        stops_at_call: None,
                    });
                    drop(aborting);
                    self.start_abort(completer);
                    wait
                }
            }
        }
    }

    /// Runs the abort on a thread of its own, started now, like every operation: a future
    /// dropped unpolled (a `select!` whose other branch was ready) still aborts.
    fn start_abort(&self, completer: Completer) {
        // Taken back if the thread cannot start, to complete with that failure.
        let slot = Arc::new(Mutex::new(Some(completer)));
        let (shared, taken) = (self.shared.clone(), slot.clone());
        let started = std::thread::Builder::new()
            .name("npu-abort".into())
            .spawn(move || {
                npu_core::holds::completing(crate::SEAL, move || {
                    let completer = taken.lock().unwrap_or_else(|e| e.into_inner()).take();
                    if let Some(completer) = completer {
                        let result = shared.abort_blocking(&completer.completion());
                        completer.complete(result);
                    }
                    // The last reference destroys the stream, which belongs on the reaper.
                    strategy::release_stream(shared);
                })
            });
        if let Err(err) = started {
            let completer = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(completer) = completer {
                self.shared
                    .lock_submission()
                    .end_shared(&completer.completion());
                completer.complete(Err(Error::invalid(
                    "Stream::abort",
                    "thread",
                    format!("cannot start the abort's thread: {err}"),
                )));
            }
        }
    }

    /// Stops the stream's work where it is (`aclrtStreamStop`): the running task finishes, the
    /// queued ones stay queued and do not run. The stream's pending operations then fail (with
    /// the runtime's code for a stopped stream) once the device reports the stop, and its
    /// queue is discarded only by [`abort`](Stream::abort), after which the stream runs new
    /// work again.
    ///
    /// ```
    /// # use npu_core::Device;
    /// use npu_mem::DeviceBuffer;
    /// use npu_stream::Stream;
    ///
    /// # tokio_test::block_on(async {
    /// # let ctx = Device::open(1)?.create_context()?;
    /// let stream = Stream::new(&ctx)?;
    /// npu_sim::control::hold(1).unwrap();
    /// let queued = stream.memset(DeviceBuffer::<u8>::new(&ctx, 64)?, 1);
    /// stream.stop()?;
    /// npu_sim::control::release(1).unwrap();
    /// assert!(queued.await.is_err(), "a stopped stream's work never runs");
    /// stream.abort().await?; // discards the stopped queue; the stream runs again
    /// stream.synchronize().await?;
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn stop(&self) -> Result<()> {
        self.context().bind()?;
        let handle = self.shared.handle;
        // SAFETY: the stream is alive (`self`) and its context is bound.
        let result = unsafe { acl_call_opt!(self.context().runtime(), aclrtStreamStop(handle)) };
        // Counted once the stop has taken effect: an abort called from now on must clear it,
        // so it may not share one whose runtime call began before.
        self.shared.stops.fetch_add(1, Ordering::AcqRel);
        result
    }
}

/// The aborts in progress on a stream, kept under its submission lock.
#[derive(Debug, Default)]
pub(super) struct Aborting {
    /// The latest abort, from its call until it ends: an abort called meanwhile shares it
    /// instead of starting another, unless a `stop` returned since its runtime call began.
    shared: Option<SharedAbort>,
    /// How many aborts are between marking which operations they discard and their end:
    /// submissions are refused meanwhile.
    pub(super) refusing: usize,
}

impl Aborting {
    /// Forgets the shared abort if it is the one `mine` completes (a later one may have
    /// taken its place).
    fn end_shared(&mut self, mine: &Completion) {
        if self
            .shared
            .as_ref()
            .is_some_and(|shared| shared.completion.same(mine))
        {
            self.shared = None;
        }
    }
}

/// An abort that later aborts may share.
#[derive(Debug)]
struct SharedAbort {
    completion: Completion,
    /// The stream's `stops` count when the abort's runtime call began; `None` before.
    stops_at_call: Option<u64>,
}

/// Ends an abort on drop, on every path out of [`StreamShared::abort_blocking`]: confirms
/// what it discarded, stops refusing submissions on its behalf, and leaves the shared slot.
struct AbortInProgress<'a> {
    stream: &'a StreamShared,
    mine: &'a Completion,
    /// What it marked (and so counted itself as refusing), if it got that far.
    marked: Option<Marked>,
    /// Whether the runtime confirmed the discard.
    discarded: bool,
}

impl AbortInProgress<'_> {
    /// Marks the work the abort discards, under the stream's submission lock (`aborting`);
    /// submissions are refused from now until the abort ends.
    fn mark(&mut self, aborting: &mut Aborting) {
        aborting.refusing += 1;
        self.marked = Some(self.stream.mark_discard());
    }
}

impl Drop for AbortInProgress<'_> {
    fn drop(&mut self) {
        let stream = self.stream;
        let mut aborting = stream.lock_submission();
        if let Some(marked) = self.marked.take() {
            if self.discarded {
                stream.confirm_discard(marked);
            } else if aborting.refusing == 1 {
                // The runtime vouched for no discard, and no other `Stream::abort` is under
                // way: the runtime's discard code no longer speaks for this stream beyond what
                // earlier aborts discarded, and what a device task abort marked at PRE (it may
                // be discarding it now; its POST confirms it). Taken under the submission
                // lock, the order `before` and `after` never take the two in reverse.
                let confirmed = stream.aborted_through.load(Ordering::Acquire);
                let device = stream.lock_device_abort().as_ref().map_or(0, |m| m.through);
                stream
                    .aborting_through
                    .store(confirmed.max(device), Ordering::Release);
            }
            aborting.refusing -= 1;
        }
        aborting.end_shared(self.mine);
    }
}

/// The work an abort is about to discard, marked before its runtime call (see
/// [`StreamShared::mark_discard`]) and confirmed once the runtime has discarded it
/// ([`StreamShared::confirm_discard`]).
#[derive(Debug)]
pub(super) struct Marked {
    /// The `seq` of the last operation it discards.
    through: u64,
    /// What earlier aborts had discarded when it marked: its own range starts after it.
    since: u64,
    /// How many aborts had marked their work once this one had (`StreamShared::aborts_marked`).
    marked: u64,
    /// The device fault that had stopped the stream before the runtime call, if one had.
    faulted: Option<Error>,
}

impl StreamShared {
    /// Marks the work an abort is about to discard, under the stream's submission lock: every
    /// operation watched so far, after what earlier aborts had confirmed.
    fn mark_discard(&self) -> Marked {
        let through = self.watched.load(Ordering::Acquire);
        let since = self.aborted_through.load(Ordering::Acquire);
        let marked = self.aborts_marked.fetch_add(1, Ordering::AcqRel) + 1;
        // Before the runtime call, so that whoever sees a failure of this stream's discarded
        // work sees this too (the runtime reports the discard only once the call has begun).
        self.aborting_through.fetch_max(through, Ordering::AcqRel);
        Marked {
            through,
            since,
            marked,
            faulted: None,
        }
    }

    /// Confirms the discard of what `marked` marked, under the stream's submission lock, once
    /// the runtime has confirmed it, and tells the strategies, which fail the discarded work
    /// whose events are not complete.
    fn confirm_discard(&self, mut marked: Marked) {
        let through = marked.through;
        self.aborted_through.fetch_max(through, Ordering::AcqRel);
        // Before the strategies hear of the discard (below), so that whoever fails the
        // discarded work sees it. From what it marked, not from what the aborts before it had
        // confirmed by now: after a stop two may run at once, and one that ends after a later
        // one (which may have found no fault) still speaks for the work it marked.
        if let Some(error) = marked.faulted.take().filter(|_| marked.since < through) {
            let mut faulted = self
                .faulted_at_abort
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if faulted.len() == super::FAULTED_ABORTS_KEPT {
                faulted.pop_front();
            }
            faulted.push_back(super::FaultedAtAbort {
                after: marked.since,
                through,
                error,
            });
        }
        // The runtime cleared the stream's errors with its queue; so does the failure record,
        // but for the fault of work that ran before the abort began (`failure::Failure`).
        let mut failure = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        if failure
            .as_ref()
            .is_some_and(|failure| !failure.outlives_abort(marked.marked))
        {
            *failure = None;
        }
        drop(failure);
        // Before submissions are taken again: whoever completes the stream's operations fails
        // what was discarded before work submitted from now on.
        self.strategy.discarded();
    }

    /// Discards the stream's queued work (`aclrtStreamAbort`), blocking until the device has
    /// confirmed it; then marks every operation watched so far as discarded and tells the
    /// strategies.
    ///
    /// The submission lock is held only to mark the abort and to finish it, not across the
    /// runtime call, which waits for the device's running task: a submission meanwhile would
    /// otherwise block its thread (a Tokio worker) for as long as that task runs. It is
    /// refused instead (see `Stream::submit_op`), so the device's queue during the call holds
    /// exactly the operations watched before it and none is mistaken for a discarded one.
    fn abort_blocking(&self, mine: &Completion) -> Result<()> {
        let bound = self.context.bind();
        let mut in_progress = AbortInProgress {
            stream: self,
            mine,
            marked: None,
            discarded: false,
        };
        if bound.is_ok() {
            let mut aborting = self.lock_submission();
            in_progress.mark(&mut aborting);
            if let Some(shared) = aborting.shared.as_mut().filter(|s| s.completion.same(mine)) {
                shared.stops_at_call = Some(self.stops.load(Ordering::Acquire));
            }
        }
        if let Some(marked) = &mut in_progress.marked {
            marked.faulted = self.fault_before_abort(crate::sentinel::confirm);
        }
        let handle = self.handle;
        let result = bound.and_then(|()| {
            // SAFETY: the stream is alive (`self`) and its context is bound.
            unsafe { acl_call_opt!(self.context.runtime(), aclrtStreamAbort(handle)) }
        });
        in_progress.discarded = result.is_ok();
        drop(in_progress);
        result
    }

    /// The error of a device fault that has already stopped the stream (or its context, in
    /// `ACL_STOP_ON_FAILURE` mode), if one has: the work it stopped failed with it before the
    /// abort, which only discards what can no longer run anyway. Whether the strategy had
    /// noticed the fault before the abort is a race; without this, the task that faulted and
    /// the work it stopped came back `Error::Aborted` when the abort won it, and the fault was
    /// lost. An explicit `Stream::stop` carries no fault and stays the abort's (`Aborted`).
    ///
    /// Asked before the runtime call, with `probe`: on a `Stream::abort`'s own thread the
    /// sentinel's (which waits 1 ms at most), inside a device task abort's callback the
    /// stream's query alone (see [`npu_core::DeviceAbortWatch`]).
    fn fault_before_abort(&self, probe: fn(&StreamShared) -> Result<()>) -> Option<Error> {
        let error = probe(self).err()?;
        let error = strategy::with_stopping_fault(self, error);
        matches!(&error, Error::Acl(acl) if acl.fault.is_some()).then_some(error)
    }

    /// How many operations were watched (`seq` of the latest), if no submission or abort of
    /// the stream is under way; `None` if one is. Every one of them then has its completion
    /// event's record queued: a submission takes its `seq` before it records (both under the
    /// submission lock), so a count read outside the lock may name an operation whose record
    /// is still to come. Never waits: the sentinel asks it (`sentinel::examine`).
    pub(crate) fn watched_and_recorded(&self) -> Option<u64> {
        // A lock a panicking submitter poisoned is free, as every other taker of it reads it.
        let aborting = match self.submit.try_lock() {
            Ok(aborting) => aborting,
            Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        (aborting.refusing == 0).then(|| self.watched.load(Ordering::Acquire))
    }

    fn lock_submission(&self) -> MutexGuard<'_, Aborting> {
        self.submit.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_device_abort(&self) -> MutexGuard<'_, Option<Marked>> {
        self.device_abort.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// An abort npu-rs did not make: `aclrtDeviceTaskAbort` of the stream's device, which the
/// runtime's device task abort callback reports before and after its discard. It marks and
/// confirms the stream's work as `Stream::abort` does, without refusing submissions (the
/// runtime refuses the device's submissions itself until the abort returns, and an abort a
/// PRE callback refused never ends here to stop refusing). Marks of an abort that did not
/// happen (refused, or not finished in time) are never confirmed: the work stays pending, as
/// it would without the callback, and the next abort's mark replaces them.
// SAFETY: dropping the last reference to a stream does not block: every operation npu-rs
// watched on it has completed or can never run, and the drop force-destroys a stream the
// runtime does not report done (as `strategy::release_stream` relies on).
unsafe impl npu_core::DeviceAbortWatch for StreamShared {
    fn before(&self) -> bool {
        // The aborting thread may be inside this stream's submission (a tracing subscriber
        // called from its ACL call): marking would wait for itself, so the abort is refused.
        let Some(held) = npu_core::contain::lock_here(crate::SEAL, &self.submit, Rank::Submission)
        else {
            return false;
        };
        let mut marked = self.mark_discard();
        drop(held);
        // The query, not the sentinel's probe: that binds the stream's context on the caller's
        // thread, whose current context is the caller's own, and waits on the device.
        marked.faulted = self.fault_before_abort(crate::sentinel::stream_status);
        *self.lock_device_abort() = Some(marked);
        true
    }

    fn after(&self) {
        let Some(marked) = self.lock_device_abort().take() else {
            // Created after the abort began: nothing of it was discarded.
            return;
        };
        // Taken when this thread may take it, which it could at PRE (or the abort would not
        // have happened); without it the order with submissions still holds, since the
        // runtime refuses them until the abort returns.
        let held = npu_core::contain::lock_here(crate::SEAL, &self.submit, Rank::Submission);
        self.confirm_discard(marked);
        drop(held);
    }
}

#[cfg(test)]
mod tests {
    use npu_core::{AclCode, AclError, DeviceFault};

    use super::*;
    use crate::strategy::OpInfo;

    /// After a `stop`, two aborts of a stream may run at once, and the one that began first
    /// may end last. If only that one found the device fault that had stopped the stream (the
    /// later one looked after the runtime had cleared it with the queue), the work it marked
    /// must still report the fault, not `Error::Aborted`. The break: the range of a faulted
    /// abort started from what the aborts before it had confirmed when it ended, so the
    /// later abort's confirmation left it nothing. No public call orders the two ends, so
    /// this ends the two marks directly, in that order.
    #[test]
    fn an_abort_ending_after_a_later_one_keeps_the_fault_of_the_work_it_marked() {
        let stream = crate::test_support::sim_stream(0);
        let shared = &*stream.shared;
        let fault = fault();
        // SAFETY: nothing is recorded against these completions and nothing waits on them.
        let (first, later) = unsafe { (Completer::new(), Completer::new()) };
        let (first, later) = (first.completion(), later.completion());
        // Both mark the same three operations, as two aborts do while submissions are
        // refused, before either's runtime call confirmed anything.
        shared.watched.store(3, Ordering::Release);
        let (first, later) = (
            marked(shared, &first, Some(fault.clone())),
            marked(shared, &later, None),
        );
        drop(later);
        drop(first);
        assert_reports(shared, 2, Some(&fault));
        assert_reports(shared, 3, Some(&fault));
    }

    /// Sequential aborts: one that found no fault, then one that found a fault, each over the
    /// work watched since the one before. Only the second one's work reports the fault; the
    /// first one's stays `Aborted` (a strategy may fail it after the second abort ends).
    #[test]
    fn a_faulted_abort_speaks_only_for_the_work_it_marked_after_the_last_one() {
        let stream = crate::test_support::sim_stream(0);
        let shared = &*stream.shared;
        // SAFETY: nothing is recorded against these completions and nothing waits on them.
        let (one, two) = unsafe { (Completer::new(), Completer::new()) };
        let (one, two) = (one.completion(), two.completion());
        shared.watched.store(2, Ordering::Release);
        drop(marked(shared, &one, None));
        shared.watched.store(5, Ordering::Release);
        drop(marked(shared, &two, Some(fault())));
        assert_reports(shared, 2, None);
        assert_reports(shared, 3, Some(&fault()));
        assert_reports(shared, 5, Some(&fault()));
    }

    /// A probe reads how many operations have their completion records queued only while no
    /// submission and no abort holds the stream: a submission takes its `seq` before it
    /// records, so a count read meanwhile could name an operation whose record is queued only
    /// after the probe's stream query, and an idle stream would make that record pass for a
    /// discarded one. Refused, not waited for: the sentinel never waits for a submitter.
    #[test]
    fn the_recorded_horizon_is_not_read_while_a_submission_or_an_abort_holds_the_stream() {
        let stream = crate::test_support::sim_stream(0);
        let shared = &*stream.shared;
        shared.watched.store(3, Ordering::Release);
        assert_eq!(shared.watched_and_recorded(), Some(3));
        let submitting = shared.lock_submission();
        assert_eq!(shared.watched_and_recorded(), None, "a submission holds it");
        drop(submitting);
        shared.lock_submission().refusing += 1;
        assert_eq!(shared.watched_and_recorded(), None, "an abort refuses");
        shared.lock_submission().refusing -= 1;
        assert_eq!(shared.watched_and_recorded(), Some(3));
        // A submitter that panicked with the lock held leaves it poisoned, not held.
        std::thread::scope(|scope| {
            let panicked = scope.spawn(|| {
                let _submitting = shared.lock_submission();
                panic!("a submitter panics with the lock held");
            });
            assert!(panicked.join().is_err());
        });
        assert_eq!(shared.watched_and_recorded(), Some(3), "poisoned is free");
    }

    /// A `Stream::abort` whose runtime call fails while an `aclrtDeviceTaskAbort` of the
    /// stream's device is between its PRE and POST: the failed abort discarded nothing, but
    /// the device abort is still discarding what it marked at PRE, so the runtime's discard
    /// code still speaks for that work until POST confirms it. The break: the failed abort's
    /// end brought `aborting_through` back to what aborts had confirmed, below the device
    /// abort's mark, so a dead verdict's `ACL_ERROR_RT_STREAM_ABORT` for that work meanwhile
    /// was reported as the runtime's error rather than `Error::Aborted`. No public call
    /// orders the failure inside the device abort on npu-sim, so this calls the watcher's
    /// PRE and POST and ends the failed abort directly.
    #[test]
    fn a_failed_abort_during_a_device_task_abort_keeps_the_device_aborts_mark() {
        use npu_core::DeviceAbortWatch;
        let stream = crate::test_support::sim_stream(0);
        let shared = &*stream.shared;
        shared.watched.store(2, Ordering::Release);
        assert!(shared.before(), "PRE marks the two operations");
        // SAFETY: nothing is recorded against this completion and nothing waits on it.
        let mine = unsafe { Completer::new() }.completion();
        let mut failed = AbortInProgress {
            stream: shared,
            mine: &mine,
            marked: None,
            discarded: false,
        };
        failed.mark(&mut shared.lock_submission());
        drop(failed);
        let op = OpInfo {
            seq: 2,
            ..OpInfo::new("aclrtMemsetAsync")
        };
        assert!(
            shared.abort_may_have_discarded(op),
            "the device abort's discard is still to come"
        );
        shared.after();
        assert!(shared.aborted(op), "POST confirmed it");
    }

    /// A device fault's error, as the runtime's exception callback reports one.
    fn fault() -> Error {
        let mut fault = DeviceFault::new(AclCode::AICORE_EXCEPTION);
        fault.task_id = 1;
        Error::Acl(
            AclError::new("aclrtLaunchKernel", AclCode::AICORE_EXCEPTION, None).with_fault(fault),
        )
    }

    /// An abort of `stream` that has marked its work as `abort_blocking` does and whose
    /// runtime call confirmed the discard, having found `faulted` before it; it ends when
    /// dropped.
    fn marked<'a>(
        stream: &'a StreamShared,
        mine: &'a Completion,
        faulted: Option<Error>,
    ) -> AbortInProgress<'a> {
        let mut abort = AbortInProgress {
            stream,
            mine,
            marked: None,
            discarded: true,
        };
        abort.mark(&mut stream.lock_submission());
        if let Some(marked) = &mut abort.marked {
            marked.faulted = faulted;
        }
        abort
    }

    /// Operation `seq` of `stream`, discarded, reports `fault` under its own call, or
    /// `Error::Aborted` when `None`.
    fn assert_reports(stream: &StreamShared, seq: u64, fault: Option<&Error>) {
        let err = stream.aborted_error(OpInfo {
            seq,
            ..OpInfo::new("aclrtMemsetAsync")
        });
        match fault {
            Some(_) => assert!(
                matches!(&err, Error::Acl(acl) if acl.fault.is_some() && acl.api == "aclrtMemsetAsync"),
                "operation {seq} reports the fault under its own call: {err}"
            ),
            None => assert!(
                matches!(err, Error::Aborted { .. }),
                "operation {seq} is aborted: {err}"
            ),
        }
    }
}

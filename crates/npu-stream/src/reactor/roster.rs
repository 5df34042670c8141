//! Which streams the reactor watches, and how a stream joins and leaves it: a registration
//! queues its operation under the stream's queue lock and, if the stream was not in the
//! reactor, puts it in the inbox; the reactor adopts the inbox, and a stream leaves when the
//! reactor finds its queue empty (under the same lock); a reactor that stops takes the inbox
//! and hands every stream it held over, and refuses later registrations. Written against
//! `super::sync` and generic over the stream, so that the loom model (`reactor::model`)
//! checks the very code the reactor and its registrants run.

use std::collections::VecDeque;

use super::sync::{AtomicBool, Mutex, MutexGuard, Ordering};

/// A stream's queue of operations waiting for the reactor.
pub(crate) trait Queued {
    type Op;
    /// The operations, oldest first.
    fn pending(&mut self) -> &mut VecDeque<Self::Op>;
    /// Whether the stream is in the reactor (active, or in the inbox): a registration that
    /// finds it clear puts the stream in the inbox.
    fn in_reactor(&mut self) -> &mut bool;
}

/// A stream as the roster handles it: a handle that keeps it alive, and its queue's lock.
pub(crate) trait Member: Clone {
    type Queue: Queued;
    fn queue(&self) -> MutexGuard<'_, Self::Queue>;
}

/// The operation type of a member's queue.
pub(crate) type Op<S> = <<S as Member>::Queue as Queued>::Op;

/// What a registration that was accepted leaves its registrant to do, with no lock held.
pub(crate) enum Joined {
    /// The stream was in the reactor already: nothing.
    Queued,
    /// The stream is in the inbox now: wake the reactor.
    Activated,
    /// The reactor stopped after the operation was queued and took the inbox before the
    /// stream reached it: nobody else will look at the stream, so the registrant hands it
    /// over ([`evict`]).
    Orphaned,
}

/// The reactor's inbox and whether it stopped.
pub(crate) struct Roster<S> {
    /// Streams that went from no pending operation to one, not yet adopted by the reactor.
    inbox: Mutex<Vec<S>>,
    /// Set if the reactor thread ever stops: registrations are then refused.
    stopped: AtomicBool,
}

impl<S: Member> Roster<S> {
    pub(crate) fn new() -> Self {
        Roster {
            inbox: Mutex::new(Vec::new()),
            stopped: AtomicBool::new(false),
        }
    }

    /// Queues `op` on `stream` (calling `queued` under the queue lock once it is accepted);
    /// gives it back if the reactor has stopped.
    ///
    /// A stream it activates is pushed to the inbox, under the inbox lock, only if the
    /// reactor has not stopped: so the inbox `stop` takes holds every activated stream but
    /// those whose registrant is told to hand them over itself. That re-check alone keeps an
    /// operation from being stranded (the loom model: a registration after a stream was
    /// handed over finds `in_reactor` cleared by [`evict`], activates it, and is orphaned).
    ///
    /// `stopped` is also read under the queue lock, and [`stop`](Roster::stop) sets it before
    /// it takes the inbox, whose streams are then drained under their queue locks: so on a
    /// stream the stop hands over, an operation is either queued before the hand-over, which
    /// takes it, or refused; never accepted after it and handed over late by its registrant
    /// (the model's watched stream checks this).
    pub(crate) fn register(
        &self,
        stream: &S,
        op: Op<S>,
        queued: impl FnOnce(),
    ) -> Result<Joined, Op<S>> {
        let activate = {
            let mut queue = stream.queue();
            if self.stopped.load(Ordering::SeqCst) {
                return Err(op);
            }
            queued();
            queue.pending().push_back(op);
            !std::mem::replace(queue.in_reactor(), true)
        };
        if !activate {
            return Ok(Joined::Queued);
        }
        let mut inbox = lock(&self.inbox);
        if self.stopped.load(Ordering::SeqCst) {
            return Ok(Joined::Orphaned);
        }
        inbox.push(stream.clone());
        Ok(Joined::Activated)
    }

    /// The reactor side, once notified: the streams activated since the last adoption.
    pub(crate) fn adopt(&self) -> Vec<S> {
        lock(&self.inbox).drain(..).collect()
    }

    /// Marks the reactor stopped, refusing every later registration, and returns the streams
    /// in the inbox, for the caller to hand over ([`evict`]) with the ones it was watching.
    pub(crate) fn stop(&self) -> Vec<S> {
        self.stopped.store(true, Ordering::SeqCst);
        std::mem::take(&mut *lock(&self.inbox))
    }
}

/// The oldest pending operation; with none, the stream leaves the reactor (under the queue
/// lock the caller holds, so a registration after it re-activates the stream).
pub(crate) fn head<Q: Queued>(queue: &mut Q) -> Option<&Q::Op> {
    if queue.pending().is_empty() {
        *queue.in_reactor() = false;
    }
    queue.pending().front()
}

/// Takes the stream out of a stopped reactor: every operation queued on it, for the caller to
/// hand to another watcher. No property needs `in_reactor` cleared here while `register` reads
/// `stopped` under the queue lock (every registration after this is refused before it looks
/// at the flag): it keeps the flag true to the stream's state, and it is what would make a
/// registration after the hand-over orphaned rather than stranded, were that read moved.
pub(crate) fn evict<Q: Queued>(queue: &mut Q) -> VecDeque<Q::Op> {
    *queue.in_reactor() = false;
    std::mem::take(queue.pending())
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

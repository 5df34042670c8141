//! The inference requests' counters and the admission limit, kept so that `GET /stats` reads
//! them as one consistent snapshot without a lock on the request path.
//!
//! A request runs through its counters in one order, on the task that serves it:
//! `received`, then (if it gets a slot) `in_flight` up, then `in_flight` down, then exactly one
//! outcome (`served`, `overloaded`, `rejected`, `failed` or `cancelled`). A snapshot reads them
//! in the reverse order, outcomes first, each later step's write a release and each read an
//! acquire: a snapshot that sees a request's later step then also sees its earlier ones. So
//! every snapshot, however many requests run meanwhile, holds [`Snapshot`]'s invariants,
//! which a reader that takes the counters one by one in any other order does not: reading
//! `received` first, say, a request that arrives and is answered before the outcomes are read
//! shows one answer more than the requests.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use axum::http::StatusCode;

use crate::api_error::ApiError;

/// What became of a request: the counter it ends under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Answered 200.
    Served,
    /// Answered 503 `overloaded`.
    Overloaded,
    /// Answered another 4xx.
    Rejected,
    /// Answered 5xx, or its handler panicked.
    Failed,
    /// Dropped unanswered, or answered to a client the server knows gone.
    Cancelled,
}

impl Outcome {
    /// The counter an answer belongs under.
    pub(crate) fn of<T>(answer: &Result<T, ApiError>) -> Outcome {
        match answer {
            Ok(_) => Outcome::Served,
            Err(err) if err.client_gone => Outcome::Cancelled,
            Err(err) if err.status == StatusCode::SERVICE_UNAVAILABLE => Outcome::Overloaded,
            Err(err) if err.status.is_client_error() => Outcome::Rejected,
            Err(_) => Outcome::Failed,
        }
    }
}

/// The counters of `POST /v1/infer` requests and the admission limit (see the module's docs for
/// how they are kept consistent).
#[derive(Debug)]
pub(crate) struct Requests {
    received: AtomicU64,
    /// Requests holding an admission slot: also the admission itself, so that the limit and
    /// the count are one value and never disagree.
    in_flight: AtomicUsize,
    max_in_flight: usize,
    /// By [`Outcome`], in its order.
    outcomes: [AtomicU64; 5],
}

/// One consistent reading of [`Requests`]. Every snapshot holds:
///
/// - `answered() <= received`: no more requests answered (or dropped) than received, so
///   [`Snapshot::unanswered`] is never negative;
/// - `in_flight <= unanswered()`: a request holding a slot is one not yet answered;
/// - `in_flight <= max_in_flight`;
/// - each counter but `in_flight` never goes down from one snapshot to the next;
/// - at rest (no request in a handler) `unanswered() == 0` and `in_flight == 0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub(crate) received: u64,
    pub(crate) in_flight: usize,
    pub(crate) served: u64,
    pub(crate) overloaded: u64,
    pub(crate) rejected: u64,
    pub(crate) failed: u64,
    pub(crate) cancelled: u64,
}

impl Snapshot {
    /// Requests that have their outcome.
    #[cfg(test)]
    pub(crate) fn answered(&self) -> u64 {
        self.served + self.overloaded + self.rejected + self.failed + self.cancelled
    }

    /// Requests received and not yet answered: in their handlers.
    #[cfg(test)]
    pub(crate) fn unanswered(&self) -> u64 {
        self.received - self.answered()
    }
}

impl Requests {
    pub(crate) fn new(max_in_flight: usize) -> Requests {
        Requests {
            received: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            max_in_flight,
            outcomes: Default::default(),
        }
    }

    /// Counts a request received; the returned guard gives it its outcome, once.
    pub(crate) fn receive(&self) -> Request<'_> {
        // Relaxed: the request's later steps are releases, which publish this too.
        self.received.fetch_add(1, Ordering::Relaxed);
        Request {
            requests: self,
            admitted: false,
            answered: false,
        }
    }

    /// Requests holding an admission slot now (`GET /stats` reads it in its snapshot).
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// The counters as one consistent reading: outcomes first, `received` last (the module's
    /// docs say why).
    pub(crate) fn snapshot(&self) -> Snapshot {
        let [served, overloaded, rejected, failed, cancelled] =
            [0, 1, 2, 3, 4].map(|i| self.outcomes[i].load(Ordering::Acquire));
        let in_flight = self.in_flight.load(Ordering::Acquire);
        let received = self.received.load(Ordering::Acquire);
        Snapshot {
            received,
            in_flight,
            served,
            overloaded,
            rejected,
            failed,
            cancelled,
        }
    }

    fn count(&self, outcome: Outcome) {
        self.outcomes[outcome as usize].fetch_add(1, Ordering::Release);
    }
}

/// A request between its receipt and its outcome. It holds the request's admission slot too,
/// so that the slot is always given back before the outcome is counted, whichever way the
/// request ends: answered ([`Request::finish`]), dropped with its connection (counted
/// `cancelled`), or unwound by a panic of its handler (counted `failed`, a bug).
pub(crate) struct Request<'a> {
    requests: &'a Requests,
    admitted: bool,
    answered: bool,
}

impl Request<'_> {
    /// Takes an admission slot, held until the request has its outcome: `false` if all
    /// `max_in_flight` are taken. Never waits.
    pub(crate) fn admit(&mut self) -> bool {
        debug_assert!(!self.admitted, "a request is admitted once");
        let max = self.requests.max_in_flight;
        let admitted = self
            .requests
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok();
        self.admitted = admitted;
        admitted
    }

    fn release(&mut self) {
        if std::mem::take(&mut self.admitted) {
            self.requests.in_flight.fetch_sub(1, Ordering::Release);
        }
    }

    /// Counts the request's outcome (after giving its slot back).
    pub(crate) fn finish(mut self, outcome: Outcome) {
        self.end(outcome);
    }

    fn end(&mut self, outcome: Outcome) {
        self.release();
        if !std::mem::replace(&mut self.answered, true) {
            self.requests.count(outcome);
        }
    }
}

impl Drop for Request<'_> {
    fn drop(&mut self) {
        // Unanswered: dropped with its connection (a client gone, or the drain timeout), or
        // unwinding from a panic in its handler.
        let outcome = if std::thread::panicking() {
            Outcome::Failed
        } else {
            Outcome::Cancelled
        };
        self.end(outcome);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn a_request_ends_under_one_outcome_and_gives_its_slot_back_first() {
        let requests = Requests::new(1);
        let mut first = requests.receive();
        assert!(first.admit());
        let mut second = requests.receive();
        assert!(!second.admit(), "one slot");
        let snapshot = requests.snapshot();
        assert_eq!((snapshot.received, snapshot.in_flight), (2, 1));
        assert_eq!(snapshot.unanswered(), 2);
        second.finish(Outcome::Overloaded);
        first.finish(Outcome::Served);
        // Dropped unanswered, holding its slot: cancelled, and the slot back.
        let mut dropped = requests.receive();
        assert!(dropped.admit());
        drop(dropped);
        // Unwound by a panic: failed.
        let panicked = std::panic::catch_unwind(|| {
            let _request = requests.receive();
            panic!("a bug in the handler");
        });
        assert!(panicked.is_err());
        let snapshot = requests.snapshot();
        let expected = Snapshot {
            received: 4,
            in_flight: 0,
            served: 1,
            overloaded: 1,
            rejected: 0,
            failed: 1,
            cancelled: 1,
        };
        assert_eq!(snapshot, expected);
        assert_eq!(snapshot.unanswered(), 0);
    }

    #[test]
    fn snapshots_taken_while_requests_run_on_other_threads_hold_the_invariants() {
        let requests = Requests::new(3);
        let stop = std::sync::atomic::AtomicBool::new(false);
        // The workers start once the reader reads.
        let start = std::sync::Barrier::new(4);
        std::thread::scope(|scope| {
            for worker in 0..3 {
                let (requests, start) = (&requests, &start);
                scope.spawn(move || {
                    start.wait();
                    for i in 0..20_000u64 {
                        let mut request = requests.receive();
                        let outcome = if !request.admit() {
                            Outcome::Overloaded
                        } else if (i + worker) % 3 == 0 {
                            Outcome::Rejected
                        } else {
                            Outcome::Served
                        };
                        if (i + worker) % 7 == 0 {
                            drop(request);
                        } else {
                            request.finish(outcome);
                        }
                    }
                });
            }
            let (stop, requests, start) = (&stop, &requests, &start);
            let reader = scope.spawn(move || {
                let mut last = requests.snapshot();
                start.wait();
                loop {
                    let now = requests.snapshot();
                    assert_invariants(&now, 3);
                    assert_not_behind(&now, &last);
                    last = now;
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                }
            });
            // Wait for the workers through the counters, then stop the reader.
            while requests.snapshot().received < 60_000 || requests.snapshot().unanswered() > 0 {
                std::thread::yield_now();
            }
            stop.store(true, Ordering::Relaxed);
            reader.join().unwrap();
        });
        let at_rest = requests.snapshot();
        assert_eq!((at_rest.received, at_rest.unanswered()), (60_000, 0));
        assert_eq!(at_rest.in_flight, 0);
    }

    /// [`Snapshot`]'s invariants within one snapshot.
    pub(crate) fn assert_invariants(snapshot: &Snapshot, max_in_flight: usize) {
        assert!(
            snapshot.answered() <= snapshot.received,
            "more answers than requests: {snapshot:?}"
        );
        assert!(
            snapshot.in_flight as u64 <= snapshot.unanswered(),
            "a slot held by an answered request: {snapshot:?}"
        );
        assert!(
            snapshot.in_flight <= max_in_flight,
            "over the limit: {snapshot:?}"
        );
    }

    /// [`Snapshot`]'s invariant across two snapshots taken in turn.
    pub(crate) fn assert_not_behind(now: &Snapshot, before: &Snapshot) {
        let counters = |s: &Snapshot| {
            [
                s.received,
                s.served,
                s.overloaded,
                s.rejected,
                s.failed,
                s.cancelled,
            ]
        };
        let went_down = counters(now)
            .iter()
            .zip(counters(before))
            .any(|(now, before)| *now < before);
        assert!(!went_down, "a counter went down: {before:?} then {now:?}");
    }
}

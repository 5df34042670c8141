//! When the reactor next queries a stream's oldest pending event, learned from how long that
//! stream's operations have taken.
//!
//! Every query costs the simulator's or the driver's time, which on a small host is taken
//! from the threads doing the work, and a query of a running event learns nothing. So each
//! stream keeps a running average of how long its operations take from becoming the stream's
//! head (registered on an idle stream, or the previous head seen done) to being seen done,
//! and its next query is planned for when the head should be done. A query that finds the
//! head still running is retried after a small fraction of that time, growing while it keeps
//! running.

use std::time::{Duration, Instant};

/// The first retry after a miss is this fraction of the typical time. A plan learned from the
/// stream's own operations misses only by a little, so the retry is short: a late query
/// delays the operation's future by up to this much of its duration. With an eighth, an
/// awaited 100 µs operation was seen 7 µs late on average in a model of the plan against
/// operations whose end jitters by a few µs; with a thirty-second, 2 µs, for no more queries.
const RETRY_FRACTION: u32 = 32;
/// The shortest retry: below this the query itself costs more than the wait saves. (1 µs
/// was tried: it saved little and took the bench's queries per completion over 2.)
const MIN_RETRY: Duration = Duration::from_micros(2);
/// Growth of the retry between misses of one head (doubling). A head that keeps missing is
/// one the plan placed well before its end (a worker the host held up, a longer operation),
/// so the queries that find it still running are what a slow growth multiplies: a head that
/// ends one typical time after its plan is found by the sixth retry when they double and the
/// seventh when they grow by half, one that ends two typical times after by the seventh and
/// the ninth. Doubling was measured against growing by half on the bench (eight runs of
/// each, alternating): 1.79–1.93 queries per completion against 1.93–2.14, with the same
/// cells met; tripling saw heads late enough to lose the 1.2× lead at one in flight.
const RETRY_GROWTH: (u32, u32) = (2, 1);
/// The longest a stream with work pending goes unqueried. It bounds how late a surprisingly
/// short operation (on a stream whose operations are usually long) is noticed, and it keeps a
/// stream that stopped making progress queried often enough to be health-checked on time.
pub(super) const MAX_WAIT: Duration = Duration::from_millis(1);
/// A new observation weighs 1/WEIGHT in the running average.
const WEIGHT: u32 = 4;
/// An observation counts for at most this many times the typical time: one operation
/// stretched by a descheduled thread (a millisecond on a busy host) must not plan the next
/// dozens of queries late, while a stream whose operations really got longer still doubles
/// its typical time within three operations.
const MAX_GROWTH: u32 = 2;

/// A stream's typical operation time. It lives in the stream's queue, not in the reactor's
/// list of active streams, because with one operation in flight the stream leaves the reactor
/// after every completion and what was learned must survive that.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pace {
    typical: Option<Duration>,
    /// How many heads in a row the first query found done: each one says the operations may
    /// have become shorter than the plan, by an unknown amount.
    early: u32,
}

impl Pace {
    fn learn(&mut self, sample: Duration) {
        self.typical = Some(match self.typical {
            None => sample,
            Some(typical) => (typical * (WEIGHT - 1) + sample.min(typical * MAX_GROWTH)) / WEIGHT,
        });
    }
}

/// The query plan for a stream's current head.
#[derive(Debug)]
pub(super) struct Plan {
    /// When the head became the head.
    since: Instant,
    /// Whether a query found this head still running.
    missed: bool,
    /// The wait after the first miss.
    first_retry: Duration,
    /// The wait after the next miss.
    retry: Duration,
    /// When to query next.
    pub(super) due: Instant,
}

impl Plan {
    /// The plan for a head that became the head at `since`, on a stream with `pace`.
    pub(super) fn new(since: Instant, pace: Pace) -> Self {
        let typical = pace.typical.unwrap_or(Duration::ZERO);
        let retry = (typical / RETRY_FRACTION).clamp(MIN_RETRY, MAX_WAIT);
        Plan {
            since,
            missed: false,
            first_retry: retry,
            retry,
            due: since + typical.min(MAX_WAIT),
        }
    }

    /// Whether the head should be queried at `now`.
    pub(super) fn is_due(&self, now: Instant) -> bool {
        self.due <= now
    }

    /// A query made at `at` found the head still running.
    pub(super) fn missed(&mut self, at: Instant) {
        self.missed = true;
        self.due = at + self.retry;
        self.retry = (self.retry * RETRY_GROWTH.0 / RETRY_GROWTH.1).min(MAX_WAIT);
    }

    /// The query planned for `self.due` found the head done: `pace` learns when it finished.
    ///
    /// The sample is the time the query was planned for, not the time it was made: the
    /// reactor may wake late, and learning its lateness as device time would plan every later
    /// query later still. After a miss that time is at most one retry past the end. A head
    /// found done by its first query may have been done long before, so that sample is taken
    /// earlier than the plan: by half a retry for the first such head in a row, twice as much
    /// for each further one, and never by more than a quarter of the plan. A stream whose
    /// plan is right alternates hits and misses and stays put; one whose operations became
    /// shorter is found out within a few operations. (Always taking 3/4 of the plan pulled
    /// a steady stream early enough to miss on most operations, each miss costing a retry;
    /// without [`MAX_GROWTH`] and that bound, one late operation planned the next dozens of
    /// queries late: the bench's 1-in-flight cells fell to 1.4 k ops/s in some runs.)
    pub(super) fn hit(&self, pace: &mut Pace) {
        let planned = self.due.saturating_duration_since(self.since);
        if self.missed {
            pace.early = 0;
            return pace.learn(planned);
        }
        pace.early = pace.early.saturating_add(1);
        let pull = (self.first_retry / 2).saturating_mul(1 << (pace.early - 1).min(20));
        pace.learn(planned.saturating_sub(pull).max(planned * 3 / 4));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    /// Queries one head that takes `duration` under `pace`'s plan, every query made `late`
    /// after it was due; returns how many queries it took.
    fn run_head(pace: &mut Pace, start: Instant, duration: Duration, late: Duration) -> u32 {
        let mut plan = Plan::new(start, *pace);
        let mut queries = 1;
        while plan.due + late < start + duration {
            plan.missed(plan.due + late);
            queries += 1;
        }
        plan.hit(pace);
        queries
    }

    #[test]
    fn an_unknown_stream_is_queried_at_once_then_retried_from_the_shortest_wait() {
        let start = Instant::now();
        let mut plan = Plan::new(start, Pace::default());
        assert!(plan.is_due(start));
        plan.missed(start);
        assert!(!plan.is_due(start));
        assert_eq!(plan.due, start + MIN_RETRY);
        plan.missed(plan.due);
        assert_eq!(
            plan.due,
            start + MIN_RETRY + MIN_RETRY * RETRY_GROWTH.0 / RETRY_GROWTH.1
        );
    }

    #[test]
    fn retries_grow_up_to_the_longest_wait() {
        let start = Instant::now();
        let mut plan = Plan::new(start, Pace::default());
        let mut at = start;
        for _ in 0..40 {
            plan.missed(at);
            at = plan.due;
        }
        plan.missed(at);
        assert_eq!(plan.due - at, MAX_WAIT);
    }

    #[test]
    fn a_steady_stream_settles_near_its_operation_time_with_few_queries() {
        for late in [Duration::ZERO, 30 * US] {
            let mut pace = Pace::default();
            let mut at = Instant::now();
            for _ in 0..100 {
                run_head(&mut pace, at, 100 * US, late);
                at += 200 * US;
            }
            let typical = pace.typical.expect("learned");
            assert!(
                typical > 60 * US && typical < 120 * US,
                "{typical:?} with wake-ups {late:?} late"
            );
            let queries: u32 = (0..100)
                .map(|i| run_head(&mut pace, at + i * 200 * US, 100 * US, late))
                .sum();
            assert!(queries <= 200, "{queries} queries for 100 operations");
        }
    }

    /// Like [`run_head`], with no lateness; returns the queries and how long after the head
    /// ended the query that found it done was made.
    fn seen_after(pace: &mut Pace, start: Instant, duration: Duration) -> (u32, Duration) {
        let mut plan = Plan::new(start, *pace);
        let mut queries = 1;
        while plan.due < start + duration {
            plan.missed(plan.due);
            queries += 1;
        }
        plan.hit(pace);
        (queries, plan.due - (start + duration))
    }

    #[test]
    fn a_miss_is_retried_after_a_thirty_second_of_the_typical_time() {
        let start = Instant::now();
        let pace = Pace {
            typical: Some(320 * US),
            early: 0,
        };
        let mut plan = Plan::new(start, pace);
        assert_eq!(plan.due, start + 320 * US);
        plan.missed(plan.due);
        assert_eq!(plan.due, start + 330 * US);
    }

    #[test]
    fn a_steady_stream_is_seen_soon_after_each_end_with_few_queries() {
        // 100 µs operations whose ends jitter over 4 µs, as a device's do.
        let ends = |i: u32| (100 + i % 5) * US;
        let mut pace = Pace::default();
        let mut at = Instant::now();
        for i in 0..100 {
            seen_after(&mut pace, at, ends(i));
            at += 200 * US;
        }
        let (mut queries, mut late) = (0, Duration::ZERO);
        for i in 0..100 {
            let (q, l) = seen_after(&mut pace, at, ends(i));
            (queries, late) = (queries + q, late + l);
            at += 200 * US;
        }
        // An eighth-of-the-time retry and a plan always pulled to 3/4 gave 7 µs here.
        assert!(
            late / 100 <= 4 * US,
            "seen {:?} late on average",
            late / 100
        );
        assert!(queries <= 200, "{queries} queries for 100 operations");
    }

    #[test]
    fn operations_that_became_shorter_are_soon_planned_at_their_new_length() {
        let mut pace = Pace::default();
        let mut at = Instant::now();
        for _ in 0..50 {
            seen_after(&mut pace, at, 500 * US);
            at += 1000 * US;
        }
        for _ in 0..45 {
            seen_after(&mut pace, at, 50 * US);
            at += 1000 * US;
        }
        let typical = pace.typical.expect("learned");
        assert!(
            typical < 100 * US,
            "still {typical:?} after 45 operations of 50 µs"
        );
    }

    #[test]
    fn one_stretched_operation_does_not_plan_the_next_ones_late() {
        let mut pace = Pace::default();
        let mut at = Instant::now();
        for _ in 0..100 {
            run_head(&mut pace, at, 100 * US, Duration::ZERO);
            at += 200 * US;
        }
        let settled = pace.typical.expect("learned");
        // Descheduled for a millisecond: the plan after it is at most a quarter later.
        run_head(&mut pace, at, 1000 * US, Duration::ZERO);
        let after = pace.typical.expect("learned");
        assert!(after <= settled * 5 / 4, "{settled:?} became {after:?}");
        for i in 1..=20 {
            run_head(&mut pace, at + i * 200 * US, 100 * US, Duration::ZERO);
        }
        let typical = pace.typical.expect("learned");
        assert!(typical < 120 * US, "still {typical:?} after 20 operations");
    }

    #[test]
    fn a_head_always_found_done_is_planned_earlier() {
        let mut pace = Pace::default();
        let start = Instant::now();
        let mut plan = Plan::new(start, pace);
        plan.missed(start);
        plan.hit(&mut pace);
        let first = pace.typical.expect("learned");
        assert_eq!(first, MIN_RETRY);
        Plan::new(start, pace).hit(&mut pace);
        assert!(pace.typical.expect("learned") < first);
    }

    #[test]
    fn the_planned_wait_is_bounded() {
        let start = Instant::now();
        let mut pace = Pace::default();
        for _ in 0..20 {
            let mut plan = Plan::new(start, pace);
            for _ in 0..40 {
                plan.missed(plan.due);
            }
            plan.hit(&mut pace);
        }
        assert!(pace.typical.expect("learned") > MAX_WAIT);
        assert_eq!(Plan::new(start, pace).due, start + MAX_WAIT);
    }
}

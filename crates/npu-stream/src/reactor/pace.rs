//! When the reactor next queries a stream's oldest pending event, learned from how long that
//! stream's operations have taken.
//!
//! Every query costs the simulator's or the driver's time, which on a small host is taken
//! from the threads doing the work, and a query of a running event learns nothing. So each
//! stream keeps a running average of how long its operations take from becoming the stream's
//! head (registered on an idle stream, or the previous head seen done) to being seen done,
//! and its next query is planned for when the head should be done. A query that finds the
//! head still running is retried after a fraction of that time, growing while it keeps
//! running.

use std::time::{Duration, Instant};

/// The first retry after a miss is this fraction of the typical time: a late query delays
/// the operation's future by at most this much of its duration.
const RETRY_FRACTION: u32 = 8;
/// The shortest retry: below this the query itself costs more than the wait saves.
const MIN_RETRY: Duration = Duration::from_micros(2);
/// Growth of the retry between misses of one head (3/2).
const RETRY_GROWTH: (u32, u32) = (3, 2);
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
    /// The wait after the next miss.
    retry: Duration,
    /// When to query next.
    pub(super) due: Instant,
}

impl Plan {
    /// The plan for a head that became the head at `since`, on a stream with `pace`.
    pub(super) fn new(since: Instant, pace: Pace) -> Self {
        let typical = pace.typical.unwrap_or(Duration::ZERO);
        Plan {
            since,
            missed: false,
            retry: (typical / RETRY_FRACTION).clamp(MIN_RETRY, MAX_WAIT),
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
    /// query later still. A head found done by its first query may have been done long
    /// before, so that sample is 3/4 of the plan: a stream whose first queries find their
    /// head done is planned earlier each time (by a sixteenth of its typical time per
    /// operation) until a query misses and shows where the end is. With 7/8 (a thirty-second
    /// per operation) and no [`MAX_GROWTH`], one late operation planned the next dozens of
    /// queries late: the bench's 1-in-flight cells fell to 1.4 k ops/s in some runs.
    pub(super) fn hit(&self, pace: &mut Pace) {
        let planned = self.due.saturating_duration_since(self.since);
        pace.learn(if self.missed {
            planned
        } else {
            planned * 3 / 4
        });
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
        assert_eq!(plan.due, start + MIN_RETRY + MIN_RETRY * 3 / 2);
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

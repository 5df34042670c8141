//! How long the reactor waits between passes that completed nothing.

use std::time::Duration;

/// Passes that only spin after the last progress. Pass `k` spins `2^k` pause instructions (so
/// at most 64) before the next query, so a short operation is noticed within a
/// microsecond or so while a longer one costs few queries: each query takes the simulator's or
/// the driver's time, which on a small host is taken from the threads doing the work.
const SPIN_PASSES: u32 = 6;
const _: () = assert!(
    SPIN_PASSES < u32::BITS,
    "2^SPIN_PASSES spins must fit a u32"
);
/// Further passes that yield the core before each retry. Spinning holds a core that the
/// submitting tasks (and, on the simulator, the device itself) may need; a yield costs a
/// system call when nothing else wants the core and hands it over when something does. On a
/// 2-core host, yielding after 6 spin passes instead of 16 raised the throughput of 4 and 16
/// busy streams by 1.5–2× (`cargo bench -p npu-benches`) at the same await latency.
const YIELD_PASSES: u32 = 32;
/// The first timed park; each fruitless park makes the next one [`GROWTH`] times longer, up to
/// `MAX_PARK`. Growing by half rather than doubling bounds how late a completion is noticed to
/// a third of the time already waited, at the price of a few more wake-ups.
const FIRST_PARK: Duration = Duration::from_micros(20);
/// Growth of the park between fruitless parks (3/2).
const GROWTH: (u32, u32) = (3, 2);
/// Long enough to cost no measurable CPU, short enough not to matter next to device work
/// that has been running for a while already.
const MAX_PARK: Duration = Duration::from_millis(1);

/// Spin, then yield, then park for growing intervals while work is pending but not done.
pub(super) struct Backoff {
    idle_passes: u32,
    park: Duration,
}

impl Backoff {
    pub(super) fn new() -> Self {
        Backoff {
            idle_passes: 0,
            park: FIRST_PARK,
        }
    }

    /// Progress was made: poll eagerly again.
    pub(super) fn reset(&mut self) {
        self.idle_passes = 0;
        self.park = FIRST_PARK;
    }

    /// Waits in place (spin or yield) and returns `None`, or returns how long to park.
    pub(super) fn next(&mut self) -> Option<Duration> {
        self.idle_passes = self.idle_passes.saturating_add(1);
        if self.idle_passes <= SPIN_PASSES {
            for _ in 0..1u32 << self.idle_passes {
                std::hint::spin_loop();
            }
            None
        } else if self.idle_passes <= SPIN_PASSES + YIELD_PASSES {
            std::thread::yield_now();
            None
        } else {
            let park = self.park;
            self.park = (self.park * GROWTH.0 / GROWTH.1).min(MAX_PARK);
            Some(park)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spins_then_yields_then_parks_up_to_the_cap() {
        let mut backoff = Backoff::new();
        for _ in 0..SPIN_PASSES + YIELD_PASSES {
            assert_eq!(backoff.next(), None);
        }
        assert_eq!(backoff.next(), Some(FIRST_PARK));
        assert_eq!(backoff.next(), Some(FIRST_PARK * 3 / 2));
        for _ in 0..20 {
            backoff.next();
        }
        assert_eq!(backoff.next(), Some(MAX_PARK));
        backoff.reset();
        assert_eq!(backoff.next(), None);
    }
}

//! How long the reactor waits between passes that completed nothing.

use std::time::Duration;

/// Passes that only spin (`spin_loop` hint) after the last progress.
const SPIN_PASSES: u32 = 64;
/// Further passes that yield the core before each retry.
const YIELD_PASSES: u32 = 32;
/// The first timed park, doubled after every fruitless park up to `MAX_PARK`.
const FIRST_PARK: Duration = Duration::from_micros(20);
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
            std::hint::spin_loop();
            None
        } else if self.idle_passes <= SPIN_PASSES + YIELD_PASSES {
            std::thread::yield_now();
            None
        } else {
            let park = self.park;
            self.park = (self.park * 2).min(MAX_PARK);
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
        assert_eq!(backoff.next(), Some(FIRST_PARK * 2));
        for _ in 0..20 {
            backoff.next();
        }
        assert_eq!(backoff.next(), Some(MAX_PARK));
        backoff.reset();
        assert_eq!(backoff.next(), None);
    }
}

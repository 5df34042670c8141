//! The process-wide operator timeouts: how long an aclrtStreamWaitEvent may wait
//! (aclrtSetOpWaitTimeout) and how long a kernel may execute (aclrtSetOpExecuteTimeOut*).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// Steps of the interval a timeout may take.
pub(crate) const MAX_STEPS: u64 = 254;
/// A timeout of 0 never expires when the interval is below this (µs), as on the hardware.
const NEVER_BELOW_US: u64 = 100_000;
/// The execute timeout that never expires.
pub(crate) const NEVER: u64 = u64::MAX;

/// aclrtSetOpWaitTimeout's seconds (0: no timeout).
static WAIT_S: AtomicU32 = AtomicU32::new(0);
/// The effective execute timeout in µs ([`NEVER`]), 0 until one is set.
static EXECUTE_US: AtomicU64 = AtomicU64::new(0);

pub(crate) fn set_wait_timeout(seconds: u32) {
    WAIT_S.store(seconds, Ordering::Relaxed);
}

/// The timeout of an aclrtStreamWaitEvent issued now.
pub(crate) fn wait_timeout() -> Option<Duration> {
    match WAIT_S.load(Ordering::Relaxed) {
        0 => None,
        seconds => Some(Duration::from_secs(u64::from(seconds))),
    }
}

/// The timeout that takes effect for a requested one (µs): rounded up to a multiple of the
/// interval, 1 to [`MAX_STEPS`] of them; 0 asks for the longest, which is [`NEVER`] when the
/// interval is short.
pub(crate) fn effective_us(requested_us: u64, interval_us: u64) -> u64 {
    if requested_us == 0 {
        return match interval_us < NEVER_BELOW_US {
            true => NEVER,
            false => MAX_STEPS * interval_us,
        };
    }
    requested_us.div_ceil(interval_us).clamp(1, MAX_STEPS) * interval_us
}

/// Sets the execute timeout (already effective, µs).
pub(crate) fn set_execute_timeout(effective_us: u64) {
    EXECUTE_US.store(effective_us, Ordering::Relaxed);
}

/// The execute timeout in force (µs, or [`NEVER`]): the one set, else the default, the
/// longest finite one.
pub(crate) fn execute_timeout_us(interval_us: u64) -> u64 {
    match EXECUTE_US.load(Ordering::Relaxed) {
        0 => MAX_STEPS * interval_us,
        us => us,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_up_to_whole_steps_within_the_range() {
        assert_eq!(effective_us(50, 100), 100, "the reference's example");
        assert_eq!(effective_us(30_000, 100), 25_400, "capped at 254 steps");
        assert_eq!(effective_us(101, 100), 200);
        assert_eq!(effective_us(u64::MAX, 100_000), 254 * 100_000);
    }

    #[test]
    fn zero_is_the_longest_timeout_or_none() {
        assert_eq!(effective_us(0, 99_999), NEVER);
        assert_eq!(effective_us(0, 100_000), 25_400_000);
    }
}

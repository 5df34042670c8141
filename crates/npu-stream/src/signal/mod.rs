//! Awaitable signalling between streams: notifies, 64-bit value writes and waits, and event
//! waits with a timeout. Each is an operation on a stream, submitted and watched like a copy.

mod notify;
mod value;
mod word;

pub use notify::Notify;
pub use value::ValueCondition;
pub use word::{AsValueWord, ValueWord};

use std::time::Duration;

use npu_core::{Error, Result};

/// ACL's stream-side timeouts are whole seconds, 0 meaning "for ever": a timeout is rounded
/// up to the next second (a wait never gives up early), and a zero timeout, which ACL would
/// read as no timeout at all, is refused.
pub(crate) fn timeout_seconds(api: &'static str, timeout: Duration, max: u64) -> Result<u64> {
    if timeout.is_zero() {
        return Err(Error::invalid(
            api,
            "timeout",
            "must be at least 1 ns (ACL reads a zero timeout as waiting for ever)",
        ));
    }
    // Saturating: `Duration::MAX` rounded up must be refused as over the limit, not wrap.
    let seconds = timeout
        .as_secs()
        .saturating_add(u64::from(timeout.subsec_nanos() > 0));
    if seconds > max {
        let rule = format!("{timeout:?} exceeds ACL's limit of {max} seconds");
        return Err(Error::invalid(api, "timeout", rule));
    }
    Ok(seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_round_up_to_whole_seconds() {
        let max = u64::from(u32::MAX);
        assert_eq!(
            timeout_seconds("t", Duration::from_nanos(1), max).unwrap(),
            1
        );
        assert_eq!(
            timeout_seconds("t", Duration::from_secs(2), max).unwrap(),
            2
        );
        assert_eq!(
            timeout_seconds("t", Duration::from_millis(2001), max).unwrap(),
            3
        );
        let zero = timeout_seconds("t", Duration::ZERO, max).unwrap_err();
        assert!(zero.to_string().contains("waiting for ever"), "{zero}");
        let long = timeout_seconds("t", Duration::from_secs(max + 1), max).unwrap_err();
        assert!(long.to_string().contains("exceeds ACL's limit"), "{long}");
        let longest = timeout_seconds("t", Duration::MAX, max).unwrap_err();
        assert!(
            longest.to_string().contains("exceeds ACL's limit"),
            "{longest}"
        );
    }
}

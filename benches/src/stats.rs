//! Small helpers the sections share: percentiles of samples, µs, medians, fields of
//! /proc/self/status and the load average.

use std::time::Duration;

#[path = "../../examples/support/percentile.rs"]
mod shared;
pub(crate) use shared::percentile;

/// A duration in µs, for the table.
pub fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

/// The median of `values` (the upper one of an even count); sorts `values`. NaN for none.
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The 1, 5 and 15 minute load averages as /proc/loadavg gives them, or "n/a".
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|line| {
            line.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|load| !load.is_empty())
        .unwrap_or_else(|| "n/a".into())
}

/// A numeric field of /proc/self/status (`key` with its colon, e.g. `"VmLck:"`), where the OS
/// reports it.
pub fn proc_status(key: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let value = status.lines().find_map(|line| line.strip_prefix(key))?;
    value.split_whitespace().next()?.parse().ok()
}

/// The number of threads in this process now (`Threads:` in /proc/self/status; 0 where that
/// cannot be read).
pub fn thread_count() -> usize {
    proc_status("Threads:").map_or(0, |n| n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut samples: Vec<Duration> = (1..=100).rev().map(Duration::from_micros).collect();
        assert_eq!(percentile(&mut samples, 0.5), Duration::from_micros(50));
        assert_eq!(percentile(&mut samples, 0.99), Duration::from_micros(99));
        assert_eq!(percentile(&mut samples, 1.0), Duration::from_micros(100));
        assert_eq!(percentile(&mut samples, 0.0), Duration::from_micros(1));
        assert_eq!(percentile(&mut [], 0.5), Duration::ZERO);
    }

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 3.0);
        assert!(median(&mut []).is_nan());
    }

    #[test]
    fn the_load_average_has_three_numbers_on_linux() {
        let load = load_average();
        if cfg!(target_os = "linux") {
            assert_eq!(load.split(' ').count(), 3, "{load}");
        } else {
            assert!(!load.is_empty());
        }
    }

    #[test]
    fn this_process_has_threads() {
        assert!(thread_count() >= 1);
    }
}

//! Small helpers the sections share: percentiles of samples, and the process's thread count.

use std::time::Duration;

/// The `q` quantile (0 to 1) of `samples` by the nearest-rank method; sorts `samples`.
/// Zero for an empty sample.
pub fn percentile(samples: &mut [Duration], q: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    samples.sort_unstable();
    let rank = (q.clamp(0.0, 1.0) * samples.len() as f64).ceil() as usize;
    samples[rank.clamp(1, samples.len()) - 1]
}

/// The number of threads in this process now (`Threads:` in /proc/self/status; 0 where that
/// cannot be read).
pub fn thread_count() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Threads:"))
                .and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(0)
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
    fn this_process_has_threads() {
        assert!(thread_count() >= 1);
    }
}

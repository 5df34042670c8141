//! Small helpers the sections share: percentiles of samples, µs, medians, fields of
//! /proc/self/status, the load average and the CPU time the hypervisor took.

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

/// The machine's CPU time so far, from the `cpu` line of /proc/stat, to tell a measurement
/// taken while the hypervisor ran other guests on this machine's CPUs (a virtual machine's
/// "steal" time) from one that had them to itself.
#[derive(Clone, Copy, Debug)]
pub struct CpuTime {
    /// Every state's ticks, steal included.
    total: u64,
    steal: u64,
}

impl CpuTime {
    /// Now; `None` where /proc/stat cannot be read or has no steal column.
    pub fn now() -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        Self::parse(stat.lines().next()?)
    }

    /// The `cpu` line: user, nice, system, idle, iowait, irq, softirq, steal, guest and
    /// guest_nice ticks (the two guest counts are already in user and nice).
    fn parse(line: &str) -> Option<Self> {
        let mut fields = line.split_whitespace();
        if fields.next()? != "cpu" {
            return None;
        }
        let ticks: Vec<u64> = fields.map(str::parse).collect::<Result<_, _>>().ok()?;
        let steal = *ticks.get(7)?;
        Some(CpuTime {
            total: ticks.iter().take(8).sum(),
            steal,
        })
    }

    /// The share of CPU time stolen since `self`, in percent: `None` without readings, or
    /// before a tick has passed.
    pub fn stolen_since(self, later: Option<CpuTime>) -> Option<f64> {
        let later = later?;
        let total = later.total.checked_sub(self.total).filter(|&t| t > 0)?;
        Some(later.steal.saturating_sub(self.steal) as f64 * 100.0 / total as f64)
    }
}

/// "n.n %" of CPU time stolen between two readings, or "n/a".
pub fn stolen(since: Option<CpuTime>) -> String {
    since
        .and_then(|since| since.stolen_since(CpuTime::now()))
        .map_or_else(|| "n/a".into(), |percent| format!("{percent:.1} %"))
}

/// A numeric field of /proc/self/status (`key` with its colon, e.g. `"VmLck:"`), where the OS
/// reports it.
pub fn proc_status(key: &str) -> Option<u64> {
    status_field("/proc/self/status", key)
}

/// How many times the calling thread has given up its CPU to wait (parked, blocked, slept):
/// `voluntary_ctxt_switches` in its /proc status, where the OS reports it.
pub fn thread_waits() -> Option<u64> {
    status_field("/proc/thread-self/status", "voluntary_ctxt_switches:")
}

fn status_field(path: &str, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(path).ok()?;
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
    fn stolen_time_is_the_steal_columns_share_of_every_column() {
        let before = CpuTime::parse("cpu  100 0 50 800 10 0 0 40 7 0").unwrap();
        let after = CpuTime::parse("cpu  150 0 60 900 10 0 0 80 9 0").unwrap();
        // 200 ticks passed, 40 of them stolen; the guest columns are already in `user`.
        assert_eq!(before.stolen_since(Some(after)), Some(20.0));
        assert_eq!(before.stolen_since(Some(before)), None, "no tick passed");
        assert!(
            CpuTime::parse("cpu0 1 2 3 4 5 6 7 8").is_none(),
            "not the machine's line"
        );
        assert!(CpuTime::parse("cpu  1 2 3").is_none(), "no steal column");
        if cfg!(target_os = "linux") {
            assert!(CpuTime::now().is_some());
        }
    }

    #[test]
    fn the_calling_thread_has_waited_on_linux() {
        if cfg!(target_os = "linux") {
            let before = thread_waits().expect("a voluntary switch count");
            std::thread::sleep(std::time::Duration::from_millis(1));
            assert!(thread_waits().expect("a voluntary switch count") > before);
        }
    }

    #[test]
    fn this_process_has_threads() {
        assert!(thread_count() >= 1);
    }
}

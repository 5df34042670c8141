//! What the host itself costs every completion strategy: how soon a parked thread runs after
//! another thread unparks it, and how late a short timed park returns.
//!
//! Each strategy ends an operation by waking some thread (the awaiting task's, a blocked
//! one's, the reactor's), so these costs set the floor of every latency row and how far the
//! one-in-flight cells can separate the strategies. On a virtual machine they depend on
//! whether the woken thread's virtual CPU is halted, which is why both cases are measured.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::Table;
use crate::stats::{micros, percentile};

const SECTION: &str = "machine";
const WAKE_UPS: usize = 1000;
/// How long the woken thread has been parked: long enough for an idle CPU to halt.
const PARKED_FOR: Duration = Duration::from_micros(200);
const TIMED_PARK: Duration = Duration::from_micros(50);

/// Adds the host's rows to `table`.
pub fn run(table: &mut Table) {
    let idle = wake_ups(false);
    let busy = wake_ups(true);
    table.push(
        SECTION,
        "wake-up of a parked thread, onto an idle CPU / beside busy ones, p50 / p99",
        format!(
            "{:.1} / {:.1} µs, {:.1} / {:.1} µs",
            idle.0, idle.1, busy.0, busy.1
        ),
        format!(
            "unpark to running, {WAKE_UPS} each, after {} µs parked; the sync floor pays one \
             per operation, event polling one plus the reactor's pass",
            PARKED_FOR.as_micros()
        ),
    );
    let overshoot = timed_parks();
    table.push(
        SECTION,
        format!(
            "timed park of {} µs returns after, p50 / p99",
            TIMED_PARK.as_micros()
        ),
        format!("{:.1} / {:.1} µs", overshoot.0, overshoot.1),
        format!("{WAKE_UPS} parks, default timer slack"),
    );
}

/// p50 and p99, in µs, of the time from `unpark` to the parked thread running; with
/// `busy_neighbour`, a thread spins on the other CPU meanwhile.
fn wake_ups(busy_neighbour: bool) -> (f64, f64) {
    let epoch = Instant::now();
    let unparked_at = Arc::new(AtomicU64::new(u64::MAX));
    let woke_after = Arc::new(AtomicU64::new(u64::MAX));
    let stop = Arc::new(AtomicBool::new(false));
    let spinner = busy_neighbour.then(|| {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        })
    });
    let sleeper = {
        let (unparked_at, woke_after) = (unparked_at.clone(), woke_after.clone());
        std::thread::spawn(move || {
            for _ in 0..WAKE_UPS {
                // A spurious wake-up parks again: only the measured unpark counts.
                while unparked_at.load(Ordering::Acquire) == u64::MAX {
                    std::thread::park();
                }
                let now = nanos_since(epoch);
                let at = unparked_at.swap(u64::MAX, Ordering::AcqRel);
                woke_after.store(now.saturating_sub(at), Ordering::Release);
            }
        })
    };
    let mut samples = Vec::with_capacity(WAKE_UPS);
    for _ in 0..WAKE_UPS {
        let until = Instant::now() + PARKED_FOR;
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        unparked_at.store(nanos_since(epoch), Ordering::Release);
        sleeper.thread().unpark();
        let sample = loop {
            let after = woke_after.swap(u64::MAX, Ordering::AcqRel);
            if after != u64::MAX {
                break after;
            }
            std::hint::spin_loop();
        };
        samples.push(Duration::from_nanos(sample));
    }
    stop.store(true, Ordering::Relaxed);
    sleeper.join().expect("the parked thread");
    if let Some(spinner) = spinner {
        spinner.join().expect("the spinning thread");
    }
    quantiles(&mut samples)
}

/// p50 and p99, in µs, of how long a `park_timeout` of [`TIMED_PARK`] takes.
fn timed_parks() -> (f64, f64) {
    let mut samples: Vec<Duration> = (0..WAKE_UPS)
        .map(|_| {
            let start = Instant::now();
            std::thread::park_timeout(TIMED_PARK);
            start.elapsed()
        })
        .collect();
    quantiles(&mut samples)
}

fn quantiles(samples: &mut [Duration]) -> (f64, f64) {
    (
        micros(percentile(samples, 0.5)),
        micros(percentile(samples, 0.99)),
    )
}

fn nanos_since(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX - 1)
}

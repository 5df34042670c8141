//! The nearest-rank percentile of latency samples, shared by `examples/serve/`'s load
//! generator and `benches/` (which includes this file).

use std::time::Duration;

/// The `q` quantile (0 to 1) of `samples` by the nearest-rank method; sorts `samples`.
/// Zero for an empty sample.
pub(crate) fn percentile(samples: &mut [Duration], q: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    samples.sort_unstable();
    let rank = (q.clamp(0.0, 1.0) * samples.len() as f64).ceil() as usize;
    samples[rank.clamp(1, samples.len()) - 1]
}

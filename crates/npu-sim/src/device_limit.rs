//! The process-wide device resource limits of aclrtDeviceSetLimit (every device shares them).

use std::sync::atomic::{AtomicU64, Ordering};

/// Default, smallest and largest SIMD stack per AI core on an Atlas A2 (bytes); above the
/// default, sizes are whole multiples of [`SIMD_STACK_STEP`].
pub(crate) const SIMD_STACK_DEFAULT: u64 = 32 << 10;
pub(crate) const SIMD_STACK_MAX: u64 = 192 << 10;
pub(crate) const SIMD_STACK_STEP: u64 = 16 << 10;
/// Default and range of the SIMD printf FIFO per core (bytes), a multiple of 8.
pub(crate) const PRINTF_FIFO_DEFAULT: u64 = 32 << 10;
pub(crate) const PRINTF_FIFO_MIN: u64 = 1 << 10;
pub(crate) const PRINTF_FIFO_MAX: u64 = 64 << 20;

pub(crate) static SIMD_STACK: AtomicU64 = AtomicU64::new(SIMD_STACK_DEFAULT);
pub(crate) static PRINTF_FIFO: AtomicU64 = AtomicU64::new(PRINTF_FIFO_DEFAULT);

/// The SIMD stack size a request takes effect as, or `None` above the largest.
pub(crate) fn simd_stack(requested: u64) -> Option<u64> {
    (requested <= SIMD_STACK_MAX).then(|| {
        requested
            .max(SIMD_STACK_DEFAULT)
            .next_multiple_of(SIMD_STACK_STEP)
    })
}

/// The printf FIFO size a request takes effect as, or `None` outside the range.
pub(crate) fn printf_fifo(requested: u64) -> Option<u64> {
    (PRINTF_FIFO_MIN..=PRINTF_FIFO_MAX)
        .contains(&requested)
        .then(|| requested.next_multiple_of(8))
}

pub(crate) fn store(limit: &AtomicU64, value: u64) {
    limit.store(value, Ordering::Relaxed);
}

/// Puts `limit` back to `before` if it still holds `set` (nothing set it since).
pub(crate) fn restore(limit: &AtomicU64, set: u64, before: u64) {
    let _ = limit.compare_exchange(set, before, Ordering::Relaxed, Ordering::Relaxed);
}

pub(crate) fn load(limit: &AtomicU64) -> u64 {
    limit.load(Ordering::Relaxed)
}

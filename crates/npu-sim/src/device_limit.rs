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

static SIMD_STACK: AtomicU64 = AtomicU64::new(SIMD_STACK_DEFAULT);
static PRINTF_FIFO: AtomicU64 = AtomicU64::new(PRINTF_FIFO_DEFAULT);

/// The SIMD stack size a request takes effect as, or `None` above the largest.
fn simd_stack(requested: u64) -> Option<u64> {
    (requested <= SIMD_STACK_MAX).then(|| {
        requested
            .max(SIMD_STACK_DEFAULT)
            .next_multiple_of(SIMD_STACK_STEP)
    })
}

/// The printf FIFO size a request takes effect as, or `None` outside the range.
fn printf_fifo(requested: u64) -> Option<u64> {
    (PRINTF_FIFO_MIN..=PRINTF_FIFO_MAX)
        .contains(&requested)
        .then(|| requested.next_multiple_of(8))
}

/// One supported limit: where its process-wide value is kept, how a request takes effect,
/// and its range in words (for the error of a request outside it). aclrtDeviceSetLimit and
/// aclInit's file both set it through this.
pub(crate) struct Limit {
    value: &'static AtomicU64,
    effective: fn(u64) -> Option<u64>,
    pub(crate) range: &'static str,
}

/// The SIMD stack per AI core.
pub(crate) static SIMD_STACK_LIMIT: Limit = Limit {
    value: &SIMD_STACK,
    effective: simd_stack,
    range: "at most 196608 bytes (192 KiB)",
};

/// The SIMD printf FIFO per core.
pub(crate) static PRINTF_FIFO_LIMIT: Limit = Limit {
    value: &PRINTF_FIFO,
    effective: printf_fifo,
    range: "1024 to 67108864 bytes (1 KiB to 64 MiB)",
};

impl Limit {
    /// What a request takes effect as, or `None` outside the range.
    pub(crate) fn effective(&self, requested: u64) -> Option<u64> {
        (self.effective)(requested)
    }

    pub(crate) fn store(&self, value: u64) {
        self.value.store(value, Ordering::Relaxed);
    }

    /// Puts the limit back to `before` if it still holds `set` (nothing set it since).
    pub(crate) fn restore(&self, set: u64, before: u64) {
        let _ = self
            .value
            .compare_exchange(set, before, Ordering::Relaxed, Ordering::Relaxed);
    }

    pub(crate) fn load(&self) -> u64 {
        self.value.load(Ordering::Relaxed)
    }
}

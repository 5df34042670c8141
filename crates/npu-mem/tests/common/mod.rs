//! Helpers shared by the integration tests.

use npu_mem::PinnedPool;

/// Waits until the pool has taken back every dropped block. A completion wakes its waiter
/// before it queues its deferred releases on the reaper, so one flush after the wake-up may
/// come too early; the loop ends as soon as the release has run.
pub(crate) fn await_releases(pool: &PinnedPool) {
    // A completed operation's own value (a dropped copy's block) is dropped on the reaper.
    npu_core::reaper::flush();
    while pool.stats().awaiting_blocks > 0 {
        npu_core::reaper::flush();
        std::thread::yield_now();
    }
}

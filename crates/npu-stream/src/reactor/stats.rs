//! Reactor counters.

use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of the reactor's counters since the process started.
///
/// ```
/// let stats = npu_stream::reactor_stats();
/// assert!(stats.completed <= stats.registered);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ReactorStats {
    /// Operations handed to the reactor.
    pub registered: u64,
    /// Operations the reactor completed (successfully or not).
    pub completed: u64,
    /// `aclrtQueryEventStatus` calls made.
    pub queries: u64,
    /// Times the reactor thread parked (timed or until new work arrived).
    pub parks: u64,
    /// Passes that found a fault notice (set by the runtime's exception callback) on a stream
    /// the reactor was watching, which made it look at that stream at once. Not a count of
    /// faults: several before one pass count once, and one whose operation that pass finds
    /// done may go uncounted.
    pub fault_notices: u64,
}

impl ReactorStats {
    /// Operations registered but not yet completed.
    ///
    /// ```
    /// # use npu_core::Device;
    /// use npu_mem::DeviceBuffer;
    /// use npu_stream::Stream;
    ///
    /// # tokio_test::block_on(async {
    /// # let ctx = Device::open(1)?.primary_context().clone();
    /// # let stream = Stream::new(&ctx)?;
    /// npu_sim::control::hold(1).unwrap(); // npu-sim: nothing on device 1 starts until release
    /// let op = stream.memset(DeviceBuffer::<u8>::new(&ctx, 64)?, 0);
    /// assert!(npu_stream::reactor_stats().pending() >= 1, "the memset is registered, not done");
    /// npu_sim::control::release(1).unwrap();
    /// op.await?;
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn pending(&self) -> u64 {
        self.registered.saturating_sub(self.completed)
    }

    /// Event queries per completed operation: 1.0 is the floor (every query found its event
    /// done); larger values mean the reactor polled events that were still running.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::{ReactorStats, Stream};
    ///
    /// # tokio_test::block_on(async {
    /// assert_eq!(ReactorStats::default().polls_per_completion(), 0.0, "nothing completed yet");
    /// Stream::new(Device::open(0)?.primary_context())?.synchronize().await?;
    /// let stats = npu_stream::reactor_stats();
    /// assert!(stats.polls_per_completion() >= 1.0, "every completion took a query");
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn polls_per_completion(&self) -> f64 {
        if self.completed == 0 {
            0.0
        } else {
            self.queries as f64 / self.completed as f64
        }
    }
}

#[derive(Default)]
pub(super) struct Counters {
    registered: AtomicU64,
    completed: AtomicU64,
    queries: AtomicU64,
    parks: AtomicU64,
    fault_notices: AtomicU64,
}

impl Counters {
    pub(super) fn registered(&self) {
        self.registered.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn completed(&self) {
        self.completed.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn queried(&self) {
        self.queries.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn parked(&self) {
        self.parks.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn fault_noticed(&self) {
        self.fault_notices.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn snapshot(&self) -> ReactorStats {
        // Completed is read first so a snapshot never shows more completed than registered.
        let completed = self.completed.load(Ordering::Relaxed);
        ReactorStats {
            completed,
            registered: self.registered.load(Ordering::Relaxed).max(completed),
            queries: self.queries.load(Ordering::Relaxed),
            parks: self.parks.load(Ordering::Relaxed),
            fault_notices: self.fault_notices.load(Ordering::Relaxed),
        }
    }
}

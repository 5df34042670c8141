//! Reusable completion events, one pool per context.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use npu_core::ffi;
use npu_core::{Context, Result, acl_call};

/// Events are recorded after every operation; creating one per operation would cost an ACL
/// allocation each time, so they are pooled per context and re-recorded.
///
/// The pools of one device's contexts keep at most [`MAX_IDLE`] events between uses, all
/// together. Each operation in flight holds one, so a burst of operations takes as many of the
/// device's events (a fixed number of hardware events: 65,536 on npu-sim) as it has in flight;
/// kept idle for the life of the context's streams, a burst's events left the device without
/// any once nothing was in flight, and `Event::new`, and every other context's completion
/// events, failed. The bound is the device's, not each pool's: the events are the device's,
/// and 64 contexts keeping 1,024 each held every one of them.
pub(crate) struct EventPool {
    context: Context,
    free: Mutex<Vec<RawEvent>>,
    /// The idle events of every pool of the context's device (in this runtime), each pool's
    /// counted under its `free` lock.
    idle: Arc<AtomicUsize>,
}

/// How many idle events the pools of one device keep; those returned past it are destroyed.
const MAX_IDLE: usize = 1024;

/// The idle count shared by the pools of `context`'s device, in its runtime.
fn device_idle(context: &Context) -> Arc<AtomicUsize> {
    type Counts = Mutex<HashMap<(usize, u32), Weak<AtomicUsize>>>;
    static COUNTS: OnceLock<Counts> = OnceLock::new();
    let mut counts = COUNTS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    counts.retain(|_, count| count.strong_count() > 0);
    let key = (
        context.runtime().library_id(crate::SEAL),
        context.device_id(),
    );
    if let Some(count) = counts.get(&key).and_then(Weak::upgrade) {
        return count;
    }
    let count = Arc::new(AtomicUsize::new(0));
    counts.insert(key, Arc::downgrade(&count));
    count
}

/// An `aclrtEvent` owned by a pool.
struct RawEvent(ffi::aclrtEvent);

// SAFETY: an aclrtEvent is an opaque handle ACL lets any thread use.
unsafe impl Send for RawEvent {}

/// An event checked out of a pool; it returns there when dropped, unless marked broken.
pub(crate) struct PooledEvent {
    raw: Option<RawEvent>,
    pool: Arc<EventPool>,
}

fn pools() -> &'static Mutex<HashMap<u64, Weak<EventPool>>> {
    static POOLS: OnceLock<Mutex<HashMap<u64, Weak<EventPool>>>> = OnceLock::new();
    POOLS.get_or_init(Default::default)
}

impl EventPool {
    /// The pool shared by every stream of `context`.
    pub(crate) fn for_context(context: &Context) -> Arc<EventPool> {
        let mut pools = pools().lock().unwrap_or_else(|e| e.into_inner());
        pools.retain(|_, pool| pool.strong_count() > 0);
        if let Some(pool) = pools.get(&context.id()).and_then(Weak::upgrade) {
            return pool;
        }
        let pool = Arc::new(EventPool {
            context: context.clone(),
            free: Mutex::new(Vec::new()),
            idle: device_idle(context),
        });
        pools.insert(context.id(), Arc::downgrade(&pool));
        pool
    }

    /// A free event, creating one when the pool is empty.
    ///
    /// Pool events are legacy `ACL_EVENT_SYNC` events: every CANN release has them, they can
    /// be waited on by other streams, and they skip the timestamp cost of timing events.
    pub(crate) fn take(self: &Arc<Self>) -> Result<PooledEvent> {
        let reused = {
            let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
            let reused = free.pop();
            if reused.is_some() {
                self.idle.fetch_sub(1, Ordering::Relaxed);
            }
            reused
        };
        let raw = match reused {
            Some(raw) => raw,
            None => {
                self.context.bind()?;
                let mut event: ffi::aclrtEvent = std::ptr::null_mut();
                // SAFETY: `event` is a valid out-pointer; the pool's context is bound.
                unsafe {
                    acl_call!(
                        self.context.runtime(),
                        aclrtCreateEventWithFlag(&mut event, ffi::ACL_EVENT_SYNC)
                    )
                }?;
                RawEvent(event)
            }
        };
        Ok(PooledEvent {
            raw: Some(raw),
            pool: self.clone(),
        })
    }

    pub(crate) fn context(&self) -> &Context {
        &self.context
    }
}

impl PooledEvent {
    pub(crate) fn pool(&self) -> &Arc<EventPool> {
        &self.pool
    }

    pub(crate) fn handle(&self) -> ffi::aclrtEvent {
        self.raw.as_ref().map_or(std::ptr::null_mut(), |raw| raw.0)
    }

    /// Gives the event up without a thread to watch its last record, which may still be
    /// queued on the device: it is leaked, neither handed to the next operation (whose record
    /// the queued one could pass for) nor destroyed under the record.
    pub(crate) fn leak(mut self) {
        self.raw = None;
    }

    /// The event's last record may never complete (its stream failed): destroy it rather
    /// than hand a stuck event to the next operation.
    pub(crate) fn discard(mut self) {
        if let Some(raw) = self.raw.take() {
            self.pool.destroy(raw);
        }
    }
}

impl Drop for PooledEvent {
    fn drop(&mut self) {
        if let Some(raw) = self.raw.take() {
            let mut free = self.pool.free.lock().unwrap_or_else(|e| e.into_inner());
            // Counted before it is kept: pools of the device returning events at once never
            // keep more than the bound between them.
            if self.pool.idle.fetch_add(1, Ordering::Relaxed) < MAX_IDLE {
                free.push(raw);
                return;
            }
            self.pool.idle.fetch_sub(1, Ordering::Relaxed);
            drop(free);
            // Destroyed with no lock held, as a discarded event is: the call does not block,
            // and a failure is logged, which may run a tracing subscriber.
            self.pool.destroy(raw);
        }
    }
}

impl EventPool {
    fn destroy(&self, raw: RawEvent) {
        let runtime = self.context.runtime();
        let result = self.context.bind().and_then(|()| {
            // SAFETY: the event is owned by this pool and no longer recorded anywhere we track.
            unsafe { acl_call!(runtime, aclrtDestroyEvent(raw.0)) }
        });
        if let Err(err) = result {
            npu_core::log!(warn, %err, "destroying a pooled event failed");
        }
    }
}

impl Drop for EventPool {
    fn drop(&mut self) {
        let free = std::mem::take(self.free.get_mut().unwrap_or_else(|e| e.into_inner()));
        self.idle.fetch_sub(free.len(), Ordering::Relaxed);
        for raw in free {
            self.destroy(raw);
        }
    }
}

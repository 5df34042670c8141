//! Reusable completion events, one pool per context.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use npu_core::ffi;
use npu_core::{Context, Result, acl_call};

/// Events are recorded after every operation; creating one per operation would cost an ACL
/// allocation each time, so they are pooled per context and re-recorded.
///
/// The pool keeps at most [`MAX_IDLE`] events between uses. Each operation in flight holds
/// one, so a burst of operations takes as many of the device's events (a fixed number of
/// hardware events: 65,536 on npu-sim) as it has in flight; kept idle for the life of the
/// context's streams, a burst's events left the device without any once nothing was in
/// flight, and `Event::new`, and every other context's completion events, failed.
pub(crate) struct EventPool {
    context: Context,
    free: Mutex<Vec<RawEvent>>,
}

/// How many idle events a pool keeps; those returned past it are destroyed.
const MAX_IDLE: usize = 1024;

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
        });
        pools.insert(context.id(), Arc::downgrade(&pool));
        pool
    }

    /// A free event, creating one when the pool is empty.
    ///
    /// Pool events are legacy `ACL_EVENT_SYNC` events: every CANN release has them, they can
    /// be waited on by other streams, and they skip the timestamp cost of timing events.
    pub(crate) fn take(self: &Arc<Self>) -> Result<PooledEvent> {
        let reused = self.free.lock().unwrap_or_else(|e| e.into_inner()).pop();
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
            if free.len() < MAX_IDLE {
                free.push(raw);
                return;
            }
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
        for raw in free {
            self.destroy(raw);
        }
    }
}

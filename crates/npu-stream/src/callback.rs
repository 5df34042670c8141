//! The callback-thread completion strategy: `aclrtLaunchCallback` after each operation, run
//! by a per-device thread looping `aclrtProcessReport`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

use npu_core::ffi;
use npu_core::{Completion, Error, Result, acl_call};

use crate::event_pool::PooledEvent;
use crate::reactor::stream_failure;
use crate::strategy::{self, CompletionStrategy, OpInfo};
use crate::stream::StreamShared;

/// How long one `aclrtProcessReport` waits; also the fault-probe period.
const REPORT_TIMEOUT_MS: i32 = 50;

pub(crate) struct CallbackStrategy;

/// One subscribed thread per (loaded runtime, device): ACL lets a thread serve streams of
/// one device only.
pub(crate) struct Worker {
    /// `pthread_self()` of the worker, ACL's identity for subscriptions.
    tid: u64,
    outstanding: Mutex<HashMap<u64, Outstanding>>,
}

struct Outstanding {
    stream: Arc<StreamShared>,
    event: PooledEvent,
    completion: Completion,
    op: OpInfo,
    since: Instant,
}

thread_local! {
    /// Operation ids whose callbacks ran during the current `aclrtProcessReport` on this
    /// worker thread. Callbacks must not call ACL, so they only note the id here.
    static FIRED: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

unsafe extern "C" fn on_callback(user_data: *mut c_void) {
    let id = user_data as usize as u64;
    FIRED.with(|fired| fired.borrow_mut().push(id));
}

/// Workers by (loaded runtime, device).
type Workers = Mutex<HashMap<(usize, u32), Arc<Worker>>>;

fn workers() -> &'static Workers {
    static WORKERS: OnceLock<Workers> = OnceLock::new();
    WORKERS.get_or_init(Default::default)
}

fn next_op_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The worker for the stream's device, started on first use.
fn worker_for(stream: &StreamShared) -> Result<Arc<Worker>> {
    let context = &stream.context;
    let key = (context.runtime().library_id(), context.device_id());
    let mut workers = workers().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(worker) = workers.get(&key) {
        return Ok(worker.clone());
    }
    let (tx, rx) = mpsc::channel();
    let runtime = context.runtime().clone();
    std::thread::Builder::new()
        .name(format!("npu-callback-{}", key.1))
        .spawn(move || {
            // SAFETY: pthread_self has no preconditions.
            let tid = unsafe { libc::pthread_self() } as u64;
            let worker = Arc::new(Worker {
                tid,
                outstanding: Mutex::new(HashMap::new()),
            });
            if tx.send(worker.clone()).is_ok() {
                worker.run(&runtime);
            }
        })
        .map_err(|e| Error::invalid("Strategy::CallbackThread", "thread", e.to_string()))?;
    let worker = rx
        .recv()
        .map_err(|_| Error::invalid("Strategy::CallbackThread", "thread", "exited at start"))?;
    workers.insert(key, worker.clone());
    Ok(worker)
}

impl Worker {
    fn run(&self, runtime: &npu_core::Runtime) {
        loop {
            // SAFETY: plain integer argument; callbacks run inside this call on this thread.
            let code = unsafe { (runtime.api().aclrtProcessReport)(REPORT_TIMEOUT_MS) };
            // Checking takes the runtime's message off this thread at once: an idle timeout's
            // message would otherwise be attached to the next error settled here.
            let reported = runtime.check("aclrtProcessReport", code);
            let fired: Vec<u64> = FIRED.with(|fired| std::mem::take(&mut *fired.borrow_mut()));
            for id in fired {
                let entry = self
                    .outstanding
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&id);
                if let Some(entry) = entry {
                    let result = strategy::settle(entry.event, entry.op.api);
                    entry
                        .completion
                        .complete(entry.stream.finish(entry.op, result));
                }
            }
            match code {
                ffi::ACL_SUCCESS => {}
                // Nothing arrived, or no stream is subscribed yet: a quiet moment to check
                // that the streams we wait on are healthy.
                ffi::ACL_ERROR_RT_REPORT_TIMEOUT | ffi::ACL_ERROR_RT_THREAD_SUBSCRIBE => {
                    self.probe();
                    if code == ffi::ACL_ERROR_RT_THREAD_SUBSCRIBE {
                        std::thread::sleep(Duration::from_millis(REPORT_TIMEOUT_MS as u64));
                    }
                }
                _ => {
                    if let Err(err) = reported {
                        tracing::warn!(%err, "aclrtProcessReport failed");
                    }
                    self.probe();
                }
            }
        }
    }

    /// Fails the outstanding operations of streams whose work can no longer complete.
    fn probe(&self) {
        let stale_after = Duration::from_millis(REPORT_TIMEOUT_MS as u64);
        let now = Instant::now();
        let mut outstanding = self.outstanding.lock().unwrap_or_else(|e| e.into_inner());
        // The oldest operation of each stream that has one waiting for a while (ids grow in
        // submission order). The lock stays held so that its event cannot be recycled while
        // the probe waits on it.
        let mut heads: Vec<(Arc<StreamShared>, u64)> = Vec::new();
        for (&id, op) in outstanding.iter() {
            if now.duration_since(op.since) < stale_after {
                continue;
            }
            match heads.iter_mut().find(|(s, _)| Arc::ptr_eq(s, &op.stream)) {
                Some(head) => head.1 = head.1.min(id),
                None => heads.push((op.stream.clone(), id)),
            }
        }
        let mut failed: Vec<(Outstanding, Error)> = Vec::new();
        for (stream, id) in heads {
            let oldest = outstanding[&id].event.handle();
            if let Err(err) = stream_failure(&stream, oldest) {
                // In submission order, so that a failed synchronize sees the failures before it.
                let mut ids: Vec<u64> = outstanding
                    .iter()
                    .filter(|(_, op)| Arc::ptr_eq(&op.stream, &stream))
                    .map(|(id, _)| *id)
                    .collect();
                ids.sort_unstable();
                let ops = ids.iter().filter_map(|id| outstanding.remove(id));
                failed.extend(ops.map(|op| (op, err.clone())));
            }
        }
        drop(outstanding);
        for (entry, err) in failed {
            let result = Err(strategy::fail(entry.event, err, entry.op.api));
            entry
                .completion
                .complete(entry.stream.finish(entry.op, result));
        }
    }
}

impl CompletionStrategy for CallbackStrategy {
    fn watch(&self, stream: &Arc<StreamShared>, op: OpInfo, completion: Completion) -> Result<()> {
        // Subscribed once per stream; the worker is kept with the subscription so that the
        // hot path never takes the global worker table's lock.
        let subscription = stream.strategy_state.subscription.get_or_init(|| {
            let worker = worker_for(stream)?;
            let (tid, handle) = (worker.tid, stream.handle);
            // SAFETY: the stream is alive and its context is bound by the submitter.
            unsafe { acl_call!(stream.context.runtime(), aclrtSubscribeReport(tid, handle)) }?;
            Ok(worker)
        });
        let worker = subscription.as_ref().map_err(Clone::clone)?;
        let event = strategy::record(stream)?;
        let id = next_op_id();
        worker
            .outstanding
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                id,
                Outstanding {
                    stream: stream.clone(),
                    event,
                    completion,
                    op,
                    since: Instant::now(),
                },
            );
        let handle = stream.handle;
        // SAFETY: `on_callback` only records the id; the stream is alive and bound.
        let launched = unsafe {
            acl_call!(
                stream.context.runtime(),
                aclrtLaunchCallback(
                    Some(on_callback),
                    id as usize as *mut c_void,
                    ffi::ACL_CALLBACK_NO_BLOCK,
                    handle
                )
            )
        };
        if let Err(err) = launched {
            // The operation itself was queued; hand its completion back so the submitter
            // drains the stream before releasing anything.
            worker
                .outstanding
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&id);
            return Err(err);
        }
        Ok(())
    }
}

/// Unsubscribes a stream being destroyed from its callback worker, if it ever subscribed
/// (only `Strategy::CallbackThread` streams do, on their first operation).
pub(crate) fn release(stream: &StreamShared) {
    let Some(Ok(worker)) = stream.strategy_state.subscription.get() else {
        return;
    };
    let tid = worker.tid;
    let runtime = stream.context.runtime();
    let result = stream.context.bind().and_then(|()| {
        // SAFETY: the stream is alive until this returns; its context is bound.
        unsafe { acl_call!(runtime, aclrtUnSubscribeReport(tid, stream.handle)) }
    });
    if let Err(err) = result {
        tracing::warn!(%err, stream = stream.id, "unsubscribing the callback thread failed");
    }
}

//! Host callbacks: aclrtSubscribeReport / aclrtLaunchCallback / aclrtProcessReport.
//!
//! A subscription binds a stream to a user thread, identified by its `pthread_self()` value.
//! When the stream reaches a callback task, the callback is queued for that thread and runs
//! inside its next aclrtProcessReport call; a BLOCK callback holds the stream until it has run.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use npu_sys::*;

use crate::error::{Res, SimError, ensure, fail};
use crate::handle::Handle;
use crate::stream::Stream;
use crate::sync::{Bell, lock, wait_until};
use crate::task::HostFn;

/// Most threads that may be subscribed at once (CANN's limit).
const MAX_THREADS: usize = 1024;

struct Pending {
    func: HostFn,
    data: usize,
    /// The stream that launched it: its thread leaving that stream drops it.
    stream: Handle,
    done: Arc<Done>,
    /// The stream and position of a BLOCK callback, which its stream waits for.
    holds: Option<(Handle, u64)>,
}

/// Whether a queued callback was run (or dropped): a BLOCK callback's stream waits for it.
#[derive(Default)]
struct Done {
    flag: AtomicBool,
    bell: Bell,
}

impl Done {
    fn set(&self) {
        self.flag.store(true, Ordering::Release);
        self.bell.ring();
    }

    fn is_set(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }
}

struct Subscriber {
    device: i32,
    streams: usize,
    queue: VecDeque<Pending>,
}

#[derive(Default)]
struct Inner {
    by_stream: HashMap<Handle, u64>,
    threads: HashMap<u64, Subscriber>,
}

#[derive(Default)]
pub(crate) struct Reports {
    inner: Mutex<Inner>,
    /// aclrtProcessReport waits listen with their thread's id as key: rung for that key when
    /// a callback is queued for the thread or the thread is unsubscribed.
    bell: Bell,
}

/// The calling thread's id as CANN keys subscriptions: `pthread_self()`.
pub(crate) fn current_thread_id() -> u64 {
    // SAFETY: pthread_self has no preconditions.
    unsafe { libc::pthread_self() as u64 }
}

impl Reports {
    pub(crate) fn subscribe(&self, thread: u64, stream: &Stream) -> Res<()> {
        let mut inner = lock(&self.inner);
        // Checked under this lock: a destruction marks the stream before it ends the stream's
        // subscription under it, so a subscription either is ended by it or sees the mark.
        ensure!(
            !stream.is_destroyed(),
            ACL_ERROR_RT_INVALID_HANDLE,
            "stream {} is being destroyed",
            stream.id
        );
        ensure!(
            !inner.by_stream.contains_key(&stream.handle),
            ACL_ERROR_RT_STREAM_SUBSCRIBE,
            "stream {} already has a subscribed report thread",
            stream.id
        );
        if let Some(existing) = inner.threads.get(&thread) {
            ensure!(
                existing.device == stream.device.id,
                ACL_ERROR_RT_THREAD_SUBSCRIBE,
                "thread {thread:#x} already serves device {}; a thread serves streams of one device",
                existing.device
            );
        } else {
            ensure!(
                inner.threads.len() < MAX_THREADS,
                ACL_ERROR_RT_OVER_LIMIT,
                "{MAX_THREADS} threads are already subscribed"
            );
        }
        let subscriber = inner.threads.entry(thread).or_insert_with(|| Subscriber {
            device: stream.device.id,
            streams: 0,
            queue: VecDeque::new(),
        });
        subscriber.streams += 1;
        inner.by_stream.insert(stream.handle, thread);
        Ok(())
    }

    pub(crate) fn unsubscribe(&self, thread: u64, stream: &Stream) -> Res<()> {
        let inner = lock(&self.inner);
        match inner.by_stream.get(&stream.handle) {
            // 107011 is the runtime's code for a stream "not subscribed, or subscribed
            // twice"; 107015 is for a callback launched on such a stream.
            None => fail!(
                ACL_ERROR_RT_STREAM_SUBSCRIBE,
                "stream {} has no subscribed report thread",
                stream.id
            ),
            Some(&owner) => ensure!(
                owner == thread,
                ACL_ERROR_RT_THREAD_SUBSCRIBE,
                "stream {} is subscribed by thread {owner:#x}, not {thread:#x}",
                stream.id
            ),
        }
        self.end(inner, thread, stream.handle);
        Ok(())
    }

    /// Ends the subscription of a stream being destroyed, if it has one: the stream cannot be
    /// named again, so nothing else could end it, and its thread would stay bound to the
    /// device (and counted against the thread limit) for good.
    pub(crate) fn forget(&self, stream: Handle) {
        let inner = lock(&self.inner);
        if let Some(&thread) = inner.by_stream.get(&stream) {
            self.end(inner, thread, stream);
        }
    }

    /// Ends `thread`'s subscription of `stream` (taking the lock that found it) and drops the
    /// callbacks of `stream` queued for the thread: the thread no longer processes the
    /// stream's callbacks, and a BLOCK one would hold the stream until the thread happened to
    /// run it anyway. The thread's last subscription drops its whole queue.
    fn end(&self, mut inner: MutexGuard<'_, Inner>, thread: u64, stream: Handle) {
        inner.by_stream.remove(&stream);
        let dropped: VecDeque<Pending> = match inner.threads.get_mut(&thread) {
            Some(subscriber) => {
                subscriber.streams -= 1;
                if subscriber.streams == 0 {
                    inner
                        .threads
                        .remove(&thread)
                        .map(|s| s.queue)
                        .unwrap_or_default()
                } else {
                    let queue = std::mem::take(&mut subscriber.queue);
                    let (dropped, kept) = queue.into_iter().partition(|p| p.stream == stream);
                    subscriber.queue = kept;
                    dropped
                }
            }
            None => VecDeque::new(),
        };
        drop(inner);
        // Callbacks nobody will process any more release their streams.
        for pending in dropped {
            pending.done.set();
        }
        self.bell.ring_key(thread);
    }

    /// Whether `thread` is the report thread subscribed to `stream`.
    pub(crate) fn serves(&self, thread: u64, stream: Handle) -> bool {
        lock(&self.inner).by_stream.get(&stream) == Some(&thread)
    }

    pub(crate) fn is_subscribed(&self, stream: Handle) -> bool {
        lock(&self.inner).by_stream.contains_key(&stream)
    }

    /// Runs on the stream's worker when it reaches a callback task.
    pub(crate) fn deliver(
        &self,
        stream: &Stream,
        position: u64,
        func: HostFn,
        data: usize,
        block: bool,
    ) -> Result<(), Option<SimError>> {
        let done = Arc::new(Done::default());
        let thread = {
            let mut inner = lock(&self.inner);
            let thread = inner.by_stream.get(&stream.handle).copied();
            // Unsubscribed since the launch: the callback is dropped, like the ones still
            // queued when a thread unsubscribes.
            let Some((thread, subscriber)) =
                thread.and_then(|t| Some((t, inner.threads.get_mut(&t)?)))
            else {
                return Ok(());
            };
            subscriber.queue.push_back(Pending {
                func,
                data,
                stream: stream.handle,
                done: done.clone(),
                holds: block.then_some((stream.handle, position)),
            });
            thread
        };
        self.bell.ring_key(thread);
        if block {
            let [doomed, stopped, lost] = stream.listens(Bell::RING_ONLY);
            let listens = [done.bell.any(), doomed, stopped, lost];
            let ran = wait_until(&listens, None, || {
                if done.is_set() {
                    Some(true)
                } else {
                    stream.gives_up_waiting().then_some(false)
                }
            });
            if ran != Some(true) {
                self.withdraw(thread, &done);
                return Err(None);
            }
        }
        Ok(())
    }

    /// A BLOCK callback its stream gave up waiting for (an abort, a forced destruction, a
    /// stop) is dropped: taken out of its thread's queue so that no later aclrtProcessReport
    /// runs it after the call that dropped it returned (its data may be gone by then). One
    /// the thread has taken already is running: the stream waits for it to return, as for any
    /// running task.
    fn withdraw(&self, thread: u64, done: &Arc<Done>) {
        let withdrawn = {
            let mut inner = lock(&self.inner);
            inner.threads.get_mut(&thread).and_then(|subscriber| {
                let at = (subscriber.queue.iter()).position(|p| Arc::ptr_eq(&p.done, done))?;
                subscriber.queue.remove(at)
            })
        };
        match withdrawn {
            Some(pending) => pending.done.set(),
            // Not queued: running in aclrtProcessReport, or run, or dropped with the
            // subscription (which sets `done` too).
            None => {
                wait_until(&[done.bell.any()], None, || done.is_set().then_some(()));
            }
        };
    }

    /// aclrtProcessReport on the calling thread: runs one queued callback.
    pub(crate) fn process(&self, deadline: Option<Instant>) -> Res<()> {
        let thread = current_thread_id();
        let next = wait_until(&[self.bell.at(thread)], deadline, || {
            let mut inner = lock(&self.inner);
            match inner.threads.get_mut(&thread) {
                None => Some(None),
                Some(subscriber) => subscriber.queue.pop_front().map(Some),
            }
        });
        match next {
            None => fail!(
                ACL_ERROR_RT_REPORT_TIMEOUT,
                "no callback arrived before the timeout"
            ),
            Some(None) => fail!(
                ACL_ERROR_RT_THREAD_SUBSCRIBE,
                "the calling thread ({thread:#x}) is not subscribed to any stream"
            ),
            Some(Some(pending)) => {
                // SAFETY: the callback and its data were supplied by aclrtLaunchCallback's
                // caller for exactly this invocation, on the thread they subscribed.
                let call = || unsafe { (pending.func)(pending.data as *mut std::ffi::c_void) };
                match pending.holds {
                    Some((stream, position)) => {
                        crate::host_task::run(stream, position, call);
                        // Before the stream is released: a wait this thread starts next must
                        // not find the callback still pending.
                        if let Some(stream) = crate::sim::sim()
                            .ok()
                            .and_then(|sim| sim.streams.get(stream))
                        {
                            stream.block_callback_ran(position);
                        }
                    }
                    None => call(),
                }
                pending.done.set();
                Ok(())
            }
        }
    }
}

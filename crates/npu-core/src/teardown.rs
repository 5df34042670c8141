//! The teardowns npu-rs hands to `npu-teardown` threads (a context's reset or destroy, ACL's
//! finalisation), counted per library so that a program, and a runtime build, can wait for
//! them to end.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::{Error, Result, Unsettled};

/// How long [`RuntimeBuilder::build`](crate::RuntimeBuilder::build) waits for teardowns of its
/// library still running before it decides on its `acl_config`. CANN's `aclFinalize` takes up
/// to 2 s while the device's logs reach the host; a reset waits for the work still queued in
/// the device. Past this, the teardown is taken as stuck in the runtime.
pub(crate) const BUILD_WAITS: Duration = Duration::from_secs(10);

/// Teardowns running on `npu-teardown` threads, per library id (no entry: none).
static RUNNING: Mutex<Option<HashMap<usize, usize>>> = Mutex::new(None);
/// Notified whenever a teardown ends.
static ENDED: Condvar = Condvar::new();

thread_local! {
    /// Set on an `npu-teardown` thread: a wait for the teardowns there would wait for itself.
    static ON_TEARDOWN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn running() -> MutexGuard<'static, Option<HashMap<usize, usize>>> {
    RUNNING.lock().unwrap_or_else(|e| e.into_inner())
}

/// One teardown of `library`'s handed to a thread of its own, counted from before that thread
/// starts until it is dropped (when the teardown returns or unwinds, or the spawn failed and
/// it ran where it was handed off).
pub(crate) struct Running(usize);

impl Running {
    pub(crate) fn start(library: usize) -> Running {
        *running()
            .get_or_insert_with(HashMap::new)
            .entry(library)
            .or_default() += 1;
        Running(library)
    }

    /// Marks the current thread as a teardown thread for the rest of its life.
    pub(crate) fn mark_thread() {
        ON_TEARDOWN.with(|on| on.set(true));
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut running = running();
        if let Some(by_library) = running.as_mut()
            && let Some(count) = by_library.get_mut(&self.0)
        {
            *count -= 1;
            if *count == 0 {
                by_library.remove(&self.0);
            }
        }
        drop(running);
        ENDED.notify_all();
    }
}

/// How many teardowns of `library` (of every library for `None`) are running.
fn count(running: &Option<HashMap<usize, usize>>, library: Option<usize>) -> usize {
    let Some(by_library) = running else {
        return 0;
    };
    match library {
        Some(library) => by_library.get(&library).copied().unwrap_or(0),
        None => by_library.values().sum(),
    }
}

/// Whether this thread serves npu-rs's work, so that it must not block on that work: a
/// thread of npu-rs's that serves every stream (the reaper, a shared thread: rule 5), one in
/// a step that completes operations (a blocking waiter's, a drain's or an abort's thread,
/// outside the completion itself too), or one holding one of npu-rs's ranked locks (a tracing
/// subscriber called back from an ACL call made under it). A blocking wait for an operation
/// (`Completion::wait_blocking`) is refused there, and so is a wait for teardowns
/// ([`may_wait_here`]).
pub(crate) fn serving_npu_rs() -> bool {
    crate::reaper::on_shared_thread()
        || crate::holds::completing_here()
        || crate::contain::holds_a_lock()
}

/// The refusal of a blocking wait for device work by `api` (the wait the caller called: an
/// operation's, pending, or a context's synchronisation) on a thread that serves npu-rs's work
/// ([`serving_npu_rs`]): one of npu-rs's own threads, which may be the one that completes
/// the work (a waker woken on the reactor waiting for the reactor's next completion), or one
/// that holds a lock of npu-rs's that the work's completion may need (an abort's thread ends
/// the work it discarded under the stream's submission lock), and that the reaper and
/// npu-rs's other threads may need meanwhile, held for as long as the wait. `None` where the
/// wait may be made.
pub(crate) fn refused_wait(api: &'static str) -> Option<Error> {
    serving_npu_rs().then(|| {
        Error::invalid(
            api,
            "thread",
            "is one of npu-rs's own threads (the reactor, the reaper, a callback worker, the \
             sentinel, the overseer, a completing operation's), which may be the one that \
             completes the work waited for, or holds a lock of npu-rs's that its completion may \
             take (called back from inside an ACL call): the wait would never end; wait from a \
             thread of the program's own, or await the work (`Completion::wait`, a stream's \
             `synchronize()` or copy)",
        )
    })
}

/// Refuses `api`, a blocking call that waits for device work through the ACL call `acl`
/// (a context's synchronisation; a synchronous copy, which on the simulator first waits for
/// every task of its device touching memory, a running kernel included): in a forked child
/// `Error::Forked` naming `acl`, as that call's own refusal there would, whatever thread the
/// child was forked from; otherwise [`refused_wait`]'s refusal on a thread that serves
/// npu-rs's work. Made before the call allocates or binds anything.
/// Shared with npu-rs's crates, not part of the API.
#[doc(hidden)]
pub fn refuse_blocking(
    seal: crate::seal::Seal,
    acl: &'static str,
    api: &'static str,
) -> Result<()> {
    crate::fork::refuse(seal, acl)?;
    refused_wait(api).map_or(Ok(()), Err)
}

/// Whether this thread may wait for teardowns: not one that serves npu-rs's work
/// ([`serving_npu_rs`]; a completing step's hold, once raised, would keep it waiting for
/// itself), nor a teardown thread (which would wait for itself), nor one holding a library's
/// `aclInit` lock, which a teardown may take.
pub(crate) fn may_wait_here() -> bool {
    !serving_npu_rs()
        && !ON_TEARDOWN.with(std::cell::Cell::get)
        && !crate::runtime::initialising_here()
}

/// Whether a teardown of `library` is running.
pub(crate) fn running_for(library: usize) -> bool {
    count(&running(), Some(library)) > 0
}

/// Waits until no teardown of `library` (of any, for `None`) runs, or until `deadline`:
/// `Err` with how many still run then.
pub(crate) fn wait_until_ended(
    library: Option<usize>,
    deadline: Instant,
) -> std::result::Result<(), usize> {
    let mut running = running();
    loop {
        let left = count(&running, library);
        if left == 0 {
            return Ok(());
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(left);
        }
        running = ENDED
            .wait_timeout(running, deadline - now)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

/// Waits as [`wait_until_ended`], then until the completing threads' holds raised before have
/// been lowered (`holds`: their streams let go of), then until the reaper has run the releases
/// queued before (a completed operation's buffer, a stream: one may drop the last handle of a
/// context and hand its teardown off), and again for any teardown that handed off. `Err` with
/// how many teardowns still run and what it was waiting for when `deadline` passed.
pub(crate) fn wait_until_settled(
    library: Option<usize>,
    deadline: Instant,
) -> std::result::Result<(), (usize, Unsettled)> {
    let ran_out = |waiting_for| (count(&running(), library), waiting_for);
    loop {
        wait_until_ended(library, deadline).map_err(|running| (running, Unsettled::Teardowns))?;
        // A completing thread's drops hand releases to the reaper and teardowns on: queued or
        // counted once it lowers its hold.
        if !crate::holds::wait_until_let_go(deadline) {
            return Err(ran_out(Unsettled::CompletingThread));
        }
        // Bounded too: a release the reaper runs may be held up (one of a runtime without the
        // calls that keep its destruction of a stopped stream from waiting, a program's own).
        if !crate::reaper::flush_until(deadline) {
            return Err(ran_out(Unsettled::Reaper));
        }
        if count(&running(), library) == 0 {
            return Ok(());
        }
    }
}

/// Blocks until every teardown npu-rs handed to a thread of its own has ended, or `timeout`
/// has passed: the way for a program to know that ACL was finalised (CANN asks for
/// `aclFinalize` before the process exits) after its last npu-rs object went somewhere npu-rs
/// cannot tear down inline.
///
/// A context whose last handle, or a [`Runtime`](crate::Runtime) whose last handle, is dropped
/// on one of npu-rs's shared threads (a waker npu-rs wakes as an operation completes, a
/// release the reaper runs, the reactor, a callback worker, ...) is torn down on a thread of
/// its own (`npu-teardown`): the device's reset (`aclrtResetDevice`, which waits for work
/// still queued) and ACL's finalisation (`aclFinalize`, up to 2 s on CANN) must not hold up
/// the threads that complete every other operation. This waits for those threads, and for the
/// threads of npu-rs's own that hold a context or a runtime and may drop the last handle: a
/// `DevicePool`'s (destroying its runtime pool, examining blocks after a memory error) and a
/// device's callback worker once its last `CallbackThread` stream is gone (it holds its
/// runtime until it retires, 50–100 ms later). Other drops made on the program's own thread
/// tore down before they returned. A teardown handed off after this call started is waited
/// for too, if it is under way before the wait ends.
///
/// It also waits until npu-rs's reaper has run the releases queued before it looked (a
/// completed operation's buffer, queued before the operation is seen complete), and those
/// they queued in turn, however deep, since one may drop a context's last handle and hand its
/// teardown off (releases handed on after it looked, and those they queue, are not waited
/// for, so a reaper busy with later releases cannot keep it looking; one handed on before
/// that keeps queuing more does, up to `timeout`). It does not wait for releases npu-rs
/// deferred until the device is done (a buffer whose operation's future was dropped) while
/// the program still holds their stream: a runtime some of whose objects await their work
/// is still alive, and its teardown has not begun (once the stream's last handle is gone,
/// the stream counts, below).
///
/// And it waits for npu-rs's threads to let go of the streams they hold. The thread that
/// completes an operation (the reactor, a callback worker, a blocking waiter, the sentinel
/// or an abort's thread) still holds its stream, and through it the context and the
/// runtime, for a moment after it wakes the task that awaited it: it raises a hold before the
/// operation's result is visible and lowers it only once it has let go, by when the teardown
/// its drop handed off is counted. Other references of those threads outlive the step that
/// completed the operation (a callback worker's probe of a stream whose operation waited
/// long, kept until a later look; a sentinel job; the reactor's list after an abort): a
/// stream whose last handle the program drops while npu-rs still holds it counts as a
/// teardown of its library until npu-rs has let go of it and released it. So a program may
/// drop its last npu-rs objects as soon as its last await returns and call this at once. A
/// stream dropped with operations still in flight is counted until they end and it is
/// released, so this waits for that work (up to `timeout`). Holds raised after the call began
/// are not waited for. Drop every npu-rs object, let their work finish, then call this.
///
/// # Blocking
///
/// This blocks the calling thread for up to `timeout`. Call it from `main` (after the Tokio
/// runtime is shut down) or from a thread of the program's own; inside an async task, wrap it
/// in `tokio::task::spawn_blocking`. Never call it from a waker, a tracing subscriber's
/// callback or anything else npu-rs runs on its own threads: those threads must not wait on
/// device work (docs/cancellation.md, rule 5), so there it is refused. A subscriber's
/// callback on the program's own thread while npu-rs releases a stream there (an event npu-rs
/// logs as it destroys the stream) is not refused, but the stream counts until that release
/// ends, so the call waits out its `timeout`.
///
/// # Errors
///
/// - [`Error::Forked`] in a forked child ([`forked`](crate::forked): forked after npu-rs
///   started a runtime or one of its threads, or while it made or started one): the teardowns it would count are its parent's.
/// - [`Error::TeardownsRunning`] if some are still running when `timeout` has passed (a
///   teardown stuck in the runtime, a dropped stream's work not done): it says how many, and
///   what the wait was waiting for then ([`Unsettled`](crate::Unsettled)).
/// - [`Error::InvalidArgument`] (argument `thread`) when called on one of npu-rs's own threads
///   (the reactor, the reaper, a callback worker, the sentinel, the overseer, a thread while it
///   completes an operation or runs a step that does, such as a blocking waiter's wait, a
///   drain's or an abort's thread, or a teardown thread, which would wait for itself), or on a
///   thread inside an ACL call npu-rs makes under one of its locks (a tracing subscriber's
///   callback), which a teardown may need.
///
/// ```
/// use std::time::Duration;
/// use npu_core::Device;
///
/// let device = Device::open(0)?;
/// drop(device);
/// // Nothing of npu-rs's is being torn down on a thread of its own any more.
/// npu_core::wait_for_teardowns(Duration::from_secs(10))?;
///
/// // On one of npu-rs's shared threads (here the reaper, running a release) it is refused.
/// let (tx, rx) = std::sync::mpsc::channel();
/// // SAFETY: the release sends a result on an unbounded channel: it does not block.
/// unsafe {
///     npu_core::reaper::release_later(move || {
///         let _ = tx.send(npu_core::wait_for_teardowns(Duration::from_secs(10)));
///     })
/// };
/// let refused = rx.recv().unwrap().unwrap_err();
/// assert!(matches!(refused, npu_core::Error::InvalidArgument { argument: "thread", .. }));
/// # Ok::<(), npu_core::Error>(())
/// ```
pub fn wait_for_teardowns(timeout: Duration) -> Result<()> {
    const API: &str = "wait_for_teardowns";
    // The counts a child inherits are its parent's, whose teardown threads it does not have.
    crate::fork::refuse(crate::SEAL, API)?;
    if !may_wait_here() {
        return Err(Error::invalid(
            API,
            "thread",
            "is one of npu-rs's own threads (the reactor, the reaper, a callback worker, the \
             sentinel, the overseer, a completing operation's or a teardown's), which must not \
             wait on device work, or holds a lock of npu-rs's that a teardown may take (called \
             back from inside an ACL call): call it from a thread of the program's own",
        ));
    }
    // Clamped so that the deadline can be added: a year is no bound either.
    let deadline = Instant::now() + timeout.min(Duration::from_secs(365 * 24 * 3600));
    let ended = wait_until_settled(None, deadline);
    ended.map_err(|(running, waiting_for)| Error::TeardownsRunning {
        api: API,
        running,
        waiting_for,
        waited: timeout,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::channel;

    use super::*;
    use crate::reaper::{as_shared_thread, off_shared_threads};

    /// A library id no loaded library has (ids count up from 0), one per test: the counts are
    /// the process's, and other tests hand off teardowns of their own.
    const HELD: usize = usize::MAX;
    const INLINE: usize = usize::MAX - 1;
    const ON_ITS_THREAD: usize = usize::MAX - 2;
    const UNTOUCHED: usize = usize::MAX - 3;

    fn now_and_later() -> (Instant, Instant) {
        let now = Instant::now();
        (now, now + Duration::from_secs(30))
    }

    /// A teardown handed off from a shared thread is counted from before the hand-off returns
    /// until it has run: a wait ending now says it still runs, a longer one returns once it
    /// ended. The break: not counted, so nothing waited for it.
    #[test]
    fn a_teardown_handed_off_is_counted_until_it_ends() {
        let (go, held) = channel::<()>();
        as_shared_thread(crate::SEAL, || {
            off_shared_threads(HELD, move || {
                let _ = held.recv_timeout(Duration::from_secs(30));
            })
        });
        assert!(running_for(HELD));
        let (now, later) = now_and_later();
        assert_eq!(wait_until_ended(Some(HELD), now), Err(1));
        go.send(()).unwrap();
        assert_eq!(wait_until_ended(Some(HELD), later), Ok(()));
        assert!(!running_for(HELD));
    }

    /// A teardown made on the thread that dropped the last handle (no shared thread) ran before
    /// the drop returned: nothing is counted for it, even while it runs.
    #[test]
    fn a_teardown_run_where_it_was_dropped_is_not_counted() {
        let (seen, counted) = channel();
        off_shared_threads(INLINE, move || seen.send(running_for(INLINE)).unwrap());
        assert!(!counted.recv().unwrap());
    }

    /// On a teardown thread (a tracing subscriber's callback there, say) a wait for the
    /// teardowns would wait for the one it runs in: refused, and a build does not wait there.
    /// The break: the wait ran out with its own teardown counted.
    #[test]
    fn a_teardown_thread_may_not_wait_for_teardowns() {
        let (seen, answers) = channel();
        as_shared_thread(crate::SEAL, || {
            off_shared_threads(ON_ITS_THREAD, move || {
                let waited = wait_for_teardowns(Duration::ZERO);
                seen.send((may_wait_here(), waited)).unwrap();
            })
        });
        let (may_wait, waited) = answers.recv().unwrap();
        assert!(!may_wait);
        refused_on_this_thread(&waited);
    }

    /// `waited` is the refusal of a wait on a thread that may not wait.
    fn refused_on_this_thread(waited: &Result<()>) {
        assert!(
            matches!(
                waited,
                Err(Error::InvalidArgument {
                    argument: "thread",
                    ..
                })
            ),
            "{waited:?}"
        );
    }

    /// A thread in a step that completes operations (a blocking waiter's wait, a drain's or an
    /// abort's thread, where a tracing subscriber's callback may run outside the completion
    /// itself) may not wait for teardowns, before its completion raised its hold as after: the
    /// wait would wait for that hold, which is lowered only once the step returns. The break: the
    /// wait ran out its timeout waiting for its own hold (`TeardownsRunning`).
    #[test]
    fn a_step_that_completes_operations_may_not_wait_for_teardowns() {
        let (before, after) = crate::holds::completing(crate::SEAL, || {
            let before = wait_for_teardowns(Duration::from_millis(100));
            crate::holds::raise_if_completing();
            (before, wait_for_teardowns(Duration::from_millis(100)))
        });
        refused_on_this_thread(&before);
        refused_on_this_thread(&after);
        assert!(may_wait_here(), "once the step has returned");
    }

    /// A wait that runs out while a completing thread holds on says so, not that releases
    /// queued on the reaper had not run: no teardown runs, so `running` alone (0) would point
    /// at the reaper. The break: the reaper named.
    #[test]
    fn a_wait_run_out_on_a_completing_thread_says_so() {
        let (raised, was_raised) = channel::<()>();
        let (go, let_go) = channel::<()>();
        let completing = std::thread::spawn(move || {
            crate::holds::completing(crate::SEAL, || {
                crate::holds::raise_if_completing();
                raised.send(()).unwrap();
                let _ = let_go.recv_timeout(Duration::from_secs(30));
            })
        });
        was_raised.recv().unwrap();
        let waited = wait_until_settled(Some(UNTOUCHED), Instant::now());
        go.send(()).unwrap();
        completing.join().unwrap();
        assert_eq!(waited, Err((0, Unsettled::CompletingThread)));
        let message = Error::TeardownsRunning {
            api: "wait_for_teardowns",
            running: 0,
            waiting_for: Unsettled::CompletingThread,
            waited: Duration::ZERO,
        }
        .to_string();
        assert!(
            message.contains("completed an operation had not let go")
                && !message.contains("reaper"),
            "{message}"
        );
    }

    /// A thread holding one of npu-rs's ranked locks (a tracing subscriber called back from an
    /// ACL call made under the runtime's lock, say) may not wait: a teardown takes the
    /// runtime's lock, and the reaper's releases may too. The break: a wait there.
    #[test]
    fn a_thread_holding_a_lock_of_npu_rs_may_not_wait_for_teardowns() {
        let lock = Mutex::new(());
        let held =
            crate::contain::lock_here(crate::SEAL, &lock, crate::contain::Rank::Runtime).unwrap();
        let waited = wait_for_teardowns(Duration::ZERO);
        drop(held);
        refused_on_this_thread(&waited);
        assert!(may_wait_here(), "once the lock is released");
    }
}

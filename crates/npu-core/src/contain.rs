//! Containment of user code that npu-rs runs on threads it shares: wakers, their drops, and
//! the tracing subscriber that receives npu-rs's own log events.
//!
//! A subscriber's layers are user code like any other, and npu-rs logs from the reactor, the
//! reaper, the sentinel, the callback workers, ACL's callback threads and `Drop` impls. An
//! unwinding log call would take a shared thread down (every operation it watches with it), or
//! abort the process when it happens in a destructor during unwinding. So every event npu-rs
//! emits goes through [`log!`](crate::log): a subscriber that panics loses that event, and
//! nothing else.
//!
//! A subscriber may also call npu-rs again (open a device, submit an operation), which takes
//! npu-rs's locks. The locks held across a call that can reach the subscriber (an ACL call,
//! since the simulator reports each failed call through `tracing`) are taken with
//! [`lock_here`], which lets the paths that take them again on the same thread refuse instead
//! of waiting for themselves.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, MutexGuard, TryLockError};

use crate::seal::Seal;

#[doc(hidden)]
pub use tracing;

/// Runs `f`, containing a panic; returns whether it panicked.
///
/// The panic's payload is user data too (`std::panic::panic_any` takes any value), and its drop
/// may panic in turn: it is dropped inside a containment of its own, and forgotten if that
/// panics as well, so nothing ever unwinds out of here.
///
/// ```
/// use npu_core::contain::contained;
///
/// // SAFETY: this example is one of npu-rs's tests.
/// let seal = unsafe { npu_core::seal::Seal::npu_rs() };
/// assert!(contained(seal, || panic!("user code")));
/// assert!(!contained(seal, || ()));
/// ```
#[doc(hidden)]
pub fn contained(_: Seal, f: impl FnOnce()) -> bool {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(()) => false,
        Err(payload) => {
            drop_payload(payload);
            true
        }
    }
}

/// Runs `task` on `runtime`'s blocking pool; false if Tokio refused it. Tokio panics when its
/// pool has no thread and cannot start one (a runtime built with a stack the host cannot map,
/// threads exhausted); that panic must not unwind through npu-rs's callers, which own
/// operations the device has accepted. A refused task stays in Tokio's queue, unrun while no
/// thread starts, and on a runtime whose clock is paused it keeps Tokio from advancing the clock
/// on its own for the rest of the runtime's life: timers there move only with
/// `tokio::time::advance`.
///
/// Containing the panic does not hide it from the panic hook, which runs before the unwind
/// reaches here: each refusal prints Tokio's "OS can't spawn worker thread" report (with a
/// backtrace when `RUST_BACKTRACE` is set), though nothing failed. A process whose hook ends it
/// on any panic, or built with `panic = "abort"`, ends there. Tokio offers no `spawn_blocking`
/// that reports the refusal instead, and swapping the process-wide hook around the call would
/// swallow other threads' panics, so this is left as it is (docs/cancellation.md, twenty-third
/// session).
///
/// ```
/// let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// let (tx, rx) = std::sync::mpsc::channel();
/// // SAFETY: this example is one of npu-rs's tests.
/// let seal = unsafe { npu_core::seal::Seal::npu_rs() };
/// let task = move || tx.send(()).unwrap();
/// assert!(npu_core::contain::spawn_contained(seal, runtime.handle(), task));
/// rx.recv().unwrap();
/// ```
#[doc(hidden)]
pub fn spawn_contained(
    seal: Seal,
    runtime: &tokio::runtime::Handle,
    task: impl FnOnce() + Send + 'static,
) -> bool {
    let refused = contained(seal, || drop(runtime.spawn_blocking(task)));
    !refused
}

thread_local! {
    /// The addresses and ranks of the [`lock_here`] locks this thread holds.
    static HELD: std::cell::RefCell<Vec<(usize, Rank)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Whether this thread holds a [`lock_here`] lock: a wait for work another thread does (a
/// teardown, the reaper), which may need that lock, must not be made here.
pub(crate) fn holds_a_lock() -> bool {
    // As `lock_here` does, a thread whose locals are gone holds none it tracks.
    HELD.try_with(|held| !held.borrow().is_empty())
        .unwrap_or(false)
}

/// Where a lock taken with [`lock_here`] stands in the order npu-rs takes them in: a thread
/// waits for such a lock only while every one it holds ranks lower.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rank {
    /// A device pool's drain lock, held across the frees of its cache and the submission of
    /// the release stream's synchronisation that awaits them.
    Drain,
    /// An event's record lock, held across its submission.
    Record,
    /// A stream's submission lock, held across the operation's ACL calls (a peer copy takes
    /// the runtime's lock inside it).
    Submission,
    /// A runtime's device and peer-access lock.
    Runtime,
}

/// A lock taken with [`lock_here`]: the thread is marked as holding it until the guard goes.
#[doc(hidden)]
#[must_use = "if unused the lock is released at once"]
pub struct HeldHere<'a, T> {
    guard: MutexGuard<'a, T>,
    address: usize,
}

/// Locks `mutex` (of rank `rank`), or returns `None` instead of waiting where waiting could
/// deadlock: when this thread holds it already (through this function), or holds another such
/// lock of the same or a higher rank and `mutex` is held by another thread.
///
/// For the locks npu-rs holds across a call that may run a tracing subscriber (an ACL call:
/// the simulator logs each failed call through `tracing`). The subscriber is user code, which
/// may call npu-rs back (open a device, submit to the same stream); the paths that take such
/// a lock refuse that with a typed error, or hand the work to the reaper, instead of
/// deadlocking this thread and every thread that takes the lock after it. Subscribers on two
/// threads may also take two such locks in opposite orders (one opening a device from inside
/// a submission, the other submitting from inside a peer-access change): npu-rs itself takes
/// them only in increasing rank, so a thread never waits against that order, and no two
/// threads wait for each other. (Muting the subscriber around the call is not possible:
/// `tracing` panics when a default is set from inside one of its own callbacks.)
///
/// ```
/// use std::sync::Mutex;
/// use npu_core::contain::{Rank, lock_here};
///
/// // SAFETY: this example is one of npu-rs's tests.
/// let seal = unsafe { npu_core::seal::Seal::npu_rs() };
/// let (lock, higher) = (Mutex::new(1), Mutex::new(2));
/// let held = lock_here(seal, &lock, Rank::Submission).expect("free");
/// assert!(lock_here(seal, &lock, Rank::Submission).is_none(), "held by this thread");
/// assert!(lock_here(seal, &higher, Rank::Runtime).is_some(), "taken in order");
/// drop(held);
/// assert_eq!(*lock_here(seal, &lock, Rank::Submission).expect("free again"), 1);
/// ```
#[doc(hidden)]
pub fn lock_here<T>(_: Seal, mutex: &Mutex<T>, rank: Rank) -> Option<HeldHere<'_, T>> {
    let address = std::ptr::from_ref(mutex) as usize;
    // A thread whose locals are gone (a thread-local destructor) is simply not tracked.
    let highest = HELD
        .try_with(|held| {
            let held = held.borrow();
            match held.iter().any(|&(at, _)| at == address) {
                true => Err(()),
                false => Ok(held.iter().map(|&(_, rank)| rank).max()),
            }
        })
        .unwrap_or(Ok(None))
        .ok()?;
    let guard = match highest {
        Some(highest) if highest >= rank => match mutex.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        },
        _ => mutex.lock().unwrap_or_else(|e| e.into_inner()),
    };
    let _ = HELD.try_with(|held| held.borrow_mut().push((address, rank)));
    Some(HeldHere { guard, address })
}

impl<T> Drop for HeldHere<'_, T> {
    fn drop(&mut self) {
        let _ = HELD.try_with(|held| {
            let mut held = held.borrow_mut();
            if let Some(at) = held
                .iter()
                .rposition(|&(address, _)| address == self.address)
            {
                held.remove(at);
            }
        });
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for HeldHere<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldHere")
            .field("value", &*self.guard)
            .finish_non_exhaustive()
    }
}

impl<T> std::ops::Deref for HeldHere<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> std::ops::DerefMut for HeldHere<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

fn drop_payload(payload: Box<dyn Any + Send>) {
    if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        std::mem::forget(again);
    }
}

/// Emits a tracing event at `$level` (`error`, `warn`, `info`, `debug`, `trace`), with
/// `tracing`'s syntax after the level, and contains a panic of the subscriber: what every
/// npu-rs crate logs with (see [`contain`](crate::contain)).
///
/// Sealed like the rest of [`contain`](crate::contain): the expansion passes the seal of the
/// crate it is invoked in, `crate::SEAL`, which each of npu-rs's crates holds (see
/// [`seal`](crate::seal)); elsewhere it does not compile.
///
/// ```
/// // SAFETY: this example is one of npu-rs's tests.
/// const SEAL: npu_core::seal::Seal = unsafe { npu_core::seal::Seal::npu_rs() };
///
/// fn main() {
///     let err = "an example";
///     npu_core::log!(warn, %err, stream = 3, "something failed");
/// }
/// ```
#[doc(hidden)]
#[macro_export]
#[allow(
    clippy::crate_in_macro_def,
    reason = "`crate::SEAL` is the seal of the invoking crate, on purpose"
)]
macro_rules! log {
    ($level:ident, $($event:tt)+) => {{
        $crate::contain::contained(crate::SEAL, || {
            $crate::contain::tracing::$level!($($event)+)
        });
    }};
}

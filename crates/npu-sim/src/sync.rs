//! Locking helpers and the bell every blocking wait of the simulator sleeps on.

use std::sync::atomic::{AtomicUsize, Ordering, fence};
use std::sync::{
    Condvar, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard,
};
use std::time::Instant;

/// Locks a mutex, ignoring poisoning: the C boundary catches panics, and the simulator's state
/// stays consistent across them (every critical section is a short, non-panicking update).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Read-locks an `RwLock`, ignoring poisoning (see [`lock`]).
pub(crate) fn read<T>(rw: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    rw.read().unwrap_or_else(PoisonError::into_inner)
}

/// Write-locks an `RwLock`, ignoring poisoning (see [`lock`]).
pub(crate) fn write<T>(rw: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    rw.write().unwrap_or_else(PoisonError::into_inner)
}

/// A process-wide wake-up bell.
///
/// Every state change another thread may be blocked on (a task finished, an event record
/// completed, a device was lost, a hold gate opened, a callback was processed) rings it; every
/// blocking wait re-evaluates its own condition when it rings. One bell instead of a condition
/// variable per object keeps the waits composable ("the record is done *or* the device is lost
/// *or* the context stopped") without lock-ordering puzzles. Ringing costs one atomic load when
/// nobody waits, which is the common case on the hot path.
///
/// Rule: never ring while holding another lock (waiters evaluate their condition under the
/// bell's lock and take object locks inside it).
pub(crate) struct Bell {
    lock: Mutex<()>,
    cv: Condvar,
    waiters: AtomicUsize,
}

impl Bell {
    pub(crate) const fn new() -> Self {
        Self {
            lock: Mutex::new(()),
            cv: Condvar::new(),
            waiters: AtomicUsize::new(0),
        }
    }

    /// Wakes every waiter so it re-checks its condition.
    pub(crate) fn ring(&self) {
        // Pairs with the SeqCst increment in `wait_until`: either the waiter sees the state
        // change in its condition check, or this load sees the waiter (Dekker-style).
        fence(Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) > 0 {
            drop(lock(&self.lock));
            self.cv.notify_all();
        }
    }

    /// Blocks until `poll` returns `Some`, or until `deadline` passes (then `None`).
    pub(crate) fn wait_until<T>(
        &self,
        deadline: Option<Instant>,
        mut poll: impl FnMut() -> Option<T>,
    ) -> Option<T> {
        if let Some(value) = poll() {
            return Some(value);
        }
        let mut guard = lock(&self.lock);
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let result = loop {
            if let Some(value) = poll() {
                break Some(value);
            }
            match deadline {
                None => guard = self.cv.wait(guard).unwrap_or_else(PoisonError::into_inner),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        break None;
                    }
                    guard = self
                        .cv
                        .wait_timeout(guard, deadline - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
            }
        };
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        drop(guard);
        result
    }
}

/// The simulator's bell.
pub(crate) static BELL: Bell = Bell::new();

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;

    #[test]
    fn a_ring_after_the_state_change_wakes_the_waiter() {
        let bell = Arc::new(Bell::new());
        let flag = Arc::new(AtomicBool::new(false));
        let waiter = {
            let (bell, flag) = (bell.clone(), flag.clone());
            std::thread::spawn(move || {
                bell.wait_until(None, || flag.load(Ordering::SeqCst).then_some(7))
            })
        };
        flag.store(true, Ordering::SeqCst);
        bell.ring();
        assert_eq!(waiter.join().unwrap(), Some(7));
    }

    #[test]
    fn a_deadline_ends_the_wait_with_none() {
        let bell = Bell::new();
        let deadline = Instant::now() + Duration::from_millis(1);
        assert_eq!(bell.wait_until(Some(deadline), || None::<()>), None);
    }
}

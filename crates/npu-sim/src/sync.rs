//! Locking helpers and the bells the simulator's blocking waits sleep on.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering, fence};
use std::sync::{
    Condvar, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard,
};
use std::thread::{LocalKey, Thread, ThreadId};
use std::time::{Duration, Instant};

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

/// A gate one thread holds at a time, which the holding thread may enter again (a callback the
/// holder runs calling back into the runtime): only its outermost entry closes and opens it.
#[derive(Default)]
pub(crate) struct OwnedGate {
    owner: Mutex<Option<ThreadId>>,
    opened: Condvar,
}

/// An entry into an [`OwnedGate`]; the outermost one opens the gate when dropped.
pub(crate) struct Entered<'a> {
    gate: &'a OwnedGate,
    outermost: bool,
}

impl OwnedGate {
    /// Enters the gate, waiting while another thread holds it.
    pub(crate) fn enter(&self) -> Entered<'_> {
        let me = std::thread::current().id();
        let mut owner = lock(&self.owner);
        if *owner == Some(me) {
            return Entered {
                gate: self,
                outermost: false,
            };
        }
        while owner.is_some() {
            owner = self
                .opened
                .wait(owner)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *owner = Some(me);
        Entered {
            gate: self,
            outermost: true,
        }
    }
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        if self.outermost {
            *lock(&self.gate.owner) = None;
            self.gate.opened.notify_one();
        }
    }
}

/// Raises a thread-local flag until dropped, then gives it back the value it had: the marks
/// by which a call made from inside a callback the simulator runs (an init callback, a
/// snapshot step's) knows that this thread holds something further up its stack.
pub(crate) struct Raised {
    flag: &'static LocalKey<Cell<bool>>,
    was: bool,
}

impl Raised {
    pub(crate) fn new(flag: &'static LocalKey<Cell<bool>>) -> Raised {
        Raised {
            flag,
            was: flag.replace(true),
        }
    }
}

impl Drop for Raised {
    fn drop(&mut self) {
        self.flag.set(self.was);
    }
}

/// A waiter's registration: its key, a ticket unique to the wait, and the position of the
/// bell in the wait's list (a wait may list one bell twice, e.g. the context bell of two
/// streams of one context, and each listing is a registration of its own).
type Registration = (u64, u64, usize);

/// Tickets tell the registrations of concurrent waits apart.
static NEXT_TICKET: AtomicU64 = AtomicU64::new(0);

/// A wake-up bell for one kind of state change of one object (a stream's progress, a
/// device's loss, a hold gate opening, a callback having run, ...).
///
/// A blocked thread registers with every bell whose ringing may make its condition true
/// ([`wait_until`]), each with a *key*, and re-checks its condition when woken. A ring wakes
/// a chosen set of keys: [`Bell::ring`] every waiter, [`Bell::ring_through`] the waiters
/// whose key is at most a mark (a stream wakes exactly the waiters for the work it has
/// finished), [`Bell::ring_key`] the waiters of one key (a callback queued for one thread).
/// So a state change wakes the threads it concerns and no others, while a wait can still
/// combine conditions ("the record completed, or its device was lost, or its context
/// stopped") by listening to several bells.
///
/// Ringing costs a fence and one atomic load when nobody waits, the common case on the hot
/// path. The bell's lock is a leaf: nothing else is locked, and nobody is woken, while it is
/// held; so a bell may be rung whatever locks the ringer holds, and a waiter's condition is
/// evaluated outside it.
pub(crate) struct Bell {
    waiters: Mutex<BTreeMap<Registration, Thread>>,
    /// Registrations in `waiters`, read without the lock by rings.
    count: AtomicUsize,
    /// Wake-ups delivered, for tests that check who was woken.
    #[cfg(test)]
    woken: AtomicUsize,
}

impl Default for Bell {
    fn default() -> Self {
        Self::new()
    }
}

/// One bell a wait listens to, with its key.
#[derive(Clone, Copy)]
pub(crate) struct Listen<'a> {
    bell: &'a Bell,
    key: u64,
}

impl Bell {
    /// The key of waiters that only [`Bell::ring`] wakes.
    pub(crate) const RING_ONLY: u64 = u64::MAX;

    pub(crate) const fn new() -> Self {
        Self {
            waiters: Mutex::new(BTreeMap::new()),
            count: AtomicUsize::new(0),
            #[cfg(test)]
            woken: AtomicUsize::new(0),
        }
    }

    /// Listens with `key`: woken by [`Bell::ring`], by [`Bell::ring_through`] a mark at least
    /// `key`, and by [`Bell::ring_key`] of `key`.
    pub(crate) fn at(&self, key: u64) -> Listen<'_> {
        Listen { bell: self, key }
    }

    /// Listens for every ring (key 0).
    pub(crate) fn any(&self) -> Listen<'_> {
        self.at(0)
    }

    /// Wakes every waiter.
    pub(crate) fn ring(&self) {
        self.wake(0, u64::MAX);
    }

    /// Wakes the waiters whose key is at most `mark`.
    pub(crate) fn ring_through(&self, mark: u64) {
        self.wake(0, mark);
    }

    /// Wakes the waiters whose key is `key`.
    pub(crate) fn ring_key(&self, key: u64) {
        self.wake(key, key);
    }

    /// Unregisters and unparks the waiters whose key lies in `first..=last`.
    fn wake(&self, first: u64, last: u64) {
        // Pairs with the fence after a registration (Dekker-style): either the waiter's next
        // check of its condition sees the state change the ringer made before ringing, or
        // this load sees the registration.
        fence(Ordering::SeqCst);
        if self.count.load(Ordering::Relaxed) == 0 {
            return;
        }
        let woken: Vec<Thread> = {
            let mut waiters = lock(&self.waiters);
            let entries: Vec<Registration> = waiters
                .range((first, 0, 0)..=(last, u64::MAX, usize::MAX))
                .map(|(entry, _)| *entry)
                .collect();
            self.count.fetch_sub(entries.len(), Ordering::Relaxed);
            entries
                .iter()
                .filter_map(|entry| waiters.remove(entry))
                .collect()
        };
        #[cfg(test)]
        self.woken.fetch_add(woken.len(), Ordering::Relaxed);
        for thread in woken {
            thread.unpark();
        }
    }

    /// Registers a waiter (idempotent: a registration still in place is left as it is).
    fn register(&self, entry: Registration, thread: &Thread) {
        if let Entry::Vacant(vacant) = lock(&self.waiters).entry(entry) {
            vacant.insert(thread.clone());
            self.count.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Removes a registration a ring has not taken.
    fn unregister(&self, entry: Registration) {
        if lock(&self.waiters).remove(&entry).is_some() {
            self.count.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Waiters registered now.
    #[cfg(test)]
    pub(crate) fn waiters(&self) -> usize {
        lock(&self.waiters).len()
    }

    /// Wake-ups delivered so far.
    #[cfg(test)]
    pub(crate) fn woken(&self) -> usize {
        self.woken.load(Ordering::Relaxed)
    }
}

/// Blocks until `poll` returns `Some`, or until `deadline` passes (then `None`). The thread
/// sleeps until one of `listens` rings, so every state change that can make `poll` succeed
/// must ring one of them (after the change).
pub(crate) fn wait_until<T>(
    listens: &[Listen<'_>],
    deadline: Option<Instant>,
    poll: impl FnMut() -> Option<T>,
) -> Option<T> {
    wait_until_every(listens, deadline, || None, poll)
}

/// [`wait_until`] that also polls at least once per `every()`, asked before each park, when
/// it is set: for a condition some changes of which ring no bell (memory another process
/// writes, which it may start doing while the thread waits).
pub(crate) fn wait_until_every<T>(
    listens: &[Listen<'_>],
    deadline: Option<Instant>,
    mut every: impl FnMut() -> Option<Duration>,
    mut poll: impl FnMut() -> Option<T>,
) -> Option<T> {
    if let Some(value) = poll() {
        return Some(value);
    }
    let ticket = NEXT_TICKET.fetch_add(1, Ordering::Relaxed);
    let entries = || {
        listens
            .iter()
            .enumerate()
            .map(move |(slot, listen)| (listen.bell, (listen.key, ticket, slot)))
    };
    let thread = std::thread::current();
    let result = loop {
        // A ring takes the registrations it wakes: registering again re-arms them. A
        // registration that was not rung stays as it is.
        for (bell, entry) in entries() {
            bell.register(entry, &thread);
        }
        fence(Ordering::SeqCst);
        if let Some(value) = poll() {
            break Some(value);
        }
        let now = Instant::now();
        if deadline.is_some_and(|deadline| now >= deadline) {
            break None;
        }
        let left = deadline.map(|deadline| deadline - now);
        match left.into_iter().chain(every()).min() {
            None => std::thread::park(),
            Some(slice) => std::thread::park_timeout(slice),
        }
        // Checked before registering again, so a wake-up that satisfied the condition
        // leaves no registration behind for a later ring to take.
        if let Some(value) = poll() {
            break Some(value);
        }
    };
    for (bell, entry) in entries() {
        bell.unregister(entry);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;

    /// Spawns a thread waiting on `bell` with `key` until `flag` is set; returns once it is
    /// registered.
    fn waiter(
        bell: &Arc<Bell>,
        flag: &Arc<AtomicBool>,
        key: u64,
    ) -> std::thread::JoinHandle<Option<u64>> {
        let registered = bell.waiters() + 1;
        let (bell, flag) = (bell.clone(), flag.clone());
        let handle = {
            let bell = bell.clone();
            std::thread::spawn(move || {
                wait_until(&[bell.at(key)], None, || {
                    flag.load(Ordering::SeqCst).then_some(key)
                })
            })
        };
        while bell.waiters() < registered {
            std::thread::yield_now();
        }
        handle
    }

    #[test]
    fn a_ring_after_the_state_change_wakes_the_waiter() {
        let bell = Arc::new(Bell::new());
        let flag = Arc::new(AtomicBool::new(false));
        let waiter = waiter(&bell, &flag, 0);
        flag.store(true, Ordering::SeqCst);
        bell.ring();
        assert_eq!(waiter.join().unwrap(), Some(0));
        assert_eq!(bell.waiters(), 0, "the wait left no registration behind");
    }

    #[test]
    fn a_deadline_ends_the_wait_with_none() {
        let bell = Bell::new();
        let deadline = Instant::now() + Duration::from_millis(1);
        assert_eq!(
            wait_until(&[bell.any()], Some(deadline), || None::<()>),
            None
        );
        assert_eq!(bell.waiters(), 0);
    }

    #[test]
    fn rings_wake_only_the_keys_they_select() {
        let bell = Arc::new(Bell::new());
        let flags: Vec<Arc<AtomicBool>> = (0..4).map(|_| Arc::default()).collect();
        let keys = [3, 5, 9, Bell::RING_ONLY];
        let waiters: Vec<_> = keys
            .iter()
            .zip(&flags)
            .map(|(&key, flag)| waiter(&bell, flag, key))
            .collect();

        flags[0].store(true, Ordering::SeqCst);
        flags[1].store(true, Ordering::SeqCst);
        bell.ring_through(5);
        assert_eq!(bell.woken(), 2, "keys 3 and 5, not 9 or RING_ONLY");

        flags[2].store(true, Ordering::SeqCst);
        bell.ring_key(9);
        assert_eq!(bell.woken(), 3);

        flags[3].store(true, Ordering::SeqCst);
        bell.ring_through(u64::MAX - 1);
        assert_eq!(bell.woken(), 3, "a mark never reaches RING_ONLY");
        bell.ring();
        assert_eq!(bell.woken(), 4);
        let results: Vec<_> = waiters.into_iter().map(|w| w.join().unwrap()).collect();
        assert_eq!(results, keys.map(Some));
        assert_eq!(bell.waiters(), 0);
    }

    #[test]
    fn a_wait_combines_bells_and_leaves_none_registered() {
        let (a, b) = (Arc::new(Bell::new()), Arc::new(Bell::new()));
        let flag = Arc::new(AtomicBool::new(false));
        let waiter = {
            let (a, b, flag) = (a.clone(), b.clone(), flag.clone());
            std::thread::spawn(move || {
                wait_until(&[a.any(), b.any(), b.at(7)], None, || {
                    flag.load(Ordering::SeqCst).then_some(())
                })
            })
        };
        while a.waiters() + b.waiters() < 3 {
            std::thread::yield_now();
        }
        flag.store(true, Ordering::SeqCst);
        b.ring_key(7);
        assert_eq!(waiter.join().unwrap(), Some(()));
        assert_eq!((a.waiters(), b.waiters()), (0, 0));
        assert_eq!((a.woken(), b.woken()), (0, 1));
    }

    #[test]
    fn a_ring_before_the_condition_holds_is_survived() {
        let bell = Arc::new(Bell::new());
        let flag = Arc::new(AtomicBool::new(false));
        let waiter = waiter(&bell, &flag, 0);
        // Woken with the condition still false: the waiter registers again.
        bell.ring();
        while bell.waiters() == 0 {
            std::thread::yield_now();
        }
        flag.store(true, Ordering::SeqCst);
        bell.ring();
        assert_eq!(waiter.join().unwrap(), Some(0));
        assert_eq!(bell.woken(), 2);
    }
}

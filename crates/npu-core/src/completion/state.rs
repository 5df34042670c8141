//! The completion protocol, written against `super::sync` so the same code runs on std
//! primitives in the library and on loom's in the model test (`completion::model`), the
//! completer's order included ([`State::complete_with`]), with the thread's own steps behind
//! [`Completing`].

use std::task::{Poll, Waker};

use super::sync::{AtomicBool, AtomicU8, Mutex, Ordering};
use crate::reaper::Action;

/// Work queued to run after completion, and where it runs.
pub(crate) enum Deferred {
    /// A release (freeing memory, dropping a value): handed to the reaper thread, because it
    /// may make an ACL call.
    Release(Action),
    /// A wake-up for a blocked thread (a channel send that never blocks): run by the completer
    /// itself, so that a thread blocked on the operation never depends on the reaper, which may
    /// itself be the thread that is blocked.
    Notify(Action),
}

/// What the thread completing an operation does besides the state's own steps
/// ([`State::complete_with`]): the library's (`Completer::complete`) or the model's.
pub(crate) trait Completing {
    /// Raises the completing thread's hold (`holds::raise_if_completing`), before the result
    /// is visible.
    fn hold(&self);

    /// Takes releases deferred on the operation (the reaper's queue), before the result is
    /// visible.
    fn hand_on(&self, releases: Vec<Action>);

    /// Runs the operation's notifications, after the wake-ups.
    fn notify(&self, notifies: Vec<Action>);
}

/// Shared by the one party that completes an operation and everyone who waits for it.
///
/// Protocol: the completer stores the value, hands on the releases deferred so far (again
/// until none is left), and only then raises `done` (Release) and takes the notifications,
/// under the lock deferring takes ([`State::complete`]); then it wakes the registered wakers
/// ([`State::wake`]) and runs the notifications: whoever sees the operation complete, woken
/// or not, finds every release deferred before then already handed on. A poller checks `done`
/// (Acquire), registers its waker, and checks `done` again, so a completion racing the
/// registration is never missed. Every waiting future keeps its own registration (a
/// [`Registration`] key): clones of a completion are awaited by several tasks at once (an
/// operation's owner and whoever waits for its completion or its event), and each must be
/// woken; a future that moves to another task replaces its own waker only. `deferred` becomes `None` exactly once, when the completer
/// takes it, so an action is either taken by the completer or handed back to its deferrer,
/// never both.
pub(crate) struct State<T> {
    done: AtomicBool,
    /// Set when the completer went away without completing (see [`State::abandon`]).
    abandoned: AtomicBool,
    /// Set by the completer, before completing, when the operation failed with a device
    /// memory error, to the error's level (0: none; the caller's encoding of its kinds,
    /// higher for worse): what a `UseList` asks of every completed use, so that it costs a
    /// load rather than the value's lock ([`State::mark_memory_error`]).
    memory_error: AtomicU8,
    value: Mutex<Option<T>>,
    /// The waker of each registration, taken by the completer.
    wakers: Mutex<Wakers>,
    deferred: Mutex<Option<Vec<Deferred>>>,
    /// What blocked threads wait on, made (and its one notification deferred) by the first.
    pub(crate) blocked: std::sync::OnceLock<std::sync::Arc<crate::completion::blocked::Signal>>,
    /// The chains keeping paused Tokio clocks still for the futures waiting on it, made by
    /// the first such future ([`crate::paused_clock`]).
    pub(crate) clock_keepers: std::sync::OnceLock<std::sync::Arc<crate::paused_clock::Keepers>>,
    /// The process's fork generation when the operation was made ([`crate::fork`]): in a
    /// child forked since, nothing will ever complete it.
    pub(crate) generation: u32,
}

impl<T: Clone> State<T> {
    pub(crate) fn new() -> Self {
        State {
            done: AtomicBool::new(false),
            abandoned: AtomicBool::new(false),
            memory_error: AtomicU8::new(0),
            value: Mutex::new(None),
            wakers: Mutex::new(Wakers::default()),
            deferred: Mutex::new(Some(Vec::new())),
            blocked: std::sync::OnceLock::new(),
            clock_keepers: std::sync::OnceLock::new(),
            generation: crate::fork::generation(),
        }
    }

    /// Completes with `value` unless already complete: stores it, hands every release
    /// deferred until then to `hand_on` (outside every lock), and only then makes the value
    /// visible. Returns the deferred notifications, which the caller must run outside any lock
    /// with [`State::wake`]; `None` for a repeated completion, which must not wake anyone.
    ///
    /// `done` is raised under the lock that deferring takes, once a look under it finds no
    /// release left: a release deferred while the earlier ones were being handed on is handed
    /// on too before anyone can see the value, so a deferrer that waits for the operation
    /// next finds its own release queued. Later deferrals are handed back to their deferrers.
    pub(crate) fn complete(
        &self,
        value: T,
        mut hand_on: impl FnMut(Vec<Action>),
    ) -> Option<Vec<Action>> {
        {
            let mut slot = self.value.lock().unwrap_or_else(|e| e.into_inner());
            if slot.is_some() {
                return None;
            }
            *slot = Some(value);
        }
        let mut notifies = Vec::new();
        loop {
            let mut deferred = self.deferred.lock().unwrap_or_else(|e| e.into_inner());
            let mut releases = Vec::new();
            for action in deferred.take().unwrap_or_default() {
                match action {
                    Deferred::Release(release) => releases.push(release),
                    Deferred::Notify(notify) => notifies.push(notify),
                }
            }
            if releases.is_empty() {
                self.done.store(true, Ordering::Release);
                return Some(notifies);
            }
            // Still accepting deferrals, which the next look takes.
            *deferred = Some(Vec::new());
            drop(deferred);
            hand_on(releases);
        }
    }

    /// The completer's whole order (`Completer::complete`), the thread's steps given by
    /// `completing`: its hold raised and the operation's memory error marked (`memory_error`,
    /// its level; 0: none) before the value is visible; the value stored and the releases
    /// handed on ([`State::complete`]); then every waiter woken ([`State::wake`]) and the
    /// notifications run. Returns how many wakers panicked; `None` for a repeated completion,
    /// which does nothing.
    pub(crate) fn complete_with(
        &self,
        value: T,
        memory_error: u8,
        completing: &impl Completing,
    ) -> Option<usize> {
        // Before the result is visible: the task it wakes may drop its last handles and wait
        // for the teardowns while this thread still holds the stream.
        completing.hold();
        // Noted before the result is visible, for the use lists of the memory it touched: a
        // pool must not hand out memory with an uncorrectable error again.
        if memory_error > 0 {
            self.mark_memory_error(memory_error);
        }
        // Releases are handed on before the result is visible, so that whoever sees the
        // operation complete finds them queued.
        let notifies = self.complete(value, |releases| completing.hand_on(releases))?;
        let panicked = self.wake();
        completing.notify(notifies);
        Some(panicked)
    }

    /// Wakes every registered waiter; called by the completer after [`State::complete`].
    /// A waker is user code: each is woken outside the lock and its panic contained, so that
    /// it harms neither the completing thread nor the other waiters. A waker's drop is user
    /// code too, so each is woken by value, its drop inside the containment. Returns how
    /// many panicked.
    pub(crate) fn wake(&self) -> usize {
        let wakers = {
            let mut wakers = self.wakers.lock().unwrap_or_else(|e| e.into_inner());
            std::mem::take(&mut wakers.registered)
        };
        wakers
            .into_iter()
            .map(|(_, waker)| crate::contain::contained(crate::SEAL, move || waker.wake()))
            .filter(|panicked| *panicked)
            .count()
    }

    /// Notes that the operation failed with a device memory error; called before
    /// [`State::complete`], whose release of `done` publishes it.
    pub(crate) fn mark_memory_error(&self, level: u8) {
        self.memory_error.fetch_max(level, Ordering::Relaxed);
    }

    /// The level of the device memory error the operation failed with (0: none). Meaningful once it has
    /// completed: read after [`State::is_complete`]'s acquire, or by a release deferred on
    /// it, which the completer hands on after noting the error (and possibly before raising
    /// `done`, so such a release must not ask `is_complete` first).
    pub(crate) fn memory_error_level(&self) -> u8 {
        self.memory_error.load(Ordering::Relaxed)
    }

    pub(crate) fn is_complete(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// The value, once complete.
    pub(crate) fn value(&self) -> Option<T> {
        if !self.is_complete() {
            return None;
        }
        self.value.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Ready with the value, or pending with `waker` registered under `registration` (which
    /// a first poll fills in), replacing the waker that registration held.
    pub(crate) fn poll(&self, waker: &Waker, registration: &mut Registration) -> Poll<T> {
        if let Some(value) = self.value() {
            return Poll::Ready(value);
        }
        let lock = || self.wakers.lock().unwrap_or_else(|e| e.into_inner());
        // A re-poll by the same task (the common case) finds its waker kept: one lock, no
        // clone. Otherwise the waker, which is the task's code, is cloned and the one it
        // replaces dropped outside the lock, so that a waker whose clone or drop touches this
        // completion cannot deadlock on it.
        if registration.0.is_none() || !lock().holds(*registration, waker) {
            // Cloned before the lock is taken: in `lock().register(.., waker.clone())` the
            // receiver, and so the lock, comes first, and a clone that polled or dropped
            // another future of this completion waited for that lock on its own thread for
            // ever.
            let waker = waker.clone();
            let replaced = lock().register(registration, waker);
            drop(replaced);
        }
        match self.value() {
            Some(value) => Poll::Ready(value),
            None => Poll::Pending,
        }
    }

    /// Forgets `registration`'s waker: its future is gone.
    pub(crate) fn deregister(&self, registration: Registration) {
        if let Some(key) = registration.0 {
            let removed = {
                let mut wakers = self.wakers.lock().unwrap_or_else(|e| e.into_inner());
                let index = wakers
                    .registered
                    .iter()
                    .position(|(known, _)| *known == key);
                index.map(|index| wakers.registered.remove(index))
            };
            // Outside the lock, as in `poll`.
            drop(removed);
        }
    }

    /// The completer is gone without completing: the operation stays pending for ever. Its
    /// releases are leaked (running them could free memory the device still uses) and its
    /// notifications are dropped, which wakes their blocked threads with a closed channel.
    /// `abandoned` is raised before the actions are taken, so a waiter that queues its
    /// notification and then finds `abandoned` clear is sure to be woken by this drop.
    pub(crate) fn abandon(&self) {
        self.abandoned.store(true, Ordering::SeqCst);
        let taken = {
            let mut deferred = self.deferred.lock().unwrap_or_else(|e| e.into_inner());
            deferred.as_mut().map(std::mem::take).unwrap_or_default()
        };
        for action in taken {
            match action {
                Deferred::Release(release) => std::mem::forget(release),
                Deferred::Notify(notify) => drop(notify),
            }
        }
    }

    pub(crate) fn is_abandoned(&self) -> bool {
        self.abandoned.load(Ordering::SeqCst)
    }

    /// How many actions wait for completion.
    #[cfg(test)]
    pub(crate) fn deferred_len(&self) -> usize {
        let deferred = self.deferred.lock().unwrap_or_else(|e| e.into_inner());
        deferred.as_ref().map_or(0, Vec::len)
    }

    /// Queues `notify` to run on the completing thread right after completion (dropped unrun
    /// if the operation is abandoned); runs it at once, on this thread, if the operation
    /// completed already.
    pub(crate) fn defer_notify(&self, notify: Action) {
        if let Some(Deferred::Notify(notify)) = self.defer(Deferred::Notify(notify)) {
            notify();
        }
    }

    /// Queues `action` to run after completion; hands it back if completion already happened.
    pub(crate) fn defer(&self, action: Deferred) -> Option<Deferred> {
        let mut deferred = self.deferred.lock().unwrap_or_else(|e| e.into_inner());
        match deferred.as_mut() {
            Some(actions) => {
                actions.push(action);
                None
            }
            None => Some(action),
        }
    }
}

/// Which waker slot of a completion a waiting future holds; empty until its first pending
/// poll. [`Registration::SHARED`] is one slot for every caller that keeps no key of its own.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Registration(Option<u64>);

impl Registration {
    /// The slot of callers without a key: the latest one's waker is the one kept.
    pub(crate) const SHARED: Registration = Registration(Some(0));
}

/// The registered wakers, by key; waiters are few, so a list.
#[derive(Default)]
struct Wakers {
    registered: Vec<(u64, Waker)>,
    /// The last key handed out (0 is [`Registration::SHARED`]'s).
    last: u64,
}

impl Wakers {
    /// Whether `registration`'s slot holds a waker that wakes the same task as `waker`
    /// (`will_wake` compares, it runs no waker code).
    fn holds(&self, registration: Registration, waker: &Waker) -> bool {
        let key = registration.0;
        self.registered
            .iter()
            .any(|(known, kept)| Some(*known) == key && kept.will_wake(waker))
    }

    /// Keeps `waker` in `registration`'s slot; returns what is to be dropped (the waker it
    /// replaces, or `waker` itself if the slot's wakes the same task), for the caller to drop
    /// once the lock is released.
    fn register(&mut self, registration: &mut Registration, waker: Waker) -> Option<Waker> {
        if let Some(key) = registration.0
            && let Some((_, known)) = self.registered.iter_mut().find(|(k, _)| *k == key)
        {
            if known.will_wake(&waker) {
                return Some(waker);
            }
            return Some(std::mem::replace(known, waker));
        }
        let key = registration.0.unwrap_or_else(|| {
            self.last += 1;
            self.last
        });
        *registration = Registration(Some(key));
        self.registered.push((key, waker));
        None
    }
}

//! Loom model of the paused-clock keeper chain, on the chain's own `chain.rs`: futures join
//! an operation's chain at their pending polls and leave it when dropped, while the chain's
//! tasks each wait a slice and hand on to a successor as long as a future wants the clock
//! kept. Checked: a future that joins while the operation is pending sees a slice start after
//! it joined (the clock is kept for it) unless the operation completes; no two tasks of a
//! chain wait at once; and once every future and task is gone the chain is forgotten, so the
//! next future starts a new one.

mod sync {
    pub(crate) use loom::sync::{Arc, Mutex, MutexGuard};
}

// The point of the model is to check the very file the futures compile, under loom.
#[allow(clippy::duplicate_mod)]
#[path = "chain.rs"]
mod chain;

use chain::{Keepers, Runtime, Want};
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::{Arc, Condvar, Mutex};

/// The one runtime of the model.
const RUNTIME: u8 = 0;

/// What the model's operation and its chain have done so far.
#[derive(Default)]
struct Progress {
    /// Slices started.
    slices: usize,
    /// The operation completed (a slice found it done).
    done: bool,
}

/// A modelled runtime: its blocking tasks are loom threads, joined by the model at its end;
/// after `accepts` of them it refuses more (a runtime shutting down).
#[derive(Clone)]
struct Model {
    inner: Arc<Inner>,
}

struct Inner {
    tasks: Mutex<Vec<loom::thread::JoinHandle<()>>>,
    accepts: AtomicUsize,
    /// Tasks asked for, refused ones included.
    spawned: AtomicUsize,
    /// How many slices find the operation still pending.
    pending_for: usize,
    progress: Mutex<Progress>,
    changed: Condvar,
    /// Tasks inside a slice.
    slicing: AtomicUsize,
}

impl Runtime for Model {
    type Id = u8;

    fn id(&self) -> u8 {
        RUNTIME
    }

    fn spawn_blocking(&self, task: impl FnOnce() + Send + 'static) -> bool {
        let accepts = self.inner.accepts.load(Ordering::Acquire);
        if self.inner.spawned.fetch_add(1, Ordering::AcqRel) >= accepts {
            return false;
        }
        let handle = loom::thread::spawn(task);
        self.inner.tasks.lock().unwrap().push(handle);
        true
    }
}

impl Model {
    fn new(pending_for: usize, accepts: usize) -> Self {
        Model {
            inner: Arc::new(Inner {
                tasks: Mutex::new(Vec::new()),
                accepts: AtomicUsize::new(accepts),
                spawned: AtomicUsize::new(0),
                pending_for,
                progress: Mutex::new(Progress::default()),
                changed: Condvar::new(),
                slicing: AtomicUsize::new(0),
            }),
        }
    }

    /// A chain task's wait on the device: returns at once (the model has no clock), finding
    /// the operation pending for the first `pending_for` slices, done after.
    fn slice(&self) -> impl FnMut() -> bool + Send + 'static {
        let inner = self.inner.clone();
        move || {
            let alone = inner.slicing.fetch_add(1, Ordering::AcqRel) == 0;
            assert!(alone, "two tasks of one chain wait at once");
            let pending = {
                let mut progress = inner.progress.lock().unwrap();
                progress.slices += 1;
                progress.done |= progress.slices > inner.pending_for;
                inner.changed.notify_all();
                !progress.done
            };
            inner.slicing.fetch_sub(1, Ordering::AcqRel);
            pending
        }
    }

    /// A future's pending poll ([`ClockHold::pending`](super::ClockHold::pending) on a paused
    /// clock): joins the chain.
    fn join(&self, keepers: &Arc<Keepers<u8>>) -> Want<u8> {
        chain::join(keepers, self.clone(), || self.slice())
    }

    /// What a future that joined waits for: a slice started after it joined, or the
    /// operation's completion. A chain that ended while it still wants the clock kept leaves
    /// it waiting for good, which loom reports as a deadlock.
    fn kept(&self, joined_after: usize) {
        let mut progress = self.inner.progress.lock().unwrap();
        while progress.slices <= joined_after && !progress.done {
            progress = self.inner.changed.wait(progress).unwrap();
        }
    }

    fn slices(&self) -> usize {
        self.inner.progress.lock().unwrap().slices
    }

    /// A future's life: joins, sees the clock kept, is dropped.
    fn wait(&self, keepers: &Arc<Keepers<u8>>) {
        let want = self.join(keepers);
        let joined = self.slices();
        self.kept(joined);
        drop(want);
    }

    /// Joins every task the runtime ran, including those spawned meanwhile.
    fn join_tasks(&self) {
        loop {
            let tasks = std::mem::take(&mut *self.inner.tasks.lock().unwrap());
            if tasks.is_empty() {
                return;
            }
            tasks.into_iter().for_each(|task| task.join().unwrap());
        }
    }

    /// With every future and task gone, the chain was forgotten: a future now starts a new
    /// one (asks for its task, which the runtime refuses: loom models few threads).
    fn forgotten(&self, keepers: &Arc<Keepers<u8>>) {
        assert!(keepers.is_empty(), "an ended chain was kept");
        self.inner.accepts.store(0, Ordering::Release);
        let before = self.inner.spawned.load(Ordering::Acquire);
        drop(self.join(keepers));
        let after = self.inner.spawned.load(Ordering::Acquire);
        assert_eq!(after, before + 1, "a chain was left marked running");
    }
}

/// Runs `model` under loom with a preemption bound: each chain task is a thread of its own,
/// and unbounded the first model takes minutes where two preemptions take seconds (three
/// take over a minute and find nothing more; the breaks the models guard need two at most).
fn check(model: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound.get_or_insert(PREEMPTIONS);
    builder.check(model);
}

/// See [`check`]; `LOOM_MAX_PREEMPTIONS` overrides it.
const PREEMPTIONS: usize = 2;

/// Two futures join and leave the chain of an operation pending for one slice, in every
/// order: the chain runs for each while it wants the clock kept, never twice at once, and
/// ends with them.
#[test]
fn a_future_that_joins_the_chain_keeps_the_clock_until_it_leaves() {
    check(|| {
        let (model, keepers) = (Model::new(1, usize::MAX), Arc::new(Keepers::default()));
        let other = {
            let (model, keepers) = (model.clone(), keepers.clone());
            loom::thread::spawn(move || model.wait(&keepers))
        };
        model.wait(&keepers);
        other.join().unwrap();
        model.join_tasks();
        model.forgotten(&keepers);
    });
}

/// A runtime that refuses the chain's next task (shutting down) ends the chain: a future that
/// comes later starts a new one rather than joining one that no task runs.
#[test]
fn a_refused_task_ends_the_chain() {
    check(|| {
        let (model, keepers) = (Model::new(usize::MAX, 1), Arc::new(Keepers::default()));
        let want = model.join(&keepers);
        let leaving = {
            let (model, want) = (model.clone(), want);
            loom::thread::spawn(move || {
                model.kept(0);
                drop(want);
            })
        };
        leaving.join().unwrap();
        model.join_tasks();
        model.forgotten(&keepers);
    });
}

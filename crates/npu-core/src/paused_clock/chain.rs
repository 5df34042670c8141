//! The keeper chains of one operation: the futures that want a runtime's paused clock kept
//! join its chain (starting it if none runs), the chain's tasks hand on to a successor while
//! any still wants it, and the chain ends in the same step that finds none does. Written
//! against `super::sync` and generic over the runtime, so that the loom model
//! (`paused_clock::model`) checks the very code the futures and the chain's tasks run.

use super::sync::{Arc, Mutex, MutexGuard};

/// What the chains need of a runtime: its identity and a way to run a blocking task.
pub(crate) trait Runtime: Clone + Send + 'static {
    type Id: Copy + PartialEq + Send + 'static;

    fn id(&self) -> Self::Id;

    /// Runs `task` on a blocking thread of the runtime; false if the runtime refused it.
    /// (Tokio refuses by panicking when no thread can be started, after it queued the task,
    /// which then stays queued; a runtime shutting down drops the task and returns true. The
    /// model's refusal, dropping the task unrun, is the simpler case of the two.)
    fn spawn_blocking(&self, task: impl FnOnce() + Send + 'static) -> bool;
}

/// The chains keeping paused clocks still for the futures waiting on one operation: at most
/// one per runtime, shared by all of those futures polled there.
#[derive(Debug)]
pub(crate) struct Keepers<I>(Mutex<Vec<Chain<I>>>);

impl<I> Default for Keepers<I> {
    fn default() -> Self {
        Keepers(Mutex::new(Vec::new()))
    }
}

#[cfg(test)]
impl<I: Copy + PartialEq> Keepers<I> {
    /// Whether no chain is kept: every one that ended was removed.
    #[allow(
        dead_code,
        reason = "for the loom model, which includes this file as its own module"
    )]
    pub(crate) fn is_empty(&self) -> bool {
        self.chains().is_empty()
    }
}

/// One runtime's chain for one operation.
#[derive(Debug)]
struct Chain<I> {
    runtime: I,
    /// The futures on that runtime that want its clock kept (their [`Want`]s alive).
    wanted: usize,
    /// Whether a task of the chain is queued or running: while it is, a future that wants
    /// the clock kept joins it instead of starting another.
    running: bool,
}

impl<I: Copy + PartialEq> Keepers<I> {
    fn chains(&self) -> MutexGuard<'_, Vec<Chain<I>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts one more future wanting `runtime`'s clock kept; returns whether it must start
    /// the chain (none is running).
    fn want(&self, runtime: I) -> bool {
        let mut chains = self.chains();
        let chain = match chains.iter_mut().position(|chain| chain.runtime == runtime) {
            Some(at) => &mut chains[at],
            None => {
                chains.push(Chain {
                    runtime,
                    wanted: 0,
                    running: false,
                });
                chains.last_mut().expect("just pushed")
            }
        };
        chain.wanted += 1;
        !std::mem::replace(&mut chain.running, true)
    }

    /// Applies `change` to `runtime`'s chain and forgets the chain once nothing wants it
    /// and no task of it runs; returns what `change` returned, `None` if there is no chain.
    /// There always is one (a chain is kept while a future wants it or a task of it runs),
    /// but this runs in drops, which must not panic.
    fn change<R>(&self, runtime: I, change: impl FnOnce(&mut Chain<I>) -> R) -> Option<R> {
        let mut chains = self.chains();
        let at = chains.iter().position(|chain| chain.runtime == runtime);
        debug_assert!(at.is_some(), "no keeper chain for a runtime in use");
        let at = at?;
        let changed = change(&mut chains[at]);
        if chains[at].wanted == 0 && !chains[at].running {
            chains.swap_remove(at);
        }
        Some(changed)
    }
}

/// One future's claim on its operation's chain for one runtime: counted while it lives.
#[derive(Debug)]
pub(crate) struct Want<I: Copy + PartialEq> {
    keepers: Arc<Keepers<I>>,
    runtime: I,
}

impl<I: Copy + PartialEq> Drop for Want<I> {
    fn drop(&mut self) {
        self.keepers.change(self.runtime, |chain| {
            chain.wanted = chain.wanted.saturating_sub(1)
        });
    }
}

/// Counts a future as wanting `runtime`'s clock kept for the operation of `keepers` and,
/// unless that runtime's chain for it already runs, starts the chain with the wait `slice`
/// makes ([`Keeper::keep`]). The claim lasts as long as the returned [`Want`].
pub(crate) fn join<R, W>(
    keepers: &Arc<Keepers<R::Id>>,
    runtime: R,
    slice: impl FnOnce() -> W,
) -> Want<R::Id>
where
    R: Runtime,
    W: FnMut() -> bool + Send + 'static,
{
    let id = runtime.id();
    let start = keepers.want(id);
    // Made before anything that could panic, so that the count goes back down.
    let want = Want {
        keepers: keepers.clone(),
        runtime: id,
    };
    if start {
        Keeper {
            runtime,
            keepers: keepers.clone(),
            holds: true,
        }
        .keep(slice());
    }
    want
}

/// The running chain of one operation on one runtime ([`join`] starts it).
struct Keeper<R: Runtime> {
    runtime: R,
    keepers: Arc<Keepers<R::Id>>,
    /// Whether this keeper still stands for the chain's running task: dropping it then ends
    /// the chain (a task dropped unrun by a runtime shutting down, say).
    holds: bool,
}

impl<R: Runtime> Keeper<R> {
    /// Whether a future still wants the clock kept; if none does, the chain ends here, in
    /// the same step, so that a future arriving after it starts a new one.
    fn wanted(&mut self) -> bool {
        self.holds = self
            .keepers
            .change(self.runtime.id(), |chain| {
                chain.running = chain.wanted > 0;
                chain.running
            })
            .unwrap_or(false);
        self.holds
    }

    /// Keeps the clock with a chain of blocking tasks. Each calls `slice`, which waits on the
    /// device for at most [`SLICE`](super::SLICE) and returns whether the operation is still
    /// pending; the task then spawns its successor, unless no future wants the clock kept any
    /// more. `slice` must not wait longer: a runtime shutting down waits for the task running
    /// it.
    fn keep<W>(self, mut slice: W)
    where
        W: FnMut() -> bool + Send + 'static,
    {
        // The result reaches the futures themselves; the task only has to exist meanwhile. A
        // refused keeper is no worse for the futures, which wait all the same, instead of
        // their every poll panicking.
        // A task that starts after its futures are gone (queued behind other blocking tasks)
        // ends at once. Waiting its slice first held the clock for a slice per queued task,
        // in turn: 20,000 lost turns stopped it for 4 s after the last one, where a dropped
        // wait is to free it within one slice.
        let runtime = self.runtime.clone();
        let mut keeper = self;
        let spawned = runtime.spawn_blocking(move || {
            if keeper.wanted() && slice() && keeper.wanted() {
                keeper.keep(slice);
            }
        });
        if !spawned {
            crate::log!(debug, "no blocking thread to keep a paused clock still");
        }
    }
}

impl<R: Runtime> Drop for Keeper<R> {
    fn drop(&mut self) {
        if self.holds {
            self.keepers
                .change(self.runtime.id(), |chain| chain.running = false);
        }
    }
}

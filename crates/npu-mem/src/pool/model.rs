//! Loom models of a pool's hand-offs between threads, on the pool's own files.
//!
//! `repairs.rs`, the repair queue of blocks after a memory error: threads returning blocks
//! queue them, the one that finds no repair thread serving the queue starts one (or, when it
//! cannot, settles the queued blocks itself), and the repair thread takes blocks until none
//! is left. Checked: no queued block is ever left without a repair thread to take it, each is
//! settled exactly once, and one thread serves the queue (never two examining blocks at
//! once).
//!
//! `settling.rs`, the tasks awaiting `settled()`: a waiter polling while the last block comes
//! back is always woken, each of several, a waiter dropped while a change wakes takes no
//! other's wake-up, and the flag the last leaving waiter lowers never hides a waiter that
//! just arrived.

mod sync {
    pub(crate) use loom::sync::atomic::{AtomicBool, Ordering};
    pub(crate) use loom::sync::{Mutex, MutexGuard};
}

// The point of the model is to check the very files the pool compiles, under loom.
#[allow(clippy::duplicate_mod)]
#[path = "repairs.rs"]
mod repairs;
#[allow(clippy::duplicate_mod)]
#[path = "settling.rs"]
mod settling;

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};
use repairs::Repairs;
use settling::Settling;
use std::task::{Context, Poll, Wake, Waker};

/// The modelled pool: its repair queue, how often each block was settled, the repair threads
/// started (joined at the end), which starts fail (by the order they are tried in), and how
/// many repair threads are examining a block now.
struct Pool {
    repairs: Repairs<usize>,
    settled: Vec<AtomicUsize>,
    threads: Mutex<Vec<loom::thread::JoinHandle<()>>>,
    starts: AtomicUsize,
    failing: &'static [bool],
    examining: AtomicUsize,
}

impl Pool {
    fn new(blocks: usize, failing: &'static [bool]) -> Arc<Self> {
        Arc::new(Pool {
            repairs: Repairs::new(),
            settled: (0..blocks).map(|_| AtomicUsize::new(0)).collect(),
            threads: Mutex::new(Vec::new()),
            starts: AtomicUsize::new(0),
            failing,
            examining: AtomicUsize::new(0),
        })
    }

    fn settle(&self, block: usize) {
        self.settled[block].fetch_add(1, Ordering::Relaxed);
    }

    /// `Cache::suspect` for a repairable error, with `Cache::repair_queued` as the thread's
    /// body: the library's `Repairs::suspect` and `Repairs::serve`.
    fn suspect(pool: &Arc<Self>, block: usize) {
        let start = || {
            let nth = pool.starts.fetch_add(1, Ordering::Relaxed);
            if pool.failing.get(nth).copied().unwrap_or(false) {
                return Err(());
            }
            let thread = {
                let pool = pool.clone();
                loom::thread::spawn(move || pool.repairs.serve(|block| pool.examine(block)))
            };
            pool.threads.lock().unwrap().push(thread);
            Ok(())
        };
        pool.repairs
            .suspect(block, start, |block, ()| pool.settle(block));
    }

    /// `Source::repair` and the settling on a repair thread: one thread serves every block
    /// queued while it runs, so no two ever examine at once.
    fn examine(&self, block: usize) {
        let others = self.examining.fetch_add(1, Ordering::SeqCst);
        assert_eq!(others, 0, "two repair threads serve the queue at once");
        self.settle(block);
        self.examining.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Two blocks queued at once by two threads, with every repair thread starting, or the first
/// one, the second one (after the first started), or both failing to: every block is settled
/// once, and never by two repair threads at once. (One block queued while a repair thread is
/// finishing is among the interleavings: the first thread's repair thread may be taking its
/// block when the second is queued.)
#[test]
fn no_queued_block_is_left_without_a_repair_thread() {
    const FAILING: [&[bool]; 4] = [&[], &[true], &[false, true], &[true, true]];
    for failing in FAILING {
        loom::model(move || {
            let pool = Pool::new(2, failing);
            let other = {
                let pool = pool.clone();
                loom::thread::spawn(move || Pool::suspect(&pool, 1))
            };
            Pool::suspect(&pool, 0);
            other.join().unwrap();
            // Only suspects start repair threads, and they have all returned.
            let threads = std::mem::take(&mut *pool.threads.lock().unwrap());
            threads.into_iter().for_each(|t| t.join().unwrap());
            for (block, settled) in pool.settled.iter().enumerate() {
                let times = settled.load(Ordering::Relaxed);
                assert_eq!(
                    times, 1,
                    "{failing:?}: block {block} was settled {times} times"
                );
            }
        });
    }
}

/// A pool's state as `settled()` sees it: the blocks still out, under a lock as the pool's
/// `State` is, and the tasks awaiting the pool's settling (the library's `Settling`).
struct Blocks {
    out: Mutex<usize>,
    settling: Settling,
}

impl Blocks {
    fn new(out: usize) -> Arc<Self> {
        Arc::new(Blocks {
            out: Mutex::new(out),
            settling: Settling::new(),
        })
    }

    /// A block comes back, in `Cache::change_and_evict`'s order: whether the change took the
    /// pool from unsettled to settled is decided under the state lock, and the waiting tasks
    /// are woken (`Cache::wake_settling`) once it is let go of.
    fn give_back(&self) {
        let settled = {
            let mut out = self.out.lock().unwrap();
            let was_settled = *out == 0;
            *out -= 1;
            !was_settled && *out == 0
        };
        if settled {
            self.settling.take().for_each(Waker::wake);
        }
    }

    /// `Settled::poll`: the library's `Settling::poll`, reading the state under its lock.
    fn poll(&self, id: &mut Option<u64>, cx: &mut Context<'_>) -> Poll<()> {
        self.settling
            .poll(id, cx.waker(), || *self.out.lock().unwrap() == 0)
    }

    /// A task awaiting `settled()` to the end. `block_on` reports a deadlock if it stays
    /// pending without being woken.
    fn wait(&self) {
        let mut id = None;
        loom::future::block_on(std::future::poll_fn(|cx| self.poll(&mut id, cx)));
        // The future's drop.
        assert!(
            self.settling.leave(&mut id).is_none(),
            "ready, yet still listed"
        );
    }

    /// A task that polls `settled()` once with `waker` and then drops the future, as one in a
    /// `select!` that another branch won; whether that poll found the pool settled.
    fn poll_once_and_leave(&self, waker: &Waker) -> bool {
        let mut id = None;
        let ready = self
            .poll(&mut id, &mut Context::from_waker(waker))
            .is_ready();
        drop(self.settling.leave(&mut id));
        ready
    }
}

/// A task's waker that only records that it was woken.
struct Woken(AtomicBool);

impl Woken {
    fn new() -> std::sync::Arc<Self> {
        std::sync::Arc::new(Woken(AtomicBool::new(false)))
    }

    fn woken(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

impl Wake for Woken {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Runs `model` under loom with a preemption bound: with three threads, unbounded, the
/// settling models take over ten minutes where three preemptions take seconds (two are
/// enough for every break they were tried against: the flag raised after the state is read,
/// lowered by a leaving waiter that finds others listed, or lowered after the list's lock is
/// let go). `LOOM_MAX_PREEMPTIONS` overrides it.
fn check(model: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound.get_or_insert(PREEMPTIONS);
    builder.check(model);
}

/// See [`check`].
const PREEMPTIONS: usize = 3;

/// A waiter polls while the pool's last block comes back: it finds the pool settled, or it is
/// woken.
#[test]
fn a_waiter_polling_while_the_last_block_comes_back_is_always_woken() {
    check(|| {
        let blocks = Blocks::new(1);
        let returner = {
            let blocks = blocks.clone();
            loom::thread::spawn(move || blocks.give_back())
        };
        blocks.wait();
        returner.join().unwrap();
    });
}

/// Two waiters poll while the last block comes back: each is woken (a second registration
/// displaces no first, a wake-up taken by one leaves none behind).
#[test]
fn every_waiter_is_woken() {
    check(|| {
        let blocks = Blocks::new(1);
        let returner = {
            let blocks = blocks.clone();
            loom::thread::spawn(move || blocks.give_back())
        };
        let other = {
            let blocks = blocks.clone();
            loom::thread::spawn(move || blocks.wait())
        };
        blocks.wait();
        other.join().unwrap();
        returner.join().unwrap();
    });
}

/// A waiter already pending while another polls once and is dropped, as the last block comes
/// back: the dropped one's leaving (its entry removed, the flag lowered if it finds the list
/// empty) takes nothing from the pending one, which is woken.
#[test]
fn a_waiter_dropped_while_a_change_wakes_takes_no_other_wake_up() {
    check(|| {
        let blocks = Blocks::new(1);
        let pending = Woken::new();
        let mut id = None;
        let waker = Waker::from(pending.clone());
        assert!(
            blocks
                .poll(&mut id, &mut Context::from_waker(&waker))
                .is_pending()
        );
        let dropped = {
            let blocks = blocks.clone();
            loom::thread::spawn(move || {
                blocks.poll_once_and_leave(&Waker::from(Woken::new()));
            })
        };
        let returner = {
            let blocks = blocks.clone();
            loom::thread::spawn(move || blocks.give_back())
        };
        dropped.join().unwrap();
        returner.join().unwrap();
        assert!(pending.woken(), "the pending waiter slept on");
        assert!(
            blocks
                .poll(&mut id, &mut Context::from_waker(&waker))
                .is_ready()
        );
    });
}

/// A waiter arrives while another, the only one listed, polls once and leaves, lowering the
/// flag as the last to go, and the last block comes back: the arrival is still woken (the
/// flag is lowered only under the list's lock with the list found empty, and raised under it
/// by every arrival).
#[test]
fn the_flag_the_last_leaving_waiter_lowers_hides_no_arrival() {
    check(|| {
        let blocks = Blocks::new(1);
        let leaving = {
            let blocks = blocks.clone();
            loom::thread::spawn(move || {
                blocks.poll_once_and_leave(&Waker::from(Woken::new()));
            })
        };
        let returner = {
            let blocks = blocks.clone();
            loom::thread::spawn(move || blocks.give_back())
        };
        blocks.wait();
        leaving.join().unwrap();
        returner.join().unwrap();
    });
}

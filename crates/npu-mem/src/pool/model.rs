//! Loom model of a pool's repair queue, on the pool's own `repairs.rs`: threads returning
//! blocks after a memory error queue them, the one that finds no repair thread serving the
//! queue starts one (or, when it cannot, settles the queued blocks itself), and the repair
//! thread takes blocks until none is left. Checked: no queued block is ever left without a
//! repair thread to take it, each is settled exactly once, and one thread serves the queue
//! (never two examining blocks at once).

mod sync {
    pub(crate) use loom::sync::{Mutex, MutexGuard};
}

// The point of the model is to check the very file the pool compiles, under loom.
#[allow(clippy::duplicate_mod)]
#[path = "repairs.rs"]
mod repairs;

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};
use repairs::Repairs;

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

//! Loom model of a pool's repair queue, on the pool's own `repairs.rs`: threads returning
//! blocks after a memory error queue them, the one that finds no repair thread serving the
//! queue starts one (or, when it cannot, settles the queued blocks itself), and the repair
//! thread takes blocks until none is left. Checked: no queued block is ever left without a
//! repair thread to take it, and each is settled exactly once.

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

/// The modelled pool: its repair queue, how often each block was settled, and the repair
/// threads started (joined at the end), of which the first `failing` cannot start.
struct Pool {
    repairs: Repairs<usize>,
    settled: Vec<AtomicUsize>,
    threads: Mutex<Vec<loom::thread::JoinHandle<()>>>,
    failing: AtomicUsize,
}

impl Pool {
    fn new(blocks: usize, failing: usize) -> Arc<Self> {
        Arc::new(Pool {
            repairs: Repairs::new(),
            settled: (0..blocks).map(|_| AtomicUsize::new(0)).collect(),
            threads: Mutex::new(Vec::new()),
            failing: AtomicUsize::new(failing),
        })
    }

    fn settle(&self, block: usize) {
        self.settled[block].fetch_add(1, Ordering::Relaxed);
    }

    /// `Cache::suspect` for a repairable error: queues the block and starts a repair thread
    /// if told to, or settles what is queued if the thread cannot start.
    fn suspect(pool: &Arc<Self>, block: usize) {
        if !pool.repairs.queue(block) {
            return;
        }
        let cannot_start = pool
            .failing
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok();
        if cannot_start {
            pool.repairs
                .unserved()
                .into_iter()
                .for_each(|b| pool.settle(b));
            return;
        }
        let thread = {
            let pool = pool.clone();
            loom::thread::spawn(move || {
                // `Cache::repair_queued`.
                while let Some(block) = pool.repairs.next() {
                    pool.settle(block);
                }
            })
        };
        pool.threads.lock().unwrap().push(thread);
    }
}

/// Two blocks queued at once by two threads, with every repair thread starting, or the first
/// one (or both) failing to: every block is settled once. (One block queued while a repair
/// thread is finishing is among the interleavings: the first thread's repair thread may be
/// taking its block when the second is queued.)
#[test]
fn no_queued_block_is_left_without_a_repair_thread() {
    for failing in 0..=2 {
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
                assert_eq!(times, 1, "block {block} was settled {times} times");
            }
        });
    }
}

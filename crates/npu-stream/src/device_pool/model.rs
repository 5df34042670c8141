//! Loom model of a device pool out of memory waiting for memory on its way back, on the
//! pool's own `returns.rs`: a trim (or an eviction) takes the cached blocks and frees them
//! under the drain lock, while requests out of memory free the cache themselves and wait for
//! a drain of the release stream (runtime pool) or retry (caching backend). Checked: a
//! request is never left failing while memory it could use was given back (no lost wake-up),
//! and it never waits when no memory is on its way back.
//!
//! The device is modelled by its release stream, a FIFO of frees and synchronisations:
//! awaiting a synchronisation runs the stream up to it (the device runs it in order, and the
//! wait returns once it has). A free not yet run leaves its memory unusable. The drain lock
//! is a plain lock here: the library's (`contain::lock_here`) also refuses a thread that
//! holds it already, which the model's drain avoids by freeing the cache without the lock it
//! holds, as the library's nested refusal does.

mod sync {
    pub(crate) use loom::sync::Mutex;
    pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};

    pub(crate) fn lock_drain<T>(
        mutex: &Mutex<T>,
    ) -> Option<impl std::ops::DerefMut<Target = T> + '_> {
        Some(mutex.lock().unwrap())
    }
}

// The point of the model is to check the very file the pool compiles, under loom.
#[allow(clippy::duplicate_mod)]
#[path = "returns.rs"]
mod returns;

use std::collections::VecDeque;

use loom::sync::{Arc, Mutex};
use returns::{Drain, Returns};

/// One step queued on the release stream.
enum Step {
    /// Frees this many blocks.
    Free(usize),
    /// A synchronisation, by number.
    Sync(u64),
}

/// The device: its free memory (in blocks) and the release stream.
#[derive(Default)]
struct Device {
    free: usize,
    stream: VecDeque<Step>,
    /// Synchronisations submitted so far; also the number of the latest.
    syncs: u64,
    /// The latest synchronisation the stream has run.
    synced: u64,
}

/// Which backend the modelled pool has.
#[derive(Clone, Copy, Debug)]
enum Backend {
    /// Frees are queued on the release stream; a request out of memory drains it.
    Runtime,
    /// Frees are made at once; a request out of memory retries if any were.
    Caching,
}

/// The modelled pool: its cached blocks, its returns, and the device.
struct Pool {
    backend: Backend,
    cached: Mutex<usize>,
    returns: Returns<u64>,
    device: Mutex<Device>,
}

impl Pool {
    /// A pool of `backend` holding `cached` blocks: all the device's memory.
    fn new(backend: Backend, cached: usize) -> Arc<Self> {
        Arc::new(Pool {
            backend,
            cached: Mutex::new(cached),
            returns: Returns::new(),
            device: Mutex::new(Device::default()),
        })
    }

    /// `aclrtMalloc` / `aclrtMemPoolMallocAsync` of one block: whether the device had it.
    fn malloc(&self) -> bool {
        let mut device = self.device.lock().unwrap();
        let got = device.free > 0;
        if got {
            device.free -= 1;
        }
        got
    }

    /// `Cache::take_and_free` inside `giving_back` held already: takes every cached block and
    /// frees them (`Source::free`: queued on the release stream, or made), counting the frees;
    /// whether there were any.
    fn free_cache(&self) -> bool {
        let blocks = std::mem::take(&mut *self.cached.lock().unwrap());
        if blocks == 0 {
            return false; // `Cache::free_blocks` makes no call for none
        }
        {
            let mut device = self.device.lock().unwrap();
            match self.backend {
                Backend::Runtime => device.stream.push_back(Step::Free(blocks)),
                Backend::Caching => device.free += blocks,
            }
        }
        self.returns.counted();
        true
    }

    /// A trim, or an eviction: the cache's blocks given back (`Source::giving_back`).
    fn trim(&self) {
        self.returns.giving_back(|| self.free_cache());
    }

    /// `Stream::synchronize` of the release stream: its number, to await and to publish.
    fn synchronize(&self) -> (u64, u64) {
        let mut device = self.device.lock().unwrap();
        device.syncs += 1;
        let sync = device.syncs;
        device.stream.push_back(Step::Sync(sync));
        (sync, sync)
    }

    /// Awaits synchronisation `sync`: the device has run the stream up to it.
    fn wait(&self, sync: u64) {
        let mut device = self.device.lock().unwrap();
        assert!(sync <= device.syncs, "awaited a drain never submitted");
        while device.synced < sync {
            match device
                .stream
                .pop_front()
                .expect("the synchronisation is queued")
            {
                Step::Free(blocks) => device.free += blocks,
                Step::Sync(ran) => device.synced = ran,
            }
        }
    }

    /// A request for one block (`DevicePool::new_block`): whether it got one, and whether it
    /// waited for memory on its way back: drained the release stream (runtime pool), or tried
    /// again (caching backend).
    fn alloc(&self) -> (bool, bool) {
        match self.backend {
            // `malloc_counting`, then `malloc_again`.
            Backend::Caching => match self.returns.attempt(|| self.malloc()) {
                (_, true) => (true, false),
                (attempted, false) => {
                    let retried =
                        self.returns
                            .retry(attempted, || self.free_cache(), || self.malloc());
                    (retried.unwrap_or(false), retried.is_some())
                }
            },
            // `malloc_on`, then `drain_cache`.
            Backend::Runtime => {
                if self.malloc() {
                    return (true, false);
                }
                match self
                    .returns
                    .drain(|| self.free_cache(), || self.synchronize())
                {
                    None => (false, false),
                    Some(Drain::Own(sync) | Drain::Theirs(sync)) => {
                        self.wait(sync);
                        (self.malloc(), true)
                    }
                }
            }
        }
    }
}

const BACKENDS: [Backend; 2] = [Backend::Runtime, Backend::Caching];

/// Runs `work` on `pool` on a thread of its own, racing the model's other threads.
fn on_its_own_thread<T: 'static>(
    pool: &Arc<Pool>,
    work: fn(&Pool) -> T,
) -> loom::thread::JoinHandle<T> {
    let pool = pool.clone();
    loom::thread::spawn(move || work(&pool))
}

/// A trim gives the only cached block back while a request is out of memory: the request
/// gets it, whichever of them takes the block out of the cache.
#[test]
fn a_request_out_of_memory_gets_what_a_trim_gives_back() {
    for backend in BACKENDS {
        loom::model(move || {
            let pool = Pool::new(backend, 1);
            let trim = on_its_own_thread(&pool, Pool::trim);
            let (got, _) = pool.alloc();
            trim.join().unwrap();
            assert!(got, "{backend:?}: failed with the memory on its way back");
        });
    }
}

/// Two requests out of memory, two cached blocks: the first to free the cache drains it, the
/// other waits for that drain; both get a block. On the runtime pool the release stream is
/// synchronised once: the drain holds the drain lock from freeing the cache to publishing its
/// synchronisation, so the other request, finding the cache empty, finds the drain too
/// (released in between, it took the frees for uncovered and synchronised again).
#[test]
fn two_requests_out_of_memory_both_get_what_one_of_them_gave_back() {
    for backend in BACKENDS {
        loom::model(move || {
            let pool = Pool::new(backend, 2);
            let other = on_its_own_thread(&pool, Pool::alloc);
            let (got, _) = pool.alloc();
            let (other_got, _) = other.join().unwrap();
            assert!(got && other_got, "{backend:?}: {got} / {other_got}");
            let syncs = pool.device.lock().unwrap().syncs;
            match backend {
                Backend::Runtime => assert_eq!(syncs, 1, "drains of one batch of frees"),
                Backend::Caching => assert_eq!(syncs, 0, "the caching backend never drains"),
            }
        });
    }
}

/// Nothing cached and nothing given back (a trim finds the cache empty): two requests out
/// of memory both fail, without waiting for the release stream or trying again.
#[test]
fn a_request_never_waits_for_memory_not_on_its_way_back() {
    for backend in BACKENDS {
        loom::model(move || {
            let pool = Pool::new(backend, 0);
            let trim = on_its_own_thread(&pool, Pool::trim);
            let other = on_its_own_thread(&pool, Pool::alloc);
            let mine = pool.alloc();
            let theirs = other.join().unwrap();
            trim.join().unwrap();
            assert_eq!(
                (mine, theirs),
                ((false, false), (false, false)),
                "{backend:?}"
            );
        });
    }
}

/// A request drained the release stream and got its block; a block handed out before comes
/// back to the cache and a trim gives it back while a second request is out of memory: the
/// earlier drain does not cover that free, and the request still gets the block.
#[test]
fn a_request_waits_for_frees_the_latest_drain_does_not_cover() {
    for backend in BACKENDS {
        loom::model(move || {
            let pool = Pool::new(backend, 1);
            assert!(pool.alloc().0, "the cached block, once drained");
            // The block handed out before the model began, returned.
            *pool.cached.lock().unwrap() += 1;
            let trim = on_its_own_thread(&pool, Pool::trim);
            let (got, _) = pool.alloc();
            trim.join().unwrap();
            assert!(got, "{backend:?}: failed with the memory on its way back");
        });
    }
}

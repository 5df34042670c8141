//! Stream-ordered memory pools (aclrtMemPool*): blocks of device memory that
//! aclrtMemPoolFreeAsync returns to the pool at a point in a stream, and that a later
//! aclrtMemPoolMallocAsync may hand out again once the reuse is ordered after that point.
//!
//! A freed block remembers the stream it was freed on and a record placed on that stream right
//! after the free. A malloc on stream `S` may reuse it when:
//! - `S` is the freeing stream (stream order);
//! - FOLLOW_EVENT_DEPENDENCIES: `S` was made to wait (StreamWaitEvent) on a record of the
//!   freeing stream at or after the free;
//! - ALLOW_OPPORTUNISTIC: the free has already executed on the device;
//! - ALLOW_INTERNAL_DEPENDENCIES: always, with a wait for the free's record queued on `S`.
//!
//! Among the blocks large enough, the smallest is taken (the reference's "closest size"),
//! preferring one that needs no queued wait.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};

use npu_sys::*;

use crate::device::Device;
use crate::error::{Res, ensure, fail};
use crate::event::{Outcome, Record};
use crate::handle::{Handle, HandleTable, Kind};
use crate::memory::{AllocKind, MemoryMap, PAGE};
use crate::sim::Sim;
use crate::stream::Stream;
use crate::sync::{lock, read, write};
use crate::task::{Op, Task};

/// Why an allocation racing aclrtMemPoolDestroy fails.
const DESTROYED: &str = "the memory pool was destroyed during the allocation";

/// The reuse switches, in attribute order (FOLLOW_EVENT_DEPENDENCIES, ALLOW_OPPORTUNISTIC,
/// ALLOW_INTERNAL_DEPENDENCIES).
#[derive(Clone, Copy)]
pub(crate) enum Reuse {
    FollowEvents = 0,
    Opportunistic = 1,
    InternalDependencies = 2,
}

/// The pool's counters (aclrtMemPoolGetAttr's RESERVED_MEM_* and USED_MEM_*), in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    pub(crate) reserved: u64,
    pub(crate) reserved_high: u64,
    pub(crate) used: u64,
    pub(crate) used_high: u64,
}

enum BlockState {
    Used,
    /// Returned by a FreeAsync on `stream`; `record` follows the free on that stream.
    Free {
        stream: Arc<Stream>,
        record: Arc<Record>,
    },
}

struct Block {
    bytes: u64,
    state: BlockState,
}

impl Block {
    /// Whether nothing submitted before its free can still be running: it may be released.
    fn releasable(&self) -> bool {
        matches!(&self.state, BlockState::Free { record, .. }
            if matches!(record.outcome(), Outcome::Done { .. }))
    }
}

/// How a free block may serve a malloc on a given stream.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fit {
    Direct,
    AfterWait,
}

struct State {
    /// Set by aclrtMemPoolDestroy, under this lock as it takes the blocks: an allocation
    /// racing the destruction must not add a block nobody will release.
    destroyed: bool,
    blocks: BTreeMap<usize, Block>,
    reuse: [bool; 3],
    release_threshold: u64,
    usage: Usage,
}

/// One memory pool (aclrtMemPoolCreate).
pub(crate) struct Pool {
    pub(crate) handle: Handle,
    pub(crate) device: Arc<Device>,
    max_size: u64,
    state: Mutex<State>,
}

/// Every pool, and which pool each block belongs to.
pub(crate) struct Pools {
    table: HandleTable<Pool>,
    owners: RwLock<BTreeMap<usize, Handle>>,
}

impl Pools {
    pub(crate) const fn new() -> Self {
        Self {
            table: HandleTable::new(Kind::MemPool),
            owners: RwLock::new(BTreeMap::new()),
        }
    }

    /// Creates a pool of at most `max_size` bytes on `device`.
    pub(crate) fn create(&self, device: &Arc<Device>, max_size: u64) -> Res<Handle> {
        let handle = self.table.reserve()?;
        let pool = Pool {
            handle,
            device: device.clone(),
            max_size,
            state: Mutex::new(State {
                destroyed: false,
                blocks: BTreeMap::new(),
                reuse: [true; 3],
                release_threshold: 0,
                usage: Usage::default(),
            }),
        };
        self.table.fill(handle, Arc::new(pool));
        Ok(handle)
    }

    pub(crate) fn resolve(&self, handle: Handle) -> Res<Arc<Pool>> {
        self.table.resolve(handle)
    }

    /// Whether `ptr` is the start of a block of a live pool.
    pub(crate) fn owns(&self, ptr: usize) -> bool {
        read(&self.owners).contains_key(&ptr)
    }

    /// The pool holding the block starting at `ptr`, or ACL_ERROR_RT_MEMORY_FREE.
    pub(crate) fn owner(&self, ptr: usize) -> Res<Arc<Pool>> {
        let handle = read(&self.owners).get(&ptr).copied();
        match handle.and_then(|h| self.table.get(h)) {
            Some(pool) => Ok(pool),
            None => fail!(
                ACL_ERROR_RT_MEMORY_FREE,
                "{ptr:#x} is not the address of memory allocated by aclrtMemPoolMallocAsync"
            ),
        }
    }

    /// Releases the pool's memory (the caller has synchronised its device) and its handle.
    /// Fails (107017) if another call destroyed the pool first.
    pub(crate) fn destroy(&self, memory: &MemoryMap, pool: &Pool) -> Res<()> {
        self.table.remove_live(pool.handle)?;
        let blocks = {
            let mut state = lock(&pool.state);
            state.destroyed = true;
            std::mem::take(&mut state.blocks)
        };
        self.release(memory, pool, blocks);
        Ok(())
    }

    /// Releases free blocks whose frees have executed until the pool holds at most `keep`
    /// bytes; returns how many bytes it holds then.
    pub(crate) fn trim(&self, memory: &MemoryMap, pool: &Pool, keep: u64) -> u64 {
        let (blocks, reserved) = {
            let mut state = lock(&pool.state);
            let mut released = BTreeMap::new();
            let mut candidates: Vec<(u64, usize)> = state
                .blocks
                .iter()
                .filter(|(_, block)| block.releasable())
                .map(|(&base, block)| (block.bytes, base))
                .collect();
            // Largest first: fewest releases to get under the target.
            candidates.sort_unstable_by(|a, b| b.cmp(a));
            for (bytes, base) in candidates {
                if state.usage.reserved <= keep {
                    break;
                }
                if let Some(block) = state.blocks.remove(&base) {
                    state.usage.reserved -= bytes;
                    released.insert(base, block);
                }
            }
            (released, state.usage.reserved)
        };
        self.release(memory, pool, blocks);
        reserved
    }

    /// After a stream synchronisation on `device`: each of its pools holding more idle memory
    /// than its release threshold gives the excess back.
    pub(crate) fn release_idle(&self, memory: &MemoryMap, device: &Device) {
        for pool in self.table.live() {
            if pool.device.id != device.id {
                continue;
            }
            let keep = {
                let state = lock(&pool.state);
                state.usage.used.saturating_add(state.release_threshold)
            };
            self.trim(memory, &pool, keep);
        }
    }

    /// Allocates `bytes` (already rounded) for use on `stream`, reusing a free block where
    /// the pool's reuse rules allow.
    pub(crate) fn malloc(
        &self,
        memory: &MemoryMap,
        pool: &Pool,
        stream: &Arc<Stream>,
        bytes: u64,
    ) -> Res<usize> {
        {
            let mut guard = lock(&pool.state);
            let state = &mut *guard;
            ensure!(!state.destroyed, ACL_ERROR_RT_INVALID_HANDLE, "{DESTROYED}");
            let found = best_fit(state, stream, bytes);
            if let Some((base, fit)) = found
                && let Some(block) = state.blocks.get_mut(&base)
            {
                if fit == Fit::AfterWait
                    && let BlockState::Free { record, .. } = &block.state
                {
                    stream.submit(Task::new(Op::Wait {
                        record: record.clone(),
                        timeout: None,
                    }))?;
                }
                block.state = BlockState::Used;
                state.usage.note_use(block.bytes);
                return Ok(base);
            }
        }
        self.grow(memory, pool, bytes)
    }

    /// Adds a new block of `bytes` to the pool, in use; releases idle blocks first if the pool
    /// would exceed its maximum size.
    fn grow(&self, memory: &MemoryMap, pool: &Pool, bytes: u64) -> Res<usize> {
        ensure!(
            bytes <= pool.max_size,
            ACL_ERROR_RT_MEMORY_ALLOCATION,
            "a block of {bytes} bytes does not fit the memory pool's {} bytes",
            pool.max_size
        );
        let reserved = lock(&pool.state).usage.reserved;
        if reserved.saturating_add(bytes) > pool.max_size {
            let room = pool.max_size.saturating_sub(bytes);
            let left = self.trim(memory, pool, room);
            ensure!(
                left <= room,
                ACL_ERROR_RT_MEMORY_ALLOCATION,
                "the memory pool cannot grow by {bytes} bytes: it holds {left} of its {} bytes",
                pool.max_size
            );
        }
        pool.device.reserve(bytes)?;
        let kind = AllocKind::Device {
            device: pool.device.id,
            accounted: bytes,
            page_size: PAGE as u32,
        };
        let base = match memory.allocate(bytes as usize, kind) {
            Ok(base) => base,
            Err(error) => {
                pool.device.unreserve(bytes);
                return Err(error);
            }
        };
        write(&self.owners).insert(base, pool.handle);
        let mut state = lock(&pool.state);
        if state.destroyed {
            drop(state);
            let block = Block {
                bytes,
                state: BlockState::Used,
            };
            self.release(memory, pool, BTreeMap::from([(base, block)]));
            fail!(ACL_ERROR_RT_INVALID_HANDLE, "{DESTROYED}");
        }
        state.blocks.insert(
            base,
            Block {
                bytes,
                state: BlockState::Used,
            },
        );
        state.usage.reserved += bytes;
        state.usage.reserved_high = state.usage.reserved_high.max(state.usage.reserved);
        state.usage.note_use(bytes);
        Ok(base)
    }

    /// Returns the block at `ptr` to its pool at this point of `stream`.
    pub(crate) fn free(&self, pool: &Pool, ptr: usize, stream: &Arc<Stream>) -> Res<()> {
        let mut guard = lock(&pool.state);
        let state = &mut *guard;
        let block = match state.blocks.get_mut(&ptr) {
            Some(block) if matches!(block.state, BlockState::Used) => block,
            _ => fail!(
                ACL_ERROR_RT_MEMORY_FREE,
                "{ptr:#x} was already returned to its memory pool"
            ),
        };
        let record = Arc::new(Record::new(stream.clone()));
        stream.submit(Task::new(Op::Record(record.clone())))?;
        block.state = BlockState::Free {
            stream: stream.clone(),
            record,
        };
        state.usage.used -= block.bytes;
        Ok(())
    }

    /// Frees released blocks' memory, outside the pool's lock.
    fn release(&self, memory: &MemoryMap, pool: &Pool, blocks: BTreeMap<usize, Block>) {
        if blocks.is_empty() {
            return;
        }
        let mut owners = write(&self.owners);
        for base in blocks.keys() {
            owners.remove(base);
        }
        drop(owners);
        for (base, block) in blocks {
            // The block came from `memory.allocate` and left the pool above: nobody else can
            // free it, so this cannot fail.
            if memory.free(base, false).is_ok() {
                pool.device.unreserve(block.bytes);
            }
        }
    }
}

impl Usage {
    fn note_use(&mut self, bytes: u64) {
        self.used += bytes;
        self.used_high = self.used_high.max(self.used);
    }
}

/// The smallest free block of at least `bytes` that `stream` may reuse, preferring one that
/// needs no wait.
fn best_fit(state: &State, stream: &Stream, bytes: u64) -> Option<(usize, Fit)> {
    state
        .blocks
        .iter()
        .filter(|(_, block)| block.bytes >= bytes)
        .filter_map(|(&base, block)| {
            let BlockState::Free {
                stream: from,
                record,
            } = &block.state
            else {
                return None;
            };
            let fit = reuse_fit(state, stream, from, record)?;
            Some(((fit, block.bytes), base))
        })
        .min()
        .map(|((fit, _), base)| (base, fit))
}

/// How a block freed on `from` (followed by `record`) may serve a malloc on `stream`.
fn reuse_fit(state: &State, stream: &Stream, from: &Stream, record: &Record) -> Option<Fit> {
    let allowed = |reuse: Reuse| state.reuse[reuse as usize];
    if from.handle == stream.handle
        || (allowed(Reuse::FollowEvents) && stream.waited_through(from.handle) >= record.position())
        || (allowed(Reuse::Opportunistic) && matches!(record.outcome(), Outcome::Done { .. }))
    {
        Some(Fit::Direct)
    } else if allowed(Reuse::InternalDependencies) && record.doom().is_none() {
        Some(Fit::AfterWait)
    } else {
        None
    }
}

impl Pool {
    pub(crate) fn usage(&self) -> Usage {
        lock(&self.state).usage
    }

    pub(crate) fn reuse(&self, reuse: Reuse) -> bool {
        lock(&self.state).reuse[reuse as usize]
    }

    pub(crate) fn set_reuse(&self, reuse: Reuse, on: bool) {
        lock(&self.state).reuse[reuse as usize] = on;
    }

    pub(crate) fn release_threshold(&self) -> u64 {
        lock(&self.state).release_threshold
    }

    pub(crate) fn set_release_threshold(&self, bytes: u64) {
        lock(&self.state).release_threshold = bytes;
    }

    /// Resets the high-water marks to the current values.
    pub(crate) fn reset_high(&self, reserved: bool) {
        let mut state = lock(&self.state);
        let usage = &mut state.usage;
        if reserved {
            usage.reserved_high = usage.reserved;
        } else {
            usage.used_high = usage.used;
        }
    }
}

/// Releases idle pool memory after a successful synchronisation of a stream of `device`.
pub(crate) fn after_sync(sim: &Sim, device: &Device) {
    sim.pools.release_idle(&sim.memory, device);
}

//! Freed memory held back from reuse: the address ranges of the last frees stay reserved, with
//! no access and no pages, before the host may hand them out again.
//!
//! A task queued before its memory was freed must fault (507013) when it runs, and an address
//! freed twice must be refused (207002). Both are decided by looking the address up when the
//! task runs or the second free comes, so both need the address to stay unallocated meanwhile.
//! If the host mapped the next allocation, made on any thread, at the range just unmapped, the
//! task would write into that allocation instead, and the second free would free it. The
//! host's mapper prefers exactly that range, so the window is real. Keeping the last frees'
//! ranges reserved closes it; beyond them, as on a device whose allocator reuses addresses,
//! nothing is promised.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

use crate::sync::lock;

/// Freed ranges held back at most: each is one mapping of the process (adjacent ones merge),
/// far below the kernel's default limit of 65,530.
const RANGES: usize = 1024;
/// Address space held back at most; no memory backs it.
const BYTES: usize = 1 << 40;

struct Held {
    /// The ranges in the order they were retired, oldest first: the first to be given back.
    order: VecDeque<(usize, usize)>,
    /// The same ranges by start, for [`holds`], which copies of pageable memory ask.
    by_base: BTreeMap<usize, usize>,
    /// Ranges held by a free whose mapping is not retired yet (a task may still run on it):
    /// never unmapped to make room.
    live: std::collections::BTreeSet<usize>,
    bytes: usize,
}

static HELD: Mutex<Held> = Mutex::new(Held {
    order: VecDeque::new(),
    by_base: BTreeMap::new(),
    live: std::collections::BTreeSet::new(),
    bytes: 0,
});

/// Holds `[base, base+len)` back from now on: a copy naming an address in it is refused, and
/// no placement takes it. Called by a free before the allocation leaves the map, so that a
/// lookup racing the free finds either the allocation or the range held back, never an
/// address it would take for the caller's own host memory (which a memset writes at once,
/// into a range about to become inaccessible). The oldest ranges held beyond the bounds are
/// unmapped. Holding a range already held changes nothing.
pub(crate) fn hold(base: usize, len: usize) {
    hold_as(base, len, true);
}

/// [`hold`], the range still `live` (mapped, a task may run on it) or not.
fn hold_as(base: usize, len: usize, live: bool) {
    let evicted: Vec<(usize, usize)> = {
        let mut held = lock(&HELD);
        if !live {
            held.live.remove(&base);
        }
        if held.by_base.get(&base) == Some(&len) {
            return;
        }
        held.order.push_back((base, len));
        held.by_base.insert(base, len);
        if live {
            held.live.insert(base);
        }
        held.bytes += len;
        let mut evicted = Vec::new();
        // The oldest first, passing over those still live (they go back to the end).
        let mut looked = 0;
        while (held.order.len() > RANGES || held.bytes > BYTES) && looked < held.order.len() {
            let Some((old, old_len)) = held.order.pop_front() else {
                break;
            };
            looked += 1;
            if held.live.contains(&old) {
                held.order.push_back((old, old_len));
                continue;
            }
            held.by_base.remove(&old);
            held.bytes -= old_len;
            evicted.push((old, old_len));
        }
        evicted
    };
    for (old, old_len) in evicted {
        // SAFETY: a range this module reserved (retired, no longer live) and has just stopped
        // holding.
        unsafe { unmap(old, old_len) };
    }
}

/// Gives back the pages of the mapping `[base, base+len)` and holds its address range back;
/// the oldest ranges held beyond the bounds are unmapped.
///
/// # Safety
///
/// `[base, base+len)` is a whole private or shared mapping that nothing refers to any more.
pub(crate) unsafe fn retire(base: usize, len: usize) {
    // Held first (unless its free held it already, while it was live), so that from the free
    // on a copy naming the range is refused rather than let through to the mapping being
    // replaced.
    hold_as(base, len, false);
    // SAFETY: replaces the caller's mapping, which nothing refers to, by an inaccessible one
    // of the same range: its pages go back to the host, its address stays this process's.
    let kept = unsafe {
        libc::mmap(
            base as *mut libc::c_void,
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    if kept as usize != base {
        let mut held = lock(&HELD);
        if held.by_base.remove(&base).is_some() {
            held.order.retain(|&(b, _)| b != base);
            held.bytes -= len;
        }
        drop(held);
        // SAFETY: as above; the range is then simply given back.
        unsafe { unmap(base, len) };
    }
}

/// Whether `ptr` lies in a range held back: memory the runtime gave out and took back, which
/// no host allocation can occupy meanwhile.
pub(crate) fn holds(ptr: usize) -> bool {
    lock(&HELD)
        .by_base
        .range(..=ptr)
        .next_back()
        .is_some_and(|(&base, &len)| ptr - base < len)
}

/// The end of a range held back that overlaps `[at, at+len)`, if one does (the ranges held
/// do not overlap one another: each was a live mapping of its own when it was retired).
pub(crate) fn overlapping(at: usize, len: usize) -> Option<usize> {
    let stop = at.saturating_add(len);
    lock(&HELD)
        .by_base
        .range(..stop)
        .next_back()
        .map(|(&base, &held)| base + held)
        .filter(|&end| end > at)
}

/// # Safety
///
/// `[base, base+len)` is a mapping that nothing refers to.
unsafe fn unmap(base: usize, len: usize) {
    // SAFETY: the caller's contract.
    unsafe { libc::munmap(base as *mut libc::c_void, len) };
}

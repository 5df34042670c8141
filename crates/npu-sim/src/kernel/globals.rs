//! Device globals of kernel libraries (aclrtBinaryGetGlobal). A variable a shared object
//! declares with `NPUSIM_GLOBAL` is the global's memory itself: the library's kernels read and
//! write it directly, and while a loaded binary holds it the memory map counts it as device
//! memory of the device it was first asked for on, so copies and memsets reach it as such.
//! One shared object loaded twice is one instance (the loader maps it once), so its globals
//! are counted once per binary holding them and leave the map with the last.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use crate::memory::{AllocKind, MemoryMap, PAGE};
use crate::sync::lock;

/// Kernel libraries kept mapped after their binaries' unload, at most: enough for a program
/// that loads its kernels once or a few times, bounded for one that reloads them in a loop.
const KEPT_LIBRARIES: usize = 64;

/// Address → how many loaded binaries hold the global there.
static HELD: Mutex<BTreeMap<usize, usize>> = Mutex::new(BTreeMap::new());
/// Address → (length, library) of every global no binary holds any more, while its library is
/// kept mapped ([`keep`]): nothing else can come to live at these addresses meanwhile.
static RETIRED: Mutex<BTreeMap<usize, (usize, usize)>> = Mutex::new(BTreeMap::new());
/// The libraries kept mapped, oldest first.
static KEPT: Mutex<VecDeque<Arc<libloading::Library>>> = Mutex::new(VecDeque::new());

/// The key a library's globals are retired under.
pub(crate) fn library_key(library: &Arc<libloading::Library>) -> usize {
    Arc::as_ptr(library) as usize
}

/// Keeps `library`, which gave out a device global, mapped beyond its binary's unload, so
/// that after the unload its globals' addresses are recognised as device memory that is gone
/// (see [`retired`]): a copy there fails with a code instead of faulting. Beyond
/// [`KEPT_LIBRARIES`] the oldest is let go, and its globals are forgotten with it.
pub(crate) fn keep(library: &Arc<libloading::Library>) {
    let evicted = {
        let mut kept = lock(&KEPT);
        kept.push_back(library.clone());
        (kept.len() > KEPT_LIBRARIES)
            .then(|| kept.pop_front())
            .flatten()
    };
    if let Some(evicted) = evicted {
        let key = library_key(&evicted);
        lock(&RETIRED).retain(|_, &mut (_, of)| of != key);
        drop(evicted);
    }
}

/// A binary starts holding the global at `[addr, addr+len)`; the first holder puts it in the
/// memory map as device memory of `device`.
pub(crate) fn hold(memory: &MemoryMap, addr: usize, len: usize, device: i32) {
    lock(&RETIRED).remove(&addr);
    let mut held = lock(&HELD);
    let holders = held.entry(addr).or_insert(0);
    if *holders == 0 {
        let kind = AllocKind::Device {
            device,
            accounted: 0,
            page_size: PAGE as u32,
        };
        memory.adopt(addr, len, kind);
    }
    *holders += 1;
}

/// A binary stops holding the global at `addr` of the library `key` (it was unloaded); the
/// last holder takes it out of the memory map once no task touches it.
pub(crate) fn release(memory: &MemoryMap, addr: usize, key: usize) {
    let mut held = lock(&HELD);
    let Some(holders) = held.get_mut(&addr) else {
        return;
    };
    *holders -= 1;
    if *holders == 0 {
        held.remove(&addr);
        if let Some(len) = memory.disown(addr) {
            let kept = lock(&KEPT)
                .iter()
                .any(|library| library_key(library) == key);
            if kept {
                lock(&RETIRED).insert(addr, (len, key));
            }
        }
    }
}

/// Whether `ptr` lies in a global whose binaries were all unloaded: device memory that is
/// gone, not host memory.
pub(crate) fn retired(ptr: usize) -> bool {
    lock(&RETIRED)
        .range(..=ptr)
        .next_back()
        .is_some_and(|(&addr, &(len, _))| ptr - addr < len)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The libraries kept mapped are bounded: letting the oldest go forgets its globals, whose
    /// addresses the host may then reuse.
    #[test]
    fn the_oldest_kept_library_is_let_go_with_its_globals() {
        let open = || {
            // SAFETY: the simulator's own kernel library, whose initialisers do nothing.
            Arc::new(unsafe { libloading::Library::new(super::super::LIBRARY_PATH) }.unwrap())
        };
        let first = open();
        keep(&first);
        // An address no real global has, so other tests' globals are not disturbed.
        let addr = usize::MAX - 4096;
        lock(&RETIRED).insert(addr, (64, library_key(&first)));
        assert!(retired(addr + 63) && !retired(addr + 64));
        for _ in 0..KEPT_LIBRARIES {
            keep(&open());
        }
        assert!(!retired(addr), "forgotten with its library");
        assert!(lock(&KEPT).len() <= KEPT_LIBRARIES);
    }
}

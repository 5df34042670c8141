//! Device globals of kernel libraries (aclrtBinaryGetGlobal). A variable a shared object
//! declares with `NPUSIM_GLOBAL` is the global's memory itself: the library's kernels read and
//! write it directly, and while a loaded binary holds it the memory map counts it as device
//! memory of the device it was first asked for on, so copies and memsets reach it as such.
//! One shared object loaded twice is one instance (the loader maps it once), so its globals
//! are counted once per binary holding them and leave the map with the last.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::memory::{AllocKind, MemoryMap, PAGE};
use crate::sync::lock;

/// Address → how many loaded binaries hold the global there.
static HELD: Mutex<BTreeMap<usize, usize>> = Mutex::new(BTreeMap::new());
/// Address → length of every global no binary holds any more. Their libraries stay mapped
/// (`Binary::global`), so nothing else can come to live at these addresses.
static RETIRED: Mutex<BTreeMap<usize, usize>> = Mutex::new(BTreeMap::new());

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

/// A binary stops holding the global at `addr` (it was unloaded); the last holder takes it out
/// of the memory map once no task touches it.
pub(crate) fn release(memory: &MemoryMap, addr: usize) {
    let mut held = lock(&HELD);
    let Some(holders) = held.get_mut(&addr) else {
        return;
    };
    *holders -= 1;
    if *holders == 0 {
        held.remove(&addr);
        if let Some(len) = memory.disown(addr) {
            lock(&RETIRED).insert(addr, len);
        }
    }
}

/// Whether `ptr` lies in a global whose binaries were all unloaded: device memory that is
/// gone, not host memory.
pub(crate) fn retired(ptr: usize) -> bool {
    lock(&RETIRED)
        .range(..=ptr)
        .next_back()
        .is_some_and(|(&addr, &len)| ptr - addr < len)
}

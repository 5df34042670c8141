//! The simulator's memory: device and pinned allocations (host memory the simulator owns),
//! host registrations, and the pointer classification copies are corrected by.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use npu_sys::*;

use crate::error::{Res, ensure, fail};
use crate::sync::{Bell, read, wait_until, write};
use crate::uce::UceMap;

/// Host page size assumed for registrations.
pub(crate) const PAGE: usize = 4096;

/// Where a pointer lives, as the runtime's copy-kind correction sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PtrClass {
    /// Device memory of this device.
    Device(i32),
    /// Pinned (aclrtMallocHost) or registered host memory.
    Host,
    /// Host memory the runtime knows nothing about (malloc, stack, ...).
    Unregistered,
}

/// A pointer as [`MemoryMap::locate`] found it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Located {
    pub(crate) class: PtrClass,
    /// The simulator's allocation holding the pointer: (base, length, kind).
    pub(crate) allocation: Option<(usize, usize, AllocKind)>,
    /// The bytes from the allocation's base that one access may cover: its length, or, for a
    /// virtual-memory mapping, up to the end of the mappings adjoining it in its reserved
    /// range (contiguous virtual memory is what such a range is for).
    pub(crate) span: usize,
    /// For registered host memory, the bytes from the pointer to the registration's end.
    pub(crate) registered: usize,
    /// Memory another process exported and this one imported by key (aclrtIpcMemImportByKey).
    pub(crate) imported: bool,
}

impl Located {
    /// Checks `[ptr, ptr+len)` ends inside the address space and, for a pointer the simulator
    /// owns (device or pinned), inside its allocation. Returns whether the range is memory the runtime knows, and so
    /// re-checked when a task runs: simulator-owned, or registered host memory (whose
    /// registration a task finds gone if aclrtHostUnregister came first, as a replay of a
    /// capture made before it would).
    pub(crate) fn check_range(&self, ptr: usize, len: usize, what: &str) -> Res<bool> {
        // Whatever memory it is (pageable memory is the caller's to vouch for, not checked
        // further), no range ends past the address space: a memset or copy would write that far.
        ensure!(
            ptr.checked_add(len).is_some(),
            ACL_ERROR_RT_PARAM_INVALID,
            "{what} range {ptr:#x}+{len} runs past the end of the address space"
        );
        match self.allocation {
            Some((base, _, _)) => {
                let span = self.span;
                // Checked: a caller's `len` near usize::MAX would wrap the sum round to a
                // small end that passes, and the task would then write that far.
                ensure!(
                    (ptr - base).checked_add(len).is_some_and(|end| end <= span),
                    ACL_ERROR_RT_PARAM_INVALID,
                    "{what} range {ptr:#x}+{len} runs past the end of its allocation ({base:#x}+{span})"
                );
                Ok(true)
            }
            // Host memory outside the simulator's allocations is registered memory, re-checked
            // when the task runs if the registration holds the whole range (a range running
            // past it is partly the caller's pageable memory, which only the caller vouches
            // for, as for pageable memory).
            None => Ok(self.class == PtrClass::Host && len <= self.registered),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AllocKind {
    Device {
        device: i32,
        accounted: u64,
        page_size: u32,
    },
    Pinned,
}

enum Backing {
    /// Mapped by [`allocate`]: its range is held back from reuse when freed
    /// ([`crate::quarantine`]).
    Mapped,
    /// Mapped by its caller at a place of its choosing (managed memory's window, where the
    /// next allocation looks for a gap in this map and among the ranges held back): held back
    /// from reuse when freed, as `Mapped` memory is, so that the next allocation cannot take
    /// the addresses a queued task still names.
    Placed,
    /// Memory someone else maps and unmaps (virtual memory mapped with aclrtMapMem).
    External,
    /// Another process's exported memory, mapped by aclrtIpcMemImportByKey and unmapped by
    /// aclrtIpcMemClose: `External` memory that copies must tell apart (the reference limits
    /// what a process of another device may copy to and from it).
    Imported,
}

/// A device allocation's contents as a snapshot's backup saved them.
pub(crate) struct SavedAllocation {
    base: usize,
    device: i32,
    serial: u64,
    bytes: Vec<u8>,
}

/// Fails with `code` if a task holds a lease on the allocation at `base`.
fn ensure_unused(base: usize, alloc: &Allocation, code: aclError) -> Res<()> {
    ensure!(
        alloc.users.load(Ordering::Acquire) == 0,
        code,
        "a task is still using the device allocation {base:#x}"
    );
    Ok(())
}

struct Allocation {
    len: usize,
    /// Which allocation this is among all the process has made: an allocation freed and
    /// another made at the same address and length is a different one (a snapshot's restore
    /// tells them apart).
    serial: u64,
    kind: AllocKind,
    backing: Backing,
    /// For a virtual-memory mapping, the base of the reserved range it lies in: mappings of
    /// one range that adjoin are one stretch of memory to a copy or a task.
    reservation: Option<usize>,
    locked: bool,
    /// Moved into a file another process may map (exported with aclrtIpcMemGetExportKey).
    shared: AtomicBool,
    /// Tasks touching the memory now ([`Lease`]s).
    users: AtomicUsize,
    /// Rung when the last user is done.
    idle: Bell,
}

impl Allocation {
    /// Waits until no task holds a lease (the allocation is out of the map, so none can start).
    fn wait_idle(&self) {
        wait_until(&[self.idle.any()], None, || {
            (self.users.load(Ordering::Acquire) == 0).then_some(())
        });
    }
}

/// A host registration (aclrtHostRegister / aclrtHostRegisterV2).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Registration {
    pub(crate) len: usize,
    pub(crate) mapped: bool,
    pub(crate) locked: bool,
}

/// Every allocation and registration, by base address.
///
/// The map's locks are held only to look up, insert or remove: a task touching memory holds a
/// [`Lease`] on the allocation instead, so a 64 MiB copy delays the free of its own memory
/// only, never other allocations, frees or lookups.
pub(crate) struct MemoryMap {
    allocations: RwLock<BTreeMap<usize, Arc<Allocation>>>,
    registrations: RwLock<BTreeMap<usize, Registration>>,
    pinned_bytes: AtomicU64,
    /// Most pinned bytes live at once.
    pinned_limit: u64,
    pinned_allocations: AtomicU64,
    /// The code the next host allocation fails with (0: none injected).
    host_failure: AtomicI32,
    /// Device memory with uncorrectable errors.
    pub(crate) uce: UceMap,
}

/// A task's hold on one live allocation while it touches the memory: freeing the allocation
/// waits until the lease is dropped, so a task never touches memory freed under it (and one
/// that starts after the free finds no allocation to lease).
pub(crate) struct Lease(Vec<Arc<Allocation>>);

impl Drop for Lease {
    fn drop(&mut self) {
        for alloc in &self.0 {
            if alloc.users.fetch_sub(1, Ordering::AcqRel) == 1 {
                alloc.idle.ring();
            }
        }
    }
}

/// The allocation holding `ptr`, with its base, then the virtual-memory mappings adjoining it
/// in its reserved range, in address order: the run one access may cover.
fn run_from(
    map: &BTreeMap<usize, Arc<Allocation>>,
    ptr: usize,
) -> Option<(usize, impl Iterator<Item = &Arc<Allocation>>)> {
    let (base, first) = find(map, ptr)?;
    let run = std::iter::successors(Some((base, first)), |&(at, alloc)| {
        let reservation = alloc.reservation?;
        let next = map.get(&(at + alloc.len))?;
        (next.reservation == Some(reservation)).then_some((at + alloc.len, next))
    });
    Some((base, run.map(|(_, alloc)| alloc)))
}

/// The allocations holding `[ptr, ptr+len)`: the one holding `ptr`, then, while the range goes
/// on past it, the mappings of its run ([`run_from`]). `None` if the range runs past them (or
/// wraps).
fn covering(
    map: &BTreeMap<usize, Arc<Allocation>>,
    ptr: usize,
    len: usize,
) -> Option<Vec<&Arc<Allocation>>> {
    let (mut reached, run) = run_from(map, ptr)?;
    let end = ptr.checked_add(len)?;
    let mut held = Vec::new();
    for alloc in run {
        held.push(alloc);
        reached += alloc.len;
        if reached >= end {
            return Some(held);
        }
    }
    None
}

/// The bytes from the base of the allocation holding `ptr` to the end of its run
/// ([`run_from`]); 0 if no allocation holds it.
fn span_of(map: &BTreeMap<usize, Arc<Allocation>>, ptr: usize) -> usize {
    run_from(map, ptr).map_or(0, |(_, run)| run.map(|alloc| alloc.len).sum())
}

fn find(map: &BTreeMap<usize, Arc<Allocation>>, ptr: usize) -> Option<(usize, &Arc<Allocation>)> {
    let (&base, alloc) = map.range(..=ptr).next_back()?;
    (ptr - base < alloc.len.max(1)).then_some((base, alloc))
}

static MLOCK_WARNED: AtomicBool = AtomicBool::new(false);

/// Page-locks a range where the OS allows it; falls back (with a one-time warning) if not.
fn try_mlock(ptr: usize, len: usize) -> bool {
    let locked = mlock(ptr, len);
    if let Err(err) = &locked {
        warn_unlocked(err);
    }
    locked.is_ok()
}

/// Page-locks a range, without warning: for callers holding a lock, which warn (through
/// [`warn_unlocked`]) once they released it, since the subscriber is the program's code and
/// may call the simulator back.
fn mlock(ptr: usize, len: usize) -> std::io::Result<()> {
    // SAFETY: mlock only changes paging attributes of a range this process owns; a failure is
    // reported through the return value.
    match unsafe { libc::mlock(ptr as *const libc::c_void, len) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Warns, once per process, that pinned memory could not be locked.
fn warn_unlocked(err: &std::io::Error) {
    if !MLOCK_WARNED.swap(true, Ordering::Relaxed) {
        crate::error::log!(warn,
            target: "npu_sim",
            "mlock of pinned host memory failed ({err}); pinned memory stays pageable (raise RLIMIT_MEMLOCK to lock it)"
        );
    }
}

fn munlock(ptr: usize, len: usize) {
    // SAFETY: undoes a successful mlock on a range this process still owns.
    unsafe { libc::munlock(ptr as *const libc::c_void, len) };
}

/// Maps `len` zeroed bytes, page-aligned, so untouched pages cost nothing (and a device block
/// can be shared with another process page by page, [`MemoryMap::share`]). Page-locked blocks
/// are committed (no MAP_NORESERVE), so the kernel refuses what it cannot back instead of
/// killing the process when they are touched.
fn allocate(len: usize, pinned: bool) -> Option<usize> {
    let reserve = if pinned { 0 } else { libc::MAP_NORESERVE };
    // SAFETY: an anonymous private mapping with no address hint has no preconditions.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | reserve,
            -1,
            0,
        )
    };
    (ptr != libc::MAP_FAILED).then_some(ptr as usize)
}

fn release(base: usize, alloc: &Allocation) {
    if alloc.locked {
        munlock(base, alloc.len);
    }
    match alloc.backing {
        // SAFETY: the range was mapped by `allocate` (or by the caller of `insert_mapped`)
        // with this length and is no longer in the map, so nothing can reach it any more.
        Backing::Mapped | Backing::Placed => unsafe { crate::quarantine::retire(base, alloc.len) },
        Backing::External | Backing::Imported => {}
    }
}

/// Copies the non-zero pages of `[base, base+len)` into `file` and maps the file shared over
/// the range. Zero pages stay holes of the file: reading an untouched page of a lazily
/// committed mapping commits nothing, so a large, mostly untouched allocation stays cheap.
fn move_into_file(base: usize, len: usize, file: &OwnedFd) -> Res<()> {
    let pages = len.div_ceil(PAGE) * PAGE;
    let io = |what: &str| {
        crate::error::SimError::new(
            ACL_ERROR_RT_MEMORY_ALLOCATION,
            format!(
                "cannot make {base:#x}+{len} shareable: {what} failed ({})",
                std::io::Error::last_os_error()
            ),
        )
    };
    // SAFETY: ftruncate on a file descriptor this process owns.
    if unsafe { libc::ftruncate(file.as_raw_fd(), pages as libc::off_t) } != 0 {
        return Err(io("sizing the shared file"));
    }
    for offset in (0..len).step_by(PAGE) {
        let chunk = PAGE.min(len - offset);
        // SAFETY: the range is a live mapping of this allocation of at least `len` bytes, and
        // no task writes it meanwhile (the caller holds the map's lock with no lease out).
        let page = unsafe { std::slice::from_raw_parts((base + offset) as *const u8, chunk) };
        if page.iter().all(|&byte| byte == 0) {
            continue;
        }
        // SAFETY: writes `chunk` readable bytes into a file this process owns.
        let written = unsafe {
            libc::pwrite(
                file.as_raw_fd(),
                page.as_ptr().cast(),
                chunk,
                offset as libc::off_t,
            )
        };
        if written != chunk as isize {
            return Err(io("copying into the shared file"));
        }
    }
    // SAFETY: replaces the allocation's own private pages (page-aligned, mapped by `allocate`)
    // with the file holding the same bytes; nothing else lives in that range.
    let mapped = unsafe {
        libc::mmap(
            base as *mut libc::c_void,
            pages,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_FIXED,
            file.as_raw_fd(),
            0,
        )
    };
    if mapped == libc::MAP_FAILED {
        return Err(io("mapping the shared file"));
    }
    Ok(())
}

/// Wakes the aclrtValueWait tasks polling memory after an allocation left the map, so that a
/// wait on a word freed (or unmapped, or closed) under it polls again and fails with 507013:
/// nothing else may write memory again to wake it, and it slept for ever.
fn gone() {
    crate::device::MEMORY_BELL.ring();
}

impl MemoryMap {
    /// An empty map whose pinned host memory is capped at `pinned_limit` bytes.
    pub(crate) fn new(pinned_limit: u64) -> Self {
        Self {
            allocations: RwLock::new(BTreeMap::new()),
            registrations: RwLock::new(BTreeMap::new()),
            pinned_bytes: AtomicU64::new(0),
            pinned_limit,
            pinned_allocations: AtomicU64::new(0),
            host_failure: AtomicI32::new(0),
            uce: UceMap::default(),
        }
    }

    /// Makes the next host allocation ([`Self::take_host_failure`]) fail with `code`.
    pub(crate) fn fail_next_host_alloc(&self, code: aclError) {
        self.host_failure.store(code, Ordering::Release);
    }

    /// The injected failure of this host allocation, if one is pending (it is used up).
    pub(crate) fn take_host_failure(&self) -> Option<aclError> {
        match self.host_failure.swap(0, Ordering::AcqRel) {
            0 => None,
            code => Some(code),
        }
    }

    /// Allocates zeroed memory of `len` bytes (already rounded by the caller).
    pub(crate) fn allocate(&self, len: usize, kind: AllocKind) -> Res<usize> {
        let pinned = kind == AllocKind::Pinned;
        if pinned {
            self.reserve_pinned(len as u64)?;
        }
        let Some(base) = allocate(len, pinned) else {
            if pinned {
                self.pinned_bytes.fetch_sub(len as u64, Ordering::AcqRel);
            }
            fail!(
                ACL_ERROR_RT_MEMORY_ALLOCATION,
                "the host could not provide {len} bytes"
            );
        };
        let locked = pinned && try_mlock(base, len);
        if pinned {
            self.pinned_allocations.fetch_add(1, Ordering::Relaxed);
        }
        self.insert(base, len, kind, Backing::Mapped, locked);
        Ok(base)
    }

    /// Accounts `bytes` of pinned memory against the limit, before anything is allocated.
    fn reserve_pinned(&self, bytes: u64) -> Res<()> {
        let reserved =
            self.pinned_bytes
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                    used.checked_add(bytes)
                        .filter(|&total| total <= self.pinned_limit)
                });
        match reserved {
            Ok(_) => Ok(()),
            Err(used) => fail!(
                ACL_ERROR_RT_MEMORY_ALLOCATION,
                "{bytes} bytes of pinned host memory requested, {} of the {}-byte limit free",
                self.pinned_limit.saturating_sub(used),
                self.pinned_limit
            ),
        }
    }

    /// Frees an allocation of the given family by its base address; returns its kind. A task
    /// touching the memory finishes first.
    pub(crate) fn free(&self, ptr: usize, pinned: bool) -> Res<AllocKind> {
        let mut map = write(&self.allocations);
        let alloc = match map.entry(ptr) {
            Entry::Occupied(entry)
                if (entry.get().kind == AllocKind::Pinned) == pinned
                    && !matches!(entry.get().backing, Backing::External | Backing::Imported) =>
            {
                entry.remove()
            }
            _ => fail!(
                ACL_ERROR_RT_MEMORY_FREE,
                "{ptr:#x} is not the address of a live {} allocation",
                if pinned { "aclrtMallocHost" } else { "device" }
            ),
        };
        // Held back before it leaves the map: a lookup racing the free finds the allocation
        // or the range held back, never an unknown address it would take for the caller's
        // pageable memory (a memset of which on a stream is written at once, here into a
        // range about to become inaccessible: attack_threads' frees racing copies faulted).
        if matches!(alloc.backing, Backing::Mapped | Backing::Placed) {
            crate::quarantine::hold(ptr, alloc.len);
        }
        drop(map);
        gone();
        alloc.wait_idle();
        self.uce.forget(ptr, alloc.len);
        self.forget_registrations(ptr, alloc.len);
        release(ptr, &alloc);
        if pinned {
            self.pinned_bytes
                .fetch_sub(alloc.len as u64, Ordering::AcqRel);
            self.pinned_allocations.fetch_sub(1, Ordering::Relaxed);
        }
        Ok(alloc.kind)
    }

    /// Makes the device allocation holding `ptr` shareable with other processes: its bytes move
    /// into `file` (a memfd sized to the allocation's pages), which is then mapped shared over
    /// the allocation's own range, so its address does not change. Done while no task touches
    /// the allocation (leases are waited for, and new ones wait on the map's lock). Returns
    /// (base, length, kind).
    pub(crate) fn share(&self, ptr: usize, file: &OwnedFd) -> Res<(usize, usize, AllocKind)> {
        loop {
            let map = write(&self.allocations);
            let Some((base, alloc)) = find(&map, ptr) else {
                fail!(
                    ACL_ERROR_RT_PARAM_INVALID,
                    "{ptr:#x} is not in a live device allocation"
                );
            };
            ensure!(
                matches!(alloc.kind, AllocKind::Device { .. })
                    && matches!(alloc.backing, Backing::Mapped | Backing::Placed),
                ACL_ERROR_RT_PARAM_INVALID,
                "{ptr:#x} is not in memory allocated with aclrtMalloc"
            );
            if alloc.users.load(Ordering::Acquire) != 0 {
                let alloc = alloc.clone();
                drop(map);
                alloc.wait_idle();
                continue;
            }
            move_into_file(base, alloc.len, file)?;
            alloc.shared.store(true, Ordering::Release);
            let shared = (base, alloc.len, alloc.kind);
            drop(map);
            // A value wait already parked on the memory looks again, and from now on reads
            // the word every so often: the other process's writes ring nothing.
            crate::device::MEMORY_BELL.ring();
            return Ok(shared);
        }
    }

    /// Records `len` bytes the caller mapped at `base` (anonymous, private, zero-filled) as an
    /// allocation of `kind`, held back from reuse by [`Self::free`] (the caller's next
    /// placement looks for a gap with [`Self::first_gap`], which skips ranges held back).
    pub(crate) fn insert_mapped(&self, base: usize, len: usize, kind: AllocKind) {
        self.insert(base, len, kind, Backing::Placed, false);
    }

    /// The lowest address of `[start, end)` where `len` bytes overlap no allocation and no
    /// freed range still held back from reuse ([`crate::quarantine`]).
    pub(crate) fn first_gap(&self, start: usize, end: usize, len: usize) -> Option<usize> {
        let map = read(&self.allocations);
        let mut at = start;
        loop {
            let stop = at.checked_add(len).filter(|&stop| stop <= end)?;
            // Allocations do not overlap: if the last one starting before `stop` ends by `at`,
            // so do all before it.
            if let Some((&base, alloc)) = map.range(..stop).next_back()
                && base + alloc.len > at
            {
                at = base + alloc.len;
                continue;
            }
            match crate::quarantine::overlapping(at, len) {
                Some(held_end) => at = held_end,
                None => return Some(at),
            }
        }
    }

    /// Records device memory mapped by someone else at `[base, base+len)`, so copies, memsets
    /// and kernels treat it as device memory.
    pub(crate) fn adopt(&self, base: usize, len: usize, kind: AllocKind) {
        self.insert_with(base, len, kind, Backing::External, None, false);
    }

    /// [`Self::adopt`] for another process's memory imported by key.
    pub(crate) fn adopt_import(&self, base: usize, len: usize, kind: AllocKind) {
        self.insert_with(base, len, kind, Backing::Imported, None, false);
    }

    /// [`Self::adopt`] for a virtual-memory mapping in the range reserved at `reservation`:
    /// an access may run on into the mappings adjoining it there.
    pub(crate) fn adopt_mapping(
        &self,
        base: usize,
        len: usize,
        kind: AllocKind,
        reservation: usize,
    ) {
        self.insert_with(base, len, kind, Backing::External, Some(reservation), false);
    }

    fn insert(&self, base: usize, len: usize, kind: AllocKind, backing: Backing, locked: bool) {
        self.insert_with(base, len, kind, backing, None, locked);
    }

    fn insert_with(
        &self,
        base: usize,
        len: usize,
        kind: AllocKind,
        backing: Backing,
        reservation: Option<usize>,
        locked: bool,
    ) {
        static SERIALS: AtomicU64 = AtomicU64::new(0);
        let allocation = Allocation {
            len,
            serial: SERIALS.fetch_add(1, Ordering::Relaxed),
            kind,
            backing,
            reservation,
            locked,
            shared: AtomicBool::new(false),
            users: AtomicUsize::new(0),
            idle: Bell::new(),
        };
        write(&self.allocations).insert(base, Arc::new(allocation));
    }

    /// Forgets memory recorded with [`Self::adopt`], [`Self::adopt_import`] or
    /// [`Self::adopt_mapping`] once no task touches it; returns its length, `None` if `base`
    /// starts no such memory.
    pub(crate) fn disown(&self, base: usize) -> Option<usize> {
        let mut map = write(&self.allocations);
        let alloc = match map.entry(base) {
            Entry::Occupied(entry)
                if matches!(entry.get().backing, Backing::External | Backing::Imported) =>
            {
                entry.remove()
            }
            _ => return None,
        };
        drop(map);
        gone();
        alloc.wait_idle();
        // The address may be mapped again, to memory the error was never in.
        self.uce.forget(base, alloc.len);
        Some(alloc.len)
    }

    /// Copies of the contents of every device allocation, for a snapshot's backup; fails if a
    /// task is using one (the caller has drained every stream, so none should).
    pub(crate) fn device_contents(&self) -> Res<Vec<SavedAllocation>> {
        // The write lock: no task can take a lease on the memory while it is read.
        let map = write(&self.allocations);
        let mut saved = Vec::new();
        for (&base, alloc) in map.iter() {
            let AllocKind::Device { device, .. } = alloc.kind else {
                continue;
            };
            ensure_unused(base, alloc, ACL_ERROR_SNAPSHOT_BACKUP_FAILED)?;
            // SAFETY: the allocation is live while the map's lock is held (a free removes it
            // under the write lock first), `base..base+len` is its memory, and no task holds a
            // lease on it or can take one while the write lock is held.
            let bytes = unsafe { std::slice::from_raw_parts(base as *const u8, alloc.len) };
            saved.push(SavedAllocation {
                base,
                device,
                serial: alloc.serial,
                bytes: bytes.to_vec(),
            });
        }
        Ok(saved)
    }

    /// Writes a backup back (see [`Self::device_contents`]). Fails, writing nothing, if a saved
    /// allocation has been freed since (another made at its address is not it) or a task is
    /// using one.
    pub(crate) fn restore_contents(&self, saved: &[SavedAllocation]) -> Res<()> {
        let map = write(&self.allocations);
        for entry in saved {
            let alloc = map
                .get(&entry.base)
                .filter(|alloc| alloc.serial == entry.serial);
            let Some(alloc) = alloc else {
                fail!(
                    ACL_ERROR_SNAPSHOT_RESTORE_FAILED,
                    "the backed-up allocation {:#x} ({} bytes on device {}) was freed since the \
                     backup",
                    entry.base,
                    entry.bytes.len(),
                    entry.device
                );
            };
            ensure_unused(entry.base, alloc, ACL_ERROR_SNAPSHOT_RESTORE_FAILED)?;
        }
        for entry in saved {
            // SAFETY: checked above to be the same live allocation, of exactly
            // `entry.bytes.len()` bytes, kept live by the map's write lock, under which no task
            // holds or takes a lease on it.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    entry.bytes.as_ptr(),
                    entry.base as *mut u8,
                    entry.bytes.len(),
                );
            }
        }
        Ok(())
    }

    /// The allocation containing `ptr`: (base, length, kind).
    pub(crate) fn allocation_of(&self, ptr: usize) -> Option<(usize, usize, AllocKind)> {
        let map = read(&self.allocations);
        find(&map, ptr).map(|(base, alloc)| (base, alloc.len, alloc.kind))
    }

    /// Whether the memory holding `ptr` may be written behind the runtime's back: memory
    /// exported to other processes, memory mapped by someone else (an IPC import, a
    /// virtual-memory mapping, whose physical memory may be another process's), or managed
    /// memory, which the host writes directly. Such writes ring no bell, so a wait reading the
    /// memory must look again by itself.
    pub(crate) fn written_elsewhere(&self, ptr: usize) -> bool {
        let map = read(&self.allocations);
        find(&map, ptr).is_some_and(|(_, alloc)| {
            alloc.shared.load(Ordering::Acquire)
                || matches!(
                    alloc.backing,
                    Backing::External | Backing::Imported | Backing::Placed
                )
        })
    }

    /// The registration containing `ptr`: (base, registration).
    pub(crate) fn registration_of(&self, ptr: usize) -> Option<(usize, Registration)> {
        let map = read(&self.registrations);
        let (&base, reg) = map.range(..=ptr).next_back()?;
        (ptr - base < reg.len).then_some((base, *reg))
    }

    /// Where a pointer lives, found with one lookup: what copy-kind correction needs, and the
    /// simulator's allocation holding it, if any, for range checks.
    pub(crate) fn locate(&self, ptr: usize) -> Located {
        let (allocation, span, imported) = {
            let map = read(&self.allocations);
            let found = find(&map, ptr);
            let allocation = found.map(|(base, alloc)| (base, alloc.len, alloc.kind));
            let imported =
                found.is_some_and(|(_, alloc)| matches!(alloc.backing, Backing::Imported));
            (allocation, span_of(&map, ptr), imported)
        };
        let registered = self.registered_from(ptr);
        let class = match allocation {
            Some((_, _, AllocKind::Device { device, .. })) => PtrClass::Device(device),
            Some((_, _, AllocKind::Pinned)) => PtrClass::Host,
            None if registered > 0 => PtrClass::Host,
            None => PtrClass::Unregistered,
        };
        Located {
            class,
            allocation,
            span,
            registered,
            imported,
        }
    }

    /// Whether `[ptr, ptr+len)` lies inside one host registration.
    pub(crate) fn registered(&self, ptr: usize, len: usize) -> bool {
        len <= self.registered_from(ptr)
    }

    /// The bytes from `ptr` to the end of the host registration holding it (0 if none does).
    fn registered_from(&self, ptr: usize) -> usize {
        self.registration_of(ptr)
            .map_or(0, |(base, reg)| base + reg.len - ptr)
    }

    /// Leases the live allocation holding all of `[ptr, ptr+len)`, for a task about to touch
    /// it; `None` if there is none (it was freed).
    pub(crate) fn lease(&self, ptr: usize, len: usize) -> Option<Lease> {
        let map = read(&self.allocations);
        // Checked, as in `Located::check_range`: a wrapped end would pass.
        let held = covering(&map, ptr, len)?;
        // Under the map's read lock: a free, which removes the allocation under the write
        // lock before waiting for its users, either sees this user or came first.
        for alloc in &held {
            alloc.users.fetch_add(1, Ordering::AcqRel);
        }
        Some(Lease(held.into_iter().cloned().collect()))
    }

    /// Whether any device allocation (aclrtMalloc, managed or mapped virtual memory) overlaps
    /// `[ptr, ptr+len)`.
    pub(crate) fn overlaps_device(&self, ptr: usize, len: usize) -> bool {
        let map = read(&self.allocations);
        let end = ptr.saturating_add(len);
        // The allocation holding `ptr`, and every one starting inside the range.
        find(&map, ptr)
            .map(|(_, alloc)| alloc)
            .into_iter()
            .chain(map.range(ptr..end).map(|(_, alloc)| alloc))
            .any(|alloc| matches!(alloc.kind, AllocKind::Device { .. }))
    }

    /// Registers host memory; fails with 507910 if any of it is already registered.
    pub(crate) fn register(&self, ptr: usize, len: usize, mapped: bool, pin: bool) -> Res<()> {
        let mut map = write(&self.registrations);
        let overlaps = map
            .range(..ptr.saturating_add(len))
            .next_back()
            .is_some_and(|(&base, reg)| base + reg.len > ptr);
        ensure!(
            !overlaps,
            ACL_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
            "host range {ptr:#x}+{len} overlaps a registered range"
        );
        // Warned about after unlocking: a subscriber reading the registrations (the host
        // statistics, a copy from host memory) would wait for this thread for ever.
        let refused = if pin { mlock(ptr, len).err() } else { None };
        map.insert(
            ptr,
            Registration {
                len,
                mapped,
                locked: pin && refused.is_none(),
            },
        );
        drop(map);
        if let Some(err) = refused {
            warn_unlocked(&err);
        }
        Ok(())
    }

    /// Drops the registrations overlapping `[ptr, ptr+len)`, memory being freed: aclrtMallocHost
    /// memory may be registered (MAPPED), and a registration left behind would make the freed
    /// range count as host memory, which a copy would then write (the range is held back from
    /// reuse, inaccessible).
    fn forget_registrations(&self, ptr: usize, len: usize) {
        let mut map = write(&self.registrations);
        let end = ptr.saturating_add(len);
        let stale: Vec<usize> = map
            .range(..end)
            .filter(|&(&base, reg)| base + reg.len > ptr)
            .map(|(&base, _)| base)
            .collect();
        for base in stale {
            if let Some(reg) = map.remove(&base)
                && reg.locked
            {
                munlock(base, reg.len);
            }
        }
    }

    /// Unregisters the registration starting at `ptr`.
    pub(crate) fn unregister(&self, ptr: usize) -> Res<()> {
        let Some(reg) = write(&self.registrations).remove(&ptr) else {
            fail!(
                ACL_ERROR_HOST_MEMORY_NOT_REGISTERED,
                "{ptr:#x} is not the start of a registered host range"
            );
        };
        if reg.locked {
            munlock(ptr, reg.len);
        }
        Ok(())
    }

    /// Whether `ptr` lies in pinned (aclrtMallocHost) memory.
    pub(crate) fn is_pinned_allocation(&self, ptr: usize) -> bool {
        matches!(self.allocation_of(ptr), Some((_, _, AllocKind::Pinned)))
    }

    /// (bytes, allocations) of pinned host memory.
    pub(crate) fn pinned_stats(&self) -> (u64, u64) {
        (
            self.pinned_bytes.load(Ordering::Acquire),
            self.pinned_allocations.load(Ordering::Relaxed),
        )
    }

    pub(crate) fn registration_count(&self) -> u64 {
        read(&self.registrations).len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIND: AllocKind = AllocKind::Device {
        device: 0,
        accounted: 4096,
        page_size: PAGE as u32,
    };

    #[test]
    fn a_free_waits_for_the_leases_of_its_allocation_only() {
        let memory = Arc::new(MemoryMap::new(u64::MAX));
        let (a, b) = (
            memory.allocate(4096, KIND).unwrap(),
            memory.allocate(4096, KIND).unwrap(),
        );
        let held = memory.lease(a + 64, 128).expect("a live range");
        assert!(memory.lease(a, 4097).is_none(), "past the allocation");
        let allocation = read(&memory.allocations)[&a].clone();

        let freeing = {
            let memory = memory.clone();
            std::thread::spawn(move || memory.free(a, false))
        };
        while allocation.idle.waiters() == 0 {
            std::thread::yield_now();
        }
        // The free of `a` waits for the task touching it; it is already out of the map, so
        // later tasks fault instead of leasing it.
        assert!(memory.lease(a, 64).is_none());
        assert_eq!(memory.locate(a).class, PtrClass::Unregistered);
        // Everything else goes on meanwhile.
        let c = memory.allocate(1 << 20, KIND).unwrap();
        assert!(memory.lease(c, 1 << 20).is_some());
        assert_eq!(memory.free(b, false).unwrap(), KIND);
        assert_eq!(memory.free(c, false).unwrap(), KIND);
        assert!(!freeing.is_finished());

        drop(held);
        assert_eq!(freeing.join().unwrap().unwrap(), KIND);
        assert_eq!(allocation.users.load(Ordering::Relaxed), 0);
    }
}

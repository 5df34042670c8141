//! Virtual memory management: reserved address ranges, physical allocations (memfds counted
//! against a device's capacity) and the mappings between them.
//!
//! A reservation is an anonymous private mapping of the whole range, so an address in it that
//! nothing is mapped at still belongs to the simulator (a stray kernel access reads zeros
//! instead of crashing the process); copies and memsets refuse such addresses. Mapping
//! physical memory replaces part of the reservation with a shared mapping of the physical
//! allocation's memfd and records it in the [`MemoryMap`] as device memory; unmapping puts
//! anonymous memory back.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex, RwLock};

use npu_sys::*;

use crate::device::Device;
use crate::error::{Res, ensure, fail};
use crate::handle::{Handle, HandleTable, Kind};
use crate::memory::{AllocKind, MemoryMap};
use crate::sync::{lock, read, write};

/// Lowest address a caller may ask a reservation to start at (16 TiB)…
const EXPECT_LOW: usize = 16 << 40;
/// …and the end of that window (24 TiB).
const EXPECT_HIGH: usize = 24 << 40;
const GIB: usize = 1 << 30;

/// Whether `addr` lies in the window expectPtr reservations come from. The host's mapper
/// places nothing there of its own accord (it works down from the top of the address space,
/// far above 24 TiB), so an address there that no reservation holds is a released one.
pub(crate) fn in_expect_window(addr: usize) -> bool {
    (EXPECT_LOW..EXPECT_HIGH).contains(&addr)
}

/// Physical memory from aclrtMallocPhysical.
pub(crate) struct Physical {
    pub(crate) device: Arc<Device>,
    /// The size the caller asked for (a mapping must have exactly this size).
    pub(crate) size: usize,
    /// The size allocated: `size` rounded to `granularity`.
    bytes: usize,
    /// The bytes counted against the device (0 for memory imported from another process,
    /// which the exporter's device holds).
    accounted: usize,
    /// Imported from another process (aclrtMemImportFromShareableHandle*), not allocated here.
    imported: bool,
    pub(crate) granularity: usize,
    pub(crate) prop: aclrtPhysicalMemProp,
    memfd: Arc<OwnedFd>,
    /// Outstanding handle references (aclrtMallocPhysical, aclrtMemRetainAllocationHandle)
    /// and the handle they refer to (retired when they reach 0).
    refs: Mutex<(u32, Handle)>,
}

impl Drop for Physical {
    fn drop(&mut self) {
        // The last handle reference and the last mapping are gone.
        self.device.unreserve(self.accounted as u64);
    }
}

impl Physical {
    /// The memory's file, to share it with another process.
    pub(crate) fn file(&self) -> &Arc<OwnedFd> {
        &self.memfd
    }

    /// The allocated size (the file's).
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether it was imported from another process rather than allocated here.
    pub(crate) fn is_imported(&self) -> bool {
        self.imported
    }
}

struct Mapping {
    len: usize,
    physical: Arc<Physical>,
    /// Access flags per device id.
    access: BTreeMap<u32, aclrtMemAccessFlags>,
    /// aclrtUnmapMem has begun and waits for the tasks touching the memory: the mapping is
    /// gone for every lookup, but still holds its addresses, so that neither a new mapping
    /// nor the reservation's release can take them before the unmap has put anonymous memory
    /// back.
    unmapping: bool,
}

/// A mapping's access flags per device id, as [`Vmm::access`] read them.
pub(crate) struct Access(BTreeMap<u32, aclrtMemAccessFlags>);

impl Access {
    /// The flags of `device` (NONE when none were given to it).
    pub(crate) fn of(&self, device: u32) -> aclrtMemAccessFlags {
        self.0
            .get(&device)
            .copied()
            .unwrap_or(ACL_RT_MEM_ACCESS_FLAGS_NONE)
    }
}

struct Reservation {
    len: usize,
    mappings: BTreeMap<usize, Mapping>,
}

/// Every physical allocation and reservation.
pub(crate) struct Vmm {
    physical: HandleTable<Physical>,
    reservations: RwLock<BTreeMap<usize, Reservation>>,
}

/// Maps `len` bytes at `addr` (or anywhere, for 0) as fresh anonymous memory; `fixed` replaces
/// what is there, otherwise an occupied address fails. Returns the address or `None`.
fn map_anonymous(addr: usize, len: usize, fixed: bool) -> Option<usize> {
    let placement = match (addr, fixed) {
        (0, _) => 0,
        (_, true) => libc::MAP_FIXED,
        (_, false) => libc::MAP_FIXED_NOREPLACE,
    };
    // SAFETY: an anonymous mapping; with MAP_FIXED it replaces only a range of a reservation
    // this module owns (and whose mapping it has just taken out of every table).
    let ptr = unsafe {
        libc::mmap(
            addr as *mut c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | placement,
            -1,
            0,
        )
    };
    (ptr != libc::MAP_FAILED && (addr == 0 || ptr as usize == addr)).then_some(ptr as usize)
}

/// Where a reservation of `size` bytes starts: a multiple of its size's power of two, from the
/// 2 MiB granularity of physical memory up to 1 GiB. The same rule an `expectPtr` must keep,
/// and what lets a program map physical memory at the very start of the range it reserved.
fn reservation_alignment(size: usize) -> usize {
    if size > GIB {
        GIB
    } else {
        size.next_power_of_two().max(2 << 20)
    }
}

/// Maps `len` anonymous bytes starting at a multiple of `align` (a power of two): mmap promises
/// only page alignment (Linux aligns large mappings to 2 MiB on its own, valgrind does not), so
/// it maps `align` more and gives back the ends.
fn map_aligned(len: usize, align: usize) -> Option<usize> {
    let base = map_anonymous(0, len.checked_add(align)?, false)?;
    let start = base.next_multiple_of(align);
    let (head, tail) = (start - base, base + align - start);
    // SAFETY: both ranges are parts of the mapping just made, which nothing else knows of.
    unsafe {
        if head > 0 {
            libc::munmap(base as *mut c_void, head);
        }
        if tail > 0 {
            libc::munmap((start + len) as *mut c_void, tail);
        }
    }
    Some(start)
}

/// 107000 unless `mapping`, found at `addr`, was mapped with size `len`.
fn mapped_with(mapping: &Mapping, addr: usize, len: usize) -> Res<()> {
    ensure!(
        len == mapping.physical.size,
        ACL_ERROR_RT_PARAM_INVALID,
        "size {len} is not the size the mapping at {addr:#x} was made with ({})",
        mapping.physical.size
    );
    Ok(())
}

/// The start and the mapping holding `addr`, if it is mapped.
fn mapping_at(
    reservations: &mut BTreeMap<usize, Reservation>,
    addr: usize,
) -> Option<(usize, &mut Mapping)> {
    reservations
        .range_mut(..=addr)
        .next_back()
        .and_then(|(_, r)| r.mappings.range_mut(..=addr).next_back())
        .filter(|(start, m)| addr < **start + m.len && !m.unmapping)
        .map(|(&start, mapping)| (start, mapping))
}

fn page_round(len: usize) -> Option<usize> {
    len.checked_next_multiple_of(crate::memory::PAGE)
}

impl Vmm {
    pub(crate) const fn new() -> Self {
        Self {
            physical: HandleTable::new(Kind::PhysicalMem),
            reservations: RwLock::new(BTreeMap::new()),
        }
    }

    /// Reserves `size` bytes of addresses, at `expect` if it is not 0.
    pub(crate) fn reserve(&self, size: usize, expect: usize) -> Res<usize> {
        let Some(len) = page_round(size) else {
            fail!(ACL_ERROR_RT_PARAM_INVALID, "size {size} is too large");
        };
        let align = reservation_alignment(size);
        if expect != 0 {
            ensure!(
                (EXPECT_LOW..EXPECT_HIGH).contains(&expect)
                    && expect
                        .checked_add(len)
                        .is_some_and(|end| end <= EXPECT_HIGH)
                    && expect.is_multiple_of(align),
                ACL_ERROR_RT_PARAM_INVALID,
                "expectPtr {expect:#x} must lie in [16 TiB, 24 TiB) and be aligned to {align:#x}"
            );
        }
        let placed = match expect {
            0 => map_aligned(len, align),
            _ => map_anonymous(expect, len, false),
        };
        let Some(base) = placed else {
            fail!(
                ACL_ERROR_RT_MEMORY_ALLOCATION,
                "{len} bytes of addresses could not be reserved{}",
                if expect != 0 { " there (in use?)" } else { "" }
            );
        };
        write(&self.reservations).insert(
            base,
            Reservation {
                len,
                mappings: BTreeMap::new(),
            },
        );
        Ok(base)
    }

    /// Releases the reservation starting at `base`; it must have no mappings left.
    pub(crate) fn release(&self, base: usize) -> Res<()> {
        let mut reservations = write(&self.reservations);
        let Some(reservation) = reservations.get(&base) else {
            fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "{base:#x} is not the start of a reserved address range"
            );
        };
        ensure!(
            reservation.mappings.is_empty(),
            ACL_ERROR_RT_PARAM_INVALID,
            "the range at {base:#x} still has {} mappings: unmap them first",
            reservation.mappings.len()
        );
        let len = reservation.len;
        reservations.remove(&base);
        if in_expect_window(base) {
            // A program may reserve these addresses again by expectPtr, so they are given
            // back; no host memory comes to live in the window (see `in_expect_window`).
            // SAFETY: the whole reservation was mapped by `reserve` and nothing in it is
            // mapped or recorded any more.
            unsafe { libc::munmap(base as *mut c_void, len) };
        } else {
            // SAFETY: as above. The host chose these addresses, so they are held back like
            // freed memory: a copy naming them later fails with a code instead of faulting.
            unsafe { crate::quarantine::retire(base, len) };
        }
        Ok(())
    }

    /// Allocates physical memory on `device`: `size` rounded to `granularity`.
    pub(crate) fn allocate(
        &self,
        device: &Arc<Device>,
        size: usize,
        granularity: usize,
        prop: aclrtPhysicalMemProp,
    ) -> Res<Handle> {
        let Some(bytes) = size.checked_next_multiple_of(granularity) else {
            fail!(
                ACL_ERROR_RT_MEMORY_ALLOCATION,
                "{size} bytes cannot be allocated"
            );
        };
        device.reserve(bytes as u64)?;
        // SAFETY: memfd_create takes a NUL-terminated name and flags; it returns a new fd or -1.
        let fd = unsafe { libc::memfd_create(c"npu-sim-physical".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            device.unreserve(bytes as u64);
            fail!(
                ACL_ERROR_RT_RESOURCE_ALLOC_FAIL,
                "memfd_create failed: {}",
                std::io::Error::last_os_error()
            );
        }
        // SAFETY: a new descriptor nothing else owns.
        let memfd = Arc::new(unsafe { OwnedFd::from_raw_fd(fd) });
        let physical = Physical {
            device: device.clone(),
            size,
            bytes,
            accounted: bytes,
            imported: false,
            granularity,
            prop,
            memfd,
            refs: Mutex::new((1, 0)),
        };
        // SAFETY: sets the size of our own memfd; its pages are committed as they are touched.
        if unsafe { libc::ftruncate(physical.memfd.as_raw_fd(), bytes as libc::off_t) } != 0 {
            fail!(
                ACL_ERROR_RT_MEMORY_ALLOCATION,
                "{bytes} bytes of physical memory could not be allocated"
            );
        }
        self.insert(physical)
    }

    fn insert(&self, physical: Physical) -> Res<Handle> {
        let physical = Arc::new(physical);
        let handle = self.physical.insert(physical.clone())?;
        lock(&physical.refs).1 = handle;
        Ok(handle)
    }

    /// Records physical memory another process exported (its memfd, `bytes` long, of which
    /// the exporter asked for `size`) as a physical allocation of `device` in this process,
    /// not counted against the device.
    pub(crate) fn adopt(
        &self,
        device: &Arc<Device>,
        size: usize,
        bytes: usize,
        granularity: usize,
        prop: aclrtPhysicalMemProp,
        memfd: Arc<OwnedFd>,
    ) -> Res<Handle> {
        self.insert(Physical {
            device: device.clone(),
            size,
            bytes,
            accounted: 0,
            imported: true,
            granularity,
            prop,
            memfd,
            refs: Mutex::new((1, 0)),
        })
    }

    pub(crate) fn resolve(&self, handle: Handle) -> Res<Arc<Physical>> {
        self.physical.resolve(handle)
    }

    /// Drops one handle reference; the last one retires the handle (the memory lives on while
    /// it is mapped).
    pub(crate) fn free(&self, handle: Handle) -> Res<()> {
        let physical = self.physical.resolve(handle)?;
        let mut refs = lock(&physical.refs);
        // Another free may have retired the handle between the lookup and the lock (the
        // retirement happens under this lock): that call freed it, this one finds it stale.
        ensure!(
            self.physical.get(handle).is_some(),
            ACL_ERROR_RT_INVALID_HANDLE,
            "physical memory handle {handle:#x} was freed by another call"
        );
        refs.0 -= 1;
        if refs.0 == 0 {
            self.physical.remove(handle);
        }
        Ok(())
    }

    /// Maps `physical` (all of it) at `addr`, inside a reservation, over nothing mapped yet,
    /// with `access` recorded for the physical memory's own device.
    pub(crate) fn map(
        &self,
        memory: &MemoryMap,
        addr: usize,
        physical: &Arc<Physical>,
        access: aclrtMemAccessFlags,
    ) -> Res<()> {
        let len = physical.bytes;
        ensure!(
            addr.is_multiple_of(physical.granularity),
            ACL_ERROR_RT_PARAM_INVALID,
            "{addr:#x} is not aligned to the allocation granularity ({:#x})",
            physical.granularity
        );
        let mut reservations = write(&self.reservations);
        let Some((&base, reservation)) =
            reservations
                .range_mut(..=addr)
                .next_back()
                .filter(|(base, r)| {
                    addr.checked_add(len)
                        .is_some_and(|end| end <= **base + r.len)
                })
        else {
            fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "{addr:#x}+{len} does not lie inside one reserved address range"
            );
        };
        let overlaps = reservation
            .mappings
            .range(..addr + len)
            .next_back()
            .is_some_and(|(&start, m)| start + m.len > addr);
        ensure!(
            !overlaps,
            ACL_ERROR_RT_PARAM_INVALID,
            "{addr:#x}+{len} overlaps memory already mapped in the range at {base:#x}"
        );
        let other_device = reservation
            .mappings
            .values()
            .find(|m| m.physical.device.id != physical.device.id);
        if let Some(other) = other_device {
            fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "the range at {base:#x} already maps memory of device {}; it cannot also map device {}'s",
                other.physical.device.id,
                physical.device.id
            );
        }
        let origin = |imported| {
            if imported {
                "imported from another process"
            } else {
                "allocated with aclrtMallocPhysical"
            }
        };
        if let Some(other) = reservation
            .mappings
            .values()
            .find(|m| m.physical.imported != physical.imported)
        {
            fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "the range at {base:#x} already maps physical memory {}; it cannot also map \
                 memory {}",
                origin(other.physical.imported),
                origin(physical.imported)
            );
        }
        // SAFETY: replaces part of our own reservation with a shared mapping of our memfd,
        // `len` bytes long (the memfd's size).
        let ptr = unsafe {
            libc::mmap(
                addr as *mut c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                physical.memfd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            fail!(
                ACL_ERROR_RT_MEMORY_ALLOCATION,
                "mapping {len} bytes at {addr:#x} failed: {}",
                std::io::Error::last_os_error()
            );
        }
        let device = physical.device.id;
        memory.adopt_mapping(
            addr,
            len,
            AllocKind::Device {
                device,
                accounted: 0,
                page_size: physical.granularity as u32,
            },
            base,
        );
        reservation.mappings.insert(
            addr,
            Mapping {
                len,
                physical: physical.clone(),
                access: BTreeMap::from([(device as u32, access)]),
                unmapping: false,
            },
        );
        Ok(())
    }

    /// Unmaps the mapping starting at `addr` once no task touches it.
    pub(crate) fn unmap(&self, memory: &MemoryMap, addr: usize) -> Res<()> {
        let len = {
            let mut reservations = write(&self.reservations);
            let mapping = reservations
                .range_mut(..=addr)
                .next_back()
                .and_then(|(_, r)| r.mappings.get_mut(&addr))
                .filter(|m| !m.unmapping);
            let Some(mapping) = mapping else {
                fail!(
                    ACL_ERROR_RT_PARAM_INVALID,
                    "{addr:#x} is not the start of mapped virtual memory"
                );
            };
            mapping.unmapping = true;
            mapping.len
        };
        memory.disown(addr);
        // Back to plain reserved addresses; failing to map them again leaves the physical
        // mapping in place, which is still memory of ours.
        map_anonymous(addr, len, true);
        let mut reservations = write(&self.reservations);
        if let Some((_, reservation)) = reservations.range_mut(..=addr).next_back() {
            reservation.mappings.remove(&addr);
        }
        Ok(())
    }

    /// Calls `f` with the mapping that starts at `addr` (the `virPtr` aclrtMapMem or
    /// aclrtMemMapNoAccess was given, as the reference requires of the functions asking about a
    /// mapping); any other address → 107000.
    fn with_mapping<T>(&self, addr: usize, f: impl FnOnce(&mut Mapping) -> T) -> Res<T> {
        let mut reservations = write(&self.reservations);
        match mapping_at(&mut reservations, addr) {
            Some((start, mapping)) if start == addr => Ok(f(mapping)),
            Some((start, _)) => fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "{addr:#x} is inside the mapping at {start:#x}, not its start (the virPtr \
                 aclrtMapMem was given)"
            ),
            None => fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "{addr:#x} is not in mapped virtual memory"
            ),
        }
    }

    /// The physical allocation mapped at `addr` (a mapping's start), with one more handle
    /// reference.
    pub(crate) fn retain(&self, addr: usize) -> Res<Handle> {
        let physical = self.with_mapping(addr, |m| m.physical.clone())?;
        let mut refs = lock(&physical.refs);
        if refs.0 == 0 {
            // Every handle was freed while the memory stayed mapped: it gets a new one.
            refs.1 = self.physical.insert(physical.clone())?;
        }
        refs.0 += 1;
        Ok(refs.1)
    }

    /// Sets each `(device, flags)` of `access` on the mapping that starts at `addr` and was
    /// mapped with size `len` (the reference: aclrtMemSetAccess's virPtr and size are those
    /// aclrtMapMem or aclrtMemMapNoAccess was given); anything else → 107000.
    pub(crate) fn set_access(
        &self,
        addr: usize,
        len: usize,
        access: &[(u32, aclrtMemAccessFlags)],
    ) -> Res<()> {
        self.with_mapping(addr, |mapping| {
            mapped_with(mapping, addr, len)?;
            mapping.access.extend(access.iter().copied());
            Ok(())
        })?
    }

    /// Checks that a mapping starts at `addr` and was mapped with size `len` (107000
    /// otherwise), changing nothing.
    pub(crate) fn check_mapping(&self, addr: usize, len: usize) -> Res<()> {
        self.with_mapping(addr, |mapping| mapped_with(mapping, addr, len))?
    }

    /// The access flags of the mapping starting at `addr`, as they are now (one lookup: the
    /// caller picks a device's once it has checked the location it was given).
    pub(crate) fn access(&self, addr: usize) -> Res<Access> {
        self.with_mapping(addr, |m| Access(m.access.clone()))
    }

    /// Whether `addr` lies in a reserved range. For an address the [`MemoryMap`] does not
    /// know, that means reserved but not mapped: copies must not treat it as host memory.
    pub(crate) fn reserved(&self, addr: usize) -> bool {
        let reservations = read(&self.reservations);
        reservations
            .range(..=addr)
            .next_back()
            .is_some_and(|(&base, r)| addr < base + r.len)
    }
}

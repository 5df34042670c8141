//! Uncorrectable memory errors (UCE): device memory ranges whose ECC failed, as
//! `npusimInjectMemUce` marks them. A task touching such a range fails with
//! ACL_ERROR_RT_DEVICE_MEM_ERROR; aclrtGetMemUceInfo lists the ranges of a device, and
//! aclrtMemUceRepair / aclrtRepairError repair them (the memory comes back zeroed: what it
//! held is lost, as on a device whose page was replaced).

use std::collections::BTreeMap;
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};

use npu_sys::*;

use crate::error::{Res, SimError, ensure};
use crate::sync::{read, write};

/// The marked ranges of every device, by start address.
#[derive(Default)]
pub(crate) struct UceMap {
    /// start → (length, device).
    ranges: RwLock<BTreeMap<usize, (usize, i32)>>,
    /// Whether any range is marked: the check every task makes costs one load until then.
    any: AtomicBool,
}

impl UceMap {
    /// Marks `[addr, addr+len)` of `device` (the caller checked it is the device's memory).
    /// A range starting where a marked one does keeps the longer length: marking a part of a
    /// bad range again must not clear the rest of it.
    pub(crate) fn mark(&self, device: i32, addr: usize, len: usize) {
        write(&self.ranges)
            .entry(addr)
            .and_modify(|(marked, _)| *marked = (*marked).max(len))
            .or_insert((len, device));
        self.any.store(true, Ordering::Release);
    }

    /// The error of a task touching `[ptr, ptr+len)`, if that overlaps a marked range.
    pub(crate) fn check(&self, ptr: usize, len: usize) -> Result<(), SimError> {
        if !self.any.load(Ordering::Acquire) {
            return Ok(());
        }
        let ranges = read(&self.ranges);
        let end = ptr.saturating_add(len.max(1));
        // Few ranges are ever marked: a scan of those starting before the end is cheap.
        let hit = ranges
            .range(..end)
            .find(|&(&start, &(size, _))| start + size > ptr);
        match hit {
            Some((&start, &(size, device))) => Err(SimError::new(
                ACL_ERROR_RT_DEVICE_MEM_ERROR,
                format!(
                    "uncorrectable memory error (UCE) at {start:#x}+{size} of device {device}, \
                     touched by a task's range {ptr:#x}+{len}"
                ),
            )),
            None => Ok(()),
        }
    }

    /// The marked ranges of `device`, in address order: (start, length).
    pub(crate) fn of_device(&self, device: i32) -> Vec<(usize, usize)> {
        read(&self.ranges)
            .iter()
            .filter(|&(_, &(_, d))| d == device)
            .map(|(&start, &(len, _))| (start, len))
            .collect()
    }

    /// Removes the given ranges of `device`, all or none: each must be one marked range of
    /// the device exactly (107000 otherwise).
    pub(crate) fn repair(&self, device: i32, wanted: &[(usize, usize)]) -> Res<()> {
        let mut ranges = write(&self.ranges);
        for &(addr, len) in wanted {
            ensure!(
                ranges.get(&addr) == Some(&(len, device)),
                ACL_ERROR_RT_PARAM_INVALID,
                "{addr:#x}+{len} is not an uncorrectable memory error range of device {device} \
                 (aclrtGetMemUceInfo lists them)"
            );
        }
        for (addr, _) in wanted {
            ranges.remove(addr);
        }
        self.any.store(!ranges.is_empty(), Ordering::Release);
        Ok(())
    }

    /// Forgets the ranges inside `[base, base+len)`: the allocation holding them was freed.
    pub(crate) fn forget(&self, base: usize, len: usize) {
        if !self.any.load(Ordering::Acquire) {
            return;
        }
        let mut ranges = write(&self.ranges);
        ranges.retain(|&start, _| !(base..base + len).contains(&start));
        self.any.store(!ranges.is_empty(), Ordering::Release);
    }
}

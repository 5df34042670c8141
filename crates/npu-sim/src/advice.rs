//! What applications said about managed memory, page by page (2 MiB): the advice of
//! aclrtMemManagedAdvise and the locations of the latest prefetch requests, which
//! aclrtMemManagedGetAttr(s) report. Nothing migrates on the simulator; this is the record
//! the queries read.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::sync::Mutex;

use npu_sys::*;

use crate::sync::lock;

/// The size of a managed page.
pub(crate) const PAGE: usize = 2 << 20;

/// A location as the queries report it: its type (DEVICE, HOST or HOST_NUMA) and id (the
/// host's is -1).
pub(crate) type Place = (aclrtMemManagedLocationType, i32);

/// The place a managed location names: HOST_NUMA_CURRENT is the simulator's one NUMA node, 0.
pub(crate) fn place_of(location: &aclrtMemManagedLocation) -> Place {
    match location.type_ {
        ACL_MEM_LOCATIONTYPE_HOST => (ACL_MEM_LOCATIONTYPE_HOST, -1),
        ACL_MEM_LOCATIONTYPE_HOST_NUMA_CURRENT => (ACL_MEM_LOCATIONTYPE_HOST_NUMA, 0),
        other => (other, location.id),
    }
}

/// One page's record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PageAdvice {
    pub(crate) read_mostly: bool,
    pub(crate) preferred: Option<Place>,
    pub(crate) accessed_by: BTreeSet<Place>,
    pub(crate) last_prefetch: Option<Place>,
}

/// The records of every page something was said about, by page address.
#[derive(Default)]
pub(crate) struct Advice {
    pages: Mutex<BTreeMap<usize, PageAdvice>>,
}

/// The page addresses `[ptr, ptr+len)` touches.
fn pages(ptr: usize, len: usize) -> impl Iterator<Item = usize> {
    let first = ptr / PAGE * PAGE;
    (first..ptr + len).step_by(PAGE)
}

impl Advice {
    /// Applies `change` to every page of `[ptr, ptr+len)`.
    pub(crate) fn update(&self, ptr: usize, len: usize, change: impl Fn(&mut PageAdvice)) {
        let mut map = lock(&self.pages);
        for page in pages(ptr, len) {
            change(map.entry(page).or_default());
        }
    }

    /// The records of every page of `[ptr, ptr+len)` (a page never advised is the default).
    pub(crate) fn of(&self, ptr: usize, len: usize) -> Vec<PageAdvice> {
        let map = lock(&self.pages);
        pages(ptr, len)
            .map(|page| map.get(&page).cloned().unwrap_or_default())
            .collect()
    }

    /// Forgets the pages of freed managed memory.
    pub(crate) fn forget(&self, range: Range<usize>) {
        lock(&self.pages).retain(|page, _| !range.contains(page));
    }
}

/// The value every page has, if they agree.
pub(crate) fn common<T: PartialEq + Copy>(
    records: &[PageAdvice],
    get: impl Fn(&PageAdvice) -> Option<T>,
) -> Option<T> {
    let first = get(records.first()?)?;
    records
        .iter()
        .all(|record| get(record) == Some(first))
        .then_some(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_recorded_and_agreement_is_over_the_whole_range() {
        let advice = Advice::default();
        let base = 0x900_0000_0000;
        let device = (ACL_MEM_LOCATIONTYPE_DEVICE, 1);
        advice.update(base, 2 * PAGE, |page| page.preferred = Some(device));
        advice.update(base + PAGE, 1, |page| page.read_mostly = true);
        let both = advice.of(base, 2 * PAGE);
        assert_eq!(both.len(), 2);
        assert_eq!(common(&both, |page| page.preferred), Some(device));
        assert_eq!(common(&both, |page| page.read_mostly.then_some(())), None);
        assert_eq!(
            common(&advice.of(base + PAGE, 8), |p| p.read_mostly.then_some(())),
            Some(())
        );
        advice.forget(base..base + 2 * PAGE);
        assert_eq!(advice.of(base, PAGE), [PageAdvice::default()]);
    }
}

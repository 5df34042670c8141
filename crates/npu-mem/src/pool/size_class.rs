//! The pool's size classes: page-granular for small blocks, four classes per power of two
//! above 64 KiB.

use crate::host_block::PAGE;

/// Blocks up to this size are rounded to whole pages.
const PAGE_GRANULAR_LIMIT: usize = 64 << 10;

/// The block size the pool uses for a request of `bytes`, or `None` if rounding overflows.
///
/// - Up to 64 KiB: the next multiple of 4 KiB. Pinning works on whole pages, so a smaller
///   block would not save memory, and 16 classes keep reuse high.
/// - Above: four classes per power of two. A request in (2^k, 2^(k+1)] is rounded up to a
///   multiple of 2^(k-2), giving the classes 1.25, 1.5, 1.75 and 2 times 2^k. The waste is
///   below a quarter of the request (an eighth on average) where rounding to a power of two,
///   as PyTorch's CachingHostAllocator does, wastes up to half the block.
pub(crate) fn size_class(bytes: usize) -> Option<usize> {
    if bytes <= PAGE_GRANULAR_LIMIT {
        return bytes.max(1).checked_next_multiple_of(PAGE);
    }
    let octave = usize::BITS - 1 - (bytes - 1).leading_zeros();
    bytes.checked_next_multiple_of(1 << (octave - 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_requests_round_to_pages() {
        assert_eq!(size_class(1), Some(PAGE));
        assert_eq!(size_class(PAGE), Some(PAGE));
        assert_eq!(size_class(PAGE + 1), Some(2 * PAGE));
        assert_eq!(size_class(64 << 10), Some(64 << 10));
    }

    #[test]
    fn large_requests_get_four_classes_per_doubling() {
        let mib = 1 << 20;
        assert_eq!(size_class(mib), Some(mib));
        assert_eq!(size_class(mib + 1), Some(mib + mib / 4));
        assert_eq!(size_class(mib + mib / 4 + 1), Some(mib + mib / 2));
        assert_eq!(size_class(mib + mib / 2 + 1), Some(mib + 3 * mib / 4));
        assert_eq!(size_class(mib + 3 * mib / 4 + 1), Some(2 * mib));
        assert_eq!(size_class(usize::MAX), None);
    }

    #[test]
    fn every_class_is_whole_pages_and_wastes_under_a_quarter() {
        let mut bytes = PAGE_GRANULAR_LIMIT + 1;
        while bytes < 1 << 40 {
            for probe in [bytes, bytes + 1, bytes * 5 / 4, bytes * 3 / 2 + 7] {
                let class = size_class(probe).unwrap();
                assert_eq!(class % PAGE, 0, "{probe}");
                assert!(
                    class >= probe && (class - probe) * 4 < probe,
                    "{probe} -> {class}"
                );
            }
            bytes = bytes * 2 + 1;
        }
    }
}

//! The API conventions of docs/architecture.md that a user meets through `npu::prelude::*`:
//! the prelude's traits do not shadow the standard library's slice methods, and the handles
//! (devices, contexts, streams, events) compare and hash by identity.

use std::collections::HashSet;
use std::hash::{BuildHasher, Hash, RandomState};

use npu::prelude::*;

/// `MemoryMut`'s consuming split is `into_halves`: with the prelude in scope, `split_at` on a
/// slice, a `Vec` or a pinned buffer (which dereferences to a slice) is still the slice's,
/// borrowing two subslices and leaving the buffer in place.
#[test]
fn the_prelude_leaves_the_slice_methods_alone() -> npu::Result<()> {
    let mut vec = vec![1u8, 2, 3, 4];
    let (head, tail) = vec.split_at(1);
    assert_eq!((head, tail), (&[1][..], &[2, 3, 4][..]));
    let (head, tail) = vec.as_mut_slice().split_at(3);
    assert_eq!((head, tail), (&[1, 2, 3][..], &[4][..]));
    let (head, _) = vec.split_at_mut(2);
    head[0] = 9;
    assert_eq!(vec, [9, 2, 3, 4]);

    let ctx = Device::open(0)?.primary_context().clone();
    let mut pinned = PinnedBuffer::from_slice(&ctx, &[1u8, 2, 3, 4])?;
    let (head, tail) = pinned.split_at(2);
    assert_eq!((head, tail), (&[1, 2][..], &[3, 4][..]));
    pinned.split_at_mut(1).1.fill(7);
    assert_eq!(
        pinned[..],
        [1, 7, 7, 7],
        "the buffer is still here: nothing consumed it"
    );

    // The consuming split, for when two operations are to own the parts.
    let (head, tail) = pinned.into_halves(1)?;
    assert_eq!((head.len(), tail.len()), (1, 3));
    Ok(())
}

/// Checks that `a` and its clone are one key, and `other` (alike but made apart) another.
fn identity<T: Clone + Eq + Hash + std::fmt::Debug>(what: &str, a: &T, other: &T) {
    let hasher = RandomState::new();
    assert_eq!(a, &a.clone(), "{what}: a clone is the same handle");
    assert_eq!(hasher.hash_one(a), hasher.hash_one(a.clone()), "{what}");
    assert_ne!(a, other, "{what}: made apart, not the same");
    let set: HashSet<T> = [a.clone(), other.clone(), a.clone()].into_iter().collect();
    assert_eq!(set.len(), 2, "{what}");
    assert!(set.contains(a) && set.contains(other), "{what}");
}

#[test]
fn handles_are_equal_when_they_are_the_same_handle() -> npu::Result<()> {
    let device = Device::open(0)?;
    identity("device", &device, &Device::open(1)?);
    assert_eq!(device, Device::open(0)?, "two opens of one device");

    let ctx = device.primary_context().clone();
    identity("context", &ctx, &device.create_context()?);
    assert_eq!(
        &ctx,
        Device::open(0)?.primary_context(),
        "one primary context"
    );

    identity("stream", &NpuStream::new(&ctx)?, &NpuStream::new(&ctx)?);
    identity("event", &Event::new(&ctx)?, &Event::new(&ctx)?);
    Ok(())
}

//! Attacks of the twenty-third session's helper, through the `npu` facade: `Filled` over a
//! buffer whose `Deref` changes its length between calls, and edge cases of views, casts,
//! copies and pools (zero lengths, huge lengths, ranges past the end).
//!
//! Each test names the promise it attacks. The simulator's counters are process-wide, so every
//! test that touches a device takes the file's device lock; every wait is bounded, so a hang
//! fails its test instead of stalling the suite.

mod common;

use std::cell::Cell;
use std::ops::{Deref, DerefMut};

use bytes::{Buf, BufMut};
use npu::Filled;
use npu::prelude::*;

/// A buffer whose `Deref` answers with the next entry of `lengths` on each call, the last
/// one for ever after, over storage of the longest of them: legal safe code, which `Filled`
/// must not trust to answer the same twice.
struct Fickle {
    storage: Vec<u8>,
    lengths: Vec<usize>,
    calls: Cell<usize>,
}

impl Fickle {
    fn new(lengths: &[usize]) -> Self {
        let longest = lengths.iter().copied().max().unwrap_or(0);
        Fickle {
            storage: vec![0; longest],
            lengths: lengths.to_vec(),
            calls: Cell::new(0),
        }
    }

    fn next_len(&self) -> usize {
        let call = self.calls.get();
        self.calls.set(call + 1);
        self.lengths[call.min(self.lengths.len() - 1)]
    }
}

impl Deref for Fickle {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.storage[..self.next_len()]
    }
}

impl DerefMut for Fickle {
    fn deref_mut(&mut self) -> &mut [u8] {
        let len = self.next_len();
        &mut self.storage[..len]
    }
}

/// Runs `f` on a thread of its own, failing the test if it does not return (a `Buf` loop that
/// spins must fail, not stall the suite) or panics.
fn bounded<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(f()));
    rx.recv_timeout(common::HANG)
        .expect("the call spun or panicked")
}

/// "Never a panic" for `Filled`'s accessors over a buffer that shrinks after it was filled:
/// each answers within the length its own call saw, the filled part reading as filled up to
/// the buffer's new end. The break: `filled()` and `chunk()` sliced past the shorter length,
/// `remaining_mut()` computed `capacity() - filled` with the filled length past the capacity
/// (an overflow panic in debug, almost `usize::MAX` in release, which `read_buf` would then
/// trust), and `chunk_mut()` sliced from past the end.
#[test]
fn filled_over_a_buffer_that_shrank_clamps_to_its_new_length() {
    bounded(|| {
        // 16 bytes for the fill, 4 ever after.
        let mut buf = Filled::new(Fickle::new(&[16, 4]));
        buf.put_slice(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        assert_eq!(buf.filled(), &[1, 2, 3, 4]);
        assert_eq!((buf.chunk(), buf.remaining()), (&[1, 2, 3, 4][..], 4));
        assert_eq!(buf.remaining_mut(), 0, "a full buffer, not a wrapped count");
        assert_eq!(buf.chunk_mut().len(), 0);
        buf.advance(3);
        assert_eq!(buf.chunk(), &[4]);
        assert_eq!(buf.get_u8(), 4);
        assert!(!buf.has_remaining());
    });
}

/// "Never a hang" for `Buf`'s and `BufMut`'s multi-byte calls on a buffer that shrinks between
/// the room check and the copy: bytes' provided `copy_to_slice` and `put_slice` loop over
/// `chunk()` / `chunk_mut()` until the count they checked first is done, and spun for ever on
/// the empty chunk of the shrunken buffer. `Filled` now reads the length once per call: the
/// copy takes the bytes the buffer held when it began, and the write that no longer fits
/// panics as `BufMut` documents for a write past the capacity.
#[test]
fn filled_copies_read_the_buffer_once_and_end() {
    // 16 bytes for the fill and the copy's own look, 4 ever after.
    let copied = bounded(|| {
        let mut buf = Filled::new(Fickle::new(&[16, 16, 4]));
        buf.put_slice(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        let mut out = [0; 8];
        buf.copy_to_slice(&mut out);
        (out, buf.remaining())
    });
    assert_eq!(copied, ([1, 2, 3, 4, 5, 6, 7, 8], 0));
    // The room checked at 16 bytes, the write made at 4.
    let write = bounded(|| {
        std::panic::catch_unwind(|| {
            let mut buf = Filled::new(Fickle::new(&[16, 4]));
            let room = buf.remaining_mut();
            buf.put_bytes(7, room);
        })
    });
    let message = panic_text(write.expect_err("16 bytes do not fit in 4"));
    assert!(
        message.contains("Filled::put_bytes: 16 bytes do not fit in the 4 left"),
        "{message}"
    );
    // `put` of another `Buf`, the room checked at 16 bytes and the copy made at 4: found by
    // the session's last read (bytes' provided loop spun on `chunk_mut`).
    let put = bounded(|| {
        std::panic::catch_unwind(|| {
            let mut buf = Filled::new(Fickle::new(&[16, 4]));
            let room = buf.remaining_mut();
            buf.put(&vec![9u8; room][..]);
        })
    });
    let message = panic_text(put.expect_err("16 bytes do not fit in 4"));
    assert!(
        message.contains("Filled::put_slice: 16 bytes do not fit in the 4 left"),
        "{message}"
    );
}

/// A panic's formatted message.
fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    *payload.downcast::<String>().expect("a formatted message")
}

/// `Filled` over a buffer that grows after a fill: the filled bytes stay filled and the new
/// room is writable.
#[test]
fn filled_over_a_buffer_that_grew_keeps_its_bytes_and_uses_the_room() {
    let mut buf = Filled::new(Fickle::new(&[4, 32]));
    buf.put_slice(&[1, 2, 3, 4]);
    assert_eq!(buf.remaining_mut(), 28);
    buf.put_bytes(5, 28);
    assert_eq!(buf.filled().len(), 32);
    assert_eq!(&buf.filled()[..5], &[1, 2, 3, 4, 5]);
}

/// The message of a refusal, which must be a typed error naming `api`, never a panic.
fn refusal<T: std::fmt::Debug, E: std::fmt::Display>(api: &str, result: Result<T, E>) -> String {
    let err = result.expect_err(api).to_string();
    assert!(err.contains(api), "{api}: {err}");
    err
}

/// "Bad input gets a typed error naming the API, never a panic": lengths whose byte count
/// overflows, or that no host can hold, for every allocating call; ranges and split points at
/// `usize::MAX`; zero lengths where they are refused. The allocations that succeed at zero
/// length must also be usable by the copies and memsets that take them.
#[test]
fn huge_and_zero_lengths_are_refused_by_name_or_work() {
    let (_guard, d0, _d1) = common::exclusive(None);
    for len in [
        usize::MAX,
        usize::MAX / 2,
        isize::MAX as usize / 8 + 1,
        1 << 60,
    ] {
        refusal("DeviceBuffer::new", npu::DeviceBuffer::<u64>::new(&d0, len));
        refusal("PinnedBuffer::new", npu::PinnedBuffer::<u64>::new(&d0, len));
        refusal(
            "PageAlignedBuffer::new",
            npu::memory::PageAlignedBuffer::<u64>::new(len),
        );
        let pool = npu::memory::PinnedPool::new(&d0);
        refusal("PinnedPool::try_alloc", pool.try_alloc::<u64>(len));
        refusal("PinnedPool::alloc", common::run(pool.alloc::<u64>(len)));
        for strategy in common::STRATEGIES {
            let s = common::stream(&d0, strategy);
            let device_pool = npu::memory::DevicePool::new(&d0).unwrap();
            refusal(
                "DevicePool::try_alloc",
                device_pool.try_alloc::<u64>(&s, len),
            );
            refusal(
                "DevicePool::alloc",
                common::run(device_pool.alloc::<u64>(&s, len)),
            );
        }
    }
    let buffer = npu::DeviceBuffer::<u8>::new(&d0, 8).unwrap();
    let buffer = refusal_back("Memory::view", buffer.view(usize::MAX..));
    let buffer = refusal_back("Memory::view", buffer.view(..=usize::MAX));
    let buffer = refusal_back("Memory::view", buffer.view(4..usize::MAX));
    let view = buffer.view(8..).unwrap();
    assert_eq!(view.len(), 0);
    let pinned = npu::PinnedBuffer::<u8>::new(&d0, 8).unwrap();
    let pinned = refusal_back("MemoryMut::into_halves", pinned.into_halves(usize::MAX));
    let (head, _tail) = pinned.into_halves(8).unwrap();
    let (head, tail) = refusal_back("Split::into_halves", head.into_halves(usize::MAX))
        .into_halves(8)
        .unwrap();
    assert_eq!((head.len(), tail.len()), (8, 0));
    for strategy in common::STRATEGIES {
        let s = common::stream(&d0, strategy);
        common::run(async {
            let empty = npu::PinnedBuffer::<u8>::new(&d0, 0);
            let device = npu::DeviceBuffer::<u8>::new(&d0, 0);
            if let (Ok(empty), Ok(device)) = (empty, device) {
                let (empty, device) = s.copy_h2d(empty, device).await.expect("zero bytes up");
                let device = s.memset(device, 1).await.expect("zero bytes set");
                s.copy_d2h(device, empty).await.expect("zero bytes down");
            }
        });
        common::run(async {
            let a = npu::DeviceBuffer::<u8>::new(&d0, 8)
                .unwrap()
                .view(8..)
                .unwrap();
            let b = npu::DeviceBuffer::<u8>::new(&d0, 8)
                .unwrap()
                .view(0..0)
                .unwrap();
            let (a, _b) = s.copy_d2d(a, b).await.expect("empty views");
            s.memset(a, 7).await.expect("an empty view set");
        });
    }
}

/// The error of a refusal naming `api`, with the value it hands back.
fn refusal_back<T, V>(api: &str, result: Result<T, npu::stream::OpError<V>>) -> V {
    let err = match result {
        Ok(_) => panic!("{api}: accepted"),
        Err(err) => err,
    };
    assert!(err.to_string().contains(api), "{api}: {err}");
    err.value.expect("handed back")
}

/// "Bad input gets a typed error naming the API" for zero-sized elements (`()` is `Pod`),
/// whose buffers would hold no bytes whatever their length: every allocation refuses them, so
/// no `Memory` of npu-rs has them.
#[test]
fn zero_sized_elements_are_refused_by_every_allocation() {
    let (_guard, d0, _d1) = common::exclusive(None);
    let s = common::stream(&d0, npu::stream::Strategy::EventPoll);
    let pool = npu::memory::PinnedPool::new(&d0);
    let device_pool = npu::memory::DevicePool::new(&d0).unwrap();
    let flags = npu::memory::RegisterFlags::PINNED;
    let refusals = [
        refusal("PinnedBuffer::new", npu::PinnedBuffer::<()>::new(&d0, 4)),
        refusal(
            "DeviceBuffer::new",
            npu::DeviceBuffer::<()>::new(&d0, usize::MAX),
        ),
        refusal(
            "PageAlignedBuffer::new",
            npu::memory::PageAlignedBuffer::<()>::new(4),
        ),
        refusal("PinnedPool::try_alloc", pool.try_alloc::<()>(4)),
        refusal("PinnedPool::alloc", common::run(pool.alloc::<()>(4))),
        refusal("DevicePool::try_alloc", device_pool.try_alloc::<()>(&s, 4)),
        refusal(
            "DevicePool::alloc",
            common::run(device_pool.alloc::<()>(&s, 4)),
        ),
        refusal(
            "HostRegistration::new",
            npu::HostRegistration::new(&d0, vec![(); 4], flags),
        ),
    ];
    for refused in refusals {
        assert!(refused.contains("zero-size"), "{refused}");
    }
}

/// Memory of the user's with zero-sized elements: legal (its `len()` elements occupy no bytes,
/// so there is nothing to keep allocated).
struct Units {
    context: npu::Context,
    units: Vec<()>,
}

// SAFETY: zero-sized elements occupy no bytes: any address is that of `len()` of them, there
// is nothing for the runtime to access or for a use to keep allocated, and the drop does not
// block.
unsafe impl npu::Memory for Units {
    type Elem = ();

    fn context(&self) -> &npu::Context {
        &self.context
    }

    fn addr(&self) -> *const std::ffi::c_void {
        self.units.as_ptr().cast()
    }

    fn len(&self) -> usize {
        self.units.len()
    }

    fn record_use(&self, _completion: &npu::stream::Completion) {}
}

impl Deref for Units {
    type Target = [()];
    fn deref(&self) -> &[()] {
        &self.units
    }
}

/// "Never a panic" for `Filled::into_view` over memory of zero-sized elements: no bytes, so
/// an empty view. The break: the cursors were divided by the element size, 0.
#[test]
fn filled_over_zero_sized_elements_gives_an_empty_view() {
    let context = npu::Device::open(0).unwrap().primary_context().clone();
    let units = Units {
        context,
        units: vec![(); 8],
    };
    let filled = Filled::new(units);
    assert_eq!((filled.capacity(), filled.remaining()), (0, 0));
    let view = filled.into_view().expect("an empty view");
    assert_eq!((view.offset(), view.len()), (0, 0));
}

/// Checks that `result` is a success or an error naming `api`, never another API's error.
fn served_or_named<T, E: std::fmt::Display>(api: &str, result: Result<T, E>) -> Option<T> {
    match result {
        Ok(value) => Some(value),
        Err(err) => {
            let err = err.to_string();
            assert!(err.contains(api), "{api}: {err}");
            None
        }
    }
}

/// "Bad input gets a typed error naming the API, never a panic or a hang" for pools at their
/// edges: reserves of counts and sizes whose product overflows, capacities of 0, 1 byte and
/// `usize::MAX`, size classes of extreme requests, and an allocation larger than a pool's
/// whole capacity (refused, not left waiting for room that can never come), under both
/// device-pool backends.
#[test]
fn pools_at_their_edges_refuse_or_serve_and_never_wait_for_ever() {
    let (_guard, d0, _d1) = common::exclusive(None);
    for bytes in [0, 1, usize::MAX / 2, usize::MAX] {
        let _ = npu::memory::PinnedPool::size_class(bytes);
        let _ = npu::memory::DevicePool::size_class(bytes);
    }
    let s = common::stream(&d0, npu::stream::Strategy::EventPoll);
    let reserves = [
        (usize::MAX, usize::MAX),
        (2, usize::MAX / 2 + 1),
        (0, 0),
        (1, 0),
    ];
    for capacity in [0, 1, usize::MAX] {
        let built = npu::memory::PinnedPool::builder(&d0)
            .capacity(capacity)
            .build();
        if let Some(pool) = served_or_named("PinnedPoolBuilder::build", built) {
            for (count, bytes) in reserves {
                served_or_named("PinnedPool::reserve", pool.reserve(count, bytes));
            }
            served_or_named("PinnedPool::alloc", common::run(pool.alloc::<u8>(8192)));
            served_or_named("PinnedPool::try_alloc", pool.try_alloc::<u8>(8192));
        }
        for backend in [
            npu::memory::DevicePoolBackend::Caching,
            npu::memory::DevicePoolBackend::RuntimePool,
        ] {
            let built = npu::memory::DevicePool::builder(&d0)
                .capacity(capacity)
                .backend(backend)
                .build();
            if let Some(pool) = served_or_named("DevicePoolBuilder::build", built) {
                for (count, bytes) in reserves {
                    let reserved = common::run(pool.reserve(&s, count, bytes));
                    served_or_named("DevicePool::reserve", reserved);
                }
                let allocated = common::run(pool.alloc::<u8>(&s, 8192));
                served_or_named("DevicePool::alloc", allocated);
                served_or_named("DevicePool::try_alloc", pool.try_alloc::<u8>(&s, 8192));
                served_or_named("DevicePool::trim_to", pool.trim_to(usize::MAX));
                served_or_named("DevicePool::trim_to", pool.trim_to(0));
            }
        }
    }
}

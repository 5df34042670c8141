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
    let message = write.expect_err("16 bytes do not fit in 4");
    let message = message
        .downcast_ref::<String>()
        .expect("a formatted message");
    assert!(
        message.contains("Filled::put_bytes: 16 bytes do not fit in the 4 left"),
        "{message}"
    );
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

// A guard works until it is dropped: one discarded in the statement that made it (a lock
// taken and released at once, a teardown counted and uncounted at once) is a mistake the
// compiler points out (`#[must_use]`), here denied. These two are npu-rs's own plumbing
// (hidden), which its crates share.
#![deny(unused_must_use)]

use std::sync::Mutex;

use npu_core::contain::{Rank, lock_here};

fn main() {
    // SAFETY: a test of npu-rs's own.
    let seal = unsafe { npu_core::seal::Seal::npu_rs() };
    let lock = Mutex::new(0);
    lock_here(seal, &lock, Rank::Submission).unwrap();
    npu_core::reaper::counted(seal, 0);
}

// The pool machinery's `Source` is public only for npu-rs's own crates: outside them it cannot
// be implemented, even by an `unsafe impl` that keeps its contract, because the seal it needs
// has no safe constructor.
use npu_mem::pool_cache::{Seal, Source};

struct Forged;

unsafe impl Source for Forged {
    type Block = ();
    const NAME: &'static str = "Forged::alloc";
    const SEAL: Seal = Seal(());

    fn block_bytes(_: &()) -> usize {
        0
    }

    fn free(&self, _: Vec<()>) {}
}

struct Unsealed;

unsafe impl Source for Unsealed {
    type Block = ();
    const NAME: &'static str = "Unsealed::alloc";

    fn block_bytes(_: &()) -> usize {
        0
    }

    fn free(&self, _: Vec<()>) {}
}

struct Borrowed;

unsafe impl Source for Borrowed {
    type Block = ();
    const NAME: &'static str = "Borrowed::alloc";
    const SEAL: Seal = Seal::npu_rs();

    fn block_bytes(_: &()) -> usize {
        0
    }

    fn free(&self, _: Vec<()>) {}
}

fn main() {}

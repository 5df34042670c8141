// The only constructor of the `Seal` that npu-rs's shared plumbing takes is `unsafe`, with a
// contract that reserves it for npu-rs's own crates: a dependent's safe code cannot call it.
use npu_core::seal::Seal;

fn main() {
    let taken = Seal::npu_rs();
    npu_core::holds::completing(taken, || ());
}

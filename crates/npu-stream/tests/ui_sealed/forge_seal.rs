// The plumbing npu-rs's crates share takes a `Seal`, which a dependent cannot build: its field
// is private (and its only constructor is `unsafe`: `take_seal.rs`).
use npu_core::seal::Seal;

fn main() {
    let forged = Seal(());
    npu_core::holds::completing(forged, || ());
}

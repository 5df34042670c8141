// npu-core's `log!` passes the invoking crate's seal, `crate::SEAL`, which only npu-rs's crates
// hold: in a dependent it does not compile.
fn main() {
    npu_core::log!(warn, "from a dependent");
}

// What npu-sys reports (a library's missing symbols, a code's name) is read, never built, by
// users: `#[non_exhaustive]`, so that a field can be added without breaking them.
use npu_core::ffi::{AclCodeInfo, MissingSymbols};

fn main() {
    let _ = MissingSymbols { missing: Vec::new() };
    let _ = AclCodeInfo { code: 0, name: "ACL_SUCCESS", description: "success" };
}

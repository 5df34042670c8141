// A runtime library named in code is loaded and called with ACL's prototypes: the caller
// vouches for it in `unsafe`, by the builder or by the choice.
fn main() {
    let _builder = npu_core::Runtime::builder().library("/usr/lib/libz.so");
    let _choice = npu_core::BackendChoice::Library(npu_core::RuntimeLibrary::new("libz.so"));
}

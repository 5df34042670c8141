//! Loading the simulator's in-process kernels, and reading the arguments of the fill kernels
//! the attacks register.

use std::ffi::c_void;

use npu::prelude::*;
use npu::sim;

/// The in-process kernel `name` (built in, or registered by the test), loaded in `ctx` from a
/// registry image.
pub(crate) fn in_process(ctx: &Context, name: &str) -> Function {
    let image = sim::kernel::registry_image(&[name]);
    // SAFETY: a registry image only names in-process kernels; loading it runs no code.
    let module = unsafe { Module::from_data(ctx, &image) }.unwrap();
    module.function(name).unwrap()
}

/// The arguments `{uint8_t *x, uint64_t n}` of a fill kernel: where to write, and how many
/// bytes.
///
/// # Safety
///
/// `args` points at the 16 bytes of a launch made with those arguments.
pub(crate) unsafe fn fill_args(args: *mut c_void) -> (*mut u8, usize) {
    let words = args.cast::<u64>();
    // SAFETY: the caller's contract: two u64 words, in no particular alignment.
    unsafe {
        (
            words.read_unaligned() as *mut u8,
            words.add(1).read_unaligned() as usize,
        )
    }
}

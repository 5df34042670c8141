//! Loading the simulator's in-process kernels, and reading the arguments of the fill kernels
//! the attacks register.

use std::ffi::c_void;
use std::sync::Mutex;

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

/// The fill kernel `{uint8_t *x, uint64_t n}` registered (once per process) as `name`, whose
/// block 0 writes `byte` over the `n` bytes at `x`, loaded in `ctx`.
pub(crate) fn fill_kernel(ctx: &Context, name: &'static str, byte: u8) -> Function {
    static REGISTERED: Mutex<Vec<&str>> = Mutex::new(Vec::new());
    let mut registered = REGISTERED.lock().unwrap_or_else(|e| e.into_inner());
    if !registered.contains(&name) {
        sim::kernel::register_with_args_size(name, 16, move |block, _, args| {
            // SAFETY: launched with {uint8_t *x, uint64_t n}: 16 bytes.
            let (x, n) = unsafe { fill_args(args) };
            if block == 0 {
                // SAFETY: x holds n bytes, kept allocated by the launch until it completes.
                unsafe { std::ptr::write_bytes(x, byte, n) };
            }
            0
        })
        .unwrap();
        registered.push(name);
    }
    drop(registered);
    in_process(ctx, name)
}

//! What the kernel tests share: modules with the simulator's kernels, kernels registered from
//! Rust, and deterministic pseudo-random data.
//!
//! Each test binary uses a part of it.
#![allow(dead_code)]

use std::ffi::c_void;
use std::num::NonZeroU32;
use std::sync::{Mutex, MutexGuard, Once};

use npu_core::{Context, Function, LaunchConfig, Module};
use npu_sim::kernel::{self, LIBRARY_PATH, VectorAddArgs, block_range};
use npu_stream::{Op, Stream};

// Shared with the facade's abort attacks, which gate their own fill kernel.
#[path = "../common/gate.rs"]
mod gate;

use gate::{set_gate, wait_gate};

/// A Rust closure computing `c = a + b` with [`VectorAddArgs`], like the shipped kernel.
pub(crate) const RUST_VECTOR_ADD: &str = "npu_stream_test_vector_add";
/// A kernel that traps (returns 1) in every block.
pub(crate) const TRAP: &str = "npu_stream_test_trap";

/// Registers this file's Rust kernels with the in-process simulator, once per test binary.
fn register_rust_kernels() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        kernel::register(RUST_VECTOR_ADD, |block, blocks, args: *mut c_void| {
            // SAFETY: launched by the tests with a packed VectorAddArgs.
            let p = unsafe { args.cast::<VectorAddArgs>().read_unaligned() };
            let (a, b, c) = (p.a as *const f32, p.b as *const f32, p.c as *mut f32);
            for i in block_range(block, blocks, p.n) {
                // SAFETY: a, b and c hold n f32 each (the tests' launches); blocks write
                // disjoint shares of c.
                unsafe { *c.add(i) = *a.add(i) + *b.add(i) };
            }
            0
        })
        .expect("a fresh kernel name");
        kernel::register(TRAP, |_, _, _| 1).expect("a fresh kernel name");
    });
}

/// The primary context of device `id`.
pub(crate) fn context(id: u32) -> Context {
    npu_core::Device::open(id)
        .unwrap()
        .primary_context()
        .clone()
}

/// npu-sim's shipped C kernel library, loaded from its file.
pub(crate) fn library(ctx: &Context) -> Module {
    // SAFETY: npu-sim's own kernel library, built for its kernel ABI.
    unsafe { Module::from_file(ctx, LIBRARY_PATH) }.unwrap()
}

/// The in-process kernel `name` (a built-in or one of this file's), through a registry image
/// loaded with aclrtBinaryLoadFromData.
pub(crate) fn in_process(ctx: &Context, name: &str) -> Function {
    register_rust_kernels();
    let image = kernel::registry_image(&[name]);
    // SAFETY: a registry image only names in-process kernels; loading it runs no code.
    let module = unsafe { Module::from_data(ctx, &image) }.unwrap();
    module.function(name).unwrap()
}

/// `n` pseudo-random values in [-100, 100) from a fixed seed (xorshift64*).
pub(crate) fn random_f32(seed: u64, n: usize) -> Vec<f32> {
    let mut state = seed | 1;
    (0..n)
        .map(|_| {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            let bits = state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40;
            (bits as f32 / (1u64 << 24) as f32) * 200.0 - 100.0
        })
        .collect()
}

/// A kernel that runs until its test opens the gate ([`open_gate`]): the device's running
/// task, which an abort or a device loss waits for.
const GATED: &str = "npu_stream_test_gated";

/// Launches the gated kernel on `stream` and returns once it runs, with its operation and the
/// gate, which one test holds at a time (a binary's tests run in parallel) until the guard is
/// dropped. The kernel returns when the holder calls [`open_gate`].
pub(crate) fn launch_gated(stream: &Stream) -> (Op<()>, MutexGuard<'static, ()>) {
    static TURN: Mutex<()> = Mutex::new(());
    static REGISTER: Once = Once::new();
    let turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    REGISTER.call_once(|| {
        kernel::register(GATED, |_, _, _| {
            set_gate(|gate| gate.0 = true);
            wait_gate(|gate| gate.1);
            0
        })
        .expect("a fresh kernel name");
    });
    set_gate(|gate| *gate = (false, false));
    let gated = in_process(stream.context(), GATED);
    // SAFETY: the gated kernel takes no arguments and touches no memory.
    let running = unsafe { stream.launch_with(&gated, LaunchConfig::new(NonZeroU32::MIN), ()) };
    wait_gate(|gate| gate.0);
    (running, turn)
}

/// Lets the gated kernel return.
pub(crate) fn open_gate() {
    set_gate(|gate| gate.1 = true);
}

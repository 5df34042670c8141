//! The gated fill kernel the abort attacks share: the device's running task when an abort
//! begins, held until its test opens the gate.

use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};

use npu::prelude::*;
use npu::sim;

use super::gate::{set_gate, wait_gate};
use super::kernels::{fill_args, in_process};

/// The fill kernel `{uint8_t *x, uint64_t n}` that waits for its test's gate before it writes
/// 0x5B over the `n` bytes at `x`: the device's running task when an abort begins.
const GATED_FILL: &str = "npu_attack_gated_fill";

/// Set by the gated kernel just before it returns.
pub(crate) static RETURNED: AtomicBool = AtomicBool::new(false);

pub(crate) fn gated_fill(ctx: &Context) -> Function {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        sim::kernel::register_with_args_size(GATED_FILL, 16, |block, _, args| {
            // SAFETY: launched with {uint8_t *x, uint64_t n}: 16 bytes.
            let (x, n) = unsafe { fill_args(args) };
            set_gate(|gate| gate.0 = true);
            wait_gate(|gate| gate.1);
            if block == 0 {
                // SAFETY: x holds n bytes, kept allocated by the launch until it completes.
                unsafe { std::ptr::write_bytes(x, 0x5B, n) };
            }
            RETURNED.store(true, Ordering::Release);
            0
        })
        .unwrap();
    });
    in_process(ctx, GATED_FILL)
}

//! The gated fill kernel the abort attacks share: the device's running task when an abort
//! begins, held until its test opens the gate.

use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};

use npu::Stream;
use npu::prelude::*;
use npu::sim;
use npu::stream::Op;

use super::gate::{set_gate, wait_gate};
use super::kernels::{fill_args, in_process};

/// The fill kernel `{uint8_t *x, uint64_t n}` that waits for its test's gate before it writes
/// 0x5B over the `n` bytes at `x`: the device's running task when an abort begins.
const GATED_FILL: &str = "npu_attack_gated_fill";

/// Set by the gated kernel just before it returns.
pub(crate) static RETURNED: AtomicBool = AtomicBool::new(false);

/// The gated fill, loaded in `ctx`'s process.
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

/// On `s`, after a memset that shows the stream works (`what` names the case): a launch of
/// `fill` (the gated fill) over a fresh 256-byte buffer, and what `behind` queues after it.
/// Returns once the kernel is running, held at its gate: the device's running task, with
/// `behind`'s work queued.
pub(crate) fn a_held_fill_and_behind_it<Q>(
    ctx: &Context,
    s: &Stream,
    fill: &Function,
    what: &str,
    behind: impl FnOnce() -> Q,
) -> (Op<(DeviceBuffer<u8>, u64)>, Q) {
    super::a_memset_writes(ctx, s, 3, what);
    let x = DeviceBuffer::<u8>::new(ctx, 256).unwrap();
    set_gate(|gate| *gate = (false, false));
    RETURNED.store(false, Ordering::Release);
    // SAFETY: the kernel writes the 256 bytes of `x`, which the launch keeps.
    let running = unsafe { s.launch(fill, 1, (x, 256u64)) };
    let queued = behind();
    wait_gate(|gate| gate.0);
    (running, queued)
}

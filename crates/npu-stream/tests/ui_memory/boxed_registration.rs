// A boxed slice cannot be registered: moving a `Box` asserts unique access to its elements,
// while the registration and the device keep using their address across moves. `into_vec`
// (which keeps the allocation) gives a buffer that can be.
use npu_core::Context;
use npu_mem::{HostRegistration, RegisterFlags};

fn register(ctx: &Context, pages: Box<[u8]>) {
    let _ = HostRegistration::new(ctx, pages, RegisterFlags::PINNED);
}

fn main() {}

// A setter of a value type returns the changed copy, and a builder does nothing until built:
// discarding either is a mistake the compiler points out (`#[must_use]`), here denied.
#![deny(unused_must_use)]

use npu_core::{Device, Engine, LaunchConfig};
use npu_mem::HostAllocConfig;
use npu_stream::Stream;

fn main() {
    let config = LaunchConfig::new(std::num::NonZeroU32::MIN);
    config.engine(Engine::Aiv);
    HostAllocConfig::new().module_id(33);
    let ctx = Device::open(0).unwrap().primary_context().clone();
    Stream::builder(&ctx).priority(1);
    let _ = config;
}

//! What the unit tests share.

use npu_core::{BackendChoice, Runtime};

use crate::Stream;

/// A new stream of `device` of an in-process simulator (the stream keeps its context and the
/// runtime alive).
pub(crate) fn sim_stream(device: u32) -> Stream {
    let runtime = Runtime::builder()
        .backend(BackendChoice::Sim)
        .build()
        .unwrap();
    let ctx = runtime.device(device).unwrap().primary_context().clone();
    Stream::new(&ctx).unwrap()
}

//! Streams, events and the futures their operations return.
//!
//! A [`Stream`] is a FIFO queue of device work. Each operation (copies, 2D copies, memsets,
//! kernel launches, the signalling below) takes ownership of the buffers it touches and
//! returns an [`Op`], a future that gives them back once the device has finished. Event
//! records and event waits (`Event::record`, `Stream::wait_event`) touch no buffer and return
//! a plain `Result` once queued; await the point they mark with [`Event::wait`].
//!
//! **Operations are submitted when the method is called, not when the future is first
//! polled.** `stream.copy_h2d(a, b)` has queued the copy on the device by the time it returns;
//! awaiting the [`Op`] only waits for it. Two calls in a row therefore run back to back on the
//! device even if their futures are awaited later (or never: a dropped [`Op`] still runs, and
//! keeps its buffers until the device is done; see docs/cancellation.md).
//!
//! The conveniences that are `async fn`s (`Stream::upload` and `download`, the staged copies,
//! `Stream::timed`, `DevicePool::alloc` and `reserve`, `PinnedPool::alloc`) are ordinary Rust
//! futures instead: they start when first polled, so one dropped unpolled does nothing, and
//! work submitted to the stream after the call but before that poll runs first.
//! [`Stream::abort`] is not one of them: it starts when called.
//!
//! ```
//! use npu::prelude::*;
//! use npu::Stream;
//!
//! # tokio_test::block_on(async {
//! let ctx = Device::open(0)?.primary_context().clone();
//! let stream = Stream::new(&ctx)?;
//! let first = stream.memset(DeviceBuffer::<u8>::new(&ctx, 64)?, 1); // queued now
//! let second = stream.memset(DeviceBuffer::<u8>::new(&ctx, 64)?, 2); // queued behind it
//! let (a, b) = (first.await?, second.await?);
//! assert_eq!((a.to_vec_blocking()?[0], b.to_vec_blocking()?[0]), (1, 2));
//! # Ok::<(), npu::Error>(())
//! # })?;
//! # Ok::<(), npu::Error>(())
//! ```
//!
//! # Many requests, several streams
//!
//! Work on one stream runs in order; work on two streams may overlap. A server that wants its
//! concurrent requests to overlap on the device gives each one a stream of a [`StreamPool`]
//! (handed out round-robin; clones share the streams) and its memory from a
//! [`DevicePool`](crate::DevicePool):
//!
//! ```
//! use npu::prelude::*; // StreamPool and DevicePool among it
//!
//! # tokio_test::block_on(async {
//! let ctx = Device::open(0)?.primary_context().clone();
//! let (streams, memory) = (StreamPool::new(&ctx, 4)?, DevicePool::new(&ctx)?);
//! let requests = (0..8u8).map(|i| {
//!     let (stream, memory) = (streams.next(), memory.clone());
//!     async move {
//!         let block = memory.alloc::<u8>(&stream, 1024).await?;
//!         let block = stream.memset(block, i).await?;
//!         stream.download(block).await.map_err(npu::Error::from)
//!     }
//! });
//! for (i, answer) in futures::future::join_all(requests).await.into_iter().enumerate() {
//!     assert_eq!(answer?, [i as u8; 1024]);
//! }
//! # Ok::<(), npu::Error>(())
//! # })?;
//! # Ok::<(), npu::Error>(())
//! ```
//!
//! # Signalling between streams
//!
//! Besides [`Event`]s, streams signal each other with a [`Notify`] (`record_notify` /
//! `wait_notify`, one record per wait), with a 64-bit [`ValueWord`] of device memory
//! (`write_value` / `wait_value` and a [`ValueCondition`]), and with event waits the device
//! gives up after a timeout (`wait_event_timeout`). Each is an [`Op`] like a copy: it owns the notify, word or
//! event until the stream has passed it, and an abort discards a wait that nothing will
//! satisfy.
//!
//! # Completion strategies
//!
//! How npu-rs learns that an operation finished is the stream's [`Strategy`], chosen with
//! [`Stream::builder`]. Keep the default, [`Strategy::EventPoll`] (one reactor thread polls the
//! oldest pending event of each stream), unless:
//!
//! - operations are long (milliseconds) and you would rather no thread polled while they run:
//!   the reactor wakes about every millisecond while work is pending, whereas
//!   [`Strategy::CallbackThread`] sleeps in `aclrtProcessReport` until ACL reports a
//!   completion, at the cost of latency and throughput;
//! - you need exactly what `spawn_blocking` + `aclrtSynchronizeEvent` code does (comparing
//!   against it, or a runtime whose event queries misbehave): [`Strategy::BlockingSync`],
//!   which takes a blocking thread per operation in flight.
//!
//! docs/benchmarks.md measures the three: event polling has the lowest latency and the
//! highest throughput with many operations in flight.
//!
//! # Paused time in tests
//!
//! Under `#[tokio::test(start_paused = true)]` an operation that is pending keeps Tokio's
//! clock from auto-advancing until it completes or its future is dropped (it holds a blocking
//! task meanwhile), so a `timeout` or `select!` against a sleep measures device work in paused
//! time as it would any other future. For the same reason a timer cannot bound a wait that
//! nothing will satisfy, nor be what satisfies it: bound such waits on the device
//! (`Stream::wait_notify_timeout`, `Stream::wait_event_timeout`).

pub use npu_core::OpError;
pub use npu_core::{BlockingWaiter, Completion, Wait};
pub use npu_stream::{
    AsValueWord, Copy2d, Event, EventBuilder, EventKind, EventWait, FailureMode, MAX_2D_HEIGHT,
    MAX_2D_WIDTH_BYTES, Notify, Op, ReactorStats, Strategy, Stream, StreamBuilder, StreamPool,
    ValueCondition, ValueWord, reactor_stats,
};

/// The write side of a completion, for completion strategies only (see its `unsafe`
/// constructor's contract).
#[doc(hidden)]
pub use npu_core::Completer;

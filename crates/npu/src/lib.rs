//! npu-rs: Huawei Ascend NPUs as `async`/`await`-native Rust under Tokio.
//!
//! CANN's runtime (`libascendcl.so`, the `aclrt*` C API) queues work on streams and offers
//! only blocking calls or callback threads to learn that it finished. npu-rs makes every
//! stream operation (copies, memsets, kernel launches, event waits) a future: the operation
//! is submitted on the calling thread, an event is recorded after it, and one reactor thread
//! polls the pending events and wakes the waiting tasks. A server can `.await` a
//! host-to-device copy or a kernel in the same `select!` as its socket reads, without
//! blocking a worker thread and without a blocking-pool thread per operation.
//!
//! This crate is the one to depend on. It re-exports:
//!
//! - [npu-core](npu_core): [`Runtime`] (loads CANN or the simulator, `NPU_BACKEND`),
//!   [`Device`], [`Context`], [`Module`]/[`Function`] (kernel binaries), [`LaunchConfig`],
//!   the [`Error`] type, the raw [`ffi`] and the [`reaper`];
//! - [npu-mem](npu_mem): [`DeviceBuffer`], [`PinnedBuffer`], the event-aware pinned pool
//!   [`PinnedPool`] (with [`PooledBuffer`]), [`HostRegistration`], and the memory traits
//!   ([`Memory`], [`MemoryMut`], [`DeviceSlice`], [`HostSlice`]), [`View`];
//! - [npu-stream](npu_stream): [`Stream`] and its operations, [`Event`], [`Op`] (the future
//!   every operation returns), [`Strategy`], [`reactor_stats`];
//! - with the `sim` feature, the simulator's configuration, controls, kernels and trace as
//!   [`sim`].
//!
//! [`prelude`] has what nearly every program uses.
//!
//! # Example
//!
//! A vector addition on device 0 (the simulator when no NPU is present):
//!
//! ```
//! use npu::prelude::*;
//!
//! #[tokio::main]
//! async fn main() -> npu::Result<()> {
//!     let device = Device::open(0)?;
//!     let ctx = device.primary_context();
//!     let stream = NpuStream::new(ctx)?;
//!     // SAFETY: npu-sim's shipped kernel library, built for its kernel ABI.
//!     let module = unsafe { Module::from_file(ctx, npu::sim::kernel::LIBRARY_PATH) }?;
//!     let add = module.function("vector_add_f32")?;
//!
//!     let n = 4096;
//!     let a = PinnedBuffer::from_slice(ctx, &vec![1.0f32; n])?;
//!     let b = PinnedBuffer::from_slice(ctx, &vec![2.0f32; n])?;
//!     let (a, da) = stream.copy_h2d(a, DeviceBuffer::new(ctx, n)?).await?;
//!     let (_b, db) = stream.copy_h2d(b, DeviceBuffer::new(ctx, n)?).await?;
//!     // SAFETY: vector_add_f32(const float *a, const float *b, float *c, uint64_t n) touches
//!     // n elements of each buffer; all three hold n.
//!     let launch = unsafe { stream.launch(&add, 8, (da, db, DeviceBuffer::new(ctx, n)?, n as u64)) };
//!     let (_da, _db, dc, _) = launch.await?;
//!     let (_dc, c) = stream.copy_d2h(dc, a).await?;
//!     assert!(c.iter().all(|&x| x == 3.0));
//!     Ok(())
//! }
//! ```
//!
//! # Feature flags
//!
//! | feature | default | what it does |
//! | --- | --- | --- |
//! | `sim` | yes | Links npu-sim, the software Ascend device, into the process: it is the `sim` backend and what `NPU_BACKEND=auto` (the default) falls back to when no CANN runtime is found, initialises and sees a device. Adds the [`sim`] module. |
//!
//! Without `sim` (`default-features = false`), no simulator is linked: [`Runtime`] loads
//! CANN's `libacl_rt.so` (or any library named by `NPU_ACL_LIB`), and `NPU_BACKEND=sim`
//! fails with [`LoadError::SimulatorNotBuilt`]. The backend is chosen at run time by
//! `NPU_BACKEND=sim|acl|auto`; see docs/ascend.md.
//!
//! # Further reading
//!
//! In the repository: docs/architecture.md (crates, layers, the reactor, ownership),
//! docs/cancellation.md (what dropping a future does), docs/simulator.md (the simulated
//! device), docs/ascend.md (running on a real Ascend host) and the examples in `examples/`.

pub use npu_core::*;
pub use npu_mem::*;
pub use npu_stream::*;

/// The README's Rust code, run as doctests so that it keeps compiling and working.
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// What nearly every npu-rs program uses: `use npu::prelude::*;`.
///
/// Types: [`Runtime`], [`Device`], [`Context`], [`NpuStream`](Stream), [`Event`], [`DeviceBuffer`],
/// [`PinnedBuffer`], [`PinnedPool`], [`PooledBuffer`], [`Module`], [`Function`],
/// [`LaunchConfig`]; traits: [`Memory`],
/// [`MemoryMut`], [`DeviceSlice`], [`HostSlice`] (for `len()`, `view()` and friends). The
/// error type is left out so that it does not shadow yours; write [`npu::Result`](Result).
///
/// The stream type is exported as `NpuStream`, not `Stream`: the prelude is glob-imported
/// beside `futures::Stream` (or `futures::prelude::*`), and a second `Stream` there either
/// makes every use ambiguous or is silently shadowed by the trait, so that `Stream::new`
/// reads as a trait object (E0782). `npu::Stream` is the same type under its own name.
///
/// ```
/// use futures::Stream; // the trait, beside the prelude: no collision
/// use npu::prelude::*;
///
/// fn ready<S: Stream + Unpin>(_: &S) {}
/// let stream = NpuStream::new(Device::open(0)?.primary_context())?;
/// ready(&futures::stream::iter([1, 2]));
/// assert!(stream.same(&stream.clone()));
/// # Ok::<(), npu::Error>(())
/// ```
///
/// ```
/// use npu::prelude::*;
///
/// let ctx = Device::open(0)?.primary_context().clone();
/// let buffer = DeviceBuffer::<u16>::new(&ctx, 10)?;
/// assert_eq!(buffer.byte_len(), 20); // a `Memory` method
/// # Ok::<(), npu::Error>(())
/// ```
pub mod prelude {
    pub use npu_core::{Context, Device, Function, LaunchConfig, Module, Runtime};
    pub use npu_mem::{
        DeviceBuffer, DeviceSlice, HostSlice, Memory, MemoryMut, PinnedBuffer, PinnedPool,
        PooledBuffer,
    };
    pub use npu_stream::{Event, Stream as NpuStream};
}

/// The in-process simulator (npu-sim): configuration, runtime controls, kernels and the
/// timeline trace (feature `sim`).
///
/// These act on the simulator linked into this process, the backend
/// [`Backend::Simulator`]; they have no effect on CANN or on a simulator loaded as a library
/// through `NPU_ACL_LIB`. docs/simulator.md describes the simulated device.
///
/// - [`SimConfig`](sim::SimConfig) / [`TimingModel`](sim::TimingModel): process-level
///   configuration (device count, memory per device, SoC name, timing model). It is fixed when
///   the simulator first initialises, so install it before the first device call, and give
///   tests that need their own configuration a process of their own (a separate test file);
///   `NPU_SIM_CONFIG` sets the same options from the environment.
/// - [`control`](sim::control): per-device timing, fault injection (fail the nth task of a
///   stream, lose a device, fail the next allocation), the hold gate, live counters.
/// - [`kernel`](sim::kernel): the kernel ABI, in-process registration and the shipped kernels
///   (`vector_add_f32`, `scale_f32`, `reduce_sum_f32`).
/// - [`trace`](sim::trace): a Chrome/Perfetto trace of every device task on the simulated
///   clock (also `NPU_TRACE=path.json`).
///
/// ```
/// use npu::prelude::*;
/// use npu::sim::control;
///
/// # tokio_test::block_on(async {
/// let ctx = Device::open(0)?.primary_context().clone();
/// let stream = NpuStream::new(&ctx)?;
/// // The next task on this stream fails with an AI Core exception.
/// control::fail_task(stream.as_raw(), 1, 507015).unwrap();
/// let err = stream.memset(DeviceBuffer::<u8>::new(&ctx, 64)?, 0).await.unwrap_err().error;
/// assert_eq!(err.acl_code(), Some(npu::AclCode(507015)));
/// # Ok::<(), npu::Error>(())
/// # })?;
/// # Ok::<(), npu::Error>(())
/// ```
#[cfg(feature = "sim")]
pub mod sim {
    pub use npu_sim::{ConfigError, SimConfig, TimingModel, config, control, kernel, trace};
}

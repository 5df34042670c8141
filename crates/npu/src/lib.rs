//! npu-rs: Huawei Ascend NPUs as `async`/`await`-native Rust under Tokio.
//!
//! CANN's runtime (`libacl_rt.so`, the `aclrt*` C API) queues work on streams and offers
//! only blocking calls or callback threads to learn that it finished. npu-rs makes every
//! stream operation (copies, memsets, kernel launches, event waits) a future: the operation
//! is submitted on the calling thread, an event is recorded after it, and (by default) one
//! reactor thread polls the pending events and wakes the waiting tasks. A server can `.await` a
//! host-to-device copy or a kernel in the same `select!` as its socket reads, without
//! blocking a worker thread and without a blocking-pool thread per operation.
//!
//! This crate is the one to depend on. Its modules follow what a program does:
//!
//! | module | for |
//! | --- | --- |
//! | [`runtime`] | loading CANN's runtime or the simulator (`NPU_BACKEND`) |
//! | [`device`] | opening devices, their contexts, attributes, memory info, health, peer access |
//! | [`memory`] | device buffers, the device pool (stream-ordered device memory), pinned buffers, the pinned pool, host registration |
//! | [`stream`] | streams, events and [`Op`], the future every operation returns; when to pick a non-default completion strategy |
//! | [`kernel`] | loading kernel binaries and launching their functions |
//! | [`error`] | the [`Error`] type and ACL's return codes |
//! | [`sim`] | the simulator: configuration, typed fault and timing controls for tests, kernels, trace (feature `sim`) |
//! | [`ffi`] | the raw ACL bindings, for calls npu-rs does not wrap (reached through [`Runtime::api`]) |
//!
//! The types nearly every program names are also at the top: [`Runtime`], [`Device`],
//! [`Context`], [`Stream`], [`Op`], [`Event`], [`DeviceBuffer`], [`PinnedBuffer`],
//! [`PinnedPool`], [`DevicePool`], [`Module`], [`Function`], [`Error`] and [`Result`];
//! [`prelude`] brings them and the memory traits into scope, except [`Op`], and [`Error`] and
//! [`Result`], which would shadow yours; it names `Stream` `NpuStream`.
//!
//! Operations are submitted when the method is called, not when the future is first polled;
//! awaiting only waits for the device. The `async fn` conveniences built on them (uploads,
//! staged copies, pool allocations) start when first polled, as any `async fn` (see
//! [`stream`]).
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
//! CANN's `libacl_rt.so` (or the older `libascendcl.so`, or the library `NPU_ACL_LIB` names),
//! and `NPU_BACKEND=sim` fails with [`LoadError::SimulatorNotBuilt`]. The backend is chosen at
//! run time by `NPU_BACKEND=sim|acl|auto`; see docs/ascend.md.
//!
//! # Reading the examples of re-exported items
//!
//! Most items here are re-exported from the crates that define them (npu-core, npu-mem,
//! npu-stream, npu-sim), and their pages keep those crates' examples, which import from there
//! (`use npu_stream::Stream;`, `Ok::<(), npu_core::Error>(())`) and drive the simulator through
//! its raw controls. With `npu` as your dependency, those crates are not in scope; the same items
//! are here:
//!
//! | an example's path | yours |
//! | --- | --- |
//! | `npu_core::{Device, Context, Runtime, Module, Function, Error, Result, ...}` | [`prelude`], or [`device`], [`runtime`], [`kernel`], [`error`] |
//! | `npu_mem::...` | [`memory`] |
//! | `npu_stream::...` | [`stream`]; `DevicePool` and its types in [`memory`], the kernel argument traits in [`kernel`] |
//! | `npu_sim::{kernel, trace, SimConfig, TimingModel}` | [`sim`]`::{kernel, trace, SimConfig, TimingModel}` |
//! | `npu_sim::control::fail_task(stream.as_raw(), 1, 507015)`, `hold(1)`, `set_timing(1, ..)`, `inject_mem_uce(ptr, len)` (raw handles, pointers and `i32` ids) | [`sim::fail_task`]`(&stream, 1, AclCode(507015))?`, [`sim::hold`]`(&device)?`, [`sim::set_timing`]`(&device, ..)?`, [`sim::inject_memory_error`]`(&buffer, 0..len)?` |
//!
//! ```
//! // What `use npu_core::Device; use npu_stream::StreamPool;` reads as here:
//! use npu::prelude::*;
//!
//! let pool = StreamPool::new(Device::open(0)?.primary_context(), 2)?;
//! assert_eq!(pool.len(), 2);
//! # Ok::<(), npu::Error>(())
//! ```
//!
//! # Further reading
//!
//! In the repository: docs/architecture.md (crates, layers, the reactor, ownership),
//! docs/cancellation.md (what dropping a future does), docs/observability.md (tracing spans,
//! `RUST_LOG`, the timeline trace), docs/simulator.md (the simulated device), docs/ascend.md
//! (running on a real Ascend host) and the examples in `examples/`.

pub mod device;
pub mod error;
pub mod kernel;
pub mod memory;
pub mod runtime;
#[cfg(feature = "sim")]
pub mod sim;
pub mod stream;

/// The raw ACL bindings (bindgen types, constants and the function table [`AclApi`](ffi::AclApi)
/// that [`Runtime::api`] returns), for calls npu-rs does not wrap.
///
/// ```
/// use npu::prelude::*;
///
/// let rt = Runtime::global()?;
/// let mut count = 0;
/// // SAFETY: `count` is a valid out-pointer.
/// let code = unsafe { (rt.api().aclrtGetDeviceCount)(&mut count) };
/// rt.check("aclrtGetDeviceCount", code)?;
/// assert!(count >= 1);
/// assert_eq!(npu::ffi::ACL_SUCCESS, 0);
/// # Ok::<(), npu::Error>(())
/// ```
pub mod ffi {
    pub use npu_core::ffi::*;
}

pub use device::{Context, Device};
pub use error::{Error, Result};
pub use kernel::{Function, Module};
pub use memory::{DeviceBuffer, DevicePool, PinnedBuffer, PinnedPool};
pub use runtime::Runtime;
pub use stream::{Event, Op, Stream};

// Earlier paths, kept so that code written against the flat facade still compiles; they are
// not part of the documented surface.
#[doc(hidden)]
pub use npu_core::reaper;
#[doc(hidden)]
pub use npu_core::{
    AclCode, AclError, ArgPacker, Backend, BackendChoice, BinaryMagic, Completer, Completion,
    DeviceAttr, DeviceStatus, Engine, ErrorClass, LaunchConfig, LoadAttempt, LoadError, MemAttr,
    MemInfo, ModuleLoader, PeerAccess, PriorityRange, RuntimeBuilder, Unsettled, UseList, Wait,
};
#[doc(hidden)]
pub use npu_mem::{
    DeviceSlice, Filled, HacType, HostAllocConfig, HostRegistration, HostSlice, MallocPolicy,
    Memory, MemoryMut, PageAlignedBuffer, PinnedPoolBuilder, Pod, PoolStats, PooledBuffer,
    RegisterError, RegisterFlags, StableBuffer, View, Zeroable, host_mem_map_capability,
};
#[doc(hidden)]
pub use npu_stream::{
    ArgWriter, ByValue, Copy2d, EventBuilder, EventKind, EventWait, FailureMode, KernelArg,
    KernelArgs, MAX_2D_HEIGHT, MAX_2D_WIDTH_BYTES, ReactorStats, Strategy, StreamBuilder,
    reactor_stats,
};

/// The facade's seal for the plumbing npu-rs's crates share (`npu_core::seal`); only the
/// simulator's controls use it.
#[cfg(feature = "sim")]
// SAFETY: npu is one of npu-rs's crates.
pub(crate) const SEAL: npu_core::seal::Seal = unsafe { npu_core::seal::Seal::npu_rs() };

/// The README's Rust code, run as doctests so that it keeps compiling and working.
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// What nearly every npu-rs program uses: `use npu::prelude::*;`.
///
/// Types: [`Runtime`], [`Device`], [`Context`], [`NpuStream`](Stream),
/// [`StreamPool`](stream::StreamPool), [`Event`], [`DeviceBuffer`], [`PinnedBuffer`],
/// [`PinnedPool`], [`PooledBuffer`], [`DevicePool`],
/// [`PooledDeviceBuffer`](memory::PooledDeviceBuffer), [`Module`], [`Function`],
/// [`LaunchConfig`]; traits: [`Memory`], [`MemoryMut`], [`DeviceSlice`], [`HostSlice`] (for
/// `len()`, `view()` and friends). The
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
    pub use npu_stream::{DevicePool, Event, PooledDeviceBuffer, Stream as NpuStream, StreamPool};
}

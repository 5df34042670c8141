//! Kernels: loading binaries, finding functions, launching them on a stream.
//!
//! [`Module`] loads a kernel binary (`aclrtBinaryLoadFromFile` / `FromData`) and
//! [`Module::function`] finds a [`Function`] in it. `Stream::launch` (and `launch_with`, which
//! takes a [`LaunchConfig`]) runs it with typed arguments: [`KernelArgs`] is implemented for
//! `()` and tuples of up to 12 [`KernelArg`]s (device buffers, views, `Arc`s of them and
//! scalars; [`ByValue`] passes a `Pod` struct by value). Launches are `unsafe`: npu-rs cannot
//! see the kernel's parameter list.
//!
//! ```
//! use npu::prelude::*;
//! use npu::Stream;
//!
//! # tokio_test::block_on(async {
//! let ctx = Device::open(0)?.primary_context().clone();
//! let stream = Stream::new(&ctx)?;
//! // SAFETY: npu-sim's shipped kernel library, built for its kernel ABI.
//! let module = unsafe { Module::from_file(&ctx, npu::sim::kernel::LIBRARY_PATH) }?;
//! let scale = module.function("scale_f32")?;
//! let x = PinnedBuffer::from_slice(&ctx, &[1.0f32, 2.0])?;
//! let (x, dx) = stream.copy_h2d(x, DeviceBuffer::new(&ctx, 2)?).await?;
//! // SAFETY: scale_f32(float *x, uint64_t n, float alpha) scales n elements of x in place.
//! let (dx, _, _) = unsafe { stream.launch(&scale, 1, (dx, 2u64, 3.0f32)) }.await?;
//! let (_, x) = stream.copy_d2h(dx, x).await?;
//! assert_eq!(&x[..], [3.0, 6.0]);
//! # Ok::<(), npu::Error>(())
//! # })?;
//! # Ok::<(), npu::Error>(())
//! ```
//!
//! For your own argument types, implement [`KernelArg`] with an [`ArgWriter`]; a launch from
//! raw bytes (`Function::launch_raw`) packs them with an [`ArgPacker`].

pub use npu_core::{ArgPacker, BinaryMagic, Engine, Function, LaunchConfig, Module, ModuleLoader};
pub use npu_stream::{ArgWriter, ByValue, KernelArg, KernelArgs};

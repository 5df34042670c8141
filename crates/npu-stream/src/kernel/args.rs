//! Typed kernel arguments: what may be passed to a kernel, and how it is packed.

use std::sync::Arc;

use bytemuck::Pod;
use npu_core::{ArgPacker, Completion, Context, Error, Result};
use npu_mem::{Cast, DeviceBuffer, DeviceSlice, Memory, MemoryMut, Split, View};

use crate::device_pool::PooledDeviceBuffer;

/// Writes a launch's arguments: packs values with the C struct layout of [`ArgPacker`] and
/// checks device memory against the kernel's context. [`KernelArg`] implementations use it.
///
/// A custom argument type, here a device buffer that passes its length along (two kernel
/// parameters, `float *x, uint64_t n`):
///
/// ```
/// use npu_core::{Completion, Device, Module, Result};
/// use npu_mem::{DeviceBuffer, Memory};
/// use npu_stream::{ArgWriter, KernelArg, Stream};
///
/// struct WithLen(DeviceBuffer<f32>);
///
/// // SAFETY: the only address packed is the buffer's, whose uses are recorded.
/// unsafe impl KernelArg for WithLen {
///     fn pack(&self, args: &mut ArgWriter<'_>) -> Result<()> {
///         args.device(&self.0)?;
///         args.value(&(self.0.len() as u64))
///     }
///
///     fn record_use(&self, completion: &Completion) {
///         Memory::record_use(&self.0, completion)
///     }
/// }
///
/// # tokio_test::block_on(async {
/// let ctx = Device::open(0)?.primary_context().clone();
/// let stream = Stream::new(&ctx)?;
/// let image = npu_sim::kernel::registry_image(&["scale_f32"]);
/// // SAFETY: a registry image names in-process kernels; loading it runs no code.
/// let scale = unsafe { Module::from_data(&ctx, &image) }?.function("scale_f32")?;
/// let x = WithLen(DeviceBuffer::from_host_blocking(&ctx, &[1.0f32, 2.0, 3.0])?);
/// // SAFETY: scale_f32 takes {float *x, uint64_t n, float alpha}; WithLen packs x and its
/// // length.
/// let (x, _) = unsafe { stream.launch(&scale, 1, (x, 3.0f32)) }.await?;
/// assert_eq!(x.0.to_vec_blocking()?, [3.0, 6.0, 9.0]);
/// # Ok::<(), npu_core::Error>(())
/// # })?;
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug)]
pub struct ArgWriter<'a> {
    api: &'static str,
    packer: ArgPacker,
    context: &'a Context,
}

impl<'a> ArgWriter<'a> {
    /// A writer for a launch of a kernel loaded in `context`; errors name `api`.
    pub(crate) fn new(api: &'static str, context: &'a Context) -> Self {
        ArgWriter {
            api,
            packer: ArgPacker::new(api),
            context,
        }
    }

    /// Packs `value`'s bytes at its natural alignment.
    ///
    /// ```
    /// use npu_core::{Completion, Device, Module, Result};
    /// use npu_mem::DeviceBuffer;
    /// use npu_stream::{ArgWriter, KernelArg, Stream};
    ///
    /// /// `uint64_t n, float alpha` as one Rust value.
    /// struct Scaling { n: u64, alpha: f32 }
    ///
    /// // SAFETY: packs no address.
    /// unsafe impl KernelArg for Scaling {
    ///     fn pack(&self, args: &mut ArgWriter<'_>) -> Result<()> {
    ///         args.value(&self.n)?;
    ///         args.value(&self.alpha)
    ///     }
    ///
    ///     fn record_use(&self, _completion: &Completion) {}
    /// }
    ///
    /// # tokio_test::block_on(async {
    /// # let ctx = Device::open(0)?.primary_context().clone();
    /// # let stream = Stream::new(&ctx)?;
    /// # let image = npu_sim::kernel::registry_image(&["scale_f32"]);
    /// # // SAFETY: a registry image names in-process kernels; loading it runs no code.
    /// # let scale = unsafe { Module::from_data(&ctx, &image) }?.function("scale_f32")?;
    /// let x = DeviceBuffer::from_host_blocking(&ctx, &[1.0f32, 2.0])?;
    /// // SAFETY: scale_f32 takes {float *x, uint64_t n, float alpha}; x holds n = 2 elements.
    /// let (x, _) = unsafe { stream.launch(&scale, 1, (x, Scaling { n: 2, alpha: 4.0 })) }.await?;
    /// assert_eq!(x.to_vec_blocking()?, [4.0, 8.0]);
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn value<T: Pod>(&mut self, value: &T) -> Result<()> {
        self.packer
            .push(bytemuck::bytes_of(value), align_of::<T>())
            .map(drop)
    }

    /// Packs the device address of `slice`, as a C pointer. The memory must belong to the
    /// kernel's runtime and device: a kernel cannot address another device's memory.
    ///
    /// ```
    /// use npu_core::{Device, Module};
    /// use npu_mem::DeviceBuffer;
    /// use npu_stream::Stream;
    ///
    /// # tokio_test::block_on(async {
    /// # let ctx = Device::open(0)?.primary_context().clone();
    /// # let stream = Stream::new(&ctx)?;
    /// # let image = npu_sim::kernel::registry_image(&["scale_f32"]);
    /// # // SAFETY: a registry image names in-process kernels; loading it runs no code.
    /// # let scale = unsafe { Module::from_data(&ctx, &image) }?.function("scale_f32")?;
    /// // Device memory packs through `ArgWriter::device`, which refuses another device's memory.
    /// let elsewhere = DeviceBuffer::<f32>::new(Device::open(1)?.primary_context(), 2)?;
    /// // SAFETY: rejected before anything runs.
    /// let err = unsafe { stream.launch(&scale, 1, (elsewhere, 2u64, 1.0f32)) }.await.unwrap_err();
    /// assert!(err.to_string().contains("the buffer is on device 1 but the kernel runs on device 0"),
    ///     "{err}");
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn device<S: DeviceSlice>(&mut self, slice: &S) -> Result<()> {
        let index = self.packer.count();
        let context = slice.context();
        if !context.runtime().same_library(self.context.runtime()) {
            return Err(Error::invalid(
                self.api,
                "args",
                format!("argument {index}: the buffer belongs to another AscendCL runtime"),
            ));
        }
        if context.device_id() != self.context.device_id() {
            return Err(Error::invalid(
                self.api,
                "args",
                format!(
                    "argument {index}: the buffer is on device {} but the kernel runs on device {}",
                    context.device_id(),
                    self.context.device_id()
                ),
            ));
        }
        let address = slice.addr() as usize;
        self.packer
            .push(&address.to_ne_bytes(), align_of::<usize>())
            .map(drop)
    }

    pub(crate) fn into_bytes(self) -> Vec<u8> {
        self.packer.into_bytes()
    }
}

/// One kernel argument: device memory (passed as its address) or a value.
///
/// Implemented for:
/// - device memory: [`DeviceBuffer`], pooled device buffers, and the [`View`]s, [`Split`]
///   parts, [`Cast`]s and `Arc`s of device memory. The launch records itself as a use of the
///   memory (for a part or a view, of the whole allocation), so it stays allocated until the
///   kernel has finished even if the launch's future is dropped;
/// - scalars, by value: integers, `f32`, `f64` and `bool` (as one byte, like C's `bool`);
/// - any `#[repr(C)]` plain-old-data struct, by value, through [`ByValue`];
/// - a `Box` of any of these. Box a large by-value struct (a launch takes up to
///   [`ArgPacker::MAX_BYTES`], 64 KiB, of arguments): a launch, its future and the arguments
///   it hands back are moved by value through every `async` layer above it, and in a debug
///   build each layer keeps its own copy on the stack, so tens of kilobytes of unboxed
///   arguments can overflow a 2 MiB thread.
///
/// ```
/// use std::sync::Arc;
/// use npu_core::Device;
/// use npu_mem::{DeviceBuffer, Memory, MemoryMut};
/// use npu_stream::{ByValue, KernelArg};
///
/// fn is_arg<A: KernelArg>(_: &A) {}
///
/// let ctx = Device::open(0)?.primary_context().clone();
/// let buffer = DeviceBuffer::<f32>::new(&ctx, 8)?;
/// let shared = Arc::new(DeviceBuffer::<u8>::new(&ctx, 8)?);
/// is_arg(&shared);
/// is_arg(&buffer.view(2..4)?);
/// let parts = DeviceBuffer::<f32>::new(&ctx, 8)?;
/// let (head, tail) = parts.into_halves(4).map_err(|e| e.error)?;
/// is_arg(&head.cast::<u32>().map_err(|e| e.error)?);
/// is_arg(&tail);
/// is_arg(&7u32);
/// is_arg(&true);
/// is_arg(&ByValue([1u16, 2, 3, 4]));
/// is_arg(&Box::new(ByValue([[0u8; 4096]; 8]))); // moved as a pointer
/// # Ok::<(), npu_core::Error>(())
/// ```
///
/// Host memory is not an argument: a kernel cannot address it, so passing a pinned buffer or
/// a `Vec` does not compile.
///
/// ```compile_fail,E0277
/// # use npu_core::{Device, Function};
/// # use npu_mem::PinnedBuffer;
/// # use npu_stream::Stream;
/// # fn f(stream: &Stream, function: &Function, host: PinnedBuffer<f32>) {
/// // error: `PinnedBuffer<f32>` is not a kernel argument
/// let _ = unsafe { stream.launch(function, 1, (host,)) };
/// # }
/// ```
///
/// ```compile_fail,E0277
/// # use npu_core::Function;
/// # use npu_stream::Stream;
/// # fn f(stream: &Stream, function: &Function) {
/// // error: `Vec<f32>` is not a kernel argument
/// let _ = unsafe { stream.launch(function, 1, (vec![1.0f32],)) };
/// # }
/// ```
///
/// # Safety
///
/// Every address `pack` writes must refer to memory that stays allocated, and is not reused,
/// until every [`Completion`] passed to `record_use` has completed (see [`npu_mem::Memory`]).
/// Dropping the value does not block: the arguments of a launch dropped in flight are dropped
/// on npu-rs's reaper thread, which every deferred release of the process shares.
// A borrowed buffer is what a cudarc user passes first (cudarc's launches take `&slice`), and
// the compiler's own error only lists the implementors: say why, and what to pass instead.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a kernel argument",
    label = "not a device buffer, a view or `Arc` of one, a scalar or a `ByValue`",
    note = "a launch takes its arguments by value and hands them back once the kernel has \
            finished, as a copy takes its buffers: move a buffer in (not `&buffer`), or pass \
            an `Arc` of it to share it with other work; host memory cannot be an argument, \
            since a kernel cannot address it"
)]
pub unsafe trait KernelArg: Send + 'static {
    /// Packs the argument.
    ///
    /// ```
    /// use npu_core::{Completion, Device, Module, Result};
    /// use npu_mem::{DeviceBuffer, Memory};
    /// use npu_stream::{ArgWriter, KernelArg, Stream};
    ///
    /// /// A buffer that passes its length along: `float *x, uint64_t n`.
    /// struct WithLen(DeviceBuffer<f32>);
    ///
    /// // SAFETY: packs only the buffer, through its own `KernelArg` implementation.
    /// unsafe impl KernelArg for WithLen {
    ///     fn pack(&self, args: &mut ArgWriter<'_>) -> Result<()> {
    ///         self.0.pack(args)?;
    ///         (self.0.len() as u64).pack(args)
    ///     }
    ///
    ///     fn record_use(&self, completion: &Completion) {
    ///         KernelArg::record_use(&self.0, completion)
    ///     }
    /// }
    ///
    /// # tokio_test::block_on(async {
    /// # let ctx = Device::open(0)?.primary_context().clone();
    /// # let stream = Stream::new(&ctx)?;
    /// # let image = npu_sim::kernel::registry_image(&["scale_f32"]);
    /// # // SAFETY: a registry image names in-process kernels; loading it runs no code.
    /// # let scale = unsafe { Module::from_data(&ctx, &image) }?.function("scale_f32")?;
    /// let x = WithLen(DeviceBuffer::from_host_blocking(&ctx, &[1.0f32, 2.0, 3.0])?);
    /// // SAFETY: scale_f32 takes {float *x, uint64_t n, float alpha}; WithLen packs x and
    /// // its length.
    /// let (x, _) = unsafe { stream.launch(&scale, 1, (x, 2.0f32)) }.await?;
    /// assert_eq!(x.0.to_vec_blocking()?, [2.0, 4.0, 6.0]);
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    fn pack(&self, args: &mut ArgWriter<'_>) -> Result<()>;

    /// Records that the launch behind `completion` may access the memory the argument refers
    /// to. Values refer to none.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::DeviceBuffer;
    /// use npu_sim::control::{device_stats, hold, release};
    /// use npu_stream::{KernelArg, Stream};
    ///
    /// let ctx = Device::open(1)?.primary_context().clone();
    /// let stream = Stream::new(&ctx)?;
    /// hold(1).unwrap(); // npu-sim: nothing on device 1 runs until `release`
    /// let launch = stream.memset(DeviceBuffer::<u8>::new(&ctx, 16)?, 0); // stands in for one
    /// let buffer = DeviceBuffer::<f32>::new(&ctx, 16)?;
    /// KernelArg::record_use(&buffer, launch.completion()); // what a launch does with each argument
    /// KernelArg::record_use(&7u32, launch.completion()); // a value: nothing to keep alive
    /// let live = device_stats(1).unwrap().live_allocations;
    /// drop(buffer);
    /// assert_eq!(device_stats(1).unwrap().live_allocations, live, "kept for the launch");
    /// release(1).unwrap();
    /// tokio_test::block_on(launch)?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    fn record_use(&self, completion: &Completion);
}

/// A plain-old-data value passed to a kernel by value: a `#[repr(C)]` struct matching the
/// kernel's parameter, for example.
///
/// ```
/// use npu_stream::ByValue;
///
/// #[repr(C)]
/// #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
/// struct Tiling {
///     rows: u32,
///     cols: u32,
/// }
///
/// let tiling = ByValue(Tiling { rows: 4, cols: 8 });
/// assert_eq!(tiling.0.cols, 8);
/// ```
///
/// Addresses inside such a struct are not tracked: the memory they point at must outlive the
/// launch (part of [`Stream::launch`](crate::Stream::launch)'s contract). Pass device memory
/// as its own argument instead, where possible.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ByValue<T>(pub T);

// SAFETY: a value packs no address npu-rs would have to keep alive; addresses hidden in the
// bytes are the launch caller's responsibility (Stream::launch's contract).
unsafe impl<T: Pod + Send> KernelArg for ByValue<T> {
    fn pack(&self, args: &mut ArgWriter<'_>) -> Result<()> {
        args.value(&self.0)
    }

    fn record_use(&self, _completion: &Completion) {}
}

// SAFETY: the box owns the argument, so whatever the argument's own implementation keeps
// alive for a launch, the box keeps alive with it; packing and recording delegate to it.
unsafe impl<A: KernelArg> KernelArg for Box<A> {
    fn pack(&self, args: &mut ArgWriter<'_>) -> Result<()> {
        A::pack(self, args)
    }

    fn record_use(&self, completion: &Completion) {
        A::record_use(self, completion)
    }
}

macro_rules! scalar_args {
    ($($ty:ty),* $(,)?) => {$(
        // SAFETY: a scalar packs no address.
        unsafe impl KernelArg for $ty {
            fn pack(&self, args: &mut ArgWriter<'_>) -> Result<()> {
                args.value(self)
            }

            fn record_use(&self, _completion: &Completion) {}
        }
    )*};
}

scalar_args!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize, f32, f64);

// SAFETY: a bool packs no address.
unsafe impl KernelArg for bool {
    fn pack(&self, args: &mut ArgWriter<'_>) -> Result<()> {
        args.value(&u8::from(*self))
    }

    fn record_use(&self, _completion: &Completion) {}
}

macro_rules! device_args {
    ($([$($generics:tt)*] $ty:ty),* $(,)?) => {$(
        // SAFETY: the address packed is the slice's own, and `DeviceSlice`'s contract keeps
        // that memory allocated until every completion recorded with `record_use` completed.
        unsafe impl<$($generics)*> KernelArg for $ty {
            fn pack(&self, args: &mut ArgWriter<'_>) -> Result<()> {
                args.device(self)
            }

            fn record_use(&self, completion: &Completion) {
                Memory::record_use(self, completion)
            }
        }
    )*};
}

device_args! {
    [T: Pod] DeviceBuffer<T>,
    [T: Pod] PooledDeviceBuffer<T>,
    [S: DeviceSlice] View<S>,
    [S: DeviceSlice + MemoryMut + Sync] Split<S>,
    [S: DeviceSlice, U: Pod] Cast<S, U>,
    [S: DeviceSlice + Sync] Arc<S>,
}

/// All arguments of a launch: `()` or a tuple of up to 12 [`KernelArg`]s, packed in order as
/// the fields of a C struct. A launch takes them by value and gives them back when the kernel
/// has finished.
///
/// ```
/// use npu_core::Device;
/// use npu_mem::DeviceBuffer;
/// use npu_stream::KernelArgs;
///
/// fn are_args<A: KernelArgs>(_: &A) {}
///
/// let ctx = Device::open(0)?.primary_context().clone();
/// let (a, b) = (DeviceBuffer::<f32>::new(&ctx, 4)?, DeviceBuffer::<f32>::new(&ctx, 4)?);
/// are_args(&());
/// are_args(&(a, b, 4u64));
/// are_args(&(1u8, 2u8, 3u8, 4u8, 5u8, 6u8, 7u8, 8u8, 9u8, 10u8, 11u8, 12u8));
/// # Ok::<(), npu_core::Error>(())
/// ```
///
/// # Safety
///
/// As for [`KernelArg`]: every address `pack` writes stays valid until every completion passed
/// to `record_uses` has completed, and dropping the value does not block. The launch's future
/// owns the value itself (a tuple, or a struct of the implementor's own), so a launch dropped
/// in flight drops it on npu-rs's reaper thread, which every deferred release of the process
/// shares: the whole value's drop must not wait (for the device, another operation, a lock
/// held across such a wait, or I/O), not only its arguments'.
pub unsafe trait KernelArgs: Send + 'static {
    /// Packs every argument, in order.
    ///
    /// ```
    /// use npu_core::{Completion, Device, Module, Result};
    /// use npu_mem::{DeviceBuffer, Memory};
    /// use npu_stream::{ArgWriter, KernelArgs, Stream};
    ///
    /// /// scale_f32's parameters as a named struct instead of a tuple.
    /// struct ScaleArgs { x: DeviceBuffer<f32>, n: u64, alpha: f32 }
    ///
    /// // SAFETY: the only address packed is `x`'s, whose uses are recorded.
    /// unsafe impl KernelArgs for ScaleArgs {
    ///     fn pack(&self, args: &mut ArgWriter<'_>) -> Result<()> {
    ///         args.device(&self.x)?;
    ///         args.value(&self.n)?;
    ///         args.value(&self.alpha)
    ///     }
    ///
    ///     fn record_uses(&self, completion: &Completion) {
    ///         self.x.record_use(completion)
    ///     }
    /// }
    ///
    /// # tokio_test::block_on(async {
    /// # let ctx = Device::open(0)?.primary_context().clone();
    /// # let stream = Stream::new(&ctx)?;
    /// # let image = npu_sim::kernel::registry_image(&["scale_f32"]);
    /// # // SAFETY: a registry image names in-process kernels; loading it runs no code.
    /// # let scale = unsafe { Module::from_data(&ctx, &image) }?.function("scale_f32")?;
    /// let x = DeviceBuffer::from_host_blocking(&ctx, &[1.0f32, 2.0])?;
    /// // SAFETY: ScaleArgs matches scale_f32's parameters, and x holds n elements.
    /// let args = unsafe { stream.launch(&scale, 1, ScaleArgs { x, n: 2, alpha: 3.0 }) }.await?;
    /// assert_eq!(args.x.to_vec_blocking()?, [3.0, 6.0]);
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    fn pack(&self, args: &mut ArgWriter<'_>) -> Result<()>;

    /// Records the launch behind `completion` as a use of every argument's memory.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::DeviceBuffer;
    /// use npu_sim::control::{device_stats, hold, release};
    /// use npu_stream::{KernelArgs, Stream};
    ///
    /// let ctx = Device::open(1)?.primary_context().clone();
    /// let stream = Stream::new(&ctx)?;
    /// hold(1).unwrap(); // npu-sim: nothing on device 1 runs until `release`
    /// let launch = stream.memset(DeviceBuffer::<u8>::new(&ctx, 16)?, 0); // stands in for one
    /// let args = (DeviceBuffer::<f32>::new(&ctx, 4)?, DeviceBuffer::<f32>::new(&ctx, 4)?, 4u64);
    /// args.record_uses(launch.completion()); // what a launch does with its arguments
    /// let live = device_stats(1).unwrap().live_allocations;
    /// drop(args);
    /// assert_eq!(device_stats(1).unwrap().live_allocations, live, "both kept for the launch");
    /// release(1).unwrap();
    /// tokio_test::block_on(launch)?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    fn record_uses(&self, completion: &Completion);
}

// SAFETY: no arguments, no addresses.
unsafe impl KernelArgs for () {
    fn pack(&self, _args: &mut ArgWriter<'_>) -> Result<()> {
        Ok(())
    }

    fn record_uses(&self, _completion: &Completion) {}
}

macro_rules! tuple_args {
    ($($name:ident)+) => {
        // SAFETY: each element upholds KernelArg's contract, and each is recorded under the
        // same completion it is packed for.
        unsafe impl<$($name: KernelArg),+> KernelArgs for ($($name,)+) {
            #[allow(non_snake_case)]
            fn pack(&self, args: &mut ArgWriter<'_>) -> Result<()> {
                let ($($name,)+) = self;
                $($name.pack(args)?;)+
                Ok(())
            }

            #[allow(non_snake_case)]
            fn record_uses(&self, completion: &Completion) {
                let ($($name,)+) = self;
                $($name.record_use(completion);)+
            }
        }
    };
}

/// Implements [`KernelArgs`] for every tuple from the full list down to one element.
macro_rules! tuples_down_from {
    ($first:ident $($rest:ident)*) => {
        tuple_args!($first $($rest)*);
        tuples_down_from!($($rest)*);
    };
    () => {};
}

tuples_down_from!(A B C D E F G H I J K L);

#[cfg(test)]
mod tests {
    use super::*;
    use npu_core::Device;

    fn packed(args: &impl KernelArgs, context: &Context) -> Result<Vec<u8>> {
        let mut writer = ArgWriter::new("test", context);
        args.pack(&mut writer)?;
        Ok(writer.into_bytes())
    }

    #[test]
    fn tuples_pack_like_c_structs() {
        let ctx = Device::open(0).unwrap().primary_context().clone();
        let bytes = packed(&(1u8, 2u32, true, 3.5f64), &ctx).unwrap();
        let mut expected = vec![1, 0, 0, 0];
        expected.extend(2u32.to_ne_bytes());
        expected.extend([1, 0, 0, 0, 0, 0, 0, 0]);
        expected.extend(3.5f64.to_ne_bytes());
        assert_eq!(bytes, expected);
        assert!(packed(&(), &ctx).unwrap().is_empty());
        let twelve = (0u8, 1u8, 2u8, 3u8, 4u8, 5u8, 6u8, 7u8, 8u8, 9u8, 10u8, 11u8);
        assert_eq!(packed(&twelve, &ctx).unwrap(), (0..12).collect::<Vec<u8>>());
    }

    #[test]
    fn device_memory_packs_as_its_address() {
        let ctx = Device::open(0).unwrap().primary_context().clone();
        let buffer = DeviceBuffer::<f32>::new(&ctx, 16).unwrap();
        let base = buffer.addr() as usize;
        let view = buffer.view(4..8).unwrap();
        let shared = Arc::new(DeviceBuffer::<u16>::new(&ctx, 1).unwrap());
        let bytes = packed(&(view, 7u32, shared.clone()), &ctx).unwrap();
        assert_eq!(bytes.len(), 24);
        assert_eq!(bytes[..8], (base + 16).to_ne_bytes());
        assert_eq!(bytes[8..12], 7u32.to_ne_bytes());
        assert_eq!(bytes[16..], (shared.addr() as usize).to_ne_bytes());
    }

    #[test]
    fn memory_of_another_device_is_a_typed_error() {
        let (d0, d1) = (Device::open(0).unwrap(), Device::open(1).unwrap());
        let other = DeviceBuffer::<f32>::new(d1.primary_context(), 4).unwrap();
        let err = packed(&(1u32, other), d0.primary_context()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "test: invalid argument `args`: argument 1: the buffer is on device 1 but the \
             kernel runs on device 0"
        );
        // Another context of the same device shares its memory.
        let explicit = d0.create_context().unwrap();
        let same_device = DeviceBuffer::<f32>::new(&explicit, 4).unwrap();
        packed(&(same_device,), d0.primary_context()).unwrap();
    }
}

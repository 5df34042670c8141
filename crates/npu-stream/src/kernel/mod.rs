//! Kernel launches: stream operations like copies, with typed arguments.

use std::cell::Cell;
use std::num::NonZeroU32;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::{Arc, OnceLock};

use npu_core::{Error, Function, LaunchConfig};

use crate::op::Op;
use crate::stream::Stream;

mod args;

pub use args::{ArgWriter, ByValue, KernelArg, KernelArgs};

impl Stream {
    /// Launches `function` with `blocks` blocks (`aclrtLaunchKernelWithHostArgs`).
    ///
    /// `args` are packed in order as the fields of a C struct (see [`KernelArgs`]): device
    /// memory as its address, values by value. The launch takes them and the future resolves
    /// to them once the kernel has finished on the device, with the kernel's failure if it
    /// trapped (`ACL_ERROR_RT_AICORE_EXCEPTION`, 507015, or 507035 on the vector engine).
    ///
    /// Rejected before ACL is called, with [`Error::InvalidArgument`]: `blocks` = 0, a function
    /// or buffer of another runtime, a function or buffer of another device than the stream's,
    /// more than [`ArgPacker::MAX_ARGS`](npu_core::ArgPacker::MAX_ARGS) values or more than
    /// [`ArgPacker::MAX_BYTES`](npu_core::ArgPacker::MAX_BYTES) bytes of arguments. The launch
    /// binds the function's context, the one its binary was loaded in, so a stream of another
    /// context fails with ACL's `ACL_ERROR_RT_STREAM_CONTEXT` (107003). A runtime without
    /// `aclrtLaunchKernelWithHostArgs` gives [`Error::Unsupported`].
    ///
    /// The function, and so its binary, stays loaded until the kernel has run.
    ///
    /// A panic in an argument's [`KernelArg::pack`] or [`KernelArg::record_use`] (user code)
    /// refuses the launch before the device sees it: the arguments are dropped and released
    /// at once, and the panic goes on unwinding from this call.
    ///
    /// Cancel safety: not cancel-safe, like the copies: dropping the future gives up the
    /// arguments, whose memory is released only after the kernel has finished; the kernel
    /// itself still runs. See docs/cancellation.md.
    ///
    /// ```
    /// use npu_core::{Device, Module};
    /// use npu_mem::DeviceBuffer;
    /// use npu_stream::Stream;
    ///
    /// # tokio_test::block_on(async {
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let stream = Stream::new(&ctx)?;
    /// // SAFETY: npu-sim's shipped kernel library, built for its kernel ABI.
    /// let module = unsafe { Module::from_file(&ctx, npu_sim::kernel::LIBRARY_PATH) }?;
    /// let add = module.function("vector_add_f32")?;
    ///
    /// let a = DeviceBuffer::from_host_blocking(&ctx, &[1.0f32, 2.0, 3.0])?;
    /// let b = DeviceBuffer::from_host_blocking(&ctx, &[10.0f32, 20.0, 30.0])?;
    /// let c = DeviceBuffer::<f32>::new(&ctx, 3)?;
    /// // SAFETY: vector_add_f32 takes {const float *a, const float *b, float *c, uint64_t n}
    /// // and touches n elements of each; all three hold 3.
    /// let (_a, _b, c, _n) = unsafe { stream.launch(&add, 2, (a, b, c, 3u64)) }.await?;
    /// assert_eq!(c.to_vec_blocking()?, [11.0, 22.0, 33.0]);
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    ///
    /// # Safety
    ///
    /// A kernel is foreign code, and npu-rs cannot check `args` against its parameters:
    /// - `args` must match the kernel's parameters in order and type;
    /// - the kernel may access only memory its arguments refer to, within that memory's
    ///   extent (element counts it is passed must agree with the buffers), and memory whose
    ///   address is passed as a value (inside a [`ByValue`] struct, say) must stay allocated
    ///   until the launch has completed;
    /// - memory the kernel writes must not be accessed by device work that may run at the same
    ///   time: work on other streams not ordered with this launch by events (through a
    ///   shared `Arc` argument, for example);
    /// - host memory the kernel reaches through a device address passed as a value (a
    ///   [`HostRegistration::device_ptr`](npu_mem::HostRegistration::device_ptr) alias, or
    ///   the address of pinned memory the device can use directly) must not be read or
    ///   written by host code until the launch has completed if the kernel writes it, nor
    ///   written if it reads it: npu-rs cannot see that use, so the buffer's `Deref`,
    ///   `DerefMut` and `HostSlice` views stay available meanwhile, and a reference to memory
    ///   a kernel writes is a data race;
    /// - on npu-sim a kernel is host code running in this process: it must be sound for these
    ///   arguments, with its blocks running concurrently.
    pub unsafe fn launch<A: KernelArgs>(&self, function: &Function, blocks: u32, args: A) -> Op<A> {
        let config = NonZeroU32::new(blocks).map(LaunchConfig::new);
        // SAFETY: the caller upholds the kernel's contract, as `launch` requires.
        unsafe { self.enqueue("Stream::launch", function, config, args) }
    }

    /// Launches `function` with an explicit [`LaunchConfig`]: the block count, which cannot be
    /// 0, and the engine (`ACL_RT_LAUNCH_KERNEL_ATTR_ENGINE_TYPE`). Otherwise as
    /// [`launch`](Stream::launch), including cancel safety.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use npu_core::{Device, Engine, LaunchConfig, Module};
    /// use npu_mem::DeviceBuffer;
    /// use npu_stream::Stream;
    ///
    /// # tokio_test::block_on(async {
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let stream = Stream::new(&ctx)?;
    /// let image = npu_sim::kernel::registry_image(&["scale_f32"]);
    /// // SAFETY: a registry image names in-process kernels; loading it runs no code.
    /// let scale = unsafe { Module::from_data(&ctx, &image) }?.function("scale_f32")?;
    ///
    /// let x = DeviceBuffer::from_host_blocking(&ctx, &[1.0f32, 2.0])?;
    /// let config = LaunchConfig::new(NonZeroU32::MIN).engine(Engine::Aiv);
    /// // SAFETY: scale_f32 takes {float *x, uint64_t n, float alpha} and scales n elements
    /// // of x in place; x holds 2.
    /// let (x, _, _) = unsafe { stream.launch_with(&scale, config, (x, 2u64, 0.5f32)) }.await?;
    /// assert_eq!(x.to_vec_blocking()?, [0.5, 1.0]);
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    ///
    /// # Safety
    ///
    /// As for [`launch`](Stream::launch).
    pub unsafe fn launch_with<A: KernelArgs>(
        &self,
        function: &Function,
        config: LaunchConfig,
        args: A,
    ) -> Op<A> {
        // SAFETY: the caller upholds the kernel's contract, as `launch_with` requires.
        unsafe { self.enqueue("Stream::launch_with", function, Some(config), args) }
    }

    /// Submits a launch for `api`, the method the caller called, which its errors name;
    /// `config` is `None` when the caller asked for 0 blocks.
    ///
    /// # Safety
    ///
    /// As for [`launch`](Stream::launch).
    unsafe fn enqueue<A: KernelArgs>(
        &self,
        api: &'static str,
        function: &Function,
        config: Option<LaunchConfig>,
        args: A,
    ) -> Op<A> {
        // `pack` is user code (`KernelArg` is a public trait), and may panic. Unwinding out
        // of the submission would drop the operation's completer uncompleted, and an abandoned
        // completion keeps the memory whose uses it recorded for ever (the other arguments'
        // buffers leaked). It runs before the device can see the launch, so a panic is caught,
        // the launch refused (its completion completes and the arguments are released as for
        // any refused work) and the panic resumed after. (A panicking `record_use` is
        // contained the same way by the submission itself, for every operation.)
        let panicked = Cell::new(None);
        // The packed arguments are kept until the launch completes, not just for the call:
        // the reference neither names a later read of `hostArgs` by the runtime nor rules one
        // out, so npu-rs does not rely on the runtime having copied them when it returns (as
        // it keeps a binary's bytes for `aclrtBinaryLoadFromData`).
        let kept = Arc::new(OnceLock::new());
        let op = self.submit_described(
            (api, "self"),
            "aclrtLaunchKernelWithHostArgs",
            0,
            ("kernel", function.name()),
            args,
            |args, done| {
                args.record_uses(done);
                // The binary must stay loaded until the kernel has run.
                // SAFETY: dropping a function clone unloads the binary at most, which does not
                // wait for the device (the kernel has completed by then).
                unsafe { done.drop_after(function.clone()) };
                // SAFETY: dropping a byte vector waits for nothing.
                unsafe { done.drop_after(kept.clone()) };
            },
            |args, stream| {
                let config = config.ok_or_else(|| {
                    Error::invalid(
                        api,
                        "blocks",
                        "must be at least 1: a launch runs 1 or more blocks",
                    )
                })?;
                self.check_runtime(api, "function", function.context())?;
                // The arguments are checked against the function's device (`ArgWriter`), and
                // the kernel runs on the stream's. ACL refuses a stream of another context
                // (107003, as documented above), but the reference states that check for no
                // launch function in particular, so a function of another device is refused
                // here: a runtime that skipped the check would otherwise hand the kernel
                // addresses checked for another device. Within one device the arguments are
                // valid in any of its contexts, and the context check is left to ACL.
                self.check_device(api, "function", function.context())?;
                let mut writer = ArgWriter::new(api, function.context());
                match catch_unwind(AssertUnwindSafe(|| args.pack(&mut writer))) {
                    Ok(packed) => packed?,
                    Err(payload) => {
                        panicked.set(Some(payload));
                        return Err(Error::invalid(api, "args", "a kernel argument panicked"));
                    }
                }
                let mut bytes = writer.into_bytes();
                // SAFETY: `stream` is this stream's live handle, of the same runtime as the
                // function (checked above). Every buffer the arguments refer to recorded this
                // launch as a use and stays allocated until it completes, and the function and
                // the packed arguments are kept until then (above); the caller vouches for the
                // kernel. `launch_raw`
                // binds the function's context: a successful launch means the stream belongs
                // to it (ACL checks), so the event record that follows runs in the stream's
                // context.
                let launched = unsafe { function.launch_raw(stream, &config, &mut bytes) };
                // A refused launch drops them with the completion, as any refused work.
                let _ = kept.set(bytes);
                launched
            },
        );
        if let Some(payload) = panicked.into_inner() {
            // Refused before the device saw it: dropping releases the arguments at once.
            drop(op);
            resume_unwind(payload);
        }
        op
    }
}

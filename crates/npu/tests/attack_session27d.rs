//! The twenty-seventh session's kernel attacks: launches whose arguments a kernel reads as its
//! C struct, arguments that call back into their stream or panic when dropped, kernels under a
//! timing model, and kernels in a runtime of the program's own. Each test names the
//! strategies it runs under; every wait is bounded (`run`, `until_released`, `watchdog`), so a
//! hang fails its test.

mod common;

use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

use common::*;
use npu::kernel::{ArgWriter, ByValue, KernelArg};
use npu::prelude::*;
use npu::sim;
use npu::stream::Completion;
use npu::{Function, Stream};

/// A by-value parameter that asks for 64-byte alignment (a C struct holding an AVX-512
/// vector, say).
#[repr(C, align(64))]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Wide([u64; 8]);

/// A by-value parameter that asks for a page's alignment, `ArgPacker::MAX_ALIGN`.
#[repr(C, align(4096))]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Page([u64; 512]);

/// `{uint64_t *out, uint8_t tag, Wide wide}` as the kernel's C compiler lays it out: `wide`
/// at 64, 128 bytes in all, aligned to 64.
#[repr(C)]
struct WideParams {
    out: *mut u64,
    tag: u8,
    wide: Wide,
}

/// `{uint64_t *out, uint8_t tag, Page page}`: `page` at 4096, 8192 bytes, aligned to 4096.
#[repr(C)]
struct PageParams {
    out: *mut u64,
    tag: u8,
    page: Page,
}

/// Kernels that read their parameters as the struct they are, through a reference (what C
/// code does with `const Params *p = args; p->field`): each traps if the pointer it got is
/// not aligned for its struct, and otherwise copies the tag and the aligned field's first and
/// last words to `out`.
const READS_WIDE: &str = "npu_attack27d_reads_wide_params";
const READS_PAGE: &str = "npu_attack27d_reads_page_params";

fn register_struct_readers() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        sim::kernel::register_with_args_size(
            READS_WIDE,
            size_of::<WideParams>(),
            |block, _, args| {
                let params = args.cast::<WideParams>();
                if !params.is_aligned() {
                    return 1;
                }
                if block == 0 {
                    // SAFETY: launched with a WideParams (checked by size), aligned (above);
                    // `out` holds 3 words, kept allocated by the launch.
                    unsafe {
                        let params = &*params;
                        let words = [u64::from(params.tag), params.wide.0[0], params.wide.0[7]];
                        std::ptr::copy_nonoverlapping(words.as_ptr(), params.out, 3);
                    }
                }
                0
            },
        )
        .unwrap();
        sim::kernel::register_with_args_size(
            READS_PAGE,
            size_of::<PageParams>(),
            |block, _, args| {
                let params = args.cast::<PageParams>();
                if !params.is_aligned() {
                    return 1;
                }
                if block == 0 {
                    // SAFETY: as for READS_WIDE, with a PageParams.
                    unsafe {
                        let params = &*params;
                        let words = [u64::from(params.tag), params.page.0[0], params.page.0[511]];
                        std::ptr::copy_nonoverlapping(words.as_ptr(), params.out, 3);
                    }
                }
                0
            },
        )
        .unwrap();
    });
}

/// `ArgPacker`'s promise (npu-core): arguments are laid out "the way a C compiler lays out a
/// struct of the same fields ... The kernel reads the buffer as its argument struct". That
/// holds only if the buffer the kernel gets is aligned for the struct: a field aligned to 64
/// within the buffer is aligned to 64 in memory only if the buffer's start is. A `ByValue`
/// asking for 64 bytes (and one for a page, the packer's `MAX_ALIGN`) after a pointer and a
/// byte, launched 16 times each so that no allocator's luck hides a misaligned buffer; the
/// kernel reads its struct through a reference and must find it aligned and exact. All three
/// strategies.
#[test]
fn a_kernel_reads_its_arguments_as_the_aligned_struct_the_packer_laid_out() {
    register_struct_readers();
    let (_guard, ctx, _) = exclusive(None);
    let (wide, page) = (in_process(&ctx, READS_WIDE), in_process(&ctx, READS_PAGE));
    assert_eq!(
        (size_of::<WideParams>(), size_of::<PageParams>()),
        (128, 8192)
    );
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        for round in 0..16u64 {
            let value = Wide([round; 8].map(|w| w * 3 + 1));
            let out = DeviceBuffer::<u64>::new(&ctx, 3).unwrap();
            // SAFETY: READS_WIDE takes {uint64_t *out, uint8_t tag, Wide wide} and writes 3
            // words of out, which holds 3.
            let launched = unsafe { s.launch(&wide, 2, (out, 7u8, ByValue(value))) };
            let (out, _, _) = run(launched).unwrap_or_else(|err| {
                panic!("{strategy:?} round {round}: a 64-byte aligned struct: {err}")
            });
            assert_eq!(
                out.to_vec_blocking().unwrap(),
                [7, round * 3 + 1, round * 3 + 1],
                "{strategy:?} round {round}"
            );

            let value = Box::new(ByValue(Page([round + 5; 512])));
            let out = DeviceBuffer::<u64>::new(&ctx, 3).unwrap();
            // SAFETY: READS_PAGE takes {uint64_t *out, uint8_t tag, Page page} and writes 3
            // words of out, which holds 3.
            let launched = unsafe { s.launch(&page, 1, (out, 9u8, value)) };
            let (out, _, _) = run(launched).unwrap_or_else(|err| {
                panic!("{strategy:?} round {round}: a page-aligned struct: {err}")
            });
            assert_eq!(
                out.to_vec_blocking().unwrap(),
                [9, round + 5, round + 5],
                "{strategy:?} round {round}"
            );
        }
        run(s.synchronize()).unwrap();
    }
}

/// What a [`Reentrant`] argument does from inside its own `pack`, which runs while its launch
/// is being submitted (under the stream's submission lock).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Callback {
    /// Submits a memset to the launch's own stream.
    SubmitsHere,
    /// Aborts the launch's own stream.
    AbortsHere,
    /// Stops the launch's own stream.
    StopsHere,
    /// Submits a memset to another stream of the device.
    SubmitsElsewhere,
}

/// `scale_f32`'s `float *x` whose `pack` calls back into npu-rs first, as user code may; what
/// the call answered is kept in `answer`, the other stream's memset in `elsewhere`.
struct Reentrant {
    x: DeviceBuffer<f32>,
    stream: Stream,
    other: Stream,
    callback: Callback,
    answer: Arc<Mutex<Option<npu::Result<()>>>>,
    elsewhere: Arc<Mutex<Option<npu::Op<DeviceBuffer<u8>>>>>,
}

// SAFETY: the only address packed is `x`'s, whose use is recorded.
unsafe impl KernelArg for Reentrant {
    fn pack(&self, args: &mut ArgWriter<'_>) -> npu::Result<()> {
        let ctx = self.stream.context().clone();
        let answer = match self.callback {
            Callback::SubmitsHere => {
                let memset = self.stream.memset(DeviceBuffer::<u8>::new(&ctx, 8)?, 1);
                futures::executor::block_on(memset)
                    .map(drop)
                    .map_err(|e| e.error)
            }
            Callback::AbortsHere => futures::executor::block_on(self.stream.abort()),
            Callback::StopsHere => self.stream.stop(),
            Callback::SubmitsElsewhere => {
                let memset = self.other.memset(DeviceBuffer::<u8>::new(&ctx, 8)?, 4);
                *self.elsewhere.lock().unwrap() = Some(memset);
                Ok(())
            }
        };
        *self.answer.lock().unwrap() = Some(answer);
        args.device(&self.x)
    }

    fn record_use(&self, completion: &Completion) {
        KernelArg::record_use(&self.x, completion)
    }
}

/// Rule 6's reentrancy promise for the one piece of user code a launch runs under the
/// stream's submission lock, `KernelArg::pack`: calling back into the launch's own stream
/// must be refused with a typed error naming the method and `self` (not wait for itself),
/// and the launch must go on; stopping the stream from there fails the launch, which hands
/// its arguments back unwritten, and an abort revives the stream; submitting to another
/// stream works. All three strategies.
#[test]
fn kernel_arguments_calling_back_into_their_stream_are_refused_by_name_or_fail_the_launch() {
    let (_guard, ctx, _) = exclusive(None);
    let scale = in_process(&ctx, "scale_f32");
    for strategy in STRATEGIES {
        for callback in [
            Callback::SubmitsHere,
            Callback::AbortsHere,
            Callback::StopsHere,
            Callback::SubmitsElsewhere,
        ] {
            let what = format!("{strategy:?} {callback:?}");
            let (s, other) = (stream(&ctx, strategy), stream(&ctx, strategy));
            let (answer, elsewhere) = (Arc::default(), Arc::default());
            let x = Reentrant {
                x: DeviceBuffer::from_host_blocking(&ctx, &[1.0f32, 2.0, 3.0]).unwrap(),
                stream: s.clone(),
                other: other.clone(),
                callback,
                answer: Arc::clone(&answer),
                elsewhere: Arc::clone(&elsewhere),
            };
            // SAFETY: scale_f32 takes {float *x, uint64_t n, float alpha} and scales n = 3
            // elements of x, which holds 3.
            let launched = watchdog(&what, || unsafe { s.launch(&scale, 1, (x, 3u64, 2.0f32)) });
            let answer = answer.lock().unwrap().take().expect("pack ran");
            let result = run(launched);
            match callback {
                Callback::SubmitsHere | Callback::AbortsHere => {
                    let api = match callback {
                        Callback::SubmitsHere => "Stream::memset",
                        _ => "Stream::abort",
                    };
                    assert_eq!(invalid(&answer.unwrap_err()), (api, "self"), "{what}");
                    let (x, _, _) = result.unwrap();
                    assert_eq!(x.x.to_vec_blocking().unwrap(), [2.0, 4.0, 6.0], "{what}");
                }
                Callback::StopsHere => {
                    answer.unwrap();
                    let Err(err) = result else {
                        panic!("{what}: a launch on the stream it stopped ran")
                    };
                    assert!(err.error.acl_code().is_some(), "{what}: {}", err.error);
                    let (x, _, _) = err.value.expect("the arguments are handed back");
                    assert_eq!(x.x.to_vec_blocking().unwrap(), [1.0, 2.0, 3.0], "{what}");
                    run(s.abort()).unwrap();
                    // SAFETY: as above, x.x alone this time.
                    let launched = unsafe { s.launch(&scale, 1, (x.x, 3u64, 3.0f32)) };
                    let (x, _, _) = run(launched).unwrap();
                    assert_eq!(x.to_vec_blocking().unwrap(), [3.0, 6.0, 9.0], "{what}");
                }
                Callback::SubmitsElsewhere => {
                    answer.unwrap();
                    let (x, _, _) = result.unwrap();
                    assert_eq!(x.x.to_vec_blocking().unwrap(), [2.0, 4.0, 6.0], "{what}");
                    let memset = elsewhere.lock().unwrap().take().unwrap();
                    assert_eq!(run(memset).unwrap().to_vec_blocking().unwrap(), [4; 8]);
                }
            }
            run(s.synchronize()).unwrap();
            run(other.synchronize()).unwrap();
        }
    }
}

/// Set by [`PanicsWhenDropped`] with the name of the thread that dropped it.
static DROPPED_ON: Mutex<Option<String>> = Mutex::new(None);

/// `scale_f32`'s `float *x` whose `Drop` panics (user code), after noting its thread.
struct PanicsWhenDropped(DeviceBuffer<f32>);

impl Drop for PanicsWhenDropped {
    fn drop(&mut self) {
        let thread = std::thread::current().name().map(str::to_owned);
        *DROPPED_ON.lock().unwrap() = Some(thread.unwrap_or_default());
        panic!("a kernel argument panicked while being dropped");
    }
}

// SAFETY: the only address packed is the buffer's, whose use is recorded.
unsafe impl KernelArg for PanicsWhenDropped {
    fn pack(&self, args: &mut ArgWriter<'_>) -> npu::Result<()> {
        args.device(&self.0)
    }

    fn record_use(&self, completion: &Completion) {
        KernelArg::record_use(&self.0, completion)
    }
}

/// `KernelArg`'s promise that "the arguments of a launch dropped in flight are dropped on
/// npu-rs's reaper thread", with an argument whose drop panics: a launch on a held device
/// whose future is dropped keeps the argument (and its buffer) until the kernel has run; it
/// is then dropped on the reaper, whose panic is contained: the buffer the panicking value
/// owns is still freed, and the reaper goes on running later releases. All three strategies.
#[test]
fn a_kernel_argument_whose_drop_panics_is_dropped_after_the_kernel_on_the_reaper() {
    let (_guard, ctx, _) = exclusive(None);
    let scale = in_process(&ctx, "scale_f32");
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let before = live_allocations(&ctx);
        *DROPPED_ON.lock().unwrap() = None;
        let held = sim::hold(&ctx.device()).unwrap();
        let x = PanicsWhenDropped(DeviceBuffer::from_host_blocking(&ctx, &[1.0f32; 4]).unwrap());
        // SAFETY: scale_f32 scales n = 4 elements of x, which holds 4.
        drop(unsafe { s.launch(&scale, 1, (x, 4u64, 2.0f32)) });
        sim::flush_releases();
        assert!(
            DROPPED_ON.lock().unwrap().is_none(),
            "{strategy:?}: kept for the kernel"
        );
        assert_eq!(live_allocations(&ctx), before + 1, "{strategy:?}");
        held.release().unwrap();
        until_released(&format!("{strategy:?}: the argument is dropped"), || {
            DROPPED_ON.lock().unwrap().is_some() && live_allocations(&ctx) <= before
        });
        assert_eq!(
            DROPPED_ON.lock().unwrap().as_deref(),
            Some("npu-reaper"),
            "{strategy:?}"
        );
        // The reaper goes on: a later dropped operation's buffer is released after it.
        let held = sim::hold(&ctx.device()).unwrap();
        drop(s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1));
        held.release().unwrap();
        until_released(&format!("{strategy:?}: a later release runs"), || {
            live_allocations(&ctx) <= before
        });
        run(s.synchronize()).unwrap();
    }
}

/// A fill kernel `{uint8_t *x, uint64_t n}` (0x5A over n bytes) that the timing-model attack
/// makes last an hour.
const TIMED_FILL: &str = "npu_attack27d_timed_fill";

fn timed_fill(ctx: &Context) -> Function {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        sim::kernel::register_with_args_size(TIMED_FILL, 16, |block, _, args| {
            if block == 0 {
                // SAFETY: launched with {uint8_t *x, uint64_t n}: x holds n bytes, kept
                // allocated by the launch until it completes.
                unsafe {
                    let (x, n) = fill_args(args);
                    std::ptr::write_bytes(x, 0x5A, n);
                }
            }
            0
        })
        .unwrap();
    });
    in_process(ctx, TIMED_FILL)
}

/// Rules 2, 3 and 5 under the simulator's timing model, where a kernel's task lasts as long
/// as its configured duration after its code has run: a kernel set to take an hour, its
/// launch dropped, keeps its buffer while it lasts; `Stream::abort` ends it at once (the
/// abort waits for the running task, which must not mean the hour), the buffer is released
/// only then, and the stream runs a kernel set to take no time. All three strategies.
#[test]
fn a_kernel_timed_to_last_an_hour_is_aborted_at_once_and_keeps_its_buffer_until_then() {
    let (_guard, ctx, _) = exclusive(None);
    let fill = timed_fill(&ctx);
    let device = ctx.device();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let before = live_allocations(&ctx);
        sim::set_kernel_duration(&device, TIMED_FILL, Duration::from_secs(3600)).unwrap();
        // SAFETY: the fill writes n = 64 bytes of x, which holds 64.
        let launched = unsafe {
            s.launch(
                &fill,
                1,
                (DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 64u64),
            )
        };
        drop(launched);
        // SAFETY: as above.
        let behind = unsafe {
            s.launch(
                &fill,
                1,
                (DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 64u64),
            )
        };
        sim::flush_releases();
        assert_eq!(
            live_allocations(&ctx),
            before + 2,
            "{strategy:?}: both kept"
        );
        run(s.abort()).unwrap();
        let err = run(behind).unwrap_err();
        assert!(
            matches!(err.error, npu::Error::Aborted { .. }),
            "{strategy:?}: {}",
            err.error
        );
        drop(err);
        until_released(&format!("{strategy:?}: the hour's buffer"), || {
            live_allocations(&ctx) <= before
        });
        sim::set_kernel_duration(&device, TIMED_FILL, Duration::ZERO).unwrap();
        // SAFETY: as above.
        let (x, _) = run(unsafe {
            s.launch(
                &fill,
                1,
                (DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 64u64),
            )
        })
        .unwrap();
        assert_eq!(x.to_vec_blocking().unwrap(), [0x5A; 64], "{strategy:?}");
        sim::set_timing(&device, None).unwrap();
    }
}

/// docs/ascend.md's teardown promise for kernels: a runtime of the program's own (npu-sim's
/// cdylib) with kernel binaries loaded from a file and from memory (a registry image), a
/// launch awaited and one dropped in flight, then every handle dropped, the modules before
/// the launch has run; ACL must be finalised once the launch is done, and the library serve
/// kernels again. All three strategies.
#[test]
fn a_runtime_of_its_own_used_through_kernels_is_finalised_when_dropped() {
    let (_guard, _d0, _d1) = exclusive(None);
    let own = OwnRuntime::new("attack27d");
    for strategy in STRATEGIES {
        let runtime = own.build();
        let ctx = runtime.device(0).unwrap().primary_context().clone();
        let s = stream(&ctx, strategy);
        // SAFETY: npu-sim's shipped kernel library, built for its kernel ABI.
        let library = unsafe { Module::from_file(&ctx, sim::kernel::LIBRARY_PATH) }.unwrap();
        let image = sim::kernel::registry_image(&["scale_f32"]);
        // SAFETY: a registry image names in-process kernels; loading it runs no code.
        let registry = unsafe { Module::from_data(&ctx, &image) }.unwrap();
        let add = library.function("vector_add_f32").unwrap();
        let scale = registry.function("scale_f32").unwrap();
        let n = 1 << 16;
        let a = DeviceBuffer::from_host_blocking(&ctx, &vec![1.0f32; n]).unwrap();
        let b = DeviceBuffer::from_host_blocking(&ctx, &vec![2.0f32; n]).unwrap();
        let c = DeviceBuffer::<f32>::new(&ctx, n).unwrap();
        // SAFETY: vector_add_f32 takes {a, b, c, n} and touches n elements of each; all hold n.
        let (a, b, c, _) = run(unsafe { s.launch(&add, 4, (a, b, c, n as u64)) }).unwrap();
        assert!(
            c.to_vec_blocking().unwrap().iter().all(|&v| v == 3.0),
            "{strategy:?}"
        );
        // SAFETY: scale_f32 scales n elements of c, which holds n.
        drop(unsafe { s.launch(&scale, 4, (c, n as u64, 2.0f32)) });
        drop((library, registry, add, scale, a, b, s, ctx, runtime));
        own.when_finalised(&format!("{strategy:?}"), |applied| {
            let ctx = applied.device(0).unwrap().primary_context().clone();
            let s = stream(&ctx, strategy);
            // SAFETY: as above.
            let library = unsafe { Module::from_file(&ctx, sim::kernel::LIBRARY_PATH) }.unwrap();
            let scale = library.function("scale_f32").unwrap();
            let x = DeviceBuffer::from_host_blocking(&ctx, &[1.0f32, 2.0]).unwrap();
            // SAFETY: scale_f32 scales n = 2 elements of x, which holds 2.
            let (x, _, _) = run(unsafe { s.launch(&scale, 1, (x, 2u64, 4.0f32)) }).unwrap();
            assert_eq!(x.to_vec_blocking().unwrap(), [4.0, 8.0], "{strategy:?}");
        });
    }
}

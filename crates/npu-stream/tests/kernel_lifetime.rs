//! A dropped launch keeps what the kernel uses until the kernel has finished: its argument
//! buffers stay allocated, and its binary stays loaded; both are released afterwards.
//! `mem::forget` only leaks.
//!
//! The checks read the simulator's live-allocation counter of device 0, so this file holds a
//! single test: no other test of the binary allocates concurrently.

mod kernel_support;

use std::time::{Duration, Instant};

use kernel_support::{context, in_process};
use npu_mem::DeviceBuffer;
use npu_sim::control::{device_stats, hold, release, set_kernel_duration, set_timing};
use npu_sim::kernel::VECTOR_ADD_F32;
use npu_stream::Stream;

fn live_allocations() -> u64 {
    device_stats(0).unwrap().live_allocations
}

/// Whether a function handle is still valid: `aclrtKernelArgsInit` fails with
/// ACL_ERROR_RT_INVALID_HANDLE (107017) once its binary was unloaded.
fn function_loaded(ctx: &npu_core::Context, function: npu_core::ffi::aclrtFuncHandle) -> bool {
    let mut args = std::ptr::null_mut();
    let init = ctx.runtime().api().aclrtKernelArgsInit.unwrap();
    // SAFETY: `args` is a valid out-pointer; the simulator checks the handle before using it.
    match unsafe { init(function, &mut args) } {
        0 => true,
        107017 => false,
        code => panic!("aclrtKernelArgsInit failed with {code}"),
    }
}

/// Waits until `done` holds, for at most a few seconds.
fn eventually(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_launch_keeps_its_arguments_until_the_kernel_finished() {
    let ctx = context(0);
    let stream = Stream::new(&ctx).unwrap();
    set_kernel_duration(0, VECTOR_ADD_F32, Duration::from_millis(100)).unwrap();
    let n = 1 << 16;
    let baseline = live_allocations();

    // The module and the function are dropped right after the launch, with the future.
    let add = in_process(&ctx, VECTOR_ADD_F32);
    let buffers = [(); 3].map(|()| DeviceBuffer::<f32>::new(&ctx, n).unwrap());
    assert_eq!(live_allocations(), baseline + 3);
    let [a, b, c] = buffers;
    // The device is held so that the kernel is still to run when the checks below run,
    // whatever the scheduler does to this thread: they used to count samples taken while the
    // 100 ms kernel ran, which a thread kept off the CPU for that long fails.
    hold(0).unwrap();
    // SAFETY: {const float *a, const float *b, float *c, uint64_t n}; all hold n f32.
    let launch = unsafe { stream.launch(&add, 4, (a, b, c, n as u64)) };
    let done = launch.completion().clone();
    let raw_function = add.as_raw();
    drop(launch);
    drop(add);

    // Until the kernel completes, none of the three buffers may be freed and the binary stays
    // loaded. Checked five times while the device holds the kernel (the releases run on other
    // threads, which get their turns between the checks), then as often as the scheduler lets
    // this thread while the kernel runs its 100 ms.
    let still_in_use = || {
        assert_eq!(
            live_allocations(),
            baseline + 3,
            "a buffer was freed while the kernel could still use it"
        );
        assert!(
            function_loaded(&ctx, raw_function),
            "the binary was unloaded while the kernel could still run"
        );
    };
    for _ in 0..5 {
        assert!(!done.is_complete(), "the kernel completed on a held device");
        still_in_use();
        tokio::task::yield_now().await;
        std::thread::yield_now();
    }
    release(0).unwrap();
    while !done.is_complete() {
        still_in_use();
        // A sampling interval, not a synchronisation: the loop ends on the completion.
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        done.result().unwrap().is_ok(),
        "the kernel ran, its binary still loaded: {:?}",
        done.result()
    );
    eventually("the buffers are freed after the kernel", || {
        live_allocations() == baseline
    });
    eventually("the binary is unloaded after the kernel", || {
        !function_loaded(&ctx, raw_function)
    });

    // Forgetting the future leaks its buffers; it never frees them early.
    let add = in_process(&ctx, VECTOR_ADD_F32);
    let [a, b, c] = [(); 3].map(|()| DeviceBuffer::<f32>::new(&ctx, n).unwrap());
    // SAFETY: as above.
    let launch = unsafe { stream.launch(&add, 4, (a, b, c, n as u64)) };
    let done = launch.completion().clone();
    std::mem::forget(launch);
    done.wait().await.unwrap();
    stream.synchronize().await.unwrap();
    npu_core::reaper::flush();
    assert_eq!(live_allocations(), baseline + 3, "leaked, not freed");
    set_timing(0, None).unwrap();
}

//! Kernel launches on the simulator: results against the CPU through both ways of loading
//! kernels, stream order across launches and copies, and the typed errors.

mod common;
mod kernel_support;

use std::num::NonZeroU32;
use std::sync::Arc;

use kernel_support::{RUST_VECTOR_ADD, context, in_process, library, random_f32};
use npu_core::{AclCode, ArgPacker, Error, Function, LaunchConfig, Module, OpError, Runtime};
use npu_mem::{DeviceBuffer, PinnedBuffer};
use npu_sim::kernel::{REDUCE_SUM_F32, SCALE_F32, VECTOR_ADD_F32, block_range};
use npu_stream::{ByValue, Strategy, Stream};

/// `c = a + b` on the device, through the stream's async copies.
async fn vector_add(stream: &Stream, add: &Function, a: &[f32], b: &[f32]) -> Vec<f32> {
    let ctx = stream.context();
    let n = a.len();
    let (host_a, host_b) = (
        PinnedBuffer::from_slice(ctx, a).unwrap(),
        PinnedBuffer::from_slice(ctx, b).unwrap(),
    );
    let (dev_a, dev_b, dev_c) = (
        DeviceBuffer::<f32>::new(ctx, n).unwrap(),
        DeviceBuffer::<f32>::new(ctx, n).unwrap(),
        DeviceBuffer::<f32>::new(ctx, n).unwrap(),
    );
    let (_, dev_a) = stream.copy_h2d(host_a, dev_a).await.unwrap();
    let (host_b, dev_b) = stream.copy_h2d(host_b, dev_b).await.unwrap();
    // SAFETY: {const float *a, const float *b, float *c, uint64_t n}; all three hold n f32.
    let launch = unsafe { stream.launch(add, 8, (dev_a, dev_b, dev_c, n as u64)) };
    let (_, _, dev_c, _) = launch.await.unwrap();
    let (_, host_c) = stream.copy_d2h(dev_c, host_b).await.unwrap();
    host_c.to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vector_add_matches_the_cpu_through_every_loading_path() {
    let ctx = context(0);
    let stream = Stream::new(&ctx).unwrap();
    let paths = [
        (
            "shared object (aclrtBinaryLoadFromFile)",
            library(&ctx).function(VECTOR_ADD_F32).unwrap(),
        ),
        (
            "built-in Rust kernel (registry image)",
            in_process(&ctx, VECTOR_ADD_F32),
        ),
        (
            "closure registered by the test (registry image)",
            in_process(&ctx, RUST_VECTOR_ADD),
        ),
    ];
    for (seed, (path, add)) in paths.iter().enumerate() {
        let n = 10_007;
        let a = random_f32(2 * seed as u64 + 1, n);
        let b = random_f32(2 * seed as u64 + 2, n);
        let c = vector_add(&stream, add, &a, &b).await;
        let expected: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
        assert_eq!(c, expected, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_and_a_two_pass_reduction_match_the_cpu() {
    let ctx = context(0);
    let stream = Stream::new(&ctx).unwrap();
    let module = library(&ctx);
    let (scale, reduce) = (
        module.function(SCALE_F32).unwrap(),
        in_process(&ctx, REDUCE_SUM_F32),
    );
    let n = 4099;
    let data = random_f32(7, n);
    let alpha = 0.375f32;
    let x = DeviceBuffer::from_host_blocking(&ctx, &data).unwrap();
    // SAFETY: {float *x, uint64_t n, float alpha}; x holds n f32.
    let (x, _, _) = unsafe { stream.launch(&scale, 5, (x, n as u64, alpha)) }
        .await
        .unwrap();
    let scaled: Vec<f32> = data.iter().map(|v| v * alpha).collect();
    assert_eq!(x.to_vec_blocking().unwrap(), scaled);

    // Pass 1: 16 blocks into 16 partial sums; pass 2: one block over the partials.
    let blocks = 16u32;
    let partials = DeviceBuffer::<f32>::new(&ctx, blocks as usize).unwrap();
    let total = DeviceBuffer::<f32>::new(&ctx, 1).unwrap();
    // SAFETY: {const float *x, float *partials, uint64_t n}; x holds n f32 and partials one
    // per block.
    let (_, partials, _) = unsafe { stream.launch(&reduce, blocks, (x, partials, n as u64)) }
        .await
        .unwrap();
    // SAFETY: as above, with the 16 partials as input and one block writing one sum.
    let (_, total, _) = unsafe { stream.launch(&reduce, 1, (partials, total, 16u64)) }
        .await
        .unwrap();
    // The CPU adds in the kernels' order, so the f32 results agree exactly.
    let cpu_partials: Vec<f32> = (0..blocks)
        .map(|b| scaled[block_range(b, blocks, n as u64)].iter().sum())
        .collect();
    let cpu_total: f32 = cpu_partials.iter().sum();
    assert_eq!(total.to_vec_blocking().unwrap(), [cpu_total]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn launch_copy_launch_runs_in_stream_order() {
    // Device 1, so that the kernel duration set here slows no other test of this file.
    let ctx = context(1);
    let stream = Stream::new(&ctx).unwrap();
    let scale = library(&ctx).function(SCALE_F32).unwrap();
    npu_sim::control::set_kernel_duration(1, SCALE_F32, std::time::Duration::from_millis(30))
        .unwrap();
    let n = 1024;
    let data = random_f32(11, n);
    let a = Arc::new(DeviceBuffer::from_host_blocking(&ctx, &data).unwrap());
    let b = DeviceBuffer::<f32>::new(&ctx, n).unwrap();

    // Nothing is awaited until all three are queued: only the stream orders them. If the copy
    // overtook the first launch, b would hold a; if the second launch overtook the copy, b
    // would hold 20 a.
    // SAFETY: {float *x, uint64_t n, float alpha}; a holds n f32, and only this stream
    // touches it.
    let first = unsafe { stream.launch(&scale, 4, (a.clone(), n as u64, 2.0f32)) };
    let copy = stream.copy_d2d(a.clone(), b);
    // SAFETY: as above.
    let second = unsafe { stream.launch(&scale, 4, (a.clone(), n as u64, 10.0f32)) };
    second.await.unwrap();
    assert!(
        first.is_complete() && copy.is_complete(),
        "a stream completes its operations in order"
    );
    first.await.unwrap();
    let (_, b) = copy.await.unwrap();
    let twice: Vec<f32> = data.iter().map(|v| v * 2.0).collect();
    assert_eq!(b.to_vec_blocking().unwrap(), twice);
    let twenty: Vec<f32> = twice.iter().map(|v| v * 10.0).collect();
    assert_eq!(a.to_vec_blocking().unwrap(), twenty);
    npu_sim::control::set_timing(1, None).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn launches_complete_under_every_completion_strategy() {
    let ctx = context(0);
    let scale = in_process(&ctx, SCALE_F32);
    for strategy in [
        Strategy::EventPoll,
        Strategy::CallbackThread,
        Strategy::BlockingSync,
    ] {
        let stream = Stream::builder(&ctx).strategy(strategy).build().unwrap();
        let x = DeviceBuffer::from_host_blocking(&ctx, &[1.5f32; 64]).unwrap();
        // SAFETY: {float *x, uint64_t n, float alpha}; x holds 64 f32.
        let (x, _, _) = unsafe { stream.launch(&scale, 4, (x, 64u64, 2.0f32)) }
            .await
            .unwrap();
        assert_eq!(x.to_vec_blocking().unwrap(), [3.0; 64], "{strategy:?}");
    }
}

fn assert_invalid<T>(result: Result<T, OpError<T>>, argument: &str, rule: &str) {
    match result {
        Err(OpError {
            error:
                Error::InvalidArgument {
                    api,
                    argument: a,
                    rule: r,
                },
            value: Some(_),
        }) => {
            assert_eq!((api, a), ("Stream::launch", argument));
            assert!(r.contains(rule), "{r:?} does not mention {rule:?}");
        }
        Err(other) => panic!("expected a typed argument error, got {other}"),
        Ok(_) => panic!("expected a typed argument error, got success"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_launches_are_typed_errors() {
    let ctx = context(0);
    let stream = Stream::new(&ctx).unwrap();
    let scale = in_process(&ctx, SCALE_F32);
    let x = || DeviceBuffer::<f32>::new(&ctx, 4).unwrap();

    // SAFETY: rejected before ACL is called.
    let zero_blocks = unsafe { stream.launch(&scale, 0, (x(), 4u64, 1.0f32)) };
    assert_invalid(zero_blocks.await, "blocks", "at least 1");

    let other_device = DeviceBuffer::<f32>::new(&context(1), 4).unwrap();
    // SAFETY: rejected before ACL is called.
    let launch = unsafe { stream.launch(&scale, 1, (other_device, 4u64, 1.0f32)) };
    assert_invalid(launch.await, "args", "on device 1");

    let big = ByValue([0u64; 4096]);
    // SAFETY: rejected before ACL is called (64 KiB + 1 byte of arguments).
    let launch = unsafe { stream.launch(&scale, 1, (big, big, 1u8)) };
    assert_invalid(launch.await, "args", &ArgPacker::MAX_BYTES.to_string());

    // The function binds the context its binary was loaded in; a stream of another context
    // (on the same device) is ACL's 107003.
    let other_context = npu_core::Device::open(0).unwrap().create_context().unwrap();
    let foreign_stream = Stream::new(&other_context).unwrap();
    // SAFETY: ACL rejects the launch before the kernel could run; x holds 4 f32.
    let err = unsafe { foreign_stream.launch(&scale, 1, (x(), 4u64, 1.0f32)) }
        .await
        .unwrap_err()
        .error;
    assert_eq!(err.acl_code(), Some(AclCode(107003)), "{err}");
    assert!(
        err.to_string()
            .starts_with("aclrtLaunchKernelWithHostArgs failed")
    );
    // The same function works on its own context's streams afterwards.
    // SAFETY: x holds 4 f32.
    unsafe { stream.launch(&scale, 1, (x(), 4u64, 1.0f32)) }
        .await
        .unwrap();

    // A function of another runtime (the simulator's cdylib) never reaches ACL.
    // SAFETY: npu-sim's build of libascendcl.so, an AscendCL runtime.
    let dlopened = unsafe { Runtime::builder().library(common::simulator_library()) }
        .build()
        .unwrap();
    let foreign_ctx = dlopened.device(0).unwrap().primary_context().clone();
    let foreign = library(&foreign_ctx).function(SCALE_F32).unwrap();
    // SAFETY: rejected before ACL is called.
    let launch = unsafe { stream.launch(&foreign, 1, ()) };
    match launch.await {
        Err(OpError {
            error: Error::InvalidArgument { api, argument, .. },
            ..
        }) => {
            assert_eq!((api, argument), ("Stream::launch", "function"))
        }
        other => panic!("expected a typed error, got {other:?}"),
    }

    let foreign_buffer = DeviceBuffer::<f32>::new(&foreign_ctx, 4).unwrap();
    // SAFETY: rejected before ACL is called.
    let launch = unsafe { stream.launch(&scale, 1, (foreign_buffer, 4u64, 1.0f32)) };
    assert_invalid(launch.await, "args", "another AscendCL runtime");

    // Unknown kernels and missing files fail when loading, with ACL's codes.
    let err = library(&ctx).function("no_such_kernel").unwrap_err();
    assert_eq!(err.acl_code(), Some(AclCode(107042)), "{err}");
    // SAFETY: nothing is loaded from a missing file.
    let err = unsafe { Module::from_file(&ctx, "/nonexistent/libkernels.so") }.unwrap_err();
    assert_eq!(err.acl_code(), Some(AclCode(107009)), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn launches_without_arguments_and_with_a_config() {
    let ctx = context(0);
    let stream = Stream::new(&ctx).unwrap();
    let count_blocks = "npu_stream_test_count_blocks";
    static SEEN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    npu_sim::kernel::register(count_blocks, |_, _, _| {
        SEEN.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        0
    })
    .unwrap();
    let function = in_process(&ctx, count_blocks);
    // SAFETY: the kernel takes no arguments and touches no memory.
    unsafe { stream.launch(&function, 3, ()) }.await.unwrap();
    let config = LaunchConfig::new(NonZeroU32::new(5).unwrap()).engine(npu_core::Engine::Aiv);
    // SAFETY: as above.
    unsafe { stream.launch_with(&function, config, ()) }
        .await
        .unwrap();
    assert_eq!(
        SEEN.load(std::sync::atomic::Ordering::SeqCst),
        8,
        "every block ran"
    );
}

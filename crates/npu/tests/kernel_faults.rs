//! `npu::sim::fail_kernel` and `npu::sim::clear_faults`: a fault on a kernel name fires on
//! whichever stream launches it, and faults that have not fired can be disarmed.
//!
//! A file of its own: `clear_faults` disarms every fault of a device, which tests of another
//! file sharing the device would notice. The tests here take turns on devices 0 and 1
//! (`TURN`) for the same reason.

mod common;

use std::sync::Arc;

use common::{HANG, fill_kernel, in_process, invalid};
use npu::error::AclCode;
use npu::prelude::*;
use npu::{Stream, sim};

const TRAP: AclCode = AclCode::AICORE_EXCEPTION;

/// One test at a time: `clear_faults` disarms every fault of a device, the other tests' too.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The primary contexts of devices 0 and 1, with no fault armed on either: a test that failed
/// before its fault fired would otherwise fail the tests after it too.
fn contexts() -> (Context, Context) {
    let context = |id| {
        let device = Device::open(id).unwrap();
        sim::clear_faults(&device).unwrap();
        device.primary_context().clone()
    };
    (context(0), context(1))
}

/// A fill kernel of this file's own: the second kernel name, which a `scale_f32` fault spares.
const FILL: &str = "kernel_faults_fill";

/// Launches `scale_f32` over the 16 elements of `x` on `stream` and awaits it.
async fn scale(
    stream: &Stream,
    function: &Function,
    x: DeviceBuffer<f32>,
) -> npu::Result<DeviceBuffer<f32>> {
    // SAFETY: scale_f32(float *x, uint64_t n, float alpha) scales n elements of x; x holds 16.
    let launch = unsafe { stream.launch(function, 1, (x, 16u64, 2.0f32)) };
    let (x, _, _) = launch.await?;
    Ok(x)
}

/// A buffer of 16 ones on `ctx`'s device, written synchronously: no task of any stream.
fn ones(ctx: &Context) -> DeviceBuffer<f32> {
    let mut x = DeviceBuffer::<f32>::new(ctx, 16).unwrap();
    x.copy_from_host_blocking(&[1.0; 16]).unwrap();
    x
}

#[tokio::test]
async fn a_kernel_fault_fires_on_the_stream_a_pool_hands_out_after_several_were_used() {
    let _turn = TURN.lock().await;
    let (ctx, _) = contexts();
    let device = ctx.device();
    let function = in_process(&ctx, sim::kernel::SCALE_F32);
    let pool = StreamPool::new(&ctx, 4).unwrap();
    // Five launches, on every stream of the pool and the first one twice: where the next one
    // runs is the pool's business, not the test's.
    let mut x = ones(&ctx);
    for _ in 0..5 {
        x = scale(&pool.next(), &function, x).await.unwrap();
    }
    sim::fail_kernel(&device, sim::kernel::SCALE_F32, 1, TRAP).unwrap();
    let next = pool.next();
    let err = scale(&next, &function, x).await.unwrap_err();
    assert_eq!(err.acl_code(), Some(TRAP), "{err}");
    let fault = err.fault().expect("where the device failed");
    assert_eq!(fault.stream_id, next.id(), "{fault:?}");
    // It fired once: the next launch, on the stream after, runs.
    let y = scale(&pool.next(), &function, ones(&ctx)).await.unwrap();
    assert_eq!(y.to_vec_blocking().unwrap(), [2.0; 16]);
    assert_eq!(sim::clear_faults(&device).unwrap(), 0, "nothing left armed");
}

#[tokio::test]
async fn nth_counts_the_kernels_launches_across_streams_and_spares_other_kernels() {
    let _turn = TURN.lock().await;
    let (ctx, _) = contexts();
    let device = ctx.device();
    let scale_f32 = in_process(&ctx, sim::kernel::SCALE_F32);
    let fill = fill_kernel(&ctx, FILL, 7);
    let streams: Vec<_> = (0..3).map(|_| Stream::new(&ctx).unwrap()).collect();
    sim::fail_kernel(&device, sim::kernel::SCALE_F32, 3, TRAP).unwrap();
    let mut outcomes = Vec::new();
    for stream in &streams {
        // A memset and another kernel between the launches: neither is a launch of scale_f32.
        let bytes = stream
            .memset(DeviceBuffer::<u8>::new(&ctx, 16).unwrap(), 0)
            .await
            .unwrap();
        // SAFETY: the fill kernel writes its n = 16 bytes of x, which holds 16.
        let filled = unsafe { stream.launch(&fill, 1, (bytes, 16u64)) }.await;
        assert!(filled.is_ok(), "another kernel name is spared");
        let x = ones(&ctx);
        outcomes.push(
            scale(stream, &scale_f32, x)
                .await
                .err()
                .and_then(|e| e.acl_code()),
        );
    }
    assert_eq!(
        outcomes,
        [None, None, Some(TRAP)],
        "the third launch, on the third stream"
    );
    assert_eq!(sim::clear_faults(&device).unwrap(), 0, "nothing left armed");
}

/// `clear_faults` disarms every fault of the device, an unused `fail_next_alloc` too: the
/// allocation after it succeeds.
#[test]
fn an_unused_failed_allocation_is_disarmed_too() {
    let _turn = TURN.blocking_lock();
    let (ctx, _) = contexts();
    let device = ctx.device();
    sim::fail_next_alloc(&device).unwrap();
    assert_eq!(sim::clear_faults(&device).unwrap(), 1);
    assert!(DeviceBuffer::<u8>::new(&ctx, 64).is_ok(), "disarmed");
    assert_eq!(sim::clear_faults(&device).unwrap(), 0);
}

#[tokio::test]
async fn cleared_faults_never_fire_and_another_devices_stay_armed() {
    let _turn = TURN.lock().await;
    let (ctx, other) = contexts();
    let device = ctx.device();
    let function = in_process(&ctx, sim::kernel::SCALE_F32);
    let stream = Stream::new(&ctx).unwrap();
    let on_other = Stream::new(&other).unwrap();
    sim::fail_task(&stream, 1, TRAP).unwrap();
    sim::fail_kernel(&device, sim::kernel::SCALE_F32, 1, TRAP).unwrap();
    sim::fail_kernel(&device, sim::kernel::SCALE_F32, 2, TRAP).unwrap();
    sim::fail_task(&on_other, 1, TRAP).unwrap();
    assert_eq!(sim::clear_faults(&device).unwrap(), 3);
    let mut x = ones(&ctx);
    // The first launch is the stream's next task, which fail_task had armed.
    for _ in 0..2 {
        x = scale(&stream, &function, x).await.expect("disarmed");
    }
    assert_eq!(x.to_vec_blocking().unwrap(), [4.0; 16]);
    assert_eq!(sim::clear_faults(&device).unwrap(), 0);
    // Device 1's fault was not device 0's to clear.
    let err = on_other
        .memset(DeviceBuffer::<u8>::new(&other, 8).unwrap(), 0)
        .await
        .unwrap_err();
    assert_eq!(err.acl_code(), Some(TRAP), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_launches_racing_from_several_tasks_exactly_one_fails() {
    const TASKS: usize = 8;
    let _turn = TURN.lock().await;
    let (ctx, _) = contexts();
    let device = ctx.device();
    let function = Arc::new(in_process(&ctx, sim::kernel::SCALE_F32));
    let mut inputs = Vec::new();
    for _ in 0..TASKS {
        let stream = Stream::new(&ctx).unwrap();
        let x = ones(&ctx);
        inputs.push((stream, x));
    }
    sim::fail_kernel(&device, sim::kernel::SCALE_F32, 5, TRAP).unwrap();
    let start = Arc::new(tokio::sync::Barrier::new(TASKS));
    let mut tasks = tokio::task::JoinSet::new();
    for (stream, x) in inputs {
        let (function, start) = (function.clone(), start.clone());
        tasks.spawn(async move {
            start.wait().await;
            scale(&stream, &function, x)
                .await
                .err()
                .and_then(|e| e.acl_code())
        });
    }
    let outcomes = tokio::time::timeout(HANG, tasks.join_all())
        .await
        .expect("no hang");
    let failed: Vec<_> = outcomes.iter().flatten().collect();
    assert_eq!(failed, [&TRAP], "{outcomes:?}");
    assert_eq!(sim::clear_faults(&device).unwrap(), 0);
}

#[test]
fn invalid_arguments_are_refused_naming_the_api_and_arm_nothing() {
    let _turn = TURN.blocking_lock();
    let (ctx, _) = contexts();
    let device = ctx.device();
    let name = sim::kernel::SCALE_F32;
    let refusals = [
        ("name", sim::fail_kernel(&device, "", 1, TRAP)),
        ("name", sim::fail_kernel(&device, "scale\0f32", 1, TRAP)),
        ("nth", sim::fail_kernel(&device, name, 0, TRAP)),
        ("code", sim::fail_kernel(&device, name, 1, AclCode(0))),
        (
            "code",
            sim::fail_kernel(&device, name, 1, AclCode::EVENT_SYNC_TIMEOUT),
        ),
        (
            "code",
            sim::fail_kernel(&device, name, 1, AclCode::STREAM_SYNC_TIMEOUT),
        ),
    ];
    for (argument, refused) in refusals {
        let err = refused.unwrap_err();
        assert_eq!(invalid(&err), ("npu::sim::fail_kernel", argument), "{err}");
    }
    assert_eq!(sim::clear_faults(&device).unwrap(), 0, "nothing was armed");
}

#[tokio::test]
async fn a_name_no_launch_uses_is_armed_and_reported_by_clear_faults() {
    let _turn = TURN.lock().await;
    let (ctx, _) = contexts();
    let device = ctx.device();
    let function = in_process(&ctx, sim::kernel::SCALE_F32);
    let stream = Stream::new(&ctx).unwrap();
    // A misspelt name: armed (a module may be loaded later), never fired.
    sim::fail_kernel(&device, "scale_f3", 1, TRAP).unwrap();
    let x = scale(&stream, &function, ones(&ctx)).await.unwrap();
    assert_eq!(x.to_vec_blocking().unwrap(), [2.0; 16]);
    assert_eq!(
        sim::clear_faults(&device).unwrap(),
        1,
        "the test learns it never fired"
    );
}

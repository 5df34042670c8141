//! A trapping kernel in both failure modes: with CONTINUE later work still
//! runs and only the faulting launch fails, with 507015 on the AIC engine or 507035 on the AIV
//! engine; with STOP nothing after the fault runs, on any stream of the context, and every
//! pending or later operation fails instead of hanging.

mod kernel_support;

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use kernel_support::{TRAP, context, in_process, library};
use npu_core::{AclCode, Context, Device, Engine, Function, LaunchConfig};
use npu_mem::DeviceBuffer;
use npu_sim::kernel::SCALE_F32;
use npu_stream::{FailureMode, Op, Stream};

/// Every wait here is bounded: a hang is a failure, not a stuck test.
const DEADLINE: Duration = Duration::from_secs(10);

async fn bounded<T: Send + 'static>(op: Op<T>) -> Result<T, npu_core::OpError<T>> {
    tokio::time::timeout(DEADLINE, op)
        .await
        .expect("the operation resolved instead of hanging")
}

/// An operation's outcome: its ACL error code, if it failed.
async fn outcome<T: Send + 'static>(op: Op<T>) -> Result<(), Option<AclCode>> {
    bounded(op)
        .await
        .map(drop)
        .map_err(|err| err.error.acl_code())
}

type Doubled = (Arc<DeviceBuffer<f32>>, u64, f32);

/// `x *= 2` over one f32 of `x`.
fn double(stream: &Stream, scale: &Function, x: &Arc<DeviceBuffer<f32>>) -> Op<Doubled> {
    // SAFETY: {float *x, uint64_t n, float alpha} with n = 1; x holds one f32 and only this
    // test's streams use it, one at a time.
    unsafe { stream.launch(scale, 1, (x.clone(), 1u64, 2.0f32)) }
}

/// A trap on `engine`.
fn trap(stream: &Stream, trap: &Function, engine: Engine) -> Op<()> {
    let config = LaunchConfig::new(NonZeroU32::MIN).engine(engine);
    // SAFETY: the trap kernel takes no arguments and touches no memory.
    unsafe { stream.launch_with(trap, config, ()) }
}

/// A fresh explicit context on `device`: a failure mode applies to a whole context, so each
/// test gets its own.
fn fresh_context(device: u32) -> Context {
    Device::open(device).unwrap().create_context().unwrap()
}

fn value(x: &DeviceBuffer<f32>) -> f32 {
    x.to_vec_blocking().unwrap()[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_mode_fails_only_the_faulting_launch() {
    let ctx = fresh_context(0);
    let stream = Stream::new(&ctx).unwrap();
    stream.set_failure_mode(FailureMode::Continue).unwrap();
    let (scale, trap_fn) = (
        library(&ctx).function(SCALE_F32).unwrap(),
        in_process(&ctx, TRAP),
    );
    let x = Arc::new(DeviceBuffer::from_host_blocking(&ctx, &[1.0f32]).unwrap());

    // All five are queued (left to right) before any is awaited.
    let ops = (
        double(&stream, &scale, &x),
        trap(&stream, &trap_fn, Engine::Aic),
        double(&stream, &scale, &x),
        trap(&stream, &trap_fn, Engine::Aiv),
        double(&stream, &scale, &x),
    );
    let results = [
        outcome(ops.0).await,
        outcome(ops.1).await,
        outcome(ops.2).await,
        outcome(ops.3).await,
        outcome(ops.4).await,
    ];
    assert_eq!(
        results,
        [
            Ok(()),
            Err(Some(AclCode(507015))),
            Ok(()),
            Err(Some(AclCode(507035))),
            Ok(())
        ]
    );
    assert_eq!(value(&x), 8.0, "the three doublings all ran");
    // synchronize() reports the first failure since the last synchronize, once, as
    // aclrtSynchronizeStream does.
    let first = bounded(stream.synchronize()).await.unwrap_err().error;
    assert_eq!(first.acl_code(), Some(AclCode(507015)));
    bounded(stream.synchronize()).await.expect("reported once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_mode_runs_nothing_after_the_fault_and_fails_everything() {
    // The buffer lives in the device's primary context, so it can still be read after the
    // test's context stopped; contexts of one device share its memory.
    let x = Arc::new(DeviceBuffer::from_host_blocking(&context(1), &[1.0f32]).unwrap());
    let ctx = fresh_context(1);
    let (stream, other) = (Stream::new(&ctx).unwrap(), Stream::new(&ctx).unwrap());
    stream.set_failure_mode(FailureMode::Stop).unwrap();
    let (scale, trap_fn) = (
        library(&ctx).function(SCALE_F32).unwrap(),
        in_process(&ctx, TRAP),
    );
    // The trap takes long enough that the work behind it is queued before it fails.
    npu_sim::control::set_kernel_duration(1, TRAP, Duration::from_millis(20)).unwrap();

    let (first, fault, queued, sync) = (
        double(&stream, &scale, &x),
        trap(&stream, &trap_fn, Engine::Aiv),
        double(&stream, &scale, &x),
        stream.synchronize(),
    );
    assert_eq!(outcome(first).await, Ok(()));
    assert_eq!(outcome(fault).await, Err(Some(AclCode(507035))));
    assert_eq!(
        outcome(queued).await,
        Err(Some(AclCode(507035))),
        "queued behind the fault"
    );
    assert_eq!(outcome(sync).await, Err(Some(AclCode(507035))));
    // Work submitted after the fault, on any stream of the context, fails too.
    for (what, stream) in [("same stream", &stream), ("other stream", &other)] {
        let result = outcome(double(stream, &scale, &x)).await;
        assert_eq!(result, Err(Some(AclCode(507035))), "{what}");
    }
    assert_eq!(value(&x), 2.0, "only the doubling before the fault ran");
    npu_sim::control::set_timing(1, None).unwrap();
}

//! Device-side task failures: an injected fault surfaces on the future of the operation that
//! failed and nowhere else; ACL_CONTINUE_ON_FAILURE keeps the stream alive, while
//! ACL_STOP_ON_FAILURE fails everything queued in the context.
//!
//! Device 1 runs a slow timing model in this process (10 MB/s memsets), so an operation can be
//! made to outlast the reactor's fault probe. Device 0's hold gate is used by one test; the
//! others only get delayed by it.

mod common;

use std::sync::Once;

use common::{STRATEGIES, code, in_process, pattern, run, stream};
use npu_core::{Context, ffi};
use npu_mem::{DeviceBuffer, Memory, PinnedBuffer};
use npu_sim::{TimingModel, control};
use npu_stream::{Event, FailureMode, Stream};

/// The code the tests inject: an AI Core exception.
const FAULT: i32 = ffi::ACL_ERROR_RT_AICORE_EXCEPTION;

/// Makes `stream`'s `index`-th operation (0-based) from now on fail when the device runs it.
fn inject(stream: &Stream, index: u64) {
    control::fail_task(stream.as_raw(), index + 1, FAULT).unwrap();
}

/// Device 1's primary context, with memsets at 10 MB/s (10 kB take 1 ms of device time).
fn slow_device() -> Context {
    static SLOW: Once = Once::new();
    let runtime = in_process();
    SLOW.call_once(|| {
        let model = TimingModel::default().d2d_bandwidth(10_000_000);
        control::set_timing(1, Some(model)).unwrap();
    });
    runtime.device(1).unwrap().primary_context().clone()
}

#[test]
fn a_fault_fails_only_the_operation_that_faulted() {
    let context = in_process().device(0).unwrap().primary_context().clone();
    for strategy in STRATEGIES {
        let (faulty, healthy) = (stream(&context, strategy), stream(&context, strategy));
        let data = pattern(11, 3000);
        inject(&faulty, 1);
        let before = faulty.memset(DeviceBuffer::<u8>::new(&context, 3000).unwrap(), 1);
        let failing = faulty.memset(DeviceBuffer::<u8>::new(&context, 3000).unwrap(), 2);
        let behind_the_fault = Event::new(&context).unwrap();
        behind_the_fault.record(&faulty).unwrap();
        let after = faulty.copy_h2d(
            PinnedBuffer::from_slice(&context, &data).unwrap(),
            DeviceBuffer::<u8>::new(&context, 3000).unwrap(),
        );
        let elsewhere = healthy.copy_h2d(
            PinnedBuffer::from_slice(&context, &data).unwrap(),
            DeviceBuffer::<u8>::new(&context, 3000).unwrap(),
        );
        run(async {
            let failed = failing.await.unwrap_err();
            let dst = failed
                .value
                .expect("a device-side failure hands the buffer back");
            assert_eq!(dst.len(), 3000);
            let err = failed.error;
            assert_eq!(code(&err), FAULT, "{strategy:?}: {err}");
            let npu_core::Error::Acl(acl) = &err else {
                unreachable!()
            };
            assert_eq!(acl.api, "aclrtMemsetAsync", "attributed to the memset");

            let ones = before.await.unwrap();
            assert_eq!(ones.to_vec_blocking().unwrap(), vec![1; 3000]);
            let (_, copied) = after.await.unwrap();
            assert_eq!(copied.to_vec_blocking().unwrap(), data, "{strategy:?}");
            let (_, copied) = elsewhere.await.unwrap();
            assert_eq!(copied.to_vec_blocking().unwrap(), data, "{strategy:?}");
            // An event recorded behind the failure sees the work done; synchronize() reports
            // the stream's first failure since the last synchronize, once, as
            // aclrtSynchronizeStream does.
            behind_the_fault.wait().await.unwrap();
            let reported = faulty.synchronize().await.unwrap_err().error;
            assert_eq!(code(&reported), FAULT, "{strategy:?}: {reported}");
            faulty.synchronize().await.unwrap();
            // ACL_CONTINUE_ON_FAILURE (the default): the stream keeps working.
            let zeros = faulty.memset(ones, 0).await.unwrap();
            assert_eq!(zeros.to_vec_blocking().unwrap(), vec![0; 3000]);
        });
    }
}

#[test]
fn synchronize_reports_the_failure_of_a_dropped_operation() {
    let context = in_process().device(0).unwrap().primary_context().clone();
    for strategy in STRATEGIES {
        let stream = stream(&context, strategy);
        inject(&stream, 1);
        let healthy = stream.memset(DeviceBuffer::<u8>::new(&context, 64).unwrap(), 1);
        // Nobody waits for the failing memset: its failure must not be lost.
        drop(stream.memset(DeviceBuffer::<u8>::new(&context, 64).unwrap(), 2));
        let later = stream.memset(DeviceBuffer::<u8>::new(&context, 64).unwrap(), 3);
        run(async {
            let err = stream.synchronize().await.unwrap_err().error;
            assert_eq!(code(&err), FAULT, "{strategy:?}: {err}");
            let npu_core::Error::Acl(acl) = &err else {
                unreachable!()
            };
            assert_eq!(
                acl.api, "aclrtMemsetAsync",
                "names the operation that failed"
            );
            healthy.await.unwrap();
            later.await.unwrap();
            stream.synchronize().await.expect("reported once");
        });
    }
}

/// After a fault in CONTINUE mode, work queued behind the fault still runs, so its futures must
/// not be failed by the fault probe (whether or not the runtime's aclrtStreamQuery reports the
/// fault): failing one would release its buffers while the device still writes into them.
#[test]
fn slow_work_after_a_fault_in_continue_mode_still_completes() {
    let context = slow_device();
    // 1.1 MB at 10 MB/s: 110 ms of device time, more than two probe periods of either
    // probing strategy (10 ms for the reactor, 50 ms for the callback thread).
    let slow_memset = |stream: &Stream, value| {
        stream.memset(DeviceBuffer::<u8>::new(&context, 1_100_000).unwrap(), value)
    };
    for strategy in STRATEGIES {
        let stream = stream(&context, strategy);
        let first = slow_memset(&stream, 0x11);
        inject(&stream, 0);
        let failing = stream.memset(DeviceBuffer::<u8>::new(&context, 64).unwrap(), 1);
        let behind = slow_memset(&stream, 0x5a);
        run(async {
            first.await.unwrap();
            let err = failing.await.unwrap_err().error;
            assert_eq!(code(&err), FAULT, "{strategy:?}");
            // The message is about this fault only: the callback thread's report waits timed
            // out while the first memset ran, and their messages are not attached to it.
            assert!(!err.to_string().contains("aclrtProcessReport"), "{err}");
            let filled = behind.await.expect("work behind the fault is not failed");
            assert!(filled.to_vec_blocking().unwrap().iter().all(|&b| b == 0x5a));
        });
    }
}

#[test]
fn stop_mode_fails_everything_queued_in_the_context() {
    let device = in_process().device(0).unwrap();
    let other_context = device.primary_context().clone();
    for strategy in STRATEGIES {
        // STOP mode stops a whole context for good: each strategy gets a fresh one.
        let context = device.create_context().unwrap();
        let (first, second) = (stream(&context, strategy), stream(&context, strategy));
        let bystander = stream(&other_context, strategy);
        first.set_failure_mode(FailureMode::Stop).unwrap();
        let data = pattern(12, 5000);

        // Queue everything before the device starts, so nothing runs before the fault.
        control::hold(0).unwrap();
        inject(&first, 0);
        let failing = first.memset(DeviceBuffer::<u8>::new(&context, 64).unwrap(), 1);
        let behind = first.memset(DeviceBuffer::<u8>::new(&context, 64).unwrap(), 2);
        let marker = Event::new(&context).unwrap();
        marker.record(&first).unwrap();
        second.wait_event(&marker).unwrap();
        let waiting = second.memset(DeviceBuffer::<u8>::new(&context, 64).unwrap(), 3);
        let unrelated = bystander.copy_h2d(
            PinnedBuffer::from_slice(&other_context, &data).unwrap(),
            DeviceBuffer::<u8>::new(&other_context, data.len()).unwrap(),
        );
        control::release(0).unwrap();

        run(async {
            assert_eq!(
                code(&failing.await.unwrap_err().error),
                FAULT,
                "{strategy:?}"
            );
            assert_eq!(
                code(&behind.await.unwrap_err().error),
                FAULT,
                "{strategy:?}"
            );
            assert_eq!(
                code(&waiting.await.unwrap_err().error),
                FAULT,
                "{strategy:?}"
            );
            assert_eq!(code(&marker.wait().await.unwrap_err()), FAULT);
            let (_, copied) = unrelated.await.expect("another context is unaffected");
            assert_eq!(copied.to_vec_blocking().unwrap(), data);
        });
        // The stopped context accepts no more work: the submission itself fails.
        let refused = second.memset(DeviceBuffer::<u8>::new(&context, 64).unwrap(), 4);
        assert!(refused.is_complete());
        assert_eq!(code(&run(refused).unwrap_err().error), FAULT);
    }
}

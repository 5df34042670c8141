//! The one-call helpers: upload and download through the context's staging pool, timed
//! operations and round-robin stream pools, each under all three completion strategies.

mod common;

use common::{STRATEGIES, code, in_process, run, stream};
use npu_core::{Context, ffi};
use npu_mem::{DeviceBuffer, Memory};
use npu_sim::control;
use npu_stream::{Stream, StreamPool};

fn context() -> Context {
    in_process().device(0).unwrap().primary_context().clone()
}

#[test]
fn upload_and_download_round_trip_through_one_pool_per_context() {
    let ctx = context();
    for strategy in STRATEGIES {
        let stream = stream(&ctx, strategy);
        let data: Vec<f32> = (0..5000).map(|i| i as f32 * 0.5).collect();
        let device = run(stream.upload(&data)).unwrap();
        assert_eq!(device.to_vec_blocking().unwrap(), data, "{strategy:?}");
        assert_eq!(run(stream.download(device)).unwrap(), data, "{strategy:?}");
        settle(&stream);
        let misses = stream.staging_pool().stats().misses;
        let other = common::stream(&ctx, strategy);
        drop(run(other.upload(&data)).unwrap());
        assert_eq!(
            other.staging_pool().stats().misses,
            misses,
            "{strategy:?}: another stream of the context reused the pool's block"
        );
    }
}

/// Waits until the staging pool has taken back every block of a completed operation (the
/// release runs on the reaper after the completion wakes its waiter).
fn settle(stream: &Stream) {
    npu_core::reaper::flush();
    while stream.staging_pool().stats().awaiting_blocks > 0 {
        npu_core::reaper::flush();
        std::thread::yield_now();
    }
}

#[test]
fn a_failed_download_hands_the_device_buffer_back() {
    let ctx = in_process().device(1).unwrap().primary_context().clone();
    for strategy in STRATEGIES {
        let stream = stream(&ctx, strategy);
        let device = DeviceBuffer::from_host_blocking(&ctx, &[3u8; 100]).unwrap();
        let fault = ffi::ACL_ERROR_RT_AICORE_EXCEPTION;
        control::fail_task(stream.as_raw(), 1, fault).unwrap();
        let failed = run(stream.download(device)).unwrap_err();
        assert_eq!(code(&failed.error), fault, "{strategy:?}: {failed}");
        let device = failed.value.expect("the source comes back");
        assert_eq!(
            run(stream.download(device)).unwrap(),
            [3; 100],
            "{strategy:?}"
        );
    }
}

#[test]
fn an_empty_upload_is_refused_by_name() {
    let stream = Stream::new(&context()).unwrap();
    let err = run(stream.upload::<u32>(&[])).unwrap_err();
    assert!(err.to_string().starts_with("Stream::upload"), "{err}");
}

#[test]
fn timed_gives_the_value_and_the_device_time_of_the_operation() {
    let ctx = context();
    for strategy in STRATEGIES {
        let stream = stream(&ctx, strategy);
        let buffer = DeviceBuffer::<u32>::new(&ctx, 1000).unwrap();
        let (buffer, _took) = run(stream.timed(|s| s.memset(buffer, 0xff))).unwrap();
        assert!(
            buffer.to_vec_blocking().unwrap().iter().all(|&x| x == !0),
            "{strategy:?}"
        );
    }
}

#[test]
fn a_timed_operation_refused_at_submission_hands_its_value_back() {
    let ctx = context();
    let elsewhere = in_process().device(1).unwrap().primary_context().clone();
    for strategy in STRATEGIES {
        let stream = stream(&ctx, strategy);
        let foreign = DeviceBuffer::<u8>::new(&elsewhere, 8).unwrap();
        let failed = run(stream.timed(|s| s.memset(foreign, 0))).unwrap_err();
        assert!(failed.to_string().contains("Stream::memset"), "{failed}");
        assert_eq!(failed.value.expect("handed back").len(), 8, "{strategy:?}");
    }
}

#[test]
fn a_stream_pool_spreads_work_over_its_streams() {
    let ctx = context();
    for strategy in STRATEGIES {
        let pool = StreamPool::with_builder(Stream::builder(&ctx).strategy(strategy), 3).unwrap();
        let picked: Vec<Stream> = (0..6).map(|_| pool.next()).collect();
        for (i, stream) in picked.iter().enumerate() {
            assert!(
                stream.same(&pool.streams()[i % 3]),
                "{strategy:?}: turn {i}"
            );
            assert_eq!(stream.strategy(), strategy);
        }
        let buffers = run(futures::future::try_join_all(
            picked.iter().enumerate().map(|(i, stream)| {
                stream.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), i as u8)
            }),
        ))
        .unwrap();
        for (i, buffer) in buffers.iter().enumerate() {
            assert_eq!(
                buffer.to_vec_blocking().unwrap(),
                [i as u8; 64],
                "{strategy:?}"
            );
        }
    }
}

/// Device memory whose own `is_empty` says "empty" of its elements. `Memory`'s contract covers
/// `len()`, not `is_empty` (a provided method an implementation may override), so npu-rs asks
/// `len()`.
struct SaysEmpty(DeviceBuffer<u32>);

// SAFETY: every method the contract covers forwards to the buffer, which upholds it; only
// `is_empty`, which it does not cover, is wrong.
unsafe impl Memory for SaysEmpty {
    type Elem = u32;

    fn context(&self) -> &Context {
        self.0.context()
    }

    fn addr(&self) -> *const std::ffi::c_void {
        self.0.addr()
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn is_empty(&self) -> bool {
        true
    }

    fn record_use(&self, completion: &npu_core::Completion) {
        self.0.record_use(completion)
    }
}

// SAFETY: the buffer is device memory.
unsafe impl npu_mem::DeviceSlice for SaysEmpty {}

#[test]
fn a_download_reads_the_len_elements_whatever_is_empty_says() {
    let ctx = context();
    let stream = stream(&ctx, STRATEGIES[0]);
    let device = DeviceBuffer::from_host_blocking(&ctx, &[1u32, 2, 3]).unwrap();
    assert_eq!(run(stream.download(SaysEmpty(device))).unwrap(), [1, 2, 3]);
}

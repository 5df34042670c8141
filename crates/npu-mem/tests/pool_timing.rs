//! A pool block is not reused while a timed simulated copy still reads it.
//!
//! Its own process: the timing model and the hold gate apply to the whole device.

mod common;

use std::ffi::c_void;
use std::sync::Arc;

use npu_core::{Completion, Context, Device};
use npu_mem::{DeviceBuffer, DeviceSlice, HostSlice, Memory, MemoryMut, PinnedPool};
use npu_sim::TimingModel;
use npu_stream::Stream;

const LEN: usize = 1 << 20;

fn pattern(i: usize) -> u8 {
    (i * 7 % 251) as u8
}

/// A copy destination the test can still read after dropping the copy's future.
struct Target(Arc<DeviceBuffer<u8>>);

// SAFETY: forwards to the device buffer, which the `Arc` keeps alive and which records the
// copy as a use; the test reads it only after the copy has completed.
unsafe impl Memory for Target {
    type Elem = u8;

    fn context(&self) -> &Context {
        self.0.context()
    }

    fn addr(&self) -> *const c_void {
        self.0.addr()
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn record_use(&self, completion: &Completion) {
        self.0.record_use(completion)
    }
}

// SAFETY: nothing else touches the buffer until the copy has completed.
unsafe impl MemoryMut for Target {
    fn addr_mut(&mut self) -> *mut c_void {
        self.0.as_raw()
    }
}

// SAFETY: the memory is a DeviceBuffer's.
unsafe impl DeviceSlice for Target {}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_is_not_reused_while_a_timed_copy_reads_it() {
    // 1 MiB at 20 MB/s: the copy occupies the device for ~50 ms of wall-paced time.
    let timing = TimingModel::default().h2d_bandwidth(20_000_000);
    npu_sim::control::set_timing(0, Some(timing)).unwrap();
    let ctx = Device::open(0).unwrap().primary_context().clone();
    let pool = PinnedPool::new(&ctx);
    let stream = Stream::new(&ctx).unwrap();
    let device = Arc::new(DeviceBuffer::<u8>::new(&ctx, LEN).unwrap());

    let mut source = pool.alloc::<u8>(LEN).await.unwrap();
    source
        .iter_mut()
        .enumerate()
        .for_each(|(i, b)| *b = pattern(i));
    let source_ptr = source.host_ptr();

    // The hold gate keeps the copy from starting until its future, and with it the block,
    // has been dropped.
    npu_sim::control::hold(0).unwrap();
    let copy = stream.copy_h2d(source, Target(device.clone()));
    let done = copy.completion().clone();
    drop(copy);
    assert_eq!(
        pool.stats().allocated,
        LEN,
        "the dropped copy keeps its block"
    );
    npu_sim::control::release(0).unwrap();

    // Allocate and scribble over 1 MiB blocks for as long as the copy runs, and once more
    // after: the block it reads must not be handed out before the copy has completed.
    loop {
        let finished = done.is_complete();
        let mut scratch = pool.alloc::<u8>(LEN).await.unwrap();
        if scratch.host_ptr() == source_ptr {
            assert!(
                done.is_complete(),
                "the block was reused while the copy read it"
            );
        }
        scratch.fill(0xee);
        drop(scratch);
        if finished {
            break;
        }
        tokio::task::yield_now().await;
    }
    done.wait().await.unwrap();
    npu_sim::control::set_timing(0, None).unwrap();

    let copied = device.to_vec_blocking().unwrap();
    assert!(
        copied.iter().enumerate().all(|(i, &b)| b == pattern(i)),
        "the device received the block's data intact"
    );
    common::await_releases(&pool);
    let stats = pool.stats();
    assert_eq!(stats.awaiting_blocks, 0);
    assert_eq!(stats.reserved, stats.allocated + stats.cached);
    let reused = pool.alloc::<u8>(LEN).await.unwrap();
    assert!(
        pool.stats().hits >= 1,
        "once the copy is done the block is reused"
    );
    drop(reused);
}

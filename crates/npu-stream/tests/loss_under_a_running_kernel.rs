//! A device lost while one of its kernels still runs: the simulator reports the loss only once
//! the kernel has returned, and until then the shared threads that look at the lost device's
//! work (the reactor's queries, the sentinel's timed waits) must not wait for the kernel, or
//! every other device's work stalls behind it. Its own process: device 1 stays lost.
//! (From the tenth review.)

mod common;
mod kernel_support;

use std::sync::mpsc;
use std::time::Duration;

use common::{STRATEGIES, every_strategy_completes_on, in_process, run, stream};
use npu_mem::DeviceBuffer;
use npu_sim::control;
use npu_stream::{DevicePool, DevicePoolBackend, Event};

#[test]
fn a_lost_device_running_a_kernel_stalls_no_other_device() {
    let runtime = in_process();
    let lost = runtime.device(1).unwrap().primary_context().clone();
    let healthy = runtime.device(0).unwrap().primary_context().clone();
    // Work of every strategy queued on the device about to be lost, behind its running
    // kernel: the reactor, the callback worker and a blocking wait each watch some of it.
    let streams: Vec<_> = STRATEGIES.map(|strategy| stream(&lost, strategy)).into();
    let (running, _gate) = kernel_support::launch_gated(&streams[0]);
    // The other streams wait for the kernel too.
    let kernel_done = Event::new(&lost).unwrap();
    kernel_done.record(&streams[0]).unwrap();
    for s in &streams[1..] {
        s.wait_event(&kernel_done).unwrap();
    }
    let behind: Vec<_> = streams
        .iter()
        .map(|s| s.memset(DeviceBuffer::<u8>::new(&lost, 64).unwrap(), 1))
        .collect();
    // Memory of the device made before the loss: a buffer, and a block of a pool on the
    // runtime's pools, whose cache frees with aclrtMemPoolFreeAsync (a submission).
    let spare = DeviceBuffer::<u8>::new(&lost, 64).unwrap();
    let pool = DevicePool::builder(&lost)
        .backend(DevicePoolBackend::RuntimePool)
        .build()
        .unwrap();
    let pool_stream = stream(&lost, STRATEGIES[0]);
    let pooled = run(pool.alloc::<u8>(&pool_stream, 4096)).unwrap();
    // The loss returns only once the kernel has: it is declared on a thread of its own.
    let loser = std::thread::spawn(|| control::lose_device(1).unwrap());
    while !control::device_stats(1).unwrap().lost {
        std::thread::yield_now();
    }
    // Every strategy on the healthy device completes while the lost device's kernel runs. On
    // a regression the reactor waits for the kernel, which only this thread releases: the
    // bound turns that deadlock into a failure.
    every_strategy_completes_on(&healthy, "device 1's kernel", kernel_support::open_gate);
    // Calls that start something on the lost device are refused at once, however long its
    // kernel runs: an allocation, a submission, and dropping a pool (its blocks go back
    // through the runtime's pool: the reaper or the dropping thread did this, and waited).
    let (tx, rx) = mpsc::channel();
    let (lost_ctx, submitter) = (lost.clone(), streams[1].clone());
    std::thread::spawn(move || {
        let allocation = DeviceBuffer::<u8>::new(&lost_ctx, 64).map(drop);
        let memset = submitter.memset(spare, 2);
        let refused_at_once = memset.is_complete();
        let submission = run(memset).map(drop).map_err(|err| err.error);
        drop(pooled);
        drop(pool);
        let _ = tx.send((allocation, refused_at_once, submission));
    });
    let refused = rx.recv_timeout(Duration::from_secs(60));
    kernel_support::open_gate();
    let (allocation, refused_at_once, submission) =
        refused.expect("a call that starts work on the lost device waited for its kernel");
    assert!(allocation.unwrap_err().is_device_lost());
    assert!(
        refused_at_once,
        "the submission was refused before the device took it"
    );
    assert!(submission.unwrap_err().is_device_lost());
    loser.join().unwrap();
    // The lost device's work resolves: what was queued behind the kernel fails with the loss.
    for op in behind {
        let err = run(op).unwrap_err().error;
        assert!(err.is_device_lost(), "{err}");
    }
    let _ = run(running);
}

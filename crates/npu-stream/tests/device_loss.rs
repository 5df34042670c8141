//! Losing a device with 1,000 operations in flight: every future resolves with the device's
//! error and none hangs. A lost device stays lost for the life of the process, so this test
//! has its own process and uses device 1; device 0 must keep working.

mod common;

use common::{STRATEGIES, code, in_process, pattern, run};
use npu_core::{Context, ffi};
use npu_mem::{DeviceBuffer, PinnedBuffer};
use npu_sim::{TimingModel, control};
use npu_stream::{Event, Op, Stream};

const STREAMS: usize = 8;
const OPERATIONS: usize = 1000;

fn streams(context: &Context) -> Vec<Stream> {
    (0..STREAMS)
        .map(|i| {
            Stream::builder(context)
                .strategy(STRATEGIES[i % STRATEGIES.len()])
                .build()
                .unwrap()
        })
        .collect()
}

#[test]
fn losing_a_device_fails_every_pending_future() {
    let runtime = in_process();
    let lost = runtime.device(1).unwrap().primary_context().clone();
    let healthy = runtime.device(0).unwrap().primary_context().clone();
    let baseline = control::device_stats(1).unwrap().live_allocations;
    // 64 kB memsets at 64 MB/s: each operation is 1 ms of device time, so each stream's queue
    // holds over 100 ms of work. The hold gate keeps it all from starting until the loss
    // (each stream's first task is already taken by its worker, waiting at the gate), so
    // every operation is pending when the device goes, whatever the host's scheduling.
    control::set_timing(1, Some(TimingModel::default().d2d_bandwidth(64_000_000))).unwrap();
    let streams = streams(&lost);
    control::hold(1).unwrap();
    let ops: Vec<Op<DeviceBuffer<u8>>> = (0..OPERATIONS)
        .map(|i| {
            let buffer = DeviceBuffer::<u8>::new(&lost, 64_000).unwrap();
            streams[i % STREAMS].memset(buffer, i as u8)
        })
        .collect();
    // For submissions after the loss (allocating fails on a lost device too).
    let spares: Vec<DeviceBuffer<u8>> = (0..STREAMS)
        .map(|_| DeviceBuffer::new(&lost, 64).unwrap())
        .collect();
    let marker = Event::new(&lost).unwrap();
    marker.record(&streams[0]).unwrap();
    assert!(ops.iter().all(|op| !op.is_complete()));

    control::lose_device(1).unwrap();
    let results = run(futures::future::join_all(ops));
    for (i, result) in results.iter().enumerate() {
        let err = result
            .as_ref()
            .expect_err("nothing ran, so nothing succeeded");
        assert_eq!(
            code(&err.error),
            ffi::ACL_ERROR_RT_LOST_HEARTBEAT,
            "operation {i}: {err}"
        );
        assert!(err.value.is_some(), "operation {i} hands its buffer back");
    }
    let err = run(marker.wait()).unwrap_err();
    assert_eq!(code(&err), ffi::ACL_ERROR_RT_LOST_HEARTBEAT);

    // New work on the lost device fails at submission.
    for (stream, spare) in streams.iter().zip(spares) {
        let refused = stream.memset(spare, 0);
        assert!(refused.is_complete(), "{:?}", stream.strategy());
        let err = run(refused).unwrap_err();
        assert_eq!(code(&err.error), ffi::ACL_ERROR_RT_LOST_HEARTBEAT);
        assert!(
            err.value.is_some(),
            "a refused memset hands its buffer back"
        );
    }
    // Every buffer of the failed operations was released (they resolved, so at once).
    drop((results, streams));
    npu_core::reaper::flush();
    assert_eq!(control::device_stats(1).unwrap().live_allocations, baseline);

    // The other device is unaffected.
    let stream = Stream::new(&healthy).unwrap();
    let data = pattern(5, 4096);
    let host = PinnedBuffer::from_slice(&healthy, &data).unwrap();
    let device = DeviceBuffer::<u8>::new(&healthy, data.len()).unwrap();
    let (_, device) = run(stream.copy_h2d(host, device)).unwrap();
    assert_eq!(device.to_vec_blocking().unwrap(), data);

    a_failed_peer_access_enable_leaves_no_access_behind(&lost, &healthy);
}

/// Defect: a peer-access enable that failed left a zero count in the runtime's table, and
/// `peer_access_to` then handed out guards for access that was never enabled (each one
/// disabling it again on drop). A lost device refuses the enable; no guard may follow. (Run
/// by the test above once it has lost device 1: a lost device stays lost.)
fn a_failed_peer_access_enable_leaves_no_access_behind(lost: &Context, peer: &Context) {
    let (lost, peer) = (lost.device(), peer.device());
    assert!(lost.enable_peer_access(&peer).is_err());
    assert!(lost.peer_access_to(&peer).is_none());
}

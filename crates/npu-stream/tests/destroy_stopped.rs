//! Destroying a stream whose work can never run. Its own process: it counts device 0's live
//! streams, which another test's streams would change.

mod common;

use common::{STRATEGIES, run, stream, until};
use npu_core::Device;
use npu_mem::DeviceBuffer;
use npu_sim::control;

/// A stopped stream whose last handle goes while its work can never run is destroyed without
/// waiting for that work: CANN's aclrtDestroyStream waits for unfinished tasks, which would
/// block the reaper (and every deferred release in the process) for ever, so npu-rs forces the
/// destruction of a stream whose query does not report it done.
#[test]
fn a_stopped_stream_with_work_it_cannot_run_is_destroyed_without_waiting() {
    let device = Device::open(0).unwrap();
    let ctx = device.create_context().unwrap();
    for strategy in STRATEGIES {
        let live = || control::device_stats(0).unwrap().live_streams;
        let before = live();
        let s = stream(&ctx, strategy);
        s.stop().unwrap();
        let stopped = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
        assert!(run(stopped).is_err(), "{strategy:?}");
        drop(s);
        // The completing thread lets go of the stream right after the failure, then the
        // reaper destroys it; a reaper waiting for the stopped work would never get there.
        until("the stopped stream is destroyed", || {
            npu_core::reaper::flush();
            live() == before
        });
    }
}

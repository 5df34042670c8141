//! `Stream::abort` and `Stream::stop` under every completion strategy: an abort fails every
//! operation it discarded with `Error::Aborted` once the device has confirmed the discard,
//! releases their buffers, and leaves the stream usable; a stop fails the pending work once the
//! device reports it, and an abort then revives the stream. Its own process: it holds device 1.

mod common;

use common::{STRATEGIES, run, stream};
use npu_core::Device;
use npu_mem::{DeviceBuffer, PinnedBuffer};
use npu_sim::control;

#[test]
fn an_abort_fails_what_it_discarded_and_the_stream_runs_again() {
    let ctx = Device::open(1).unwrap().primary_context().clone();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        // Work that completed before the abort is not affected.
        let done = run(s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 9)).unwrap();
        let before = control::device_stats(1).unwrap().live_allocations;
        control::hold(1).unwrap();
        let memsets: Vec<_> = (0..3)
            .map(|i| s.memset(DeviceBuffer::<u8>::new(&ctx, 4096).unwrap(), i))
            .collect();
        let host = PinnedBuffer::from_slice(&ctx, &[1u8; 4096]).unwrap();
        let copy = s.copy_h2d(host, DeviceBuffer::<u8>::new(&ctx, 4096).unwrap());
        run(s.abort()).unwrap();
        for memset in memsets {
            let err = run(memset).unwrap_err();
            assert!(err.error.is_aborted(), "{strategy:?}: {err}");
            assert!(matches!(
                err.error,
                npu_core::Error::Aborted {
                    api: "aclrtMemsetAsync"
                }
            ));
        }
        assert!(run(copy).unwrap_err().error.is_aborted(), "{strategy:?}");
        npu_core::reaper::flush();
        assert_eq!(
            control::device_stats(1).unwrap().live_allocations,
            before,
            "{strategy:?}: the discarded operations' buffers were released"
        );
        control::release(1).unwrap();
        let again = run(s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 4))
            .unwrap_or_else(|err| panic!("{strategy:?}: {err}"));
        assert_eq!(again.to_vec_blocking().unwrap(), [4; 64], "{strategy:?}");
        assert_eq!(done.to_vec_blocking().unwrap(), [9; 64]);
        run(s.synchronize()).unwrap();
    }
}

#[test]
fn aborting_an_idle_stream_is_harmless() {
    let ctx = Device::open(0).unwrap().primary_context().clone();
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        run(s.abort()).unwrap();
        let buffer = run(s.memset(DeviceBuffer::<u8>::new(&ctx, 16).unwrap(), 3)).unwrap();
        assert_eq!(buffer.to_vec_blocking().unwrap(), [3; 16], "{strategy:?}");
    }
}

#[test]
fn a_stopped_stream_fails_its_work_and_an_abort_revives_it() {
    // Device 0: the abort test holds device 1.
    let device = Device::open(0).unwrap();
    for strategy in STRATEGIES {
        let ctx = device.create_context().unwrap();
        let s = stream(&ctx, strategy);
        s.stop().unwrap();
        let stopped = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
        assert!(
            run(stopped).is_err(),
            "{strategy:?}: a stopped stream's work never runs"
        );
        run(s.abort()).unwrap();
        let buffer = run(s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 5)).unwrap();
        assert_eq!(buffer.to_vec_blocking().unwrap(), [5; 64], "{strategy:?}");
    }
}

//! The typed simulator controls of `npu::sim`: refusals and the hold guard.
//!
//! A file of its own: it holds devices, which other tests would notice.

mod common;

use common::dlopened_simulator;
use npu::Stream;
use npu::error::AclCode;
use npu::prelude::*;
use npu::sim;

#[test]
fn a_device_of_another_backend_is_refused() {
    let device = dlopened_simulator().device(0).unwrap();
    let stream = Stream::new(device.primary_context()).unwrap();
    let refusals = [
        ("npu::sim::hold", sim::hold(&device).map(drop)),
        ("npu::sim::lose", sim::lose(&device)),
        (
            "npu::sim::fail_task",
            sim::fail_task(&stream, 1, AclCode(507015)),
        ),
        (
            "npu::sim::fail_kernel",
            sim::fail_kernel(&device, "scale_f32", 1, AclCode(507015)),
        ),
        (
            "npu::sim::clear_faults",
            sim::clear_faults(&device).map(drop),
        ),
        ("npu::sim::fail_next_alloc", sim::fail_next_alloc(&device)),
        ("npu::sim::set_timing", sim::set_timing(&device, None)),
        (
            "npu::sim::device_stats",
            sim::device_stats(&device).map(drop),
        ),
        ("npu::sim::now_ns", sim::now_ns(&device).map(drop)),
    ];
    for (api, refused) in refusals {
        match refused.unwrap_err() {
            npu::Error::InvalidArgument {
                api: named,
                argument,
                rule,
            } => {
                // fail_task is passed a stream, the others a device.
                let passed = if api == "npu::sim::fail_task" {
                    "stream"
                } else {
                    "device"
                };
                assert_eq!((named, argument), (api, passed));
                assert!(rule.contains("in-process simulator only"), "{rule}");
            }
            other => panic!("{api}: {other}"),
        }
    }
}

/// A fault the simulator would refuse is refused by the control first, naming it and the
/// argument, as `fail_kernel` does (it was the simulator's bare ACL code, "npu-sim control").
#[test]
fn a_refused_fault_names_the_control_and_the_argument() {
    let device = Device::open(0).unwrap();
    let stream = Stream::new(device.primary_context()).unwrap();
    for (nth, code, argument) in [
        (0, AclCode(507015), "nth"),
        (1, AclCode::STREAM_SYNC_TIMEOUT, "code"),
    ] {
        let err = sim::fail_task(&stream, nth, code).unwrap_err();
        let npu::Error::InvalidArgument {
            api,
            argument: named,
            ..
        } = &err
        else {
            panic!("{err}");
        };
        assert_eq!((*api, *named), ("npu::sim::fail_task", argument), "{err}");
    }
}

/// A kernel name no kernel can have (empty, or holding a NUL) is refused by every control
/// that names a kernel, naming the control and `name`: `set_kernel_duration` stored it and
/// said `Ok` (turning the device's timing model on for a kernel that never runs), where
/// `fail_kernel` refused it.
#[test]
fn a_name_no_kernel_has_is_refused_by_every_kernel_control_naming_it() {
    let device = Device::open(1).unwrap();
    for name in ["", "\0", "scale_f32\0tail"] {
        let refusals = [
            (
                "npu::sim::set_kernel_duration",
                sim::set_kernel_duration(&device, name, std::time::Duration::from_micros(5)),
            ),
            (
                "npu::sim::fail_kernel",
                sim::fail_kernel(&device, name, 1, AclCode(507015)),
            ),
        ];
        for (api, refused) in refusals {
            let err = refused.unwrap_err();
            let npu::Error::InvalidArgument {
                api: named,
                argument,
                ..
            } = &err
            else {
                panic!("{api}({name:?}): {err}");
            };
            assert_eq!((*named, *argument), (api, "name"), "{name:?}: {err}");
            assert!(err.to_string().starts_with(api), "{err}");
        }
    }
    assert_eq!(sim::clear_faults(&device).unwrap(), 0, "nothing armed");
    sim::set_timing(&device, None).unwrap();
}

#[test]
fn holds_nest_and_the_last_one_releases() {
    let device = Device::open(1).unwrap();
    let ctx = device.primary_context();
    let stream = Stream::new(ctx).unwrap();
    let outer = sim::hold(&device).unwrap();
    let inner = sim::hold(&device).unwrap();
    let op = stream.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), 5);
    drop(inner);
    // Still held by `outer`: had the gate opened, the memset would now be able to run; a
    // synchronous query of the stream says whether it has.
    assert!(!op.is_complete());
    let rt = ctx.runtime();
    let mut status = 0;
    let query = rt.api().aclrtStreamQuery.expect("an optional ACL function");
    // SAFETY: the stream is alive and `status` is a valid out-pointer.
    let code = unsafe { query(stream.as_raw(), &mut status) };
    rt.check("aclrtStreamQuery", code).unwrap();
    assert_eq!(
        status,
        npu::ffi::ACL_STREAM_STATUS_NOT_READY,
        "the memset has not run"
    );
    outer.release().unwrap();
    let buffer = tokio_test::block_on(op).unwrap();
    assert_eq!(buffer.to_vec_blocking().unwrap(), [5; 64]);
}

/// Device memory whose `byte_len` says more than its `len()` elements hold. `Memory`'s
/// contract does not cover `byte_len` (a provided method any implementation may override),
/// and npu-rs promises never to rely on it: ranges are checked against `len()` elements.
struct Overstated(npu::memory::Split<DeviceBuffer<u8>>);

// SAFETY: every method the contract covers forwards to the part, which upholds it; only
// `byte_len`, which it does not cover, says more.
unsafe impl npu::memory::Memory for Overstated {
    type Elem = u8;

    fn context(&self) -> &npu::Context {
        self.0.context()
    }

    fn addr(&self) -> *const std::ffi::c_void {
        self.0.addr()
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn byte_len(&self) -> usize {
        4096
    }

    fn record_use(&self, completion: &npu::stream::Completion) {
        self.0.record_use(completion)
    }
}

// SAFETY: the part is device memory.
unsafe impl npu::memory::DeviceSlice for Overstated {}

#[test]
fn an_injected_memory_error_stays_within_the_memory_passed() {
    use npu::memory::{Memory, MemoryMut};

    let device = Device::open(0).unwrap();
    let ctx = device.primary_context();
    let stream = Stream::new(ctx).unwrap();
    let buffer = DeviceBuffer::<u8>::new(ctx, 4096).unwrap();
    let (head, tail) = buffer.into_halves(64).unwrap();
    let head = Overstated(head);
    // Bytes 64.. are the tail's, another value's memory: the head's `byte_len` is no licence
    // to mark them.
    let err = sim::inject_memory_error(&head, 64..65).unwrap_err();
    match &err {
        npu::Error::InvalidArgument { api, argument, .. } => {
            assert_eq!(
                (*api, *argument),
                ("npu::sim::inject_memory_error", "bytes")
            );
        }
        other => panic!("{other}"),
    }
    assert!(err.to_string().contains("the memory's 64 bytes"), "{err}");
    // The tail is untouched: its memset runs, where a marked byte would fail it with
    // ACL_ERROR_RT_DEVICE_MEM_ERROR.
    let tail = tokio_test::block_on(stream.memset(tail, 7)).unwrap();
    assert_eq!(tail.len(), 4032);
    // Within the head's own 64 bytes the error lands, and fails an operation on the head.
    sim::inject_memory_error(&head, 0..1).unwrap();
    let err = tokio_test::block_on(stream.memset(head.0, 1)).unwrap_err();
    assert!(err.is_memory_error(), "{err}"); // an `OpError` answers as its `Error` does
}

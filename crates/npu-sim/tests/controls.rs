//! The simulator's own C control functions (`npusim/control.h`) refuse bad arguments as the ACL
//! functions do: a NULL pointer, a value that means nothing or a configuration that conflicts
//! → 100000; a trace flush in a process that never enabled tracing → 107000. This process
//! never enables tracing, so that flush has no trace to write. The device statistics count
//! live contexts as the ACL calls create and destroy them.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;

use common::cases::{case, run_table};
use common::*;
use npu_sim::abi::*;
use npu_sys::*;

unsafe extern "C" fn does_nothing(_: u32, _: u32, _: *mut c_void) -> i32 {
    0
}

#[test]
fn bad_arguments_are_refused() {
    run_table(&[
        case(
            "a configuration other than the running one",
            "npusimConfigure",
            100000,
            0,
            || {
                let json = c_string(r#"{"devices": 3}"#);
                code!(npusimConfigure(json.as_ptr()))
            },
        ),
        case(
            "device stats into NULL",
            "npusimGetDeviceStats",
            100000,
            0,
            || code!(npusimGetDeviceStats(99, ptr::null_mut())),
        ),
        case(
            "host stats into NULL",
            "npusimGetHostStats",
            100000,
            0,
            || code!(npusimGetHostStats(ptr::null_mut())),
        ),
        case("time into NULL", "npusimGetTimeNs", 100000, 0, || {
            code!(npusimGetTimeNs(99, ptr::null_mut()))
        }),
        case(
            "register a NULL kernel",
            "npusimRegisterKernel",
            100000,
            0,
            || {
                let name = c_string("controls_null_kernel");
                code!(npusimRegisterKernel(name.as_ptr(), None))
            },
        ),
        case(
            "register an empty name",
            "npusimRegisterKernel",
            100000,
            0,
            || code!(npusimRegisterKernel(c"".as_ptr(), Some(does_nothing))),
        ),
        case(
            "image size into NULL",
            "npusimRegistryImage",
            100000,
            0,
            || {
                code!(npusimRegistryImage(
                    ptr::null(),
                    0,
                    ptr::null_mut(),
                    0,
                    ptr::null_mut()
                ))
            },
        ),
        case("fail task 0", "npusimFailTask", 100000, 0, || {
            code!(npusimFailTask(ptr::null_mut(), 0, 507899))
        }),
        case(
            "fail a task with success",
            "npusimFailTask",
            100000,
            0,
            || code!(npusimFailTask(ptr::null_mut(), 1, ACL_SUCCESS)),
        ),
        case(
            "fail a kernel of no name",
            "npusimFailKernel",
            100000,
            0,
            || code!(npusimFailKernel(0, ptr::null(), 1, 507899)),
        ),
        case(
            "fail a kernel of an empty name",
            "npusimFailKernel",
            100000,
            0,
            || code!(npusimFailKernel(0, c"".as_ptr(), 1, 507899)),
        ),
        case(
            "fail a kernel whose name is not UTF-8",
            "npusimFailKernel",
            100000,
            0,
            || code!(npusimFailKernel(0, c"scale\xfff32".as_ptr(), 1, 507899)),
        ),
        case(
            "fail a kernel's launch 0",
            "npusimFailKernel",
            100000,
            0,
            || code!(npusimFailKernel(0, c"scale_f32".as_ptr(), 0, 507899)),
        ),
        case(
            "fail a kernel with a wait's timeout",
            "npusimFailKernel",
            100000,
            0,
            || {
                code!(npusimFailKernel(
                    0,
                    c"scale_f32".as_ptr(),
                    1,
                    ACL_ERROR_RT_STREAM_SYNC_TIMEOUT
                ))
            },
        ),
        case(
            "a duration for a kernel of no name",
            "npusimSetKernelDuration",
            100000,
            0,
            || code!(npusimSetKernelDuration(0, ptr::null(), 1000)),
        ),
        case(
            "a duration for a kernel of an empty name",
            "npusimSetKernelDuration",
            100000,
            0,
            || code!(npusimSetKernelDuration(0, c"".as_ptr(), 1000)),
        ),
        case(
            "a duration for a kernel whose name is not UTF-8",
            "npusimSetKernelDuration",
            100000,
            0,
            || code!(npusimSetKernelDuration(0, c"scale\xfff32".as_ptr(), 1000)),
        ),
        case(
            "a duration for a kernel of device 99",
            "npusimSetKernelDuration",
            107001,
            0,
            || code!(npusimSetKernelDuration(99, c"scale_f32".as_ptr(), 1000)),
        ),
        case(
            "fail a kernel of device 99",
            "npusimFailKernel",
            107001,
            0,
            || code!(npusimFailKernel(99, c"scale_f32".as_ptr(), 1, 507899)),
        ),
        case(
            "clear the faults of device 99",
            "npusimClearFaults",
            107001,
            0,
            || code!(npusimClearFaults(99, ptr::null_mut())),
        ),
        case(
            "flush a trace never enabled",
            "npusimTraceFlush",
            107000,
            0,
            || code!(npusimTraceFlush()),
        ),
    ]);
}

/// `live_contexts` counts a device's primary context once while it is set, however many
/// references it has, and each explicit context until it is destroyed; the C struct carries
/// the same count. Device 1 is this test's alone: the table above sets device 0 only.
#[test]
fn live_contexts_count_the_primary_context_once_and_each_explicit_one() {
    let counted = || npu_sim::control::device_stats(1).unwrap().live_contexts;
    assert_eq!(counted(), 0, "device 1 was never set");

    set_device(1);
    set_device(1);
    assert_eq!(counted(), 1, "two references to one primary context");
    let (mut first, mut second) = (ptr::null_mut(), ptr::null_mut());
    acl!(aclrtCreateContext(&mut first, 1));
    acl!(aclrtCreateContext(&mut second, 1));
    assert_eq!(counted(), 3);
    let mut stats = npusimDeviceStats::default();
    acl!(npusimGetDeviceStats(1, &mut stats));
    assert_eq!(stats.liveContexts, 3, "the C struct agrees");

    acl!(aclrtDestroyContext(first));
    assert_eq!(counted(), 2);
    acl!(aclrtResetDevice(1));
    assert_eq!(
        counted(),
        2,
        "the primary context keeps its other reference"
    );
    acl!(aclrtResetDevice(1));
    assert_eq!(counted(), 1, "released with its last reference");
    acl!(aclrtDestroyContext(second));
    assert_eq!(counted(), 0);

    // A context destroyed twice is counted off once.
    assert_eq!(code!(aclrtDestroyContext(second)), 107017);
    assert_eq!(counted(), 0);
    set_device(1);
    acl!(aclrtResetDeviceForce(1));
    assert_eq!(counted(), 0, "a forced reset releases the primary context");
    acl!(npusimGetDeviceStats(1, &mut stats));
    assert_eq!(stats.liveContexts, 0);
}

//! The simulator's own C control functions (`npusim/control.h`) refuse bad arguments as the ACL
//! functions do: a NULL pointer, a value that means nothing or a configuration that conflicts
//! → 100000; a trace flush in a process that never enabled tracing → 107000. This process
//! never enables tracing, so that flush has no trace to write.

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
            "flush a trace never enabled",
            "npusimTraceFlush",
            107000,
            0,
            || code!(npusimTraceFlush()),
        ),
    ]);
}

//! Operator timeouts through the exported C ABI: aclrtSetOpWaitTimeout (how long an
//! aclrtStreamWaitEvent may wait) and the execute timeout (aclrtSetOpExecuteTimeOut, V2,
//! WithMs, aclrtGetOpExecuteTimeout, aclrtGetOpTimeOutInterval), which stops a kernel that
//! runs too long under a timing model, and a launch's own timeout attributes, which replace it
//! for that launch. The settings are process-wide, so the file is a process
//! of its own, and each setting is exercised by one test.
//!
//! The process's timeout step is 1 ms (`op_timeout_interval_us`), below the 100 ms under which a
//! timeout of 0 means "never"; the default step is checked by `tests/c/runtime_config.c`.
//! Devices: 0 for event waits, 1 (with a timing model) for kernels.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ptr;

use common::*;
use npu_sim::abi::*;
use npu_sys::*;

const INTERVAL_US: u64 = 1_000;

fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        npu_sim::SimConfig::default()
            .op_timeout_interval_us(INTERVAL_US)
            .install()
            .unwrap();
        npu_sim::kernel::register("ten_ms", |_, _, _| 0).unwrap();
        npu_sim::kernel::register("one_ms", |_, _, _| 0).unwrap();
        npu_sim::control::set_kernel_duration(1, "ten_ms", std::time::Duration::from_millis(10))
            .unwrap();
        npu_sim::control::set_kernel_duration(1, "one_ms", std::time::Duration::from_millis(1))
            .unwrap();
    });
}

fn execute_timeout_ms() -> u32 {
    let mut ms = 0;
    acl!(aclrtGetOpExecuteTimeout(&mut ms));
    ms
}

fn set_v2(us: u64) -> u64 {
    let mut actual = 0;
    acl!(aclrtSetOpExecuteTimeOutV2(us, &mut actual));
    actual
}

/// Runs `kernel` on a stream of device 1 between two records, all released by the hold gate
/// at one simulated instant; returns the stream synchronisation's code and the simulated time
/// between the records (ms).
fn timed_launch(func: aclrtFuncHandle, cfg: *mut aclrtLaunchKernelCfg) -> (aclError, f32) {
    let stream = create_stream();
    let (start, end) = (create_event(), create_event());
    npu_sim::control::hold(1).unwrap();
    acl!(aclrtRecordEvent(start, stream));
    assert_eq!(launch(func, 1, stream, &(), cfg), 0);
    acl!(aclrtRecordEvent(end, stream));
    npu_sim::control::release(1).unwrap();
    let code = code!(aclrtSynchronizeStream(stream));
    let mut ms = -1.0;
    acl!(aclrtEventElapsedTime(&mut ms, start, end));
    acl!(aclrtDestroyEvent(start));
    acl!(aclrtDestroyEvent(end));
    acl!(aclrtDestroyStream(stream));
    (code, ms)
}

#[track_caller]
fn assert_ms(ms: f32, expected: f32) {
    assert!((ms - expected).abs() < 1e-3, "{ms} ms, not {expected} ms");
}

#[test]
fn execute_timeouts_round_to_the_interval_and_stop_long_kernels() {
    install();
    let mut interval = 0;
    acl!(aclrtGetOpTimeOutInterval(&mut interval));
    assert_eq!(interval, INTERVAL_US);
    assert_eq!(execute_timeout_ms(), 254, "the default: 254 steps");

    assert_eq!(set_v2(1_500), 2_000, "rounded up to whole steps");
    assert_eq!(execute_timeout_ms(), 2);
    assert_eq!(set_v2(1), 1_000, "at least one step");
    assert_eq!(set_v2(10_000_000), 254_000, "at most 254 steps");
    acl!(aclrtSetOpExecuteTimeOut(1));
    assert_eq!(execute_timeout_ms(), 254, "1 s is more than 254 steps");
    assert_eq!(
        code!(aclrtSetOpExecuteTimeOutWithMs(5)),
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT
    );
    assert!(recent_message().contains("aclrtSetOpExecuteTimeOutWithMs"));
    assert_eq!(
        execute_timeout_ms(),
        254,
        "the unsupported call changed nothing"
    );

    set_device(1);
    let bin = registry_binary(&["ten_ms", "one_ms"]);
    let (ten, one) = (function(bin, "ten_ms"), function(bin, "one_ms"));

    // 2 ms: the 10 ms kernel stops at 2 ms with the engine's timeout code; a 1 ms one runs.
    assert_eq!(set_v2(2_000), 2_000);
    let (code, ms) = timed_launch(ten, ptr::null_mut());
    assert_eq!(code, ACL_ERROR_RT_AICORE_TIMEOUT);
    assert!(recent_message().contains("execute timeout"));
    assert_ms(ms, 2.0);
    let mut attr = aiv_attr();
    let mut cfg = aclrtLaunchKernelCfg {
        attrs: &mut attr,
        numAttrs: 1,
    };
    let (code, ms) = timed_launch(ten, &mut cfg);
    assert_eq!(code, ACL_ERROR_RT_VECTOR_CORE_TIMEOUT);
    assert_ms(ms, 2.0);
    let (code, ms) = timed_launch(one, ptr::null_mut());
    assert_eq!(code, 0);
    assert_ms(ms, 1.0);

    // 0 with a step under 100 ms: never.
    assert_eq!(set_v2(0), u64::MAX);
    assert_eq!(execute_timeout_ms(), u32::MAX);
    acl!(aclrtSetOpExecuteTimeOut(0));
    assert_eq!(execute_timeout_ms(), u32::MAX);
    let (code, ms) = timed_launch(ten, ptr::null_mut());
    assert_eq!(code, 0);
    assert_ms(ms, 10.0);

    assert_eq!(
        code!(aclrtSetOpExecuteTimeOutV2(5_000, ptr::null_mut())),
        ACL_ERROR_INVALID_PARAM
    );
    assert_eq!(
        execute_timeout_ms(),
        u32::MAX,
        "a refused call changes nothing"
    );
    assert_eq!(
        code!(aclrtGetOpExecuteTimeout(ptr::null_mut())),
        ACL_ERROR_INVALID_PARAM
    );
    assert_eq!(
        code!(aclrtGetOpTimeOutInterval(ptr::null_mut())),
        ACL_ERROR_INVALID_PARAM
    );
    assert!(recent_message().contains("aclrtGetOpTimeOutInterval"));

    per_launch_timeouts(ten);
    acl!(aclrtBinaryUnLoad(bin));
    acl!(aclrtResetDevice(1));
}

fn timeout_attr(id: aclrtLaunchKernelAttrId, us: u64) -> aclrtLaunchKernelAttr {
    let value = match id {
        ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT => aclrtLaunchKernelAttrValue {
            timeout: u16::try_from(us / 1_000_000).unwrap(),
        },
        _ => aclrtLaunchKernelAttrValue {
            timeoutUs: aclrtTimeoutUs {
                timeoutLow: us as u32,
                timeoutHigh: (us >> 32) as u32,
            },
        },
    };
    aclrtLaunchKernelAttr { id, value }
}

/// A launch's own timeout attribute replaces the process-wide execute timeout for that launch
/// (0 waits for ever); the two forms exclude each other. `ten` runs for 10 ms.
fn per_launch_timeouts(ten: aclrtFuncHandle) {
    let run = |attrs: &mut [aclrtLaunchKernelAttr]| {
        let mut cfg = aclrtLaunchKernelCfg {
            attrs: attrs.as_mut_ptr(),
            numAttrs: attrs.len(),
        };
        timed_launch(ten, &mut cfg)
    };
    assert_eq!(execute_timeout_ms(), u32::MAX, "no process-wide timeout");
    let (code, ms) = run(&mut [timeout_attr(ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT_US, 3_000)]);
    assert_eq!(code, ACL_ERROR_RT_AICORE_TIMEOUT);
    assert!(recent_message().contains("3000 µs"), "{}", recent_message());
    assert_ms(ms, 3.0);
    let (code, ms) = run(&mut [
        aiv_attr(),
        timeout_attr(ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT_US, 3_000),
    ]);
    assert_eq!(code, ACL_ERROR_RT_VECTOR_CORE_TIMEOUT);
    assert_ms(ms, 3.0);
    let (code, ms) = run(&mut [timeout_attr(ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT, 1_000_000)]);
    assert_eq!(code, 0, "1 s is longer than the kernel");
    assert_ms(ms, 10.0);

    assert_eq!(set_v2(2_000), 2_000);
    for us in [0, 1 << 32] {
        let (code, ms) = run(&mut [timeout_attr(ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT_US, us)]);
        assert_eq!(code, 0, "{us} µs overrides the process-wide 2 ms");
        assert_ms(ms, 10.0);
    }
    let (code, ms) = run(&mut [timeout_attr(ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT, 0)]);
    assert_eq!(code, 0, "0 s waits for ever");
    assert_ms(ms, 10.0);
    let (code, _) = run(&mut []);
    assert_eq!(
        code, ACL_ERROR_RT_AICORE_TIMEOUT,
        "without one, 2 ms applies"
    );

    let stream = create_stream();
    let mut both = [
        timeout_attr(ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT, 1_000_000),
        timeout_attr(ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT_US, 3_000),
    ];
    let mut cfg = aclrtLaunchKernelCfg {
        attrs: both.as_mut_ptr(),
        numAttrs: both.len(),
    };
    assert_eq!(
        launch(ten, 1, stream, &(), &mut cfg),
        ACL_ERROR_RT_PARAM_INVALID
    );
    assert!(recent_message().contains("cannot both be given"));
    acl!(aclrtSynchronizeStream(stream));
    acl!(aclrtDestroyStream(stream));
    assert_eq!(set_v2(0), u64::MAX);
}

fn create_notify() -> aclrtNotify {
    let mut notify = ptr::null_mut();
    acl!(aclrtCreateNotify(
        &mut notify,
        u64::from(ACL_NOTIFY_DEFAULT)
    ));
    notify
}

#[test]
fn the_wait_timeout_applies_to_waits_issued_after_it() {
    install();
    set_device(0);
    let (producer, consumer) = (create_stream(), create_stream());
    let notify = create_notify();
    let event = create_event();
    // The producer holds until the notify is recorded, so its record stays pending.
    acl!(aclrtWaitAndResetNotify(notify, producer, 0));
    acl!(aclrtRecordEvent(event, producer));

    acl!(aclrtSetOpWaitTimeout(1));
    acl!(aclrtStreamWaitEvent(consumer, event));
    assert_eq!(
        code!(aclrtSynchronizeStream(consumer)),
        ACL_ERROR_RT_WAIT_TIMEOUT
    );
    assert!(recent_message().contains("timed out"));

    // A wait issued with no timeout keeps waiting after one is set: the stream's own
    // synchronisation expires (507046) instead of the wait failing at 1 s (107019).
    acl!(aclrtSetOpWaitTimeout(0));
    acl!(aclrtStreamWaitEvent(consumer, event));
    acl!(aclrtSetOpWaitTimeout(1));
    assert_eq!(
        code!(aclrtSynchronizeStreamWithTimeout(consumer, 1_500)),
        ACL_ERROR_RT_STREAM_SYNC_TIMEOUT
    );
    acl!(aclrtSetOpWaitTimeout(0));
    acl!(aclrtRecordNotify(notify, ptr::null_mut()));
    acl!(aclrtSynchronizeStream(consumer));
    acl!(aclrtSynchronizeStream(producer));
    acl!(aclrtDestroyEvent(event));
    acl!(aclrtDestroyNotify(notify));
    acl!(aclrtResetDevice(0));
}

//! Device ID mapping (user, logical and physical IDs), the primary context's state, device
//! state callbacks, the process's device resource limits, runtime parameters (process and
//! context), the float overflow settings, event IDs and the count of events left, with every
//! error path, through the exported C ABI.
//!
//! Devices (this process has 7): 0 for events (only
//! `events_have_distinct_ids_and_only_waitable_ones_count_against_the_limit` uses it), 1 for
//! the primary context's state (only `primary_context_state_follows_set_and_reset` sets it), 2
//! is lost by `a_lost_device_fails_event_queries_but_still_maps`, 3 for the error cases and the
//! overflow settings, 4 for
//! the device state callbacks (only `device_state_callbacks_surround_set_and_reset` uses it),
//! 5 for the overflow flag address (only `a_context_has_one_overflow_flag_address_on_its_device`),
//! 6 for device state callbacks under racing sets and resets (only
//! `racing_sets_and_resets_change_the_state_once_each_way`).

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;

use common::cases::{Case, case, run_table};
use common::*;
use npu_sim::abi::*;
use npu_sys::*;

fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        npu_sim::SimConfig::default().devices(7).install().unwrap();
    });
}

type Mapping = unsafe extern "C" fn(i32, *mut i32) -> aclError;

/// Every mapping function, named.
const MAPPINGS: [(&str, Mapping); 6] = [
    (
        "aclrtGetLogicDevIdByUserDevId",
        aclrtGetLogicDevIdByUserDevId,
    ),
    (
        "aclrtGetUserDevIdByLogicDevId",
        aclrtGetUserDevIdByLogicDevId,
    ),
    ("aclrtGetLogicDevIdByPhyDevId", aclrtGetLogicDevIdByPhyDevId),
    ("aclrtGetPhyDevIdByLogicDevId", aclrtGetPhyDevIdByLogicDevId),
    ("aclrtGetUserDevIdByPhyDevId", aclrtGetUserDevIdByPhyDevId),
    ("aclrtGetPhyDevIdByUserDevId", aclrtGetPhyDevIdByUserDevId),
];

#[test]
fn every_id_of_a_device_is_the_same_without_visible_devices() {
    install();
    for (name, map) in MAPPINGS {
        for id in 0..5 {
            let mut out = -1;
            acl!(map(id, &mut out));
            assert_eq!(out, id, "{name}({id})");
        }
    }
}

#[test]
fn a_lost_device_fails_event_queries_but_still_maps() {
    install();
    std::thread::spawn(|| {
        set_device(2);
        let event = create_event();
        npu_sim::control::lose_device(2).unwrap();
        let mut id = 0;
        assert_eq!(
            code!(aclrtGetEventId(event, &mut id)),
            ACL_ERROR_RT_LOST_HEARTBEAT
        );
        assert_eq!(
            code!(aclrtGetEventAvailNum(&mut id)),
            ACL_ERROR_RT_LOST_HEARTBEAT
        );
        assert!(recent_message().contains("aclrtGetEventAvailNum"));
        let mut out = -1;
        acl!(aclrtGetPhyDevIdByUserDevId(2, &mut out));
        assert_eq!(out, 2, "the device still has its IDs");
        assert_eq!(primary_state(2), 1, "its primary context is not released");
        acl!(aclrtDestroyEvent(event));
        acl!(aclrtResetDevice(2));
    })
    .join()
    .unwrap();
}

#[test]
fn the_bare_tgid_is_the_process_id() {
    let mut pid = 0;
    acl!(aclrtDeviceGetBareTgid(&mut pid));
    assert_eq!(pid, std::process::id() as i32);
    assert_eq!(
        code!(aclrtDeviceGetBareTgid(ptr::null_mut())),
        ACL_ERROR_INVALID_PARAM
    );
    assert!(recent_message().contains("aclrtDeviceGetBareTgid"));
}

fn primary_state(device: i32) -> i32 {
    let mut active = -1;
    acl!(aclrtGetPrimaryCtxState(
        device,
        ptr::null_mut(),
        &mut active
    ));
    active
}

#[test]
fn primary_context_state_follows_set_and_reset() {
    install();
    std::thread::spawn(|| {
        assert_eq!(primary_state(1), 0, "never set");
        set_device(1);
        assert_eq!(primary_state(1), 1);
        set_device(1);
        acl!(aclrtResetDevice(1));
        assert_eq!(primary_state(1), 1, "one reference left");
        acl!(aclrtResetDevice(1));
        assert_eq!(primary_state(1), 0, "released");
        let mut ctx = ptr::null_mut();
        acl!(aclrtCreateContext(&mut ctx, 1));
        assert_eq!(
            primary_state(1),
            0,
            "an explicit context is not the primary one"
        );
        acl!(aclrtDestroyContext(ctx));
        set_device(1);
        acl!(aclrtResetDeviceForce(1));
        assert_eq!(primary_state(1), 0, "force-released");
    })
    .join()
    .unwrap();
}

/// What the device state callbacks saw for device 4: (tag, state).
static STATES: std::sync::Mutex<Vec<(u8, aclrtDeviceState)>> = std::sync::Mutex::new(Vec::new());

unsafe extern "C" fn on_state(device: i32, state: aclrtDeviceState, args: *mut std::ffi::c_void) {
    // Other tests set and reset other devices meanwhile.
    if device == 4 {
        // SAFETY: the test registers the callbacks with pointers to its static tags.
        let tag = unsafe { *args.cast::<u8>() };
        STATES.lock().unwrap().push((tag, state));
    }
}

static TAG_1: u8 = 1;
static TAG_2: u8 = 2;

fn tag(tag: &'static u8) -> *mut std::ffi::c_void {
    ptr::from_ref(tag).cast_mut().cast()
}

fn states() -> Vec<(u8, aclrtDeviceState)> {
    std::mem::take(&mut *STATES.lock().unwrap())
}

#[test]
fn device_state_callbacks_surround_set_and_reset() {
    install();
    std::thread::spawn(|| {
        let (a, b) = (c"state a", c"state b");
        acl!(aclrtRegDeviceStateCallback(
            a.as_ptr(),
            Some(on_state),
            tag(&TAG_1)
        ));
        acl!(aclrtRegDeviceStateCallback(
            b.as_ptr(),
            Some(on_state),
            tag(&TAG_2)
        ));
        use npu_sys::{
            ACL_RT_DEVICE_STATE_RESET_POST as RP, ACL_RT_DEVICE_STATE_RESET_PRE as RE,
            ACL_RT_DEVICE_STATE_SET_POST as SP, ACL_RT_DEVICE_STATE_SET_PRE as SE,
        };
        let round = |pre, post| [(1, pre), (2, pre), (1, post), (2, post)];
        // The reference counts the sets: the device's state changes at the first set and at
        // the reset that releases it (the last, or a force), not at the nested ones.
        set_device(4);
        assert_eq!(states(), [round(SE, SP)].concat(), "the first set");
        set_device(4);
        acl!(aclrtResetDevice(4));
        assert_eq!(states(), [], "a nested set and its reset");
        acl!(aclrtResetDeviceForce(4));
        assert_eq!(states(), [round(RE, RP)].concat(), "the force");
        set_device(4);
        set_device(4);
        acl!(aclrtResetDevice(4));
        acl!(aclrtResetDevice(4));
        assert_eq!(
            states(),
            [round(SE, SP), round(RE, RP)].concat(),
            "registration order, the first set and the last reset"
        );
        // A reset with nothing left to release changes nothing: no call.
        acl!(aclrtRegDeviceStateCallback(
            a.as_ptr(),
            None,
            ptr::null_mut()
        ));
        assert_eq!(
            code!(aclrtResetDevice(4)),
            ACL_ERROR_RT_CONTEXT_RELEASE_ERROR
        );
        assert_eq!(states(), []);
        set_device(4);
        acl!(aclrtResetDevice(4));
        assert_eq!(states(), [(2, SE), (2, SP), (2, RE), (2, RP)], "b alone");
        acl!(aclrtRegDeviceStateCallback(
            b.as_ptr(),
            None,
            ptr::null_mut()
        ));
        set_device(4);
        acl!(aclrtResetDevice(4));
        assert_eq!(states(), [], "nothing registered");
    })
    .join()
    .unwrap();
}

/// How often each state was told for device 6, by state.
static RACED: [std::sync::atomic::AtomicU32; 4] =
    [const { std::sync::atomic::AtomicU32::new(0) }; 4];

unsafe extern "C" fn count_state(device: i32, state: aclrtDeviceState, _: *mut c_void) {
    if device == 6 {
        RACED[state as usize].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Eight threads set device 6 at once, then reset it at once, twice over: whichever sets and
/// resets come first, the device's state changes once each way per round, and the callbacks
/// are told exactly that (the simulator told every call, nested ones included).
#[test]
fn racing_sets_and_resets_change_the_state_once_each_way() {
    install();
    let name = c"racing";
    acl!(aclrtRegDeviceStateCallback(
        name.as_ptr(),
        Some(count_state),
        ptr::null_mut()
    ));
    const THREADS: usize = 8;
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(THREADS));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                for _ in 0..2 {
                    barrier.wait();
                    set_device(6);
                    barrier.wait();
                    acl!(aclrtResetDevice(6));
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    acl!(aclrtRegDeviceStateCallback(
        name.as_ptr(),
        None,
        ptr::null_mut()
    ));
    let told = RACED
        .each_ref()
        .map(|n| n.load(std::sync::atomic::Ordering::Relaxed));
    assert_eq!(told, [2; 4], "SET_PRE, SET_POST, RESET_PRE, RESET_POST");
}

fn get_limit(limit: aclrtDeviceLimit) -> usize {
    let mut value = 0;
    acl!(aclrtDeviceGetLimit(limit, &mut value));
    value
}

#[test]
fn device_limits_round_as_the_hardware_and_refuse_simt() {
    install();
    let (stack, fifo) = (
        ACL_RT_DEV_LIMIT_SIMD_STACK_SIZE,
        ACL_RT_DEV_LIMIT_SIMD_PRINTF_FIFO_SIZE_PER_CORE,
    );
    assert_eq!((get_limit(stack), get_limit(fifo)), (32 << 10, 32 << 10));
    for (asked, effective) in [(1, 32 << 10), (40_000, 48 << 10), (196_608, 192 << 10)] {
        acl!(aclrtDeviceSetLimit(stack, asked));
        assert_eq!(get_limit(stack), effective, "stack {asked}");
    }
    for (asked, effective) in [(1024, 1024), (1025, 1032), (64 << 20, 64 << 20)] {
        acl!(aclrtDeviceSetLimit(fifo, asked));
        assert_eq!(get_limit(fifo), effective, "fifo {asked}");
    }
    let refused = [
        (stack, 196_609, ACL_ERROR_RT_PARAM_INVALID),
        (fifo, 1023, ACL_ERROR_RT_PARAM_INVALID),
        (fifo, (64 << 20) + 1, ACL_ERROR_RT_PARAM_INVALID),
        (
            ACL_RT_DEV_LIMIT_SIMT_STACK_SIZE,
            1024,
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        ),
        (
            ACL_RT_DEV_LIMIT_SIMT_DVG_WARP_STACK_SIZE,
            1024,
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        ),
        (
            ACL_RT_DEV_LIMIT_SIMT_PRINTF_FIFO_SIZE,
            1 << 20,
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        ),
        (5, 1024, ACL_ERROR_RT_PARAM_INVALID),
    ];
    for (limit, value, code) in refused {
        assert_eq!(
            code!(aclrtDeviceSetLimit(limit, value)),
            code,
            "set {limit} {value}"
        );
        assert!(recent_message().contains("aclrtDeviceSetLimit"));
    }
    assert_eq!(
        (get_limit(stack), get_limit(fifo)),
        (192 << 10, 64 << 20),
        "refused settings change nothing"
    );
    let mut value = 0;
    for (limit, code) in [
        (
            ACL_RT_DEV_LIMIT_SIMT_STACK_SIZE,
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        ),
        (
            ACL_RT_DEV_LIMIT_SIMT_PRINTF_FIFO_SIZE,
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        ),
        (7, ACL_ERROR_RT_PARAM_INVALID),
    ] {
        assert_eq!(
            code!(aclrtDeviceGetLimit(limit, &mut value)),
            code,
            "get {limit}"
        );
    }
    assert_eq!(
        code!(aclrtDeviceGetLimit(stack, ptr::null_mut())),
        ACL_ERROR_INVALID_PARAM
    );
    assert!(recent_message().contains("aclrtDeviceGetLimit"));
}

fn sys_param(opt: aclSysParamOpt) -> i64 {
    let mut value = -1;
    acl!(aclrtGetSysParamOpt(opt, &mut value));
    value
}

fn ctx_param(opt: aclSysParamOpt) -> Result<i64, aclError> {
    let mut value = -1;
    match code!(aclrtCtxGetSysParamOpt(opt, &mut value)) {
        0 => Ok(value),
        code => Err(code),
    }
}

#[test]
fn runtime_parameters_of_the_process_and_of_each_context() {
    install();
    std::thread::spawn(|| {
        for opt in 0..4 {
            assert_eq!(sys_param(opt), 0, "option {opt} is off by default");
        }
        acl!(aclrtSetSysParamOpt(ACL_OPT_DETERMINISTIC, 3));
        acl!(aclrtSetSysParamOpt(ACL_OPT_ENABLE_DEBUG_KERNEL, 1));
        assert_eq!(sys_param(ACL_OPT_DETERMINISTIC), 3);
        assert_eq!(sys_param(ACL_OPT_ENABLE_DEBUG_KERNEL), 1);
        for (opt, value) in [
            (ACL_OPT_DETERMINISTIC, 4),
            (ACL_OPT_ENABLE_KERNEL_EARLY_START, 2),
            (4, 0),
        ] {
            assert_eq!(
                code!(aclrtSetSysParamOpt(opt, value)),
                ACL_ERROR_INVALID_PARAM
            );
            assert!(recent_message().contains("aclrtSetSysParamOpt"));
        }
        assert_eq!(
            sys_param(ACL_OPT_DETERMINISTIC),
            3,
            "a refused value changes nothing"
        );

        // Contexts have their own parameters, without defaults.
        set_device(3);
        assert_eq!(
            ctx_param(ACL_OPT_DETERMINISTIC),
            Err(ACL_ERROR_RT_SYSPARAMOPT_NOT_SET)
        );
        acl!(aclrtCtxSetSysParamOpt(ACL_OPT_DETERMINISTIC, 1));
        assert_eq!(ctx_param(ACL_OPT_DETERMINISTIC), Ok(1));
        let mut other = ptr::null_mut();
        acl!(aclrtCreateContext(&mut other, 3));
        assert_eq!(
            ctx_param(ACL_OPT_DETERMINISTIC),
            Err(ACL_ERROR_RT_SYSPARAMOPT_NOT_SET)
        );
        acl!(aclrtDestroyContext(other));
        assert_eq!(
            code!(aclrtCtxSetSysParamOpt(ACL_OPT_DETERMINISTIC, 1)),
            ACL_ERROR_RT_CONTEXT_NULL
        );
        // The option and its value are arguments, checked before the (missing) context.
        assert_eq!(
            code!(aclrtCtxSetSysParamOpt(ACL_OPT_DETERMINISTIC, 4)),
            ACL_ERROR_INVALID_PARAM
        );
        assert_eq!(code!(aclrtCtxSetSysParamOpt(9, 0)), ACL_ERROR_INVALID_PARAM);
        assert_eq!(ctx_param(9), Err(ACL_ERROR_INVALID_PARAM));
        set_device(3);
        assert_eq!(
            ctx_param(ACL_OPT_DETERMINISTIC),
            Ok(1),
            "the primary context kept it"
        );
        assert_eq!(
            code!(aclrtCtxSetSysParamOpt(ACL_OPT_STRONG_CONSISTENCY, 2)),
            ACL_ERROR_INVALID_PARAM
        );
        assert_eq!(ctx_param(9), Err(ACL_ERROR_INVALID_PARAM));
        assert_eq!(
            code!(aclrtCtxGetSysParamOpt(
                ACL_OPT_DETERMINISTIC,
                ptr::null_mut()
            )),
            ACL_ERROR_INVALID_PARAM
        );
        assert_eq!(
            code!(aclrtGetSysParamOpt(ACL_OPT_DETERMINISTIC, ptr::null_mut())),
            ACL_ERROR_INVALID_PARAM
        );
        assert_eq!(
            code!(aclrtGetSysParamOpt(4, &mut 0)),
            ACL_ERROR_INVALID_PARAM
        );
        assert!(recent_message().contains("aclrtGetSysParamOpt"));
        acl!(aclrtResetDevice(3));
        acl!(aclrtResetDevice(3));
    })
    .join()
    .unwrap();
}

fn sat_mode() -> aclrtFloatOverflowMode {
    let mut mode = u32::MAX;
    acl!(aclrtGetDeviceSatMode(&mut mode));
    mode
}

fn overflow_switch(stream: aclrtStream) -> u32 {
    let mut flag = u32::MAX;
    acl!(aclrtGetStreamOverflowSwitch(stream, &mut flag));
    flag
}

#[test]
fn overflow_settings_are_kept_per_device_and_stream() {
    install();
    std::thread::spawn(|| {
        set_device(3);
        assert_eq!(
            sat_mode(),
            ACL_RT_OVERFLOW_MODE_INFNAN,
            "the Atlas A2 default"
        );
        acl!(aclrtSetDeviceSatMode(ACL_RT_OVERFLOW_MODE_SATURATION));
        assert_eq!(sat_mode(), ACL_RT_OVERFLOW_MODE_SATURATION);
        assert_eq!(
            code!(aclrtSetDeviceSatMode(ACL_RT_OVERFLOW_MODE_UNDEF)),
            ACL_ERROR_INVALID_PARAM
        );
        acl!(aclrtSetDeviceSatMode(ACL_RT_OVERFLOW_MODE_INFNAN));
        assert_eq!(sat_mode(), ACL_RT_OVERFLOW_MODE_INFNAN);

        let stream = create_stream();
        // The status task writes its 64 bytes in stream order: no overflow, all zeros.
        let status = malloc(64);
        acl!(aclrtMemset(status, 64, 0xFF, 64));
        acl!(aclrtGetOverflowStatus(status, 64, stream));
        acl!(aclrtResetOverflowStatus(stream));
        acl!(aclrtSynchronizeStream(stream));
        assert_eq!(download::<u8>(status, 64), vec![0; 64]);
        for (addr, size, code) in [
            (ptr::null_mut(), 64, ACL_ERROR_INVALID_PARAM),
            (status, 32, ACL_ERROR_RT_PARAM_INVALID),
            (pageable(64), 64, ACL_ERROR_RT_PARAM_INVALID),
            (status.wrapping_byte_add(64), 64, ACL_ERROR_RT_PARAM_INVALID),
        ] {
            assert_eq!(
                code!(aclrtGetOverflowStatus(addr, size, stream)),
                code,
                "{size}"
            );
            assert!(recent_message().contains("aclrtGetOverflowStatus"));
        }
        acl!(aclrtFree(status));
        assert_eq!(overflow_switch(stream), 0);
        acl!(aclrtSetStreamOverflowSwitch(stream, 1));
        assert_eq!(overflow_switch(stream), 1);
        let mut attr = aclrtStreamAttrValue::default();
        acl!(aclrtGetStreamAttribute(
            stream,
            ACL_STREAM_ATTR_FLOAT_OVERFLOW_CHECK,
            &mut attr
        ));
        // SAFETY: the field the attribute defines.
        let switch = unsafe { attr.overflowSwitch };
        assert_eq!(switch, 1, "the same switch as the attribute");
        assert_eq!(
            code!(aclrtSetStreamOverflowSwitch(stream, 2)),
            ACL_ERROR_INVALID_PARAM
        );
        acl!(aclrtSetStreamOverflowSwitch(ptr::null_mut(), 1));
        assert_eq!(
            overflow_switch(ptr::null_mut()),
            1,
            "NULL is the default stream"
        );
        acl!(aclrtDestroyStream(stream));
        assert_eq!(
            code!(aclrtSetStreamOverflowSwitch(stream, 0)),
            ACL_ERROR_RT_INVALID_HANDLE
        );
        assert_eq!(
            code!(aclrtResetOverflowStatus(stream)),
            ACL_ERROR_RT_INVALID_HANDLE
        );
        assert_eq!(
            code!(aclrtGetStreamOverflowSwitch(
                ptr::null_mut(),
                ptr::null_mut()
            )),
            ACL_ERROR_INVALID_PARAM
        );
        assert_eq!(
            code!(aclrtGetDeviceSatMode(ptr::null_mut())),
            ACL_ERROR_INVALID_PARAM
        );
        acl!(aclrtResetDevice(3));
        std::thread::spawn(|| {
            let mut mode = 0;
            assert_eq!(
                code!(aclrtGetDeviceSatMode(&mut mode)),
                ACL_ERROR_RT_CONTEXT_NULL
            );
            assert_eq!(
                code!(aclrtSetDeviceSatMode(ACL_RT_OVERFLOW_MODE_SATURATION)),
                ACL_ERROR_RT_CONTEXT_NULL
            );
            assert!(recent_message().contains("aclrtSetDeviceSatMode"));
        })
        .join()
        .unwrap();
    })
    .join()
    .unwrap();
}

/// The float status tasks (aclrtGetFloatOverflowStatus, aclrtNpuGetFloatOverFlowStatus) write
/// zeros over their output in stream order, the clears keep the stream's order, and each
/// argument check is reached.
#[test]
fn float_status_tasks_write_no_overflow_and_check_their_arguments() {
    install();
    let foreign = malloc_on(0, 64) as usize;
    std::thread::spawn(move || {
        let foreign = foreign as *mut c_void;
        set_device(3);
        let stream = create_stream();
        let status = malloc(64);
        acl!(aclrtMemset(status, 64, 0xFF, 64));
        acl!(aclrtGetFloatOverflowStatus(status, 8, stream));
        acl!(aclrtSynchronizeStream(stream));
        let mut expected = vec![0u8; 8];
        expected.extend([0xFF; 56]);
        assert_eq!(
            download::<u8>(status, 64),
            expected,
            "only outputSize bytes"
        );
        acl!(aclrtMemset(status, 64, 0xFF, 64));
        acl!(aclrtNpuGetFloatOverFlowStatus(
            status,
            64,
            0,
            ptr::null_mut()
        ));
        acl!(aclrtResetFloatOverflowStatus(stream));
        acl!(aclrtNpuClearFloatOverFlowStatus(0, ptr::null_mut()));
        acl!(aclrtSynchronizeStream(stream));
        acl!(aclrtSynchronizeStream(ptr::null_mut()));
        assert_eq!(download::<u8>(status, 64), vec![0; 64]);
        type Getter = unsafe extern "C" fn(*mut c_void, u64, aclrtStream) -> aclError;
        unsafe extern "C" fn npu_get(out: *mut c_void, size: u64, stream: aclrtStream) -> aclError {
            // SAFETY: forwards the caller's arguments.
            unsafe { aclrtNpuGetFloatOverFlowStatus(out, size, 1, stream) }
        }
        let getters: [(&str, Getter); 2] = [
            ("aclrtGetFloatOverflowStatus", aclrtGetFloatOverflowStatus),
            ("aclrtNpuGetFloatOverFlowStatus", npu_get),
        ];
        let other = stream_of_device(0);
        let stale = create_stream();
        acl!(aclrtDestroyStream(stale));
        for (name, get) in getters {
            for (case, addr, size, on, code) in [
                (
                    "NULL output",
                    ptr::null_mut(),
                    64,
                    stream,
                    ACL_ERROR_INVALID_PARAM,
                ),
                ("size 0", status, 0, stream, ACL_ERROR_INVALID_PARAM),
                (
                    "host memory",
                    pageable(64),
                    64,
                    stream,
                    ACL_ERROR_RT_PARAM_INVALID,
                ),
                (
                    "past the allocation",
                    status,
                    4096 + 64,
                    stream,
                    ACL_ERROR_RT_PARAM_INVALID,
                ),
                (
                    "memory of another device",
                    foreign,
                    64,
                    stream,
                    ACL_ERROR_RT_PARAM_INVALID,
                ),
                (
                    "stream of another device",
                    status,
                    64,
                    other,
                    ACL_ERROR_RT_STREAM_CONTEXT,
                ),
                (
                    "destroyed stream",
                    status,
                    64,
                    stale,
                    ACL_ERROR_RT_INVALID_HANDLE,
                ),
            ] {
                // SAFETY: the simulator checks every argument.
                let got = unsafe { get(addr, size, on) };
                assert_eq!(got, code, "{name}: {case}: {}", recent_message());
            }
        }
        assert_eq!(
            code!(aclrtResetFloatOverflowStatus(stale)),
            ACL_ERROR_RT_INVALID_HANDLE
        );
        assert_eq!(
            code!(aclrtNpuClearFloatOverFlowStatus(0, other)),
            ACL_ERROR_RT_STREAM_CONTEXT
        );
        let addr = status as usize;
        std::thread::spawn(move || {
            let status = addr as *mut c_void;
            assert_eq!(
                code!(aclrtGetFloatOverflowStatus(status, 64, ptr::null_mut())),
                ACL_ERROR_RT_CONTEXT_NULL
            );
            assert_eq!(
                code!(aclrtNpuClearFloatOverFlowStatus(0, ptr::null_mut())),
                ACL_ERROR_RT_CONTEXT_NULL
            );
        })
        .join()
        .unwrap();
        acl!(aclrtFree(status));
        acl!(aclrtDestroyStream(stream));
    })
    .join()
    .unwrap();
}

fn event_id(event: aclrtEvent) -> u32 {
    let mut id = u32::MAX;
    acl!(aclrtGetEventId(event, &mut id));
    id
}

fn events_left() -> u32 {
    let mut count = u32::MAX;
    acl!(aclrtGetEventAvailNum(&mut count));
    count
}

#[test]
fn events_have_distinct_ids_and_only_waitable_ones_count_against_the_limit() {
    install();
    std::thread::spawn(|| {
        set_device(0);
        let legacy = create_event();
        let mut sync = ptr::null_mut();
        acl!(aclrtCreateEventWithFlag(&mut sync, ACL_EVENT_SYNC));
        let mut timeline = ptr::null_mut();
        acl!(aclrtCreateEventExWithFlag(
            &mut timeline,
            ACL_EVENT_TIME_LINE
        ));
        let ids = [event_id(legacy), event_id(sync), event_id(timeline)];
        assert!(
            ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2],
            "{ids:?}"
        );
        assert_eq!(event_id(legacy), ids[0], "an event keeps its ID");
        // Other tests of this file create no events on device 0, so the count is exact.
        assert_eq!(
            events_left(),
            65536 - 2,
            "legacy and SYNC events hold one each"
        );
        acl!(aclrtDestroyEvent(sync));
        assert_eq!(events_left(), 65536 - 1);
        acl!(aclrtDestroyEvent(legacy));
        acl!(aclrtDestroyEvent(timeline));
        assert_eq!(events_left(), 65536);
        acl!(aclrtResetDevice(0));
    })
    .join()
    .unwrap();
}

fn stale_event() -> aclrtEvent {
    let event = create_event();
    acl!(aclrtDestroyEvent(event));
    event
}

unsafe extern "C" fn ignore_state(_: i32, _: aclrtDeviceState, _: *mut std::ffi::c_void) {}

fn register_twice() -> aclError {
    let name = c"registered twice";
    acl!(aclrtRegDeviceStateCallback(
        name.as_ptr(),
        Some(ignore_state),
        ptr::null_mut()
    ));
    let code = code!(aclrtRegDeviceStateCallback(
        name.as_ptr(),
        Some(ignore_state),
        ptr::null_mut()
    ));
    acl!(aclrtRegDeviceStateCallback(
        name.as_ptr(),
        None,
        ptr::null_mut()
    ));
    code
}

const CASES: &[Case] = &[
    case(
        "state callback NULL name",
        "aclrtRegDeviceStateCallback",
        ACL_ERROR_INVALID_PARAM,
        -1,
        || {
            code!(aclrtRegDeviceStateCallback(
                ptr::null(),
                Some(ignore_state),
                ptr::null_mut()
            ))
        },
    ),
    case(
        "state callback empty name",
        "aclrtRegDeviceStateCallback",
        ACL_ERROR_INVALID_PARAM,
        -1,
        || {
            code!(aclrtRegDeviceStateCallback(
                c"".as_ptr(),
                Some(ignore_state),
                ptr::null_mut()
            ))
        },
    ),
    case(
        "state callback registered twice",
        "aclrtRegDeviceStateCallback",
        ACL_ERROR_RT_PARAM_INVALID,
        -1,
        register_twice,
    ),
    case(
        "remove an unknown state callback",
        "aclrtRegDeviceStateCallback",
        ACL_ERROR_RT_PARAM_INVALID,
        -1,
        || {
            code!(aclrtRegDeviceStateCallback(
                c"unknown".as_ptr(),
                None,
                ptr::null_mut()
            ))
        },
    ),
    case(
        "map NULL out",
        "aclrtGetPhyDevIdByUserDevId",
        ACL_ERROR_INVALID_PARAM,
        -1,
        || code!(aclrtGetPhyDevIdByUserDevId(0, ptr::null_mut())),
    ),
    case(
        "map device 7",
        "aclrtGetLogicDevIdByUserDevId",
        ACL_ERROR_RT_INVALID_DEVICEID,
        -1,
        || code!(aclrtGetLogicDevIdByUserDevId(7, &mut 0)),
    ),
    case(
        "map device -1",
        "aclrtGetUserDevIdByPhyDevId",
        ACL_ERROR_RT_INVALID_DEVICEID,
        -1,
        || code!(aclrtGetUserDevIdByPhyDevId(-1, &mut 0)),
    ),
    case(
        "primary state flags not NULL",
        "aclrtGetPrimaryCtxState",
        ACL_ERROR_INVALID_PARAM,
        -1,
        || code!(aclrtGetPrimaryCtxState(0, &mut 0, &mut 0)),
    ),
    case(
        "primary state NULL active",
        "aclrtGetPrimaryCtxState",
        ACL_ERROR_INVALID_PARAM,
        -1,
        || code!(aclrtGetPrimaryCtxState(0, ptr::null_mut(), ptr::null_mut())),
    ),
    case(
        "primary state of device 7",
        "aclrtGetPrimaryCtxState",
        ACL_ERROR_RT_INVALID_DEVICEID,
        -1,
        || code!(aclrtGetPrimaryCtxState(7, ptr::null_mut(), &mut 0)),
    ),
    case(
        "event id of NULL",
        "aclrtGetEventId",
        ACL_ERROR_INVALID_PARAM,
        -1,
        || code!(aclrtGetEventId(ptr::null_mut(), &mut 0)),
    ),
    case(
        "event id NULL out",
        "aclrtGetEventId",
        ACL_ERROR_INVALID_PARAM,
        3,
        || code!(aclrtGetEventId(create_event(), ptr::null_mut())),
    ),
    case(
        "event id of a destroyed event",
        "aclrtGetEventId",
        ACL_ERROR_RT_INVALID_HANDLE,
        3,
        || code!(aclrtGetEventId(stale_event(), &mut 0)),
    ),
    case(
        "event id of a destroyed event into NULL: the pointer is checked first",
        "aclrtGetEventId",
        ACL_ERROR_INVALID_PARAM,
        3,
        || code!(aclrtGetEventId(stale_event(), ptr::null_mut())),
    ),
    case(
        "events left NULL",
        "aclrtGetEventAvailNum",
        ACL_ERROR_INVALID_PARAM,
        -1,
        || code!(aclrtGetEventAvailNum(ptr::null_mut())),
    ),
    case(
        "events left without context",
        "aclrtGetEventAvailNum",
        ACL_ERROR_RT_CONTEXT_NULL,
        -1,
        || code!(aclrtGetEventAvailNum(&mut 0)),
    ),
    case(
        "overflow address into NULL",
        "aclrtCtxGetFloatOverflowAddr",
        100000,
        3,
        || code!(aclrtCtxGetFloatOverflowAddr(ptr::null_mut())),
    ),
    case(
        "overflow address without a context",
        "aclrtCtxGetFloatOverflowAddr",
        107002,
        -1,
        || {
            let mut address = ptr::null_mut();
            code!(aclrtCtxGetFloatOverflowAddr(&mut address))
        },
    ),
    case(
        "hardware sync address into NULL",
        "aclrtGetHardwareSyncAddr",
        100000,
        3,
        || code!(aclrtGetHardwareSyncAddr(ptr::null_mut())),
    ),
    case(
        "hardware sync address without a context",
        "aclrtGetHardwareSyncAddr",
        107002,
        -1,
        || {
            let mut address = ptr::null_mut();
            code!(aclrtGetHardwareSyncAddr(&mut address))
        },
    ),
    case("set a compute group", "aclrtSetGroup", 207000, 3, || {
        code!(aclrtSetGroup(0))
    }),
    case(
        "group count into NULL",
        "aclrtGetGroupCount",
        100000,
        3,
        || code!(aclrtGetGroupCount(ptr::null_mut())),
    ),
    case(
        "group count on an Atlas A2",
        "aclrtGetGroupCount",
        207000,
        3,
        || {
            let mut count = 7;
            let code = code!(aclrtGetGroupCount(&mut count));
            assert_eq!(count, 7, "nothing written");
            code
        },
    ),
    case(
        "group info on an Atlas A2",
        "aclrtCreateGroupInfo",
        207000,
        3,
        || {
            assert!(code!(aclrtCreateGroupInfo()).is_null());
            // SAFETY: no preconditions.
            unsafe { aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL) }
        },
    ),
    case(
        "destroy NULL group info",
        "aclrtDestroyGroupInfo",
        100000,
        3,
        || code!(aclrtDestroyGroupInfo(ptr::null_mut())),
    ),
    case(
        "destroy group info on an Atlas A2",
        "aclrtDestroyGroupInfo",
        207000,
        3,
        || code!(aclrtDestroyGroupInfo(ptr::dangling_mut())),
    ),
    case(
        "all group info into NULL",
        "aclrtGetAllGroupInfo",
        100000,
        3,
        || code!(aclrtGetAllGroupInfo(ptr::null_mut())),
    ),
    case(
        "all group info on an Atlas A2",
        "aclrtGetAllGroupInfo",
        207000,
        3,
        || code!(aclrtGetAllGroupInfo(ptr::dangling_mut())),
    ),
    case(
        "group detail with NULL outputs",
        "aclrtGetGroupInfoDetail",
        100000,
        3,
        || {
            code!(aclrtGetGroupInfoDetail(
                ptr::dangling(),
                0,
                ACL_GROUP_AICORE_INT,
                ptr::null_mut(),
                4,
                ptr::null_mut()
            ))
        },
    ),
    case(
        "group detail on an Atlas A2",
        "aclrtGetGroupInfoDetail",
        207000,
        3,
        || {
            let (mut value, mut size) = (0i32, 0usize);
            code!(aclrtGetGroupInfoDetail(
                ptr::dangling(),
                0,
                ACL_GROUP_AICORE_INT,
                (&raw mut value).cast(),
                4,
                &mut size
            ))
        },
    ),
];

/// The addresses of the runtime's per-context workspaces.
type WorkspaceGetter = unsafe extern "C" fn(*mut *mut c_void) -> aclError;

#[test]
fn a_context_has_one_address_of_each_workspace_on_its_device() {
    install();
    std::thread::spawn(|| {
        set_device(5);
        let address = |get: WorkspaceGetter| {
            let mut address = ptr::null_mut();
            acl!(get(&mut address));
            address
        };
        let getters: [WorkspaceGetter; 2] =
            [aclrtCtxGetFloatOverflowAddr, aclrtGetHardwareSyncAddr];
        let before = npu_sim::control::device_stats(5).unwrap().live_allocations;
        let [flags, sync] = getters.map(address);
        assert_ne!(flags, sync, "two workspaces");
        for (get, workspace) in getters.into_iter().zip([flags, sync]) {
            assert_eq!(address(get), workspace, "one address per context");
            assert_eq!(download::<u8>(workspace, 64), vec![0; 64], "zeros");
            let mut attributes = aclrtPtrAttributes::default();
            acl!(aclrtPointerGetAttributes(workspace, &mut attributes));
            assert_eq!(
                attributes.location.id, 5,
                "device memory of the context's device"
            );
        }
        assert_eq!(
            npu_sim::control::device_stats(5).unwrap().live_allocations,
            before,
            "the runtime's memory, not the program's"
        );
        // Another context has its own (freed with it).
        let mut ctx = ptr::null_mut();
        acl!(aclrtCreateContext(&mut ctx, 5));
        for (get, workspace) in getters.into_iter().zip([flags, sync]) {
            assert_ne!(address(get), workspace);
        }
        acl!(aclrtDestroyContext(ctx));
    })
    .join()
    .unwrap();
}

#[test]
fn every_error_path() {
    install();
    run_table(CASES);
}

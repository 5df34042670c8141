//! Device ID mapping (user, logical and physical IDs), the primary context's state, event IDs
//! and the count of events left, with every error path, through the exported C ABI.
//!
//! Devices (this process has 4): 0 for events (only
//! `events_have_distinct_ids_and_only_waitable_ones_count_against_the_limit` uses it), 1 for
//! the primary context's state (only `primary_context_state_follows_set_and_reset` sets it), 2
//! is lost by `a_lost_device_fails_event_queries_but_still_maps`, 3 for the error cases.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ptr;

use common::cases::{Case, case, run_table};
use common::*;
use npu_sim::abi::*;
use npu_sys::*;

fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        npu_sim::SimConfig::default().devices(4).install().unwrap();
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
        for id in 0..4 {
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

const CASES: &[Case] = &[
    case(
        "map NULL out",
        "aclrtGetPhyDevIdByUserDevId",
        ACL_ERROR_INVALID_PARAM,
        -1,
        || code!(aclrtGetPhyDevIdByUserDevId(0, ptr::null_mut())),
    ),
    case(
        "map device 4",
        "aclrtGetLogicDevIdByUserDevId",
        ACL_ERROR_RT_INVALID_DEVICEID,
        -1,
        || code!(aclrtGetLogicDevIdByUserDevId(4, &mut 0)),
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
        "primary state of device 4",
        "aclrtGetPrimaryCtxState",
        ACL_ERROR_RT_INVALID_DEVICEID,
        -1,
        || code!(aclrtGetPrimaryCtxState(4, ptr::null_mut(), &mut 0)),
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
];

#[test]
fn every_error_path() {
    install();
    run_table(CASES);
}

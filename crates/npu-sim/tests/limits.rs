//! Process-wide resource limits and faults, exhausted or injected in a process of their own so
//! that no other test sees them: streams per device (207008), notifies per device (207009),
//! events holding a hardware event per device (207007),
//! subscribed report threads (207012), labels in the process (207005), and an injected failure
//! of the next host allocation.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ptr;

use common::*;
use npu_sim::abi::*;
use npu_sys::*;

#[test]
fn running_out_of_streams() {
    set_device(0);
    let limit = 1984 - 1; // the primary context's default stream counts
    let available = || {
        let mut count = u32::MAX;
        acl!(aclrtGetStreamAvailableNum(&mut count));
        count
    };
    assert_eq!(available(), limit);
    let streams: Vec<aclrtStream> = (0..limit).map(|_| create_stream()).collect();
    assert_eq!(available(), 0);
    let mut extra = ptr::null_mut();
    assert_eq!(
        code!(aclrtCreateStream(&mut extra)),
        ACL_ERROR_RT_NO_STREAM_RESOURCE
    );
    assert!(recent_message().contains("aclrtCreateStream failed with 207008"));
    for stream in streams {
        acl!(aclrtDestroyStream(stream));
    }
    assert_eq!(npu_sim::control::device_stats(0).unwrap().live_streams, 1);
    let stream = create_stream();
    acl!(aclrtDestroyStream(stream));
}

#[test]
fn running_out_of_subscribed_threads() {
    set_device(1);
    let streams: Vec<aclrtStream> = (0..1025).map(|_| create_stream()).collect();
    for (thread, &stream) in (0x1000u64..).zip(&streams[..1024]) {
        acl!(aclrtSubscribeReport(thread, stream));
    }
    assert_eq!(
        code!(aclrtSubscribeReport(0x9999, streams[1024])),
        ACL_ERROR_RT_OVER_LIMIT
    );
    assert!(recent_message().contains("aclrtSubscribeReport failed with 207012"));
    // A thread already subscribed may take more streams of the same device.
    acl!(aclrtSubscribeReport(0x1000, streams[1024]));
    acl!(aclrtUnSubscribeReport(0x1001, streams[1]));
    acl!(aclrtSubscribeReport(0x9999, create_stream()));
}

/// The process's host memory, whose counters two tests compare with a baseline: one injects
/// a failure into the process's next host allocation and then allocates pinned memory, the
/// other asks for more pinned memory than the machine has. Run together (libtest runs tests on
/// parallel threads), one's pinned allocation showed in the other's counts (40 of 1,000 runs
/// of the pair on two threads: `pinned_allocations: 1` against a baseline of 0, or the other
/// way round), and the refused request can take the failure injected for the other's next
/// allocation, which then succeeds. Each takes this turn ([`take_turn`]) for its whole run.
static HOST_MEMORY: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn the_next_host_allocation_fails_with_the_injected_code() {
    let _host_memory = take_turn(&HOST_MEMORY);
    set_device(1);
    let before = npu_sim::control::host_stats().unwrap();
    let mut host = ptr::null_mut();

    npu_sim::control::fail_next_host_alloc(ACL_ERROR_RT_MEMORY_ALLOCATION).unwrap();
    assert_eq!(
        code!(aclrtMallocHost(&mut host, 4096)),
        ACL_ERROR_RT_MEMORY_ALLOCATION
    );
    assert!(recent_message().contains("aclrtMallocHost failed with 207001"));
    assert!(host.is_null());
    assert_eq!(npu_sim::control::host_stats().unwrap(), before);

    // The C control, another code, the other allocation function.
    acl!(npusimFailNextHostAlloc(ACL_ERROR_RT_DRV_INTERNAL_ERROR));
    assert_eq!(
        code!(aclrtMallocHostWithCfg(&mut host, 4096, ptr::null_mut())),
        ACL_ERROR_RT_DRV_INTERNAL_ERROR
    );
    assert_eq!(npu_sim::control::host_stats().unwrap(), before);

    // Only the next allocation fails; a code of 0 is refused.
    acl!(aclrtMallocHost(&mut host, 4096));
    acl!(aclrtFreeHost(host));
    assert_eq!(
        code!(npusimFailNextHostAlloc(ACL_SUCCESS)),
        ACL_ERROR_INVALID_PARAM
    );
    assert!(npu_sim::control::fail_next_host_alloc(ACL_SUCCESS).is_err());
    acl!(aclrtMallocHost(&mut host, 4096));
    acl!(aclrtFreeHost(host));
}

#[test]
fn running_out_of_notifies() {
    // Notifies are counted apart from streams, so this shares device 1 with the subscription
    // test (not device 0, whose stream test counts the streams this one makes).
    set_device(1);
    let create = || {
        let mut notify = ptr::null_mut();
        acl!(aclrtCreateNotify(&mut notify, 0));
        notify
    };
    // A notify destroyed while a queued task still names it gives its place back at once, as
    // a program that destroyed it may count on (here the task waits behind a gate; a task the
    // device just finished may still be dropped by its worker when the stream's
    // synchronisation returns).
    let (stream, opener) = (create_stream(), create_stream());
    let (gate, queued) = (create(), create());
    acl!(aclrtWaitAndResetNotify(gate, stream, 0));
    acl!(aclrtRecordNotify(queued, stream));
    acl!(aclrtDestroyNotify(queued));
    let notifies: Vec<aclrtNotify> = std::iter::once(gate)
        .chain((1..8192).map(|_| create()))
        .collect();
    let mut extra = ptr::null_mut();
    assert_eq!(
        code!(aclrtCreateNotify(&mut extra, 0)),
        ACL_ERROR_RT_NO_NOTIFY_RESOURCE
    );
    assert!(recent_message().contains("aclrtCreateNotify failed with 207009"));
    acl!(aclrtRecordNotify(gate, opener));
    acl!(aclrtSynchronizeStream(stream));
    for stream in [stream, opener] {
        acl!(aclrtDestroyStream(stream));
    }
    for notify in notifies {
        acl!(aclrtDestroyNotify(notify));
    }
    acl!(aclrtCreateNotify(&mut extra, 0));
    acl!(aclrtDestroyNotify(extra));
}

#[test]
fn running_out_of_labels() {
    // Labels are counted for the process (65,535), apart from every device resource.
    set_device(0);
    let labels: Vec<aclrtLabel> = (0..65_535)
        .map(|_| {
            let mut label = ptr::null_mut();
            acl!(aclrtCreateLabel(&mut label));
            label
        })
        .collect();
    let mut extra = ptr::null_mut();
    assert_eq!(
        code!(aclrtCreateLabel(&mut extra)),
        ACL_ERROR_RT_RESOURCE_ALLOC_FAIL
    );
    assert!(recent_message().contains("aclrtCreateLabel failed with 207005"));
    // A destroyed label a list holds counts until the list goes too.
    let mut list = ptr::null_mut();
    let mut first = [labels[0]];
    acl!(aclrtCreateLabelList(first.as_mut_ptr(), 1, &mut list));
    acl!(aclrtDestroyLabel(labels[0]));
    assert_eq!(
        code!(aclrtCreateLabel(&mut extra)),
        ACL_ERROR_RT_RESOURCE_ALLOC_FAIL
    );
    recent_message();
    acl!(aclrtDestroyLabelList(list));
    acl!(aclrtCreateLabel(&mut extra));
    acl!(aclrtDestroyLabel(extra));
    for label in &labels[1..] {
        acl!(aclrtDestroyLabel(*label));
    }
}

#[test]
fn a_request_beyond_the_machine_is_an_allocation_error() {
    let _host_memory = take_turn(&HOST_MEMORY);
    set_device(0);
    const TIB: usize = 1 << 40;
    let before = npu_sim::control::host_stats().unwrap();
    let mut host = ptr::null_mut();
    // The default pinned limit is the machine's physical memory: refused before any page is
    // mapped or locked.
    assert_eq!(
        code!(aclrtMallocHost(&mut host, TIB)),
        ACL_ERROR_RT_MEMORY_ALLOCATION
    );
    assert!(recent_message().contains("pinned host memory"));
    assert_eq!(
        code!(aclrtMallocHostWithCfg(
            &mut host,
            TIB as u64,
            ptr::null_mut()
        )),
        ACL_ERROR_RT_MEMORY_ALLOCATION
    );
    assert!(host.is_null());
    assert_eq!(npu_sim::control::host_stats().unwrap(), before);
    // Device memory is capped by the device's configured capacity.
    let mut dev = ptr::null_mut();
    assert_eq!(
        code!(aclrtMalloc(&mut dev, TIB, ACL_MEM_MALLOC_HUGE_FIRST)),
        ACL_ERROR_RT_MEMORY_ALLOCATION
    );
    assert!(dev.is_null());
}

#[test]
fn running_out_of_events() {
    std::thread::spawn(|| {
        set_device(1);
        let available = || {
            let mut count = u32::MAX;
            acl!(aclrtGetEventAvailNum(&mut count));
            count
        };
        let sync_event = || {
            let mut event = ptr::null_mut();
            let code = code!(aclrtCreateEventWithFlag(&mut event, ACL_EVENT_SYNC));
            (code, event)
        };
        assert_eq!(available(), 65536);
        let events: Vec<aclrtEvent> = (0..65536)
            .map(|_| {
                let (code, event) = sync_event();
                assert_eq!(code, 0);
                event
            })
            .collect();
        assert_eq!(available(), 0);
        assert_eq!(sync_event().0, ACL_ERROR_RT_NO_EVENT_RESOURCE);
        assert!(recent_message().contains("aclrtCreateEventWithFlag failed with 207007"));
        let mut legacy = ptr::null_mut();
        assert_eq!(
            code!(aclrtCreateEvent(&mut legacy)),
            ACL_ERROR_RT_NO_EVENT_RESOURCE
        );
        let mut timeline = ptr::null_mut();
        acl!(aclrtCreateEventWithFlag(&mut timeline, ACL_EVENT_TIME_LINE));
        acl!(aclrtDestroyEvent(timeline));
        // The creation of an Ex event is not limited by the hardware, SYNC or not.
        let mut ex = ptr::null_mut();
        acl!(aclrtCreateEventExWithFlag(&mut ex, ACL_EVENT_SYNC));
        acl!(aclrtRecordEvent(ex, ptr::null_mut()));
        acl!(aclrtSynchronizeEvent(ex));
        acl!(aclrtDestroyEvent(ex));
        for event in events {
            acl!(aclrtDestroyEvent(event));
        }
        assert_eq!(available(), 65536);
        acl!(aclrtResetDevice(1));
    })
    .join()
    .unwrap();
}

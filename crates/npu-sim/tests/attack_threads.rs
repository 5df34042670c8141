//! Attacks from many threads at once through the C ABI. CANN's runtime is usable from several
//! threads: contexts are per thread, streams, events and memory are shared. Each test races
//! calls the reference allows on different threads (device lifecycle against stream creation,
//! destruction against queries and waits, frees against queued copies, report threads against
//! callbacks) and checks that every call returns a code, never a crash or a hang, and that the
//! device's counters end consistent. Interleavings come from a fixed-seed generator, so a failure
//! replays; every wait is bounded (`bounded`). Each test has a device of its own; the file is
//! meant to run under valgrind as well.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use common::*;
use npu_sim::abi::*;
use npu_sim::control;
use npu_sys::*;

/// splitmix64: a small generator with a fixed seed per test, so that interleavings replay.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Installs the file's simulator once: a device for each test (1 GiB each, committed lazily).
fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        npu_sim::SimConfig::default()
            .devices(13)
            .memory_per_device(1 << 30)
            .install()
            .unwrap();
    });
}

/// The device's streams as the reference counts them (1,984 on an Atlas A2).
const MAX_STREAMS: u64 = 1984;

fn available_streams() -> u32 {
    let mut count = u32::MAX;
    acl!(aclrtGetStreamAvailableNum(&mut count));
    count
}

fn live_streams(device: i32) -> u64 {
    control::device_stats(device).unwrap().live_streams
}

/// A legacy event whose record has completed. The threads' random waits are on such events: a
/// wait on a legacy event never recorded holds its stream until a record, which the random
/// calls may queue behind that very wait.
fn recorded_event() -> aclrtEvent {
    let event = create_event();
    acl!(aclrtRecordEvent(event, ptr::null_mut()));
    acl!(aclrtSynchronizeStream(ptr::null_mut()));
    event
}

/// Promise (docs, aclrtGetStreamAvailableNum; the reference's 1,984 streams per device): the
/// first explicit context of a device binds the device's default stream, and a primary context
/// created later takes that bound stream as its own default stream, so neither aclrtSetDevice
/// nor aclrtResetDevice changes how many streams the device holds. With an explicit context
/// filling the device to its limit, aclrtSetDevice / aclrtResetDevice cycles on one thread and
/// stream creations in the explicit context on three others: every set must succeed and every
/// creation must be refused (207008), the device never holding more than 1,984 streams.
#[test]
fn set_and_reset_device_racing_stream_creation_at_the_stream_limit() {
    install();
    const DEVICE: i32 = 0;
    let mut ctx = ptr::null_mut();
    acl!(aclrtCreateContext(&mut ctx, DEVICE));
    let mut streams = Vec::new();
    loop {
        let mut stream = ptr::null_mut();
        match code!(aclrtCreateStream(&mut stream)) {
            0 => streams.push(Raw::of(stream)),
            ACL_ERROR_RT_NO_STREAM_RESOURCE => break,
            code => panic!("aclrtCreateStream: {code}: {}", recent_message()),
        }
    }
    recent_message();
    assert_eq!(available_streams(), 0);
    assert_eq!(
        live_streams(DEVICE),
        MAX_STREAMS,
        "the device's bound default stream is one of its streams"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(4));
    let shared = Raw::of(ctx);
    let racers: Vec<_> = (0..3)
        .map(|_| {
            let (stop, start) = (stop.clone(), start.clone());
            thread::spawn(move || {
                acl!(aclrtSetCurrentContext(shared.ptr()));
                start.wait();
                let mut created = 0u32;
                let mut other = Vec::new();
                while !stop.load(Ordering::Acquire) {
                    let mut stream = ptr::null_mut();
                    match code!(aclrtCreateStream(&mut stream)) {
                        0 => {
                            created += 1;
                            acl!(aclrtDestroyStream(stream));
                        }
                        ACL_ERROR_RT_NO_STREAM_RESOURCE => {}
                        code => other.push(code),
                    }
                    recent_message();
                }
                (created, other)
            })
        })
        .collect();
    let cycles = bounded("aclrtSetDevice / aclrtResetDevice cycles", move || {
        start.wait();
        let mut failed = Vec::new();
        for _ in 0..300 {
            match code!(aclrtSetDevice(DEVICE)) {
                0 => acl!(aclrtResetDevice(DEVICE)),
                code => failed.push((code, recent_message())),
            }
        }
        stop.store(true, Ordering::Release);
        failed
    });
    let mut created = 0;
    for racer in racers {
        let (count, other) = bounded("stream creations", move || racer.join().unwrap());
        assert!(other.is_empty(), "unexpected codes: {other:?}");
        created += count;
    }
    assert!(
        cycles.is_empty(),
        "aclrtSetDevice failed {} times on a device whose bound default stream it takes, first: {:?}",
        cycles.len(),
        cycles.first()
    );
    assert_eq!(
        created, 0,
        "streams created beyond the limit while the device's default stream changed hands"
    );
    acl!(aclrtSetCurrentContext(ctx));
    assert_eq!(live_streams(DEVICE), MAX_STREAMS);
    assert_eq!(available_streams(), 0);
    for stream in streams {
        acl!(aclrtDestroyStream(stream.ptr()));
    }
    acl!(aclrtDestroyContext(ctx));
    assert_eq!(live_streams(DEVICE), 0, "every stream given back");
}

/// Slots of handles shared between the threads of a test (0: empty). A thread reads a slot and
/// uses whatever handle it finds there, live or destroyed meanwhile by another thread.
struct Slots(Vec<AtomicUsize>);

impl Slots {
    fn new(count: usize) -> Self {
        Self((0..count).map(|_| AtomicUsize::new(0)).collect())
    }

    fn pick(&self, rng: &mut Rng) -> &AtomicUsize {
        &self.0[rng.below(self.0.len() as u64) as usize]
    }

    /// Empties every slot, returning the handles left.
    fn drain(&self) -> Vec<Raw> {
        self.0
            .iter()
            .map(|slot| slot.swap(0, Ordering::AcqRel))
            .filter(|&raw| raw != 0)
            .map(|raw| Raw::of(raw as *mut c_void))
            .collect()
    }
}

/// Puts `handle` into the empty `slot`; false if another thread filled it first (the caller
/// then destroys its own).
fn fill<T>(slot: &AtomicUsize, handle: *mut T) -> bool {
    slot.compare_exchange(0, handle as usize, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
}

/// Empties `slot` if it still holds `handle`; false if another thread emptied or refilled it.
fn empty<T>(slot: &AtomicUsize, handle: *mut T) -> bool {
    slot.compare_exchange(handle as usize, 0, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
}

/// Fails the test with what the call returned unless it is one of `allowed`.
#[track_caller]
fn expect_one_of(what: &str, code: aclError, allowed: &[aclError]) {
    if !allowed.contains(&code) {
        panic!("{what} returned {code}: {}", recent_message());
    }
}

/// Runs `body(thread index, generator)` on `threads` threads at once, each with its own
/// generator seeded from `seed`, and waits (bounded) for all of them.
fn on_threads(
    what: &'static str,
    threads: usize,
    seed: u64,
    body: impl Fn(usize, &mut Rng) + Send + Sync + 'static,
) {
    let body = Arc::new(body);
    let start = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|index| {
            let (body, start) = (body.clone(), start.clone());
            thread::spawn(move || {
                let mut rng = Rng(seed ^ (index as u64).wrapping_mul(0x1000_0000_01b3));
                start.wait();
                body(index, &mut rng);
            })
        })
        .collect();
    bounded(what, move || {
        for handle in handles {
            handle.join().unwrap();
        }
    });
}

const OK: aclError = ACL_SUCCESS;
const STALE: aclError = ACL_ERROR_RT_INVALID_HANDLE;
const DROPPED: aclError = ACL_ERROR_RT_STREAM_ABORT;
/// A wait that gave up (aclrtStreamWaitEventWithTimeout), reported by what comes after it.
const TIMED_OUT: aclError = ACL_ERROR_RT_WAIT_TIMEOUT;

/// Promise (reference: streams and events may be shared between the threads of a context;
/// docs: a destroyed handle is stale, 107017, never a dangling pointer; a forced destruction
/// fails the waits on what it dropped with 107023): eight threads of one device create,
/// destroy (plain and forced), submit to, record, wait on, synchronise and query streams and
/// events they share, each using handles the others destroy under it. Every call returns one
/// of the codes these races allow; the device's live stream and event counts return to where
/// they were. A wait issued after a reset of its event, or before its first record, waits for
/// the event's next record (the reference's figure for aclrtResetEvent: a reset restores the
/// event's initial state), which no thread may make: each wait gives up after
/// a second (107019, reported by its stream's synchronisation and by the records behind it),
/// as a program mixing resets and waits this freely would need on the hardware too.
#[test]
fn shared_streams_and_events_destroyed_under_concurrent_use_leave_codes_and_counts() {
    install();
    const DEVICE: i32 = 1;
    set_device(DEVICE);
    let dev = Raw::of(malloc(1 << 16));
    let before = control::device_stats(DEVICE).unwrap();
    let streams = Arc::new(Slots::new(6));
    let events = Arc::new(Slots::new(6));
    {
        let (streams, events) = (streams.clone(), events.clone());
        on_threads(
            "streams and events shared by eight threads",
            8,
            0x5eed_0001,
            move |index, rng| {
                set_device(DEVICE);
                let region = dev.ptr::<u8>().wrapping_add(index * 4096).cast::<c_void>();
                for _ in 0..3000 {
                    let stream_slot = streams.pick(rng);
                    let event_slot = events.pick(rng);
                    let stream = stream_slot.load(Ordering::Acquire) as aclrtStream;
                    let event = event_slot.load(Ordering::Acquire) as aclrtEvent;
                    match rng.below(14) {
                        0 if stream.is_null() => {
                            let mut created = ptr::null_mut();
                            acl!(aclrtCreateStream(&mut created));
                            if !fill(stream_slot, created) {
                                acl!(aclrtDestroyStream(created));
                            }
                        }
                        1 if event.is_null() => {
                            let mut created = ptr::null_mut();
                            acl!(aclrtCreateEventWithFlag(&mut created, ACL_EVENT_SYNC));
                            if !fill(event_slot, created) {
                                acl!(aclrtDestroyEvent(created));
                            }
                        }
                        2 | 3 if !stream.is_null() => {
                            let force = rng.below(2) == 0;
                            let code = if force {
                                code!(aclrtDestroyStreamForce(stream))
                            } else {
                                code!(aclrtDestroyStream(stream))
                            };
                            expect_one_of("aclrtDestroyStream(Force)", code, &[OK, STALE]);
                            empty(stream_slot, stream);
                        }
                        4 if !event.is_null() => {
                            let code = code!(aclrtDestroyEvent(event));
                            expect_one_of("aclrtDestroyEvent", code, &[OK, STALE]);
                            empty(event_slot, event);
                        }
                        5 | 6 if !stream.is_null() => {
                            let code =
                                code!(aclrtMemsetAsync(region, 4096, index as i32, 4096, stream));
                            expect_one_of("aclrtMemsetAsync", code, &[OK, STALE, DROPPED]);
                        }
                        7 if !stream.is_null() && !event.is_null() => {
                            let code = code!(aclrtRecordEvent(event, stream));
                            expect_one_of("aclrtRecordEvent", code, &[OK, STALE, DROPPED]);
                        }
                        8 if !stream.is_null() && !event.is_null() => {
                            let code = code!(aclrtStreamWaitEventWithTimeout(stream, event, 1));
                            expect_one_of("aclrtStreamWaitEvent", code, &[OK, STALE, DROPPED]);
                        }
                        9 if !stream.is_null() => {
                            let code = code!(aclrtSynchronizeStreamWithTimeout(stream, 20_000));
                            expect_one_of(
                                "aclrtSynchronizeStreamWithTimeout",
                                code,
                                &[OK, STALE, DROPPED, TIMED_OUT],
                            );
                        }
                        10 if !event.is_null() => {
                            let code = code!(aclrtSynchronizeEventWithTimeout(event, 20_000));
                            expect_one_of(
                                "aclrtSynchronizeEventWithTimeout",
                                code,
                                &[OK, STALE, DROPPED, TIMED_OUT],
                            );
                        }
                        11 if !event.is_null() => {
                            let mut status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
                            let code = code!(aclrtQueryEventStatus(event, &mut status));
                            expect_one_of("aclrtQueryEventStatus", code, &[OK, STALE, DROPPED]);
                            let mut wait = ACL_EVENT_WAIT_STATUS_NOT_READY;
                            let code = code!(aclrtQueryEventWaitStatus(event, &mut wait));
                            expect_one_of("aclrtQueryEventWaitStatus", code, &[OK, STALE, DROPPED]);
                        }
                        12 if !stream.is_null() => {
                            let mut status = ACL_STREAM_STATUS_NOT_READY;
                            let code = code!(aclrtStreamQuery(stream, &mut status));
                            expect_one_of("aclrtStreamQuery", code, &[OK, STALE, DROPPED]);
                        }
                        13 if !stream.is_null() && !event.is_null() => {
                            let code = code!(aclrtResetEvent(event, stream));
                            expect_one_of("aclrtResetEvent", code, &[OK, STALE, DROPPED]);
                        }
                        _ => {}
                    }
                    recent_message();
                }
            },
        );
    }
    for stream in streams.drain() {
        expect_one_of(
            "aclrtDestroyStream",
            code!(aclrtDestroyStream(stream.ptr())),
            &[OK],
        );
    }
    for event in events.drain() {
        acl!(aclrtDestroyEvent(event.ptr()));
    }
    let after = control::device_stats(DEVICE).unwrap();
    assert_eq!(
        (after.live_streams, after.live_events),
        (before.live_streams, before.live_events),
        "streams or events left counted"
    );
    acl!(aclrtFree(dev.ptr()));
}

const NO_CONTEXT: aclError = ACL_ERROR_RT_CONTEXT_NULL;
const OTHER_CONTEXT: aclError = ACL_ERROR_RT_STREAM_CONTEXT;
const NOT_SET: aclError = ACL_ERROR_RT_CONTEXT_RELEASE_ERROR;

/// Promise (reference, aclrtResetDeviceForce: the primary context, its streams and their work
/// go, whatever the count; docs: handles of what went are stale, 107017, and a thread whose
/// device was reset has no context, 107002): one thread force-resets and sets the device
/// again and again while six others, bound to it, create and destroy streams and events,
/// allocate, fill and free memory, submit work to their streams and the default stream,
/// synchronise, and create and destroy explicit contexts of the device. Every call returns a
/// code these races allow, none hangs, and once every thread has finished the device holds no
/// stream, no event and no memory, and aclrtGetMemInfo agrees.
#[test]
fn forced_resets_racing_every_kind_of_call_leave_codes_and_an_empty_device() {
    install();
    const DEVICE: i32 = 2;
    let stop = Arc::new(AtomicBool::new(false));
    let resetter = {
        let stop = stop.clone();
        thread::spawn(move || {
            let mut rng = Rng(0x5eed_0002);
            let mut resets = 0;
            while !stop.load(Ordering::Acquire) || resets < 20 {
                set_device(DEVICE);
                // Leave the device set for a while, so that the others' work lands in it.
                for _ in 0..rng.below(64) {
                    thread::yield_now();
                }
                let code = code!(aclrtResetDeviceForce(DEVICE));
                expect_one_of("aclrtResetDeviceForce", code, &[OK, NOT_SET]);
                recent_message();
                resets += 1;
            }
            resets
        })
    };
    let streams = Arc::new(Slots::new(8));
    let events = Arc::new(Slots::new(4));
    let memory = Arc::new(Slots::new(8));
    {
        let (streams, events, memory) = (streams.clone(), events.clone(), memory.clone());
        on_threads(
            "calls racing forced resets",
            6,
            0x5eed_0003,
            move |_, rng| {
                let mut own_context: aclrtContext = ptr::null_mut();
                for _ in 0..600 {
                    if rng.below(8) == 0 {
                        // Bind again: a forced reset released this thread's reference.
                        let code = code!(aclrtSetDevice(DEVICE));
                        expect_one_of("aclrtSetDevice", code, &[OK]);
                    }
                    let stream_slot = streams.pick(rng);
                    let stream = stream_slot.load(Ordering::Acquire) as aclrtStream;
                    let event_slot = events.pick(rng);
                    let event = event_slot.load(Ordering::Acquire) as aclrtEvent;
                    let memory_slot = memory.pick(rng);
                    let dev = memory_slot.load(Ordering::Acquire) as *mut c_void;
                    let ctx_codes = [OK, STALE, DROPPED, NO_CONTEXT, OTHER_CONTEXT];
                    match rng.below(13) {
                        0 if stream.is_null() => {
                            let mut created = ptr::null_mut();
                            let code = code!(aclrtCreateStream(&mut created));
                            expect_one_of("aclrtCreateStream", code, &[OK, NO_CONTEXT]);
                            if code == OK && !fill(stream_slot, created) {
                                let code = code!(aclrtDestroyStream(created));
                                expect_one_of("aclrtDestroyStream", code, &ctx_codes);
                            }
                        }
                        1 if !stream.is_null() => {
                            let code = code!(aclrtDestroyStream(stream));
                            expect_one_of("aclrtDestroyStream", code, &ctx_codes);
                            if code != OTHER_CONTEXT && code != NO_CONTEXT {
                                empty(stream_slot, stream);
                            }
                        }
                        2 if dev.is_null() => {
                            let mut created = ptr::null_mut();
                            let code =
                                code!(aclrtMalloc(&mut created, 8192, ACL_MEM_MALLOC_HUGE_FIRST));
                            expect_one_of("aclrtMalloc", code, &[OK, NO_CONTEXT]);
                            if code == OK && !fill(memory_slot, created) {
                                acl!(aclrtFree(created));
                            }
                        }
                        3 if !dev.is_null() => {
                            // Only the thread that empties the slot frees the memory: a second
                            // free of an address another allocation may have taken since is the
                            // caller's bug, not a race of the runtime's.
                            let emptied = empty(memory_slot, dev);
                            if emptied {
                                acl!(aclrtFree(dev));
                            }
                        }
                        4 | 5 if !dev.is_null() => {
                            // The memory may be freed under the memset (507013 at the next
                            // synchronisation, or a refusal now).
                            let code = code!(aclrtMemsetAsync(dev, 8192, 7, 8192, stream));
                            expect_one_of(
                                "aclrtMemsetAsync",
                                code,
                                &[
                                    OK,
                                    STALE,
                                    DROPPED,
                                    NO_CONTEXT,
                                    OTHER_CONTEXT,
                                    ACL_ERROR_RT_PARAM_INVALID,
                                ],
                            );
                        }
                        6 => {
                            let code = code!(aclrtSynchronizeStreamWithTimeout(stream, 20_000));
                            expect_one_of(
                                "aclrtSynchronizeStreamWithTimeout",
                                code,
                                &[OK, STALE, DROPPED, NO_CONTEXT, ACL_ERROR_RT_SYS_DMA],
                            );
                        }
                        7 => {
                            let code = code!(aclrtSynchronizeDeviceWithTimeout(20_000));
                            expect_one_of(
                                "aclrtSynchronizeDeviceWithTimeout",
                                code,
                                &[OK, DROPPED, NO_CONTEXT, ACL_ERROR_RT_SYS_DMA],
                            );
                        }
                        8 if event.is_null() => {
                            let mut created = ptr::null_mut();
                            let code = code!(aclrtCreateEvent(&mut created));
                            expect_one_of("aclrtCreateEvent", code, &[OK, NO_CONTEXT]);
                            if code == OK && !fill(event_slot, created) {
                                acl!(aclrtDestroyEvent(created));
                            }
                        }
                        9 if !event.is_null() => {
                            let code = match rng.below(3) {
                                0 => code!(aclrtRecordEvent(event, stream)),
                                1 => code!(aclrtSynchronizeEventWithTimeout(event, 20_000)),
                                _ => {
                                    let code = code!(aclrtDestroyEvent(event));
                                    empty(event_slot, event);
                                    code
                                }
                            };
                            // A memset the record captured may have met freed memory.
                            expect_one_of(
                                "an event call",
                                code,
                                &[
                                    OK,
                                    STALE,
                                    DROPPED,
                                    NO_CONTEXT,
                                    OTHER_CONTEXT,
                                    ACL_ERROR_RT_SYS_DMA,
                                ],
                            );
                        }
                        10 => {
                            let (mut free, mut total) = (0, 0);
                            let code = code!(aclrtGetMemInfo(ACL_HBM_MEM, &mut free, &mut total));
                            expect_one_of("aclrtGetMemInfo", code, &[OK, NO_CONTEXT]);
                            assert!(free <= total);
                            let mut count = 0;
                            let code = code!(aclrtGetStreamAvailableNum(&mut count));
                            expect_one_of("aclrtGetStreamAvailableNum", code, &[OK, NO_CONTEXT]);
                            assert!(u64::from(count) <= MAX_STREAMS);
                        }
                        11 if own_context.is_null() => {
                            let code = code!(aclrtCreateContext(&mut own_context, DEVICE));
                            expect_one_of("aclrtCreateContext", code, &[OK]);
                        }
                        12 if !own_context.is_null() => {
                            acl!(aclrtDestroyContext(own_context));
                            own_context = ptr::null_mut();
                            // The thread has no context now; the next round may set the device.
                        }
                        _ => {}
                    }
                    recent_message();
                }
                if !own_context.is_null() {
                    acl!(aclrtDestroyContext(own_context));
                }
            },
        );
    }
    stop.store(true, Ordering::Release);
    let resets = bounded("the resetting thread", move || resetter.join().unwrap());
    assert!(resets >= 20);
    // What is left: streams of a primary context released since are stale already.
    set_device(DEVICE);
    for stream in streams.drain() {
        let code = code!(aclrtDestroyStream(stream.ptr()));
        expect_one_of("aclrtDestroyStream", code, &[OK, STALE]);
        recent_message();
    }
    for event in events.drain() {
        acl!(aclrtDestroyEvent(event.ptr()));
    }
    for dev in memory.drain() {
        acl!(aclrtFree(dev.ptr()));
    }
    let (mut free, mut total) = (0, 0);
    acl!(aclrtGetMemInfo(ACL_HBM_MEM, &mut free, &mut total));
    acl!(aclrtResetDeviceForce(DEVICE));
    let stats = control::device_stats(DEVICE).unwrap();
    assert_eq!(
        (
            stats.live_streams,
            stats.live_events,
            stats.live_allocations,
            stats.bytes_allocated
        ),
        (0, 0, 0, 0),
        "what the device still holds"
    );
    assert_eq!(free, total, "aclrtGetMemInfo: all device memory free");
}

const MIB: usize = 1 << 20;
const FREED: aclError = ACL_ERROR_RT_SYS_DMA;

/// Promise (docs, "Memory": aclrtFree is immediate; a task whose memory was freed under it
/// fails with 507013 and touches nothing; a synchronous copy of freed memory is refused): two
/// threads copy between device allocations (asynchronously on streams of their own, and
/// synchronously to and from a host buffer) while two others free and allocate those
/// allocations again. No copy reads or writes unmapped memory (the process would fault),
/// every call returns a code these races allow, and the device's memory counts return to
/// where they were.
#[test]
fn frees_racing_queued_and_synchronous_copies_leave_codes_and_counts() {
    install();
    const DEVICE: i32 = 3;
    set_device(DEVICE);
    let before = control::device_stats(DEVICE).unwrap();
    let memory = Arc::new(Slots::new(6));
    {
        let memory = memory.clone();
        on_threads("copies racing frees", 4, 0x5eed_0004, move |index, rng| {
            set_device(DEVICE);
            let stream = create_stream();
            let mut host = vec![0u8; MIB];
            for _ in 0..150 {
                let slot = memory.pick(rng);
                let dev = slot.load(Ordering::Acquire) as *mut c_void;
                let other = memory.pick(rng).load(Ordering::Acquire) as *mut c_void;
                if index >= 2 {
                    // Freeing threads: free the allocation in a slot, or fill an empty one.
                    if dev.is_null() {
                        let fresh = malloc(MIB);
                        if !fill(slot, fresh) {
                            acl!(aclrtFree(fresh));
                        }
                    } else if empty(slot, dev) {
                        acl!(aclrtFree(dev));
                    }
                    continue;
                }
                if dev.is_null() || other.is_null() {
                    continue;
                }
                let refused = [OK, ACL_ERROR_RT_PARAM_INVALID];
                // A synchronous copy whose memory is freed after it looked the address up
                // meets the free as a task would.
                let sync_refused = [OK, ACL_ERROR_RT_PARAM_INVALID, FREED];
                match rng.below(4) {
                    0 => {
                        let code = code!(aclrtMemcpyAsync(
                            dev,
                            MIB,
                            other,
                            MIB,
                            ACL_MEMCPY_DEVICE_TO_DEVICE,
                            stream
                        ));
                        expect_one_of("aclrtMemcpyAsync", code, &refused);
                        let code = code!(aclrtMemsetAsync(other, MIB, index as i32, MIB, stream));
                        expect_one_of("aclrtMemsetAsync", code, &refused);
                    }
                    1 => {
                        let code = code!(aclrtMemcpy(
                            host.as_mut_ptr().cast(),
                            MIB,
                            dev,
                            MIB,
                            ACL_MEMCPY_DEVICE_TO_HOST
                        ));
                        expect_one_of("aclrtMemcpy (D2H)", code, &sync_refused);
                    }
                    2 => {
                        let code = code!(aclrtMemcpy(
                            dev,
                            MIB,
                            host.as_ptr().cast(),
                            MIB,
                            ACL_MEMCPY_HOST_TO_DEVICE
                        ));
                        expect_one_of("aclrtMemcpy (H2D)", code, &sync_refused);
                    }
                    _ => {
                        let code = code!(aclrtSynchronizeStreamWithTimeout(stream, 20_000));
                        expect_one_of("aclrtSynchronizeStreamWithTimeout", code, &[OK, FREED]);
                    }
                }
                recent_message();
            }
            let code = code!(aclrtSynchronizeStreamWithTimeout(stream, 20_000));
            expect_one_of("aclrtSynchronizeStreamWithTimeout", code, &[OK, FREED]);
            recent_message();
            acl!(aclrtDestroyStream(stream));
        });
    }
    for dev in memory.drain() {
        acl!(aclrtFree(dev.ptr()));
    }
    let after = control::device_stats(DEVICE).unwrap();
    assert_eq!(
        (after.live_allocations, after.bytes_allocated),
        (before.live_allocations, before.bytes_allocated)
    );
}

/// Promise (reference, aclrtMemcpy: a synchronous copy may be called from any thread; docs:
/// copies of overlapping ranges are not ordered with each other): two threads copying
/// different patterns into overlapping ranges of one allocation at once, each copy returning
/// 0, leave every byte of the overlap holding one pattern or the other and every byte outside
/// it the one copy that wrote it.
#[test]
fn synchronous_copies_into_overlapping_ranges_from_two_threads_keep_their_bytes() {
    install();
    const DEVICE: i32 = 8;
    set_device(DEVICE);
    let dev = Raw::of(malloc(3 * MIB));
    for round in 0..20u8 {
        let (a, b) = (2 * round + 1, 2 * round + 2);
        on_threads(
            "overlapping synchronous copies",
            2,
            0x5eed_0005,
            move |index, _| {
                set_device(DEVICE);
                let (offset, value) = if index == 0 { (0, a) } else { (MIB, b) };
                let source = vec![value; 2 * MIB];
                let target = dev.ptr::<u8>().wrapping_add(offset).cast::<c_void>();
                acl!(aclrtMemcpy(
                    target,
                    2 * MIB,
                    source.as_ptr().cast(),
                    2 * MIB,
                    ACL_MEMCPY_HOST_TO_DEVICE
                ));
            },
        );
        let bytes = download::<u8>(dev.ptr(), 3 * MIB);
        assert!(
            bytes[..MIB].iter().all(|&x| x == a),
            "round {round}: the first copy's part"
        );
        assert!(
            bytes[MIB..2 * MIB].iter().all(|&x| x == a || x == b),
            "round {round}: the overlap holds a byte neither copy wrote"
        );
        assert!(
            bytes[2 * MIB..].iter().all(|&x| x == b),
            "round {round}: the second copy's part"
        );
    }
    acl!(aclrtFree(dev.ptr()));
}

/// What one aclrtLaunchCallback's function saw: how often it ran, and on which thread.
#[derive(Default)]
struct CallbackRun {
    runs: AtomicU32,
    thread: AtomicU64,
}

unsafe extern "C" fn count_run(data: *mut c_void) {
    // SAFETY: the test passes a leaked CallbackRun, alive for the rest of the process.
    let run = unsafe { &*data.cast::<CallbackRun>() };
    run.thread.store(this_thread(), Ordering::Release);
    run.runs.fetch_add(1, Ordering::AcqRel);
}

/// Promise (reference: aclrtSubscribeReport / aclrtProcessReport run a stream's callbacks on
/// the thread subscribed to it; docs, point 10: each launch runs at most once, on that thread,
/// inside its aclrtProcessReport; a callback queued for a thread that unsubscribes never runs,
/// and its stream does not hang): two report threads subscribe to, process and unsubscribe from
/// four shared streams at random while two threads launch BLOCK and NO_BLOCK callbacks and
/// memsets on them and synchronise them, and a fifth destroys (plainly or forced) and
/// re-creates the streams. Every call returns a code these races allow; no callback runs twice
/// or on a thread that is not a report thread; every synchronisation and destruction returns.
#[test]
fn report_threads_subscribing_and_leaving_under_callbacks_and_stream_destruction() {
    install();
    const DEVICE: i32 = 4;
    set_device(DEVICE);
    let dev = Raw::of(malloc(4096));
    let before = control::device_stats(DEVICE).unwrap().live_streams;
    let streams = Arc::new(Slots::new(4));
    for slot in &streams.0 {
        slot.store(create_stream() as usize, Ordering::Release);
    }
    let report_threads = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let launched = Arc::new(std::sync::Mutex::new(Vec::<&'static CallbackRun>::new()));
    {
        let (streams, report_threads, launched) =
            (streams.clone(), report_threads.clone(), launched.clone());
        on_threads(
            "report threads, callbacks and destructions",
            5,
            0x5eed_0006,
            move |index, rng| {
                set_device(DEVICE);
                match index {
                    0 => {
                        for _ in 0..60 {
                            let slot = streams.pick(rng);
                            let stream = slot.swap(0, Ordering::AcqRel) as aclrtStream;
                            if !stream.is_null() {
                                let code = if rng.below(2) == 0 {
                                    code!(aclrtDestroyStream(stream))
                                } else {
                                    code!(aclrtDestroyStreamForce(stream))
                                };
                                expect_one_of("aclrtDestroyStream(Force)", code, &[OK]);
                            }
                            slot.store(create_stream() as usize, Ordering::Release);
                            recent_message();
                            thread::yield_now();
                        }
                    }
                    1 | 2 => {
                        let me = this_thread();
                        report_threads[index - 1].store(me, Ordering::Release);
                        for _ in 0..400 {
                            let stream = streams.pick(rng).load(Ordering::Acquire) as aclrtStream;
                            match rng.below(4) {
                                0 if !stream.is_null() => {
                                    let code = code!(aclrtSubscribeReport(me, stream));
                                    expect_one_of(
                                        "aclrtSubscribeReport",
                                        code,
                                        &[OK, STALE, ACL_ERROR_RT_STREAM_SUBSCRIBE],
                                    );
                                }
                                1 if !stream.is_null() => {
                                    let code = code!(aclrtUnSubscribeReport(me, stream));
                                    expect_one_of(
                                        "aclrtUnSubscribeReport",
                                        code,
                                        &[
                                            OK,
                                            STALE,
                                            ACL_ERROR_RT_STREAM_SUBSCRIBE,
                                            ACL_ERROR_RT_THREAD_SUBSCRIBE,
                                        ],
                                    );
                                }
                                _ => {
                                    let code = code!(aclrtProcessReport(1));
                                    expect_one_of(
                                        "aclrtProcessReport",
                                        code,
                                        &[
                                            OK,
                                            ACL_ERROR_RT_REPORT_TIMEOUT,
                                            ACL_ERROR_RT_THREAD_SUBSCRIBE,
                                        ],
                                    );
                                }
                            }
                            recent_message();
                        }
                        // Leave every stream still subscribed: what is queued for this thread is
                        // dropped, so no stream waits for it any more.
                        for slot in &streams.0 {
                            let stream = slot.load(Ordering::Acquire) as aclrtStream;
                            if !stream.is_null() {
                                let _ = code!(aclrtUnSubscribeReport(me, stream));
                            }
                        }
                        recent_message();
                    }
                    _ => {
                        let launch_codes = [OK, STALE, DROPPED, ACL_ERROR_RT_STREAM_NO_CB_REG];
                        for _ in 0..300 {
                            let stream = streams.pick(rng).load(Ordering::Acquire) as aclrtStream;
                            if stream.is_null() {
                                continue;
                            }
                            match rng.below(4) {
                                0 | 1 => {
                                    let run: &'static CallbackRun = Box::leak(Box::default());
                                    let block = if rng.below(2) == 0 {
                                        ACL_CALLBACK_BLOCK
                                    } else {
                                        ACL_CALLBACK_NO_BLOCK
                                    };
                                    let data = ptr::from_ref(run).cast_mut().cast();
                                    let code = code!(aclrtLaunchCallback(
                                        Some(count_run),
                                        data,
                                        block,
                                        stream
                                    ));
                                    expect_one_of("aclrtLaunchCallback", code, &launch_codes);
                                    launched.lock().unwrap().push(run);
                                }
                                2 => {
                                    let code =
                                        code!(aclrtMemsetAsync(dev.ptr(), 4096, 1, 4096, stream));
                                    expect_one_of("aclrtMemsetAsync", code, &[OK, STALE, DROPPED]);
                                }
                                _ => {
                                    // A BLOCK callback may wait for a report thread until it leaves.
                                    let code =
                                        code!(aclrtSynchronizeStreamWithTimeout(stream, 30_000));
                                    expect_one_of(
                                        "aclrtSynchronizeStreamWithTimeout",
                                        code,
                                        &[OK, STALE, DROPPED],
                                    );
                                }
                            }
                            recent_message();
                        }
                    }
                }
            },
        );
    }
    for stream in streams.drain() {
        let raw = stream;
        bounded("destroying a stream the report threads left", move || {
            set_device(DEVICE);
            acl!(aclrtDestroyStream(raw.ptr()));
        });
    }
    let report_threads: Vec<u64> = report_threads
        .iter()
        .map(|t| t.load(Ordering::Acquire))
        .collect();
    let launched = launched.lock().unwrap();
    let mut ran = 0;
    for run in launched.iter() {
        let runs = run.runs.load(Ordering::Acquire);
        assert!(runs <= 1, "a callback ran {runs} times");
        if runs == 1 {
            ran += 1;
            let thread = run.thread.load(Ordering::Acquire);
            assert!(
                report_threads.contains(&thread),
                "a callback ran on thread {thread:#x}"
            );
        }
    }
    assert!(!launched.is_empty());
    assert!(ran > 0, "no callback ran");
    assert_eq!(control::device_stats(DEVICE).unwrap().live_streams, before);
    acl!(aclrtFree(dev.ptr()));
}

/// Promise (reference, aclrtSetDevice / aclrtResetDevice: the primary context is
/// reference-counted, shared by the threads that set the device, and torn down when the last
/// reference goes): six threads setting and resetting one device in loops never take the
/// context from a seventh that holds a reference all along: its submissions to the default
/// stream and its synchronisations all succeed. Once the holder resets too, the primary context
/// is gone (aclrtGetPrimaryCtxState says 0), a further reset fails with 507007, and the device
/// holds no stream.
#[test]
fn set_and_reset_cycles_on_many_threads_never_take_the_context_of_a_holder() {
    install();
    const DEVICE: i32 = 5;
    let stop = Arc::new(AtomicBool::new(false));
    let holder = {
        let stop = stop.clone();
        thread::spawn(move || {
            set_device(DEVICE);
            let dev = malloc(4096);
            let mut rounds = 0u32;
            while !stop.load(Ordering::Acquire) || rounds < 50 {
                acl!(aclrtMemsetAsync(
                    dev,
                    4096,
                    rounds as i32 & 0xff,
                    4096,
                    ptr::null_mut()
                ));
                let mut stream = ptr::null_mut();
                acl!(aclrtCreateStream(&mut stream));
                acl!(aclrtMemsetAsync(dev, 64, 1, 64, stream));
                acl!(aclrtSynchronizeStream(ptr::null_mut()));
                acl!(aclrtDestroyStream(stream));
                rounds += 1;
            }
            acl!(aclrtSynchronizeDevice());
            acl!(aclrtFree(dev));
            acl!(aclrtResetDevice(DEVICE));
            rounds
        })
    };
    on_threads("set and reset cycles", 6, 0x5eed_0007, move |_, rng| {
        for _ in 0..150 {
            let depth = 1 + rng.below(3);
            for _ in 0..depth {
                acl!(aclrtSetDevice(DEVICE));
            }
            if rng.below(2) == 0 {
                let mut stream = ptr::null_mut();
                acl!(aclrtCreateStream(&mut stream));
                acl!(aclrtDestroyStream(stream));
            }
            for _ in 0..depth {
                acl!(aclrtResetDevice(DEVICE));
            }
        }
    });
    stop.store(true, Ordering::Release);
    bounded("the holder", move || holder.join().unwrap());
    let mut active = -1;
    acl!(aclrtGetPrimaryCtxState(
        DEVICE,
        ptr::null_mut(),
        &mut active
    ));
    assert_eq!(active, 0, "the last reset tore the primary context down");
    assert_eq!(code!(aclrtResetDevice(DEVICE)), NOT_SET);
    recent_message();
    assert_eq!(live_streams(DEVICE), 0);
}

/// Promise (reference, aclrtUnSubscribeReport: the thread no longer processes the stream's
/// callbacks; docs: a callback queued for a thread that unsubscribes never runs, and its stream
/// does not hang): a report thread subscribed to two streams unsubscribes from one of them
/// while a BLOCK callback of that stream is on its way to it (the stream's worker delivering
/// it races the unsubscription). Whichever wins, the stream finishes (the callback was dropped
/// or never delivered) and the thread, still subscribed to the other stream, never runs the
/// callback.
#[test]
fn a_report_thread_leaving_one_of_its_streams_drops_that_streams_queued_callbacks() {
    install();
    const DEVICE: i32 = 6;
    set_device(DEVICE);
    let dev = malloc(4096);
    let other = create_stream();
    let me = this_thread();
    acl!(aclrtSubscribeReport(me, other));
    let mut rng = Rng(0x5eed_0008);
    for round in 0..100 {
        let stream = create_stream();
        acl!(aclrtSubscribeReport(me, stream));
        let run: &'static CallbackRun = Box::leak(Box::default());
        let block = if round % 2 == 0 {
            ACL_CALLBACK_BLOCK
        } else {
            ACL_CALLBACK_NO_BLOCK
        };
        acl!(aclrtLaunchCallback(
            Some(count_run),
            ptr::from_ref(run).cast_mut().cast(),
            block,
            stream
        ));
        acl!(aclrtMemsetAsync(dev, 4096, round, 4096, stream));
        // Vary how far the worker gets before the thread leaves.
        for _ in 0..rng.below(200) {
            thread::yield_now();
        }
        acl!(aclrtUnSubscribeReport(me, stream));
        let code = code!(aclrtSynchronizeStreamWithTimeout(stream, 20_000));
        assert_eq!(code, OK, "round {round}: {}", recent_message());
        assert_eq!(
            code!(aclrtProcessReport(1)),
            ACL_ERROR_RT_REPORT_TIMEOUT,
            "round {round}: the thread ran a callback of a stream it left"
        );
        recent_message();
        assert_eq!(run.runs.load(Ordering::Acquire), 0, "round {round}");
        acl!(aclrtDestroyStream(stream));
    }
    acl!(aclrtUnSubscribeReport(me, other));
    acl!(aclrtDestroyStream(other));
    acl!(aclrtFree(dev));
}

const DEVICE_ABORTING: aclError = ACL_ERROR_RT_DEVICE_TASK_ABORT;

/// Promise (reference, aclrtStreamAbort and aclrtDeviceTaskAbort: the tasks not run yet are
/// dropped and the streams are left empty and usable; docs: meanwhile submissions are refused
/// with 107023 or 107022, waits on dropped records fail with 107023): one thread aborts
/// shared streams and the whole device again and again while three others submit memsets,
/// records and waits to those streams and synchronise them and their events, and a fifth
/// destroys and re-creates the streams. Every call returns a code these races allow, none
/// hangs, and afterwards every stream runs new work to completion.
#[test]
fn stream_and_device_aborts_racing_submissions_waits_and_destructions() {
    install();
    const DEVICE: i32 = 7;
    set_device(DEVICE);
    let dev = Raw::of(malloc(1 << 16));
    let before = control::device_stats(DEVICE).unwrap();
    let streams = Arc::new(Slots::new(4));
    let events = Arc::new(Slots::new(4));
    for slot in &streams.0 {
        slot.store(create_stream() as usize, Ordering::Release);
    }
    for slot in &events.0 {
        slot.store(recorded_event() as usize, Ordering::Release);
    }
    {
        let (streams, events) = (streams.clone(), events.clone());
        on_threads(
            "aborts racing submissions",
            5,
            0x5eed_0009,
            move |index, rng| {
                set_device(DEVICE);
                let region = dev.ptr::<u8>().wrapping_add(index * 8192).cast::<c_void>();
                for _ in 0..300 {
                    let stream_slot = streams.pick(rng);
                    let stream = stream_slot.load(Ordering::Acquire) as aclrtStream;
                    let event = events.pick(rng).load(Ordering::Acquire) as aclrtEvent;
                    let refused = [OK, STALE, DROPPED, DEVICE_ABORTING];
                    match index {
                        0 => {
                            let code = if rng.below(4) == 0 {
                                code!(aclrtDeviceTaskAbort(DEVICE, 0))
                            } else {
                                code!(aclrtStreamAbort(stream))
                            };
                            expect_one_of("an abort", code, &refused);
                        }
                        4 => {
                            if rng.below(8) == 0 {
                                let fresh = create_stream();
                                let old = stream_slot.swap(fresh as usize, Ordering::AcqRel);
                                let code = code!(aclrtDestroyStream(old as aclrtStream));
                                expect_one_of("aclrtDestroyStream", code, &[OK]);
                            } else {
                                let code = code!(aclrtSynchronizeDeviceWithTimeout(20_000));
                                expect_one_of("aclrtSynchronizeDeviceWithTimeout", code, &refused);
                            }
                        }
                        _ => {
                            let code = match rng.below(6) {
                                0 | 1 => code!(aclrtMemsetAsync(region, 8192, 3, 8192, stream)),
                                2 => code!(aclrtRecordEvent(event, stream)),
                                3 => code!(aclrtStreamWaitEvent(stream, event)),
                                4 => code!(aclrtSynchronizeStreamWithTimeout(stream, 20_000)),
                                _ => code!(aclrtSynchronizeEventWithTimeout(event, 20_000)),
                            };
                            expect_one_of("a submission or wait", code, &refused);
                        }
                    }
                    recent_message();
                }
            },
        );
    }
    for stream in streams.drain() {
        // A wait on a record an abort dropped failed the stream's work: reported once.
        let code = code!(aclrtSynchronizeStreamWithTimeout(stream.ptr(), 20_000));
        expect_one_of("aclrtSynchronizeStreamWithTimeout", code, &[OK, DROPPED]);
        recent_message();
        acl!(aclrtMemsetAsync(dev.ptr(), 4096, 9, 4096, stream.ptr()));
        acl!(aclrtSynchronizeStreamWithTimeout(stream.ptr(), 20_000));
        acl!(aclrtDestroyStream(stream.ptr()));
    }
    for event in events.drain() {
        acl!(aclrtDestroyEvent(event.ptr()));
    }
    assert_eq!(download::<u8>(dev.ptr(), 4096), vec![9; 4096]);
    let after = control::device_stats(DEVICE).unwrap();
    assert_eq!(
        (after.live_streams, after.live_events),
        (before.live_streams, before.live_events)
    );
    acl!(aclrtFree(dev.ptr()));
}

/// Promise (docs, "Copies" and "Memory": a task touching registered host memory that is no
/// longer registered when it runs faults with 507013 and touches nothing; unregistered host
/// memory is copied as C's memcpy would): one thread registers and unregisters a host buffer
/// again and again while two others queue uploads from it and downloads back, and synchronise.
/// Every call returns a code these races allow, a round trip that succeeded brings back the
/// buffer's bytes, and no registration is left.
#[test]
fn host_registrations_racing_queued_copies_of_the_registered_range() {
    install();
    const DEVICE: i32 = 9;
    const LEN: usize = 64 * 1024;
    set_device(DEVICE);
    let before = control::host_stats().unwrap().registrations;
    let host = Raw::of(pageable(LEN));
    // SAFETY: `pageable` returned LEN writable bytes, leaked for the process.
    unsafe { std::slice::from_raw_parts_mut(host.ptr::<u8>(), LEN) }.fill(0x5a);
    let dev = Raw::of(malloc(3 * LEN));
    let stop = Arc::new(AtomicBool::new(false));
    let registrar = {
        let stop = stop.clone();
        thread::spawn(move || {
            set_device(DEVICE);
            let mut cycles = 0;
            while !stop.load(Ordering::Acquire) || cycles < 20 {
                let mut mapped = ptr::null_mut();
                acl!(aclrtHostRegister(
                    host.ptr(),
                    LEN as u64,
                    ACL_HOST_REGISTER_MAPPED,
                    &mut mapped
                ));
                acl!(aclrtHostUnregister(host.ptr()));
                cycles += 1;
            }
        })
    };
    on_threads(
        "copies racing registrations",
        2,
        0x5eed_000a,
        move |index, rng| {
            set_device(DEVICE);
            let stream = create_stream();
            let region = dev.ptr::<u8>().wrapping_add(index * LEN).cast::<c_void>();
            let mut back = vec![0u8; LEN];
            for round in 0..150 {
                let len = LEN - 4096 * rng.below(8) as usize;
                acl!(aclrtMemsetAsync(region, LEN, 0, LEN, stream));
                let code = code!(aclrtMemcpyAsync(
                    region,
                    len,
                    host.ptr(),
                    len,
                    ACL_MEMCPY_HOST_TO_DEVICE,
                    stream
                ));
                expect_one_of("aclrtMemcpyAsync (H2D)", code, &[OK, FREED]);
                back.fill(0);
                let down = code!(aclrtMemcpyAsync(
                    back.as_mut_ptr().cast(),
                    len,
                    region,
                    len,
                    ACL_MEMCPY_DEVICE_TO_HOST,
                    stream
                ));
                expect_one_of("aclrtMemcpyAsync (D2H)", down, &[OK, FREED]);
                let synced = code!(aclrtSynchronizeStreamWithTimeout(stream, 20_000));
                expect_one_of("aclrtSynchronizeStreamWithTimeout", synced, &[OK, FREED]);
                recent_message();
                if code == OK && down == OK && synced == OK {
                    assert!(
                        back[..len].iter().all(|&b| b == 0x5a),
                        "round {round}: the round trip brought back other bytes"
                    );
                }
            }
            acl!(aclrtDestroyStream(stream));
        },
    );
    stop.store(true, Ordering::Release);
    bounded("the registering thread", move || registrar.join().unwrap());
    assert_eq!(control::host_stats().unwrap().registrations, before);
    acl!(aclrtFree(dev.ptr()));
}

/// One thread's share of the contexts attack: the explicit contexts it made, the streams it
/// made in each context (index 0: the primary context), and its aclrtSetDevice references.
#[derive(Default)]
struct Holdings {
    contexts: Vec<aclrtContext>,
    /// (context index, 0 for the primary context, else explicit index + 1; stream)
    streams: Vec<(usize, aclrtStream)>,
    references: u32,
}

impl Holdings {
    /// Makes context `at` current (0: the primary context, through a reference held).
    fn enter(&self, at: usize, device: i32) {
        if at == 0 {
            acl!(aclrtSetDevice(device));
            acl!(aclrtResetDevice(device));
        } else {
            acl!(aclrtSetCurrentContext(self.contexts[at - 1]));
        }
    }

    /// Destroys the streams made in context `at`.
    fn drop_streams_of(&mut self, at: usize, device: i32) {
        self.enter(at, device);
        self.streams.retain(|&(of, stream)| {
            if of == at {
                acl!(aclrtDestroyStream(stream));
            }
            of != at
        });
    }
}

/// Promise (docs, aclrtGetStreamAvailableNum: the device's streams, default streams included;
/// the first explicit context binds the device's default stream, a primary context takes it
/// as its own, and the device gives it back once neither is left): six threads create and
/// destroy explicit contexts, set and reset the device, and create and destroy streams in
/// whichever context is current, at random. Every call succeeds; what the device counts never
/// exceeds 1,984 and agrees with aclrtGetStreamAvailableNum; once every thread has released
/// what it holds, the device holds no stream and a new primary context counts exactly one.
#[test]
fn contexts_sets_and_streams_made_and_released_on_many_threads_keep_the_stream_count() {
    install();
    const DEVICE: i32 = 10;
    on_threads(
        "contexts, sets and streams",
        6,
        0x5eed_000b,
        move |_, rng| {
            let mut held = Holdings::default();
            for _ in 0..120 {
                match rng.below(6) {
                    0 if held.contexts.len() < 3 => {
                        let mut ctx = ptr::null_mut();
                        acl!(aclrtCreateContext(&mut ctx, DEVICE));
                        held.contexts.push(ctx);
                    }
                    1 if !held.contexts.is_empty() => {
                        let at = 1 + rng.below(held.contexts.len() as u64) as usize;
                        held.drop_streams_of(at, DEVICE);
                        acl!(aclrtDestroyContext(held.contexts[at - 1]));
                        held.contexts.remove(at - 1);
                        for (of, _) in &mut held.streams {
                            if *of > at {
                                *of -= 1;
                            }
                        }
                    }
                    2 => {
                        acl!(aclrtSetDevice(DEVICE));
                        held.references += 1;
                    }
                    3 if held.references > 0 => {
                        if held.references == 1 {
                            held.drop_streams_of(0, DEVICE);
                        }
                        acl!(aclrtResetDevice(DEVICE));
                        held.references -= 1;
                    }
                    4 => {
                        let options = usize::from(held.references > 0);
                        let count = options + held.contexts.len();
                        if count == 0 {
                            continue;
                        }
                        let pick = rng.below(count as u64) as usize;
                        let at = if held.references > 0 { pick } else { pick + 1 };
                        held.enter(at, DEVICE);
                        let mut stream = ptr::null_mut();
                        acl!(aclrtCreateStream(&mut stream));
                        held.streams.push((at, stream));
                        let mut available = 0;
                        acl!(aclrtGetStreamAvailableNum(&mut available));
                        assert!(u64::from(available) < MAX_STREAMS);
                        assert!(live_streams(DEVICE) <= MAX_STREAMS);
                    }
                    5 if !held.streams.is_empty() => {
                        let which = rng.below(held.streams.len() as u64) as usize;
                        let (at, stream) = held.streams.remove(which);
                        held.enter(at, DEVICE);
                        acl!(aclrtDestroyStream(stream));
                    }
                    _ => {}
                }
            }
            while let Some(&(at, _)) = held.streams.first() {
                held.drop_streams_of(at, DEVICE);
            }
            for ctx in held.contexts.drain(..) {
                acl!(aclrtDestroyContext(ctx));
            }
            for _ in 0..held.references {
                acl!(aclrtResetDevice(DEVICE));
            }
        },
    );
    assert_eq!(live_streams(DEVICE), 0, "streams left counted");
    set_device(DEVICE);
    assert_eq!(u64::from(available_streams()), MAX_STREAMS - 1);
    acl!(aclrtResetDevice(DEVICE));
    assert_eq!(live_streams(DEVICE), 0);
}

const LOST: aclError = ACL_ERROR_RT_LOST_HEARTBEAT;

/// Promise (docs, "A lost device": work queued on a lost device is abandoned, and every call
/// on it, waits included, reports 507010 promptly once no task touches memory any more): the
/// device is lost while four threads submit copies, memsets, records and waits to shared
/// streams, synchronise streams, events and the device, and create and destroy streams and
/// memory. Every call returns 0 (it came first) or a code of the loss, none hangs, and once the
/// loss is seen every submission, synchronisation and creation reports it.
#[test]
fn a_device_lost_under_work_on_many_threads_answers_every_call_with_a_code() {
    install();
    const DEVICE: i32 = 11;
    set_device(DEVICE);
    let dev = Raw::of(malloc(1 << 20));
    let streams = Arc::new(Slots::new(4));
    let events = Arc::new(Slots::new(4));
    for slot in &streams.0 {
        slot.store(create_stream() as usize, Ordering::Release);
    }
    for slot in &events.0 {
        slot.store(recorded_event() as usize, Ordering::Release);
    }
    let progress = Arc::new(AtomicU32::new(0));
    {
        let (streams, events, progress) = (streams.clone(), events.clone(), progress.clone());
        on_threads(
            "work on a device being lost",
            5,
            0x5eed_000c,
            move |index, rng| {
                set_device(DEVICE);
                if index == 4 {
                    // Lose the device once the others are well under way.
                    while progress.load(Ordering::Acquire) < 200 {
                        thread::yield_now();
                    }
                    control::lose_device(DEVICE).unwrap();
                    return;
                }
                let region = dev.ptr::<u8>().wrapping_add(index * 65536).cast::<c_void>();
                let allowed = [OK, LOST, STALE, DROPPED];
                let mut lost_seen = false;
                for round in 0..400 {
                    progress.fetch_add(1, Ordering::AcqRel);
                    let stream_slot = streams.pick(rng);
                    let stream = stream_slot.load(Ordering::Acquire) as aclrtStream;
                    let event = events.pick(rng).load(Ordering::Acquire) as aclrtEvent;
                    let (what, code) = match rng.below(9) {
                        0 | 1 => (
                            "aclrtMemsetAsync",
                            code!(aclrtMemsetAsync(region, 65536, 1, 65536, stream)),
                        ),
                        2 => (
                            "aclrtMemcpyAsync",
                            code!(aclrtMemcpyAsync(
                                region,
                                4096,
                                region.cast::<u8>().wrapping_add(32768).cast(),
                                4096,
                                ACL_MEMCPY_DEVICE_TO_DEVICE,
                                stream
                            )),
                        ),
                        3 => ("aclrtRecordEvent", code!(aclrtRecordEvent(event, stream))),
                        4 => (
                            "aclrtStreamWaitEvent",
                            code!(aclrtStreamWaitEvent(stream, event)),
                        ),
                        5 => (
                            "aclrtSynchronizeStreamWithTimeout",
                            code!(aclrtSynchronizeStreamWithTimeout(stream, 20_000)),
                        ),
                        6 => (
                            "aclrtSynchronizeEventWithTimeout",
                            code!(aclrtSynchronizeEventWithTimeout(event, 20_000)),
                        ),
                        7 => (
                            "aclrtSynchronizeDeviceWithTimeout",
                            code!(aclrtSynchronizeDeviceWithTimeout(20_000)),
                        ),
                        _ => {
                            let mut fresh = ptr::null_mut();
                            let code =
                                code!(aclrtMalloc(&mut fresh, 4096, ACL_MEM_MALLOC_HUGE_FIRST));
                            if code == OK {
                                let freed = code!(aclrtFree(fresh));
                                expect_one_of("aclrtFree", freed, &[OK, LOST]);
                            }
                            ("aclrtMalloc", code)
                        }
                    };
                    expect_one_of(what, code, &allowed);
                    recent_message();
                    if lost_seen && what.starts_with("aclrtSynchronize") {
                        assert_eq!(code, LOST, "round {round}: {what} after the loss was seen");
                    }
                    lost_seen |= code == LOST;
                }
            },
        );
    }
    let mut stream = ptr::null_mut();
    assert_eq!(code!(aclrtCreateStream(&mut stream)), LOST);
    assert_eq!(code!(aclrtSynchronizeDevice()), LOST);
    recent_message();
    for stream in streams.drain() {
        let code = code!(aclrtDestroyStream(stream.ptr()));
        expect_one_of("aclrtDestroyStream", code, &[OK, LOST]);
        recent_message();
    }
    for event in events.drain() {
        let code = code!(aclrtDestroyEvent(event.ptr()));
        expect_one_of("aclrtDestroyEvent", code, &[OK, LOST]);
        recent_message();
    }
}

/// Promise (docs, aclrtGetStreamAvailableNum: the device's live streams, default streams
/// included; aclrtResetDevice waits for the primary context's work before its streams go): a
/// primary context released while its default stream holds work keeps that stream counted
/// until it is destroyed, also when another thread sets the device again meanwhile and a new
/// primary context, with a default stream of its own, takes the device's default stream.
#[test]
fn a_primary_context_torn_down_behind_held_work_keeps_its_default_stream_counted() {
    install();
    const DEVICE: i32 = 12;
    set_device(DEVICE);
    let dev = malloc(4096);
    control::hold(DEVICE).unwrap();
    acl!(aclrtMemsetAsync(dev, 4096, 1, 4096, ptr::null_mut()));
    let resetter = thread::spawn(|| code!(aclrtResetDevice(DEVICE)));
    // The reset has released the context once the device reports no primary context; its
    // default stream waits for the held memset.
    let released = bounded("the release of the primary context", || {
        loop {
            let mut active = -1;
            acl!(aclrtGetPrimaryCtxState(
                DEVICE,
                ptr::null_mut(),
                &mut active
            ));
            if active == 0 {
                break true;
            }
            thread::yield_now();
        }
    });
    assert!(released);
    set_device(DEVICE);
    assert_eq!(
        live_streams(DEVICE),
        2,
        "the old default stream, still being destroyed, and the new one"
    );
    assert_eq!(u64::from(available_streams()), MAX_STREAMS - 2);
    control::release(DEVICE).unwrap();
    let code = bounded("aclrtResetDevice behind held work", move || {
        resetter.join().unwrap()
    });
    assert_eq!(code, OK);
    assert_eq!(live_streams(DEVICE), 1);
    assert_eq!(download::<u8>(dev, 4096), vec![1; 4096]);
    acl!(aclrtFree(dev));
    acl!(aclrtResetDevice(DEVICE));
    assert_eq!(live_streams(DEVICE), 0);
}

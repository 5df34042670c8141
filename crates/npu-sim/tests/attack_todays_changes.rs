//! Attacks on four behaviours changed together: a wait issued after aclrtResetEvent of a
//! recorded event (held until the event's next record that runs), staged copies of kind
//! ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE (a stream task, the caller's buffer free at once),
//! aclrtFreeWithDevSync (the memory's device and the current device) and the granularity
//! aclrtMapMem requires of a size. Every wait is bounded: a hang shows as a timeout code.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;

use common::*;
use npu_sim::abi::*;
use npu_sys::*;

/// Installs the file's simulator once: a device for each test.
fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        npu_sim::SimConfig::default()
            .devices(8)
            .memory_per_device(1 << 30)
            .install()
            .unwrap();
    });
}

/// How long a synchronisation that must end waits before the test calls it a hang (ms).
const BOUND_MS: i32 = 10_000;

fn sync_event() -> aclrtEvent {
    let mut event = ptr::null_mut();
    acl!(aclrtCreateEventWithFlag(&mut event, ACL_EVENT_SYNC));
    event
}

fn notify() -> aclrtNotify {
    let mut notify = ptr::null_mut();
    acl!(aclrtCreateNotify(&mut notify, 0));
    notify
}

/// A stream held by a notify wait until the test records the notify.
fn held_stream(notify: aclrtNotify) -> aclrtStream {
    let stream = create_stream();
    acl!(aclrtWaitAndResetNotify(notify, stream, 0));
    stream
}

/// An event recorded (the record complete), then reset (the reset run): a wait issued now is
/// held until the event's next record.
fn reset_event(stream: aclrtStream) -> aclrtEvent {
    let event = sync_event();
    acl!(aclrtRecordEvent(event, stream));
    acl!(aclrtResetEvent(event, stream));
    acl!(aclrtSynchronizeStream(stream));
    event
}

fn wait_status(event: aclrtEvent) -> aclrtEventWaitStatus {
    let mut status = ACL_EVENT_WAIT_STATUS_RESERVED;
    acl!(aclrtQueryEventWaitStatus(event, &mut status));
    status
}

/// Promise (docs, event models: "destroying the event ends such a wait, since nothing can
/// record it any more"): a wait held after a reset ends when aclrtDestroyEvent returns, even
/// while a reset of the event is still queued on a held stream (that queued task keeps the
/// simulator's event alive, but no record can be made of a destroyed handle). While held, the
/// wait keeps aclrtQueryEventWaitStatus NOT_READY.
#[test]
fn destroying_a_reset_event_ends_a_held_wait_while_another_reset_is_queued() {
    install();
    set_device(0);
    let (resetter, waiter) = (create_stream(), create_stream());
    let gate = notify();
    let held = held_stream(gate);
    let event = reset_event(resetter);
    acl!(aclrtStreamWaitEvent(waiter, event));
    acl!(aclrtResetEvent(event, held));
    assert_eq!(wait_status(event), ACL_EVENT_WAIT_STATUS_NOT_READY);
    acl!(aclrtDestroyEvent(event));
    assert_eq!(
        code!(aclrtSynchronizeStreamWithTimeout(waiter, BOUND_MS)),
        0,
        "the held wait outlived its event's destruction: {}",
        recent_message()
    );
    acl!(aclrtRecordNotify(gate, resetter));
    acl!(aclrtSynchronizeStreamWithTimeout(held, BOUND_MS));
    for stream in [resetter, waiter, held] {
        acl!(aclrtDestroyStream(stream));
    }
    acl!(aclrtDestroyNotify(gate));
}

/// Promise (docs: aclrtStreamAbort, aclrtDestroyStreamForce and aclrtDeviceTaskAbort drop a
/// stream's waiting work): each ends a wait held after a reset that nothing will record, returns
/// 0, and leaves the device usable (a copy on a new stream runs).
#[test]
fn aborts_end_a_held_wait_no_record_will_open() {
    install();
    const DEVICE: i32 = 2;
    set_device(DEVICE);
    let resetter = create_stream();
    let event = reset_event(resetter);
    for how in [
        "aclrtStreamAbort",
        "aclrtDestroyStreamForce",
        "aclrtDeviceTaskAbort",
    ] {
        let waiter = create_stream();
        acl!(aclrtStreamWaitEvent(waiter, event));
        assert_eq!(wait_status(event), ACL_EVENT_WAIT_STATUS_NOT_READY, "{how}");
        let code = match how {
            "aclrtStreamAbort" => code!(aclrtStreamAbort(waiter)),
            "aclrtDestroyStreamForce" => code!(aclrtDestroyStreamForce(waiter)),
            _ => code!(aclrtDeviceTaskAbort(DEVICE, 0)),
        };
        assert_eq!(code, 0, "{how}: {}", recent_message());
        if how != "aclrtDestroyStreamForce" {
            let synced = code!(aclrtSynchronizeStreamWithTimeout(waiter, BOUND_MS));
            assert_ne!(
                synced, ACL_ERROR_RT_WAIT_TIMEOUT,
                "{how} left the wait held"
            );
            acl!(aclrtDestroyStreamForce(waiter));
        }
        // The dropped wait has left its stream: a record completes the event's waits.
        acl!(aclrtRecordEvent(event, resetter));
        acl!(aclrtSynchronizeStreamWithTimeout(resetter, BOUND_MS));
        assert_eq!(wait_status(event), ACL_EVENT_WAIT_STATUS_COMPLETE, "{how}");
        acl!(aclrtResetEvent(event, resetter));
        acl!(aclrtSynchronizeStreamWithTimeout(resetter, BOUND_MS));
    }
    let stream = create_stream();
    let dev = malloc(16);
    let host = [5u8; 16];
    acl!(aclrtMemcpyAsync(
        dev,
        16,
        host.as_ptr().cast(),
        16,
        ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE,
        stream
    ));
    acl!(aclrtSynchronizeStreamWithTimeout(stream, BOUND_MS));
    assert_eq!(download::<u8>(dev, 16), vec![5u8; 16]);
    acl!(aclrtDestroyEvent(event));
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtDestroyStream(resetter));
    acl!(aclrtFree(dev));
}

/// Promise (docs: the timeout of a wait issued after a reset covers the whole wait): a wait
/// whose gate opens on a record that cannot complete (queued behind a held notify wait) still
/// fails with 107019 ACL_ERROR_RT_WAIT_TIMEOUT, and the stream is usable once its error is
/// reported.
#[test]
fn a_held_waits_timeout_covers_the_record_it_opened_on() {
    install();
    set_device(3);
    let resetter = create_stream();
    let event = reset_event(resetter);
    let gate = notify();
    let held = held_stream(gate);
    let waiter = create_stream();
    acl!(aclrtStreamWaitEventWithTimeout(waiter, event, 1));
    acl!(aclrtRecordEvent(event, held));
    assert_eq!(
        code!(aclrtSynchronizeStreamWithTimeout(waiter, BOUND_MS)),
        ACL_ERROR_RT_WAIT_TIMEOUT
    );
    acl!(aclrtRecordNotify(gate, resetter));
    acl!(aclrtSynchronizeStreamWithTimeout(held, BOUND_MS));
    acl!(aclrtStreamWaitEvent(waiter, event));
    acl!(aclrtSynchronizeStreamWithTimeout(waiter, BOUND_MS));
    acl!(aclrtDestroyEvent(event));
    for stream in [resetter, waiter, held] {
        acl!(aclrtDestroyStream(stream));
    }
    acl!(aclrtDestroyNotify(gate));
}

/// Promise (docs, ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE: pageable memory is staged at the call):
/// queued behind a held stream, a staged copy takes the bytes the buffer held at the call,
/// whatever the caller writes or frees there afterwards; a device source under the kind is read
/// in stream order (after a memset queued before it); a captured one takes the bytes of the
/// capture at every execution; 0 bytes is a success that queues nothing; a count past the
/// destination allocation is refused (107000) before anything is staged; a stream destroyed by
/// force with the staged copy queued drops it.
#[test]
fn staged_copies_take_the_bytes_of_the_call() {
    install();
    set_device(4);
    let gate = notify();
    let held = held_stream(gate);
    let dev = malloc(4096);
    let host = vec![0x11u8; 4096].into_boxed_slice();
    let host = Box::into_raw(host).cast::<u8>();
    acl!(aclrtMemcpyAsync(
        dev,
        4096,
        host.cast::<c_void>(),
        4096,
        ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE,
        held
    ));
    // SAFETY: the buffer is ours; the copy staged it, so writing and freeing it is allowed.
    unsafe {
        ptr::write_bytes(host, 0x22, 4096);
        drop(Box::from_raw(ptr::slice_from_raw_parts_mut(host, 4096)));
    }
    assert_eq!(
        code!(aclrtMemcpyAsync(
            dev,
            4096,
            ptr::NonNull::<u8>::dangling().as_ptr().cast(),
            0,
            ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE,
            held
        )),
        0
    );
    let big = pageable(8192);
    assert_eq!(
        code!(aclrtMemcpyAsync(
            dev,
            8192,
            big,
            8192,
            ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE,
            held
        )),
        ACL_ERROR_RT_PARAM_INVALID
    );
    // A device source under the kind is read in stream order, after the memset before it.
    let source = malloc(64);
    acl!(aclrtMemsetAsync(source, 64, 0x66, 64, held));
    acl!(aclrtMemcpyAsync(
        dev.cast::<u8>().wrapping_add(4032).cast(),
        64,
        source,
        64,
        ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE,
        held
    ));
    let other = create_stream();
    acl!(aclrtRecordNotify(gate, other));
    acl!(aclrtSynchronizeStreamWithTimeout(held, BOUND_MS));
    let mut expected = vec![0x11u8; 4032];
    expected.extend([0x66u8; 64]);
    assert_eq!(download::<u8>(dev, 4096), expected);
    acl!(aclrtFree(source));

    let captured = create_stream();
    let mut bytes = [0x33u8; 64];
    acl!(aclmdlRICaptureBegin(
        captured,
        ACL_MODEL_RI_CAPTURE_MODE_RELAXED
    ));
    acl!(aclrtMemcpyAsync(
        dev,
        64,
        bytes.as_ptr().cast(),
        64,
        ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE,
        captured
    ));
    let mut instance = ptr::null_mut();
    acl!(aclmdlRICaptureEnd(captured, &mut instance));
    bytes.fill(0x44);
    acl!(aclrtMemset(dev, 64, 0, 64));
    acl!(aclmdlRIExecuteAsync(instance, other));
    acl!(aclrtSynchronizeStreamWithTimeout(other, BOUND_MS));
    assert_eq!(download::<u8>(dev, 64), vec![0x33u8; 64]);
    acl!(aclmdlRIDestroy(instance));

    acl!(aclrtWaitAndResetNotify(gate, held, 0));
    acl!(aclrtMemcpyAsync(
        dev,
        64,
        bytes.as_ptr().cast(),
        64,
        ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE,
        held
    ));
    acl!(aclrtDestroyStreamForce(held));
    acl!(aclrtSynchronizeDevice());
    assert_eq!(download::<u8>(dev, 64), vec![0x33u8; 64]);
    for stream in [other, captured] {
        acl!(aclrtDestroyStream(stream));
    }
    acl!(aclrtDestroyNotify(gate));
    acl!(aclrtFree(dev));
}

/// A pointer handed to another thread (ACL handles and device addresses are plain tokens).
#[derive(Clone, Copy)]
struct Raw(usize);

impl Raw {
    fn of<T>(ptr: *mut T) -> Self {
        Self(ptr as usize)
    }

    fn ptr<T>(self) -> *mut T {
        self.0 as *mut T
    }
}

/// Runs `call` on a thread of its own (bound to `device`) and returns its code, or panics if it
/// has not returned within the bound (the thread is left behind: a hang is the failure).
fn returns_on_a_thread(
    what: &str,
    device: Option<i32>,
    unblock: impl FnOnce(),
    call: impl FnOnce() -> aclError + Send + 'static,
) -> aclError {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        if let Some(device) = device {
            set_device(device);
        }
        let _ = tx.send(call());
    });
    unblock();
    rx.recv_timeout(std::time::Duration::from_millis(BOUND_MS as u64))
        .unwrap_or_else(|_| panic!("{what} did not return"))
}

/// Promise (docs, event models: a held wait holds its stream's synchronisation and destruction,
/// the last aclrtResetDevice of its context, "for as long as the event lives unrecorded";
/// destroying the event ends it): a thread blocked in each of aclrtSynchronizeDevice,
/// aclrtDestroyStream, aclrtFreeWithDevSync, aclrtDestroyContext and aclrtResetDeviceForce
/// behind a held wait returns 0 once another thread destroys the event (whichever comes
/// first), and the device is usable afterwards.
#[test]
fn teardowns_behind_a_held_wait_return_once_the_event_is_destroyed() {
    install();
    const DEVICE: i32 = 5;
    for how in [
        "aclrtSynchronizeDevice",
        "aclrtDestroyStream",
        "aclrtFreeWithDevSync",
        "aclrtDestroyContext",
        "aclrtResetDeviceForce",
    ] {
        let mut ctx = ptr::null_mut();
        if how == "aclrtDestroyContext" {
            acl!(aclrtCreateContext(&mut ctx, DEVICE));
        } else {
            set_device(DEVICE);
        }
        let resetter = create_stream();
        let event = reset_event(resetter);
        let waiter = create_stream();
        acl!(aclrtStreamWaitEvent(waiter, event));
        let dev = Raw::of(malloc(64));
        let (ctx, waiter_raw) = (Raw::of(ctx), Raw::of(waiter));
        let bound = (how != "aclrtResetDeviceForce").then_some(DEVICE);
        let code = returns_on_a_thread(
            how,
            bound,
            || acl!(aclrtDestroyEvent(event)),
            move || match how {
                "aclrtSynchronizeDevice" => {
                    // SAFETY: the context is the device's primary one, current on this thread.
                    unsafe { aclrtSynchronizeDevice() }
                }
                // SAFETY: a live stream of this thread's current context.
                "aclrtDestroyStream" => unsafe { aclrtDestroyStream(waiter_raw.ptr()) },
                // SAFETY: live device memory of the current device.
                "aclrtFreeWithDevSync" => unsafe { aclrtFreeWithDevSync(dev.ptr()) },
                // SAFETY: a live explicit context.
                "aclrtDestroyContext" => unsafe { aclrtDestroyContext(ctx.ptr()) },
                // SAFETY: the device was set by the test's thread.
                _ => unsafe { aclrtResetDeviceForce(DEVICE) },
            },
        );
        assert_eq!(code, 0, "{how}");
        match how {
            "aclrtSynchronizeDevice" | "aclrtFreeWithDevSync" => {
                if how == "aclrtSynchronizeDevice" {
                    acl!(aclrtFree(dev.ptr()));
                }
                acl!(aclrtDestroyStream(waiter));
                acl!(aclrtDestroyStream(resetter));
            }
            "aclrtDestroyStream" => {
                acl!(aclrtFree(dev.ptr()));
                acl!(aclrtDestroyStream(resetter));
            }
            _ => {}
        }
    }
    set_device(DEVICE);
    let stream = create_stream();
    let dev = malloc(16);
    acl!(aclrtMemsetAsync(dev, 16, 9, 16, stream));
    acl!(aclrtSynchronizeStreamWithTimeout(stream, BOUND_MS));
    assert_eq!(download::<u8>(dev, 16), vec![9u8; 16]);
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(dev));
}

/// Promise (docs: aclrtFreeWithDevSync synchronises the memory's device and the current
/// device; it refuses with 207000 a wait for the calling thread's own stream): another device's
/// memory freed behind a current-device stream held by a notify wait returns 0 once the notify
/// is recorded (from the test's thread, whichever comes first); a host function of a
/// current-device stream freeing another device's memory gets 207000 and the memory stays
/// usable.
#[test]
fn free_with_device_sync_waits_for_both_devices_and_refuses_its_own_stream() {
    install();
    const HERE: i32 = 6;
    const THERE: i32 = 7;
    set_device(THERE);
    let remote = Raw::of(malloc(64));
    set_device(HERE);
    let gate = notify();
    let held = held_stream(gate);
    let recorder = create_stream();
    let code = returns_on_a_thread(
        "aclrtFreeWithDevSync behind a held stream of the current device",
        Some(HERE),
        || acl!(aclrtRecordNotify(gate, recorder)),
        // SAFETY: live device memory of another device.
        move || unsafe { aclrtFreeWithDevSync(remote.ptr()) },
    );
    assert_eq!(code, 0);

    set_device(THERE);
    let remote = malloc(64);
    set_device(HERE);
    static FREED: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);
    unsafe extern "C" fn free_inside(data: *mut c_void) {
        set_device(6);
        // SAFETY: the test passes live device memory of device 7.
        let code = unsafe { aclrtFreeWithDevSync(data) };
        FREED.store(code, std::sync::atomic::Ordering::SeqCst);
    }
    acl!(aclrtLaunchHostFunc(held, Some(free_inside), remote));
    acl!(aclrtSynchronizeStreamWithTimeout(held, BOUND_MS));
    assert_eq!(
        FREED.load(std::sync::atomic::Ordering::SeqCst),
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT
    );
    // Still device 7's live memory, which device 7 sets (device 6 has no peer access to it).
    set_device(THERE);
    acl!(aclrtMemset(remote, 64, 3, 64));
    set_device(HERE);
    assert_eq!(download::<u8>(remote, 64), vec![3u8; 64]);
    acl!(aclrtFreeWithDevSync(remote));
    for stream in [held, recorder] {
        acl!(aclrtDestroyStream(stream));
    }
    acl!(aclrtDestroyNotify(gate));
}

/// Promise (docs, event models): a wait issued on a reset event waits for the event's next
/// record, and a wait issued after a record waits for that record; so a wait racing the record
/// that follows a reset waits for it whichever call comes first. Each round resets the event,
/// queues a memset behind a held notify wait on one stream, then races the record there (on a
/// second thread) against a wait and a copy of the memset's bytes on another stream: once the
/// notify is recorded, the copy must hold the round's bytes. A wait that passed without waiting
/// would let the copy read the bytes of an earlier round.
#[test]
fn a_wait_racing_the_record_after_a_reset_waits_for_it() {
    install();
    const DEVICE: i32 = 0;
    const ROUNDS: u32 = 300;
    set_device(DEVICE);
    let (recorder, waiter, helper) = (create_stream(), create_stream(), create_stream());
    let gate = notify();
    let event = sync_event();
    let (x, y) = (malloc(4), malloc(4));
    let barrier = std::sync::Barrier::new(2);
    let (event_raw, recorder_raw) = (Raw::of(event), Raw::of(recorder));
    let mut stale = Vec::new();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            set_device(DEVICE);
            for _ in 0..ROUNDS {
                barrier.wait();
                acl!(aclrtRecordEvent(event_raw.ptr(), recorder_raw.ptr()));
                barrier.wait();
            }
        });
        for round in 0..ROUNDS {
            let value = (round % 250 + 1) as i32;
            acl!(aclrtRecordEvent(event, helper));
            acl!(aclrtResetEvent(event, helper));
            acl!(aclrtSynchronizeStream(helper));
            acl!(aclrtWaitAndResetNotify(gate, recorder, 0));
            acl!(aclrtMemsetAsync(x, 4, value, 4, recorder));
            barrier.wait();
            acl!(aclrtStreamWaitEvent(waiter, event));
            acl!(aclrtMemcpyAsync(
                y,
                4,
                x,
                4,
                ACL_MEMCPY_DEVICE_TO_DEVICE,
                waiter
            ));
            barrier.wait();
            acl!(aclrtRecordNotify(gate, helper));
            acl!(aclrtSynchronizeStreamWithTimeout(recorder, BOUND_MS));
            acl!(aclrtSynchronizeStreamWithTimeout(waiter, BOUND_MS));
            // Not asserted here: a panic would leave the other thread at the barrier.
            if download::<u8>(y, 4) != vec![value as u8; 4] {
                stale.push(round);
            }
        }
    });
    assert!(
        stale.is_empty(),
        "rounds whose copy did not wait: {stale:?}"
    );
    acl!(aclrtDestroyEvent(event));
    for stream in [recorder, waiter, helper] {
        acl!(aclrtDestroyStream(stream));
    }
    acl!(aclrtDestroyNotify(gate));
    acl!(aclrtFree(x));
    acl!(aclrtFree(y));
}

/// Promise (docs, aclrtMapMem checks: the size must be the allocation's and a whole number of
/// the 2 MiB granularity; aclrtMemMapNoAccess answers 100000 where aclrtMapMem answers 107000):
/// allocations one byte past and one byte short of a granularity boundary are made, but mapped
/// neither at their own size nor at the rounded one; an allocation of exactly two granules maps
/// (with or without access); a staged copy across its two granules queued behind a held stream
/// and unmapped under it fails with 507013 (docs: a queued task reaches what is mapped when it
/// runs), and one queued after the memory is mapped again lands.
#[test]
fn map_sizes_at_granularity_boundaries() {
    install();
    const DEVICE: i32 = 3;
    const GRANULE: usize = 2 << 20;
    set_device(DEVICE);
    let mut va = ptr::null_mut();
    acl!(aclrtReserveMemAddress(
        &mut va,
        4 * GRANULE,
        0,
        ptr::null_mut(),
        0
    ));
    let prop = huge_physical_prop(DEVICE as u32);
    for size in [GRANULE + 1, 2 * GRANULE - 1] {
        let mut handle = ptr::null_mut();
        acl!(aclrtMallocPhysical(&mut handle, size, &prop, 0));
        for tried in [size, size.next_multiple_of(GRANULE)] {
            assert_eq!(
                code!(aclrtMapMem(va, tried, 0, handle, 0)),
                ACL_ERROR_RT_PARAM_INVALID,
                "map {tried} bytes of a {size}-byte allocation"
            );
            assert_eq!(
                code!(aclrtMemMapNoAccess(va, tried, 0, handle, 0)),
                ACL_ERROR_INVALID_PARAM,
                "map without access {tried} bytes of a {size}-byte allocation"
            );
        }
        acl!(aclrtFreePhysical(handle));
    }
    let mut handle = ptr::null_mut();
    acl!(aclrtMallocPhysical(&mut handle, 2 * GRANULE, &prop, 0));
    acl!(aclrtMemMapNoAccess(va, 2 * GRANULE, 0, handle, 0));
    acl!(aclrtUnmapMem(va));
    acl!(aclrtMapMem(va, 2 * GRANULE, 0, handle, 0));
    let gate = notify();
    let held = held_stream(gate);
    let recorder = create_stream();
    let host = vec![0x5au8; 4096];
    // The copy crosses the seam between the two granules.
    let at = Raw::of(va.cast::<u8>().wrapping_add(GRANULE - 2048));
    acl!(aclrtMemcpyAsync(
        at.ptr(),
        4096,
        host.as_ptr().cast(),
        4096,
        ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE,
        held
    ));
    // Staged: the caller's buffer goes at once. Unmapped before the copy runs: the copy finds
    // nothing mapped there (507013), and the stream goes on.
    drop(host);
    acl!(aclrtUnmapMem(va));
    acl!(aclrtRecordNotify(gate, recorder));
    assert_eq!(
        code!(aclrtSynchronizeStreamWithTimeout(held, BOUND_MS)),
        ACL_ERROR_RT_SYS_DMA
    );
    acl!(aclrtMapMem(va, 2 * GRANULE, 0, handle, 0));
    let host = vec![0xa5u8; 4096];
    acl!(aclrtMemcpyAsync(
        at.ptr(),
        4096,
        host.as_ptr().cast(),
        4096,
        ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE,
        held
    ));
    drop(host);
    acl!(aclrtSynchronizeStreamWithTimeout(held, BOUND_MS));
    assert_eq!(download::<u8>(at.ptr(), 4096), vec![0xa5u8; 4096]);
    acl!(aclrtUnmapMem(va));
    acl!(aclrtFreePhysical(handle));
    acl!(aclrtReleaseMemAddress(va));
    for stream in [held, recorder] {
        acl!(aclrtDestroyStream(stream));
    }
    acl!(aclrtDestroyNotify(gate));
}

/// Promise (docs, event models: destroying the event ends the waits held at its gate; a
/// destroyed handle is stale, 107017): four threads issue waits on a reset event, each on a
/// stream of its own, while the test's thread destroys it. Each wait is accepted (then held or
/// not, and ended by the destruction) or refused as stale; every stream then synchronises
/// with 0, whichever came first.
#[test]
fn waits_issued_while_the_reset_event_is_destroyed_all_end() {
    install();
    const DEVICE: i32 = 4;
    const WAITS: usize = 50;
    set_device(DEVICE);
    for round in 0..20 {
        let resetter = create_stream();
        let event = Raw::of(reset_event(resetter));
        let barrier = std::sync::Barrier::new(5);
        let codes = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    set_device(DEVICE);
                    let waiter = create_stream();
                    barrier.wait();
                    for _ in 0..WAITS {
                        let code = code!(aclrtStreamWaitEvent(waiter, event.ptr()));
                        codes.lock().unwrap().push(code);
                    }
                    let synced = code!(aclrtSynchronizeStreamWithTimeout(waiter, BOUND_MS));
                    codes.lock().unwrap().push(synced);
                    acl!(aclrtDestroyStream(waiter));
                });
            }
            barrier.wait();
            acl!(aclrtDestroyEvent(event.ptr()));
        });
        let codes = codes.into_inner().unwrap();
        assert!(
            codes
                .iter()
                .all(|&code| code == 0 || code == ACL_ERROR_RT_INVALID_HANDLE),
            "round {round}: {codes:?}"
        );
        acl!(aclrtDestroyStream(resetter));
    }
}

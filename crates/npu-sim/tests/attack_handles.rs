//! Attacks on handle lifetimes under tasks queued behind a closed hold gate: streams, contexts
//! and devices torn down, events destroyed, binaries unloaded and report threads unsubscribed
//! while work that depends on them has not run. The promises attacked are the reference's
//! (aclrtDestroyStream and aclrtResetDevice wait for the unfinished work; aclrtDestroyEvent does
//! not block and frees the event once it completes) and docs/simulator.md's (a forced
//! destruction drops what has not started; queued launches keep their library loaded; a
//! callback no thread processes never runs). Every test closes the hold gate of a device of its
//! own; the file is meant to run under valgrind as well.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::thread;

use common::*;
use npu_sim::abi::*;
use npu_sim::control;
use npu_sim::kernel::{self, ScaleArgs};
use npu_sys::*;

fn memset_async(dev: *mut c_void, len: usize, value: i32, stream: aclrtStream) {
    acl!(aclrtMemsetAsync(dev, len, value, len, stream));
}

fn at(dev: *mut c_void, offset: usize) -> *mut c_void {
    dev.cast::<u8>().wrapping_add(offset).cast()
}

/// Promise (reference, aclrtDestroyStream): "if the stream has unfinished tasks, it waits for
/// them to complete before destroying the stream". Work held at the gate when the destruction
/// begins has run when it returns, and the event recorded behind it completed.
#[test]
fn destroying_a_stream_waits_for_its_held_work() {
    install_eight_devices();
    set_device(1);
    let dev = malloc(4096);
    let stream = create_stream();
    let done = create_event();
    control::hold(1).unwrap();
    memset_async(dev, 4096, 3, stream);
    acl!(aclrtRecordEvent(done, stream));
    let raw = Raw::of(stream);
    let destroyer = thread::spawn(move || {
        set_device(1);
        code!(aclrtDestroyStream(raw.ptr()))
    });
    control::release(1).unwrap();
    let code = bounded("aclrtDestroyStream of a held stream", move || {
        destroyer.join().unwrap()
    });
    assert_eq!(code, 0, "{}", recent_message());
    assert_eq!(
        download::<u8>(dev, 4096),
        vec![3; 4096],
        "the held memset ran before the destruction returned"
    );
    let mut status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
    acl!(aclrtQueryEventStatus(done, &mut status));
    assert_eq!(status, ACL_EVENT_RECORDED_STATUS_COMPLETE);
    acl!(aclrtDestroyEvent(done));
    acl!(aclrtFree(dev));
}

/// Queues a memset of `value` over the first 4 KiB of `dev` and a record of `event` on
/// `recorder`, then on `waiter` a wait for that record and a copy of those 4 KiB to the next.
fn memset_record_wait_copy(
    dev: *mut c_void,
    value: i32,
    (recorder, waiter): (aclrtStream, aclrtStream),
    event: aclrtEvent,
) {
    memset_async(dev, 4096, value, recorder);
    acl!(aclrtRecordEvent(event, recorder));
    acl!(aclrtStreamWaitEvent(waiter, event));
    acl!(aclrtMemcpyAsync(
        at(dev, 4096),
        4096,
        dev,
        4096,
        ACL_MEMCPY_DEVICE_TO_DEVICE,
        waiter
    ));
}

/// Promise (docs, aclrtDestroyStreamForce): a task waiting at the hold gate counts as not
/// started and is dropped; waits on the records dropped fail with 107023, also a wait another
/// stream queued on such a record, and nothing the dropped tasks would have written is written.
#[test]
fn a_forced_destroy_drops_held_work_and_fails_the_waits_other_streams_queued_on_it() {
    install_eight_devices();
    set_device(2);
    let dev = malloc(8192);
    let (doomed, waiter) = (create_stream(), create_stream());
    let record = create_event();
    control::hold(2).unwrap();
    memset_record_wait_copy(dev, 5, (doomed, waiter), record);
    acl!(aclrtDestroyStreamForce(doomed));
    control::release(2).unwrap();
    assert_eq!(
        code!(aclrtSynchronizeEvent(record)),
        ACL_ERROR_RT_STREAM_ABORT
    );
    recent_message();
    let raw = Raw::of(waiter);
    let synced = bounded("the stream waiting on a dropped record", move || {
        set_device(2);
        let code = code!(aclrtSynchronizeStream(raw.ptr()));
        (code, recent_message())
    });
    assert_eq!(synced.0, ACL_ERROR_RT_STREAM_ABORT, "{}", synced.1);
    assert_eq!(
        download::<u8>(dev, 4096),
        vec![0; 4096],
        "the dropped memset never ran"
    );
    acl!(aclrtDestroyStream(waiter));
    acl!(aclrtDestroyEvent(record));
    acl!(aclrtFree(dev));
}

/// Promise (reference, aclrtDestroyContext releases the context's resources, its streams
/// included, and a stream's destruction waits for its work): destroying a context whose
/// created and default streams hold work waits for that work; the memory, which belongs to
/// the device, holds what it wrote.
#[test]
fn destroying_a_context_waits_for_the_held_work_of_its_streams() {
    install_eight_devices();
    set_device(3);
    let dev = malloc(8192);
    let mut context = ptr::null_mut();
    acl!(aclrtCreateContext(&mut context, 3));
    let stream = create_stream();
    control::hold(3).unwrap();
    memset_async(dev, 4096, 1, stream);
    memset_async(at(dev, 4096), 4096, 2, ptr::null_mut());
    let raw = Raw::of(context);
    let destroyer = thread::spawn(move || code!(aclrtDestroyContext(raw.ptr())));
    control::release(3).unwrap();
    let code = bounded("aclrtDestroyContext of held streams", move || {
        destroyer.join().unwrap()
    });
    assert_eq!(code, 0, "{}", recent_message());
    set_device(3);
    let bytes = download::<u8>(dev, 8192);
    assert_eq!(
        &bytes[..4096],
        &[1; 4096][..],
        "the created stream's memset"
    );
    assert_eq!(
        &bytes[4096..],
        &[2; 4096][..],
        "the default stream's memset"
    );
    assert_eq!(
        code!(aclrtMemsetAsync(dev, 64, 0, 64, stream)),
        ACL_ERROR_RT_INVALID_HANDLE,
        "a stream of the destroyed context"
    );
    recent_message();
    acl!(aclrtFree(dev));
}

/// Promise (reference, aclrtResetDevice): the reset releases the primary context and its
/// streams and "waits for their tasks to complete"; an explicit context of the device is not
/// the primary's and keeps working. Work held on both when the reset begins: the primary's has
/// run when it returns, the explicit context's runs and synchronises with 0.
#[test]
fn resetting_a_device_waits_for_held_work_and_spares_an_explicit_context() {
    install_eight_devices();
    set_device(4);
    let dev = malloc(3 * 4096);
    let primary_stream = create_stream();
    let mut context = ptr::null_mut();
    acl!(aclrtCreateContext(&mut context, 4));
    let own_stream = create_stream();
    control::hold(4).unwrap();
    memset_async(at(dev, 8192), 4096, 9, own_stream);
    {
        let raw = (Raw::of(primary_stream), Raw::of(dev));
        thread::spawn(move || {
            set_device(4);
            memset_async(raw.1.ptr(), 4096, 6, raw.0.ptr());
            memset_async(at(raw.1.ptr(), 4096), 4096, 7, ptr::null_mut());
            acl!(aclrtResetDevice(4));
        })
        .join()
        .unwrap();
    }
    // Two references were taken (this thread's and the helper's); the helper released one.
    let resetter = thread::spawn(|| code!(aclrtResetDevice(4)));
    control::release(4).unwrap();
    let code = bounded("aclrtResetDevice of held streams", move || {
        resetter.join().unwrap()
    });
    assert_eq!(code, 0, "{}", recent_message());
    acl!(aclrtSynchronizeStream(own_stream));
    let bytes = download::<u8>(dev, 3 * 4096);
    assert_eq!(
        &bytes[..4096],
        &[6; 4096][..],
        "the primary's created stream"
    );
    assert_eq!(
        &bytes[4096..8192],
        &[7; 4096][..],
        "the primary's default stream"
    );
    assert_eq!(
        &bytes[8192..],
        &[9; 4096][..],
        "the explicit context's stream"
    );
    assert_eq!(
        code!(aclrtMemsetAsync(dev, 64, 0, 64, primary_stream)),
        ACL_ERROR_RT_INVALID_HANDLE,
        "a stream of the reset primary context"
    );
    recent_message();
    acl!(aclrtFree(dev));
    acl!(aclrtDestroyContext(context));
}

/// Promise (reference, aclrtDestroyEvent): an event may be destroyed before it completes; the
/// call does not block and the event's resources are released when it completes. Its record
/// held on one stream and a wait for it queued on another: the wait still waits for the record
/// (the copy behind it reads what the memset before the record wrote), nothing hangs.
#[test]
fn an_event_destroyed_with_its_record_and_a_wait_queued_still_orders_them() {
    install_eight_devices();
    set_device(5);
    let dev = malloc(8192);
    let (recorder, waiter) = (create_stream(), create_stream());
    let event = create_event();
    control::hold(5).unwrap();
    memset_record_wait_copy(dev, 4, (recorder, waiter), event);
    acl!(aclrtDestroyEvent(event));
    assert_eq!(
        code!(aclrtRecordEvent(event, recorder)),
        ACL_ERROR_RT_INVALID_HANDLE,
        "the destroyed handle"
    );
    recent_message();
    control::release(5).unwrap();
    let raw = (Raw::of(recorder), Raw::of(waiter));
    let codes = bounded("streams around a destroyed event", move || {
        set_device(5);
        (
            code!(aclrtSynchronizeStream(raw.0.ptr())),
            code!(aclrtSynchronizeStream(raw.1.ptr())),
        )
    });
    assert_eq!(codes, (0, 0), "{}", recent_message());
    assert_eq!(
        download::<u8>(dev, 8192),
        vec![4; 8192],
        "the copy waited for the record"
    );
    acl!(aclrtFree(dev));
    a_destroyed_event_whose_held_record_is_dropped_fails_the_queued_wait();
}

/// Promise (docs): aclrtBinaryUnLoad retires the binary's handles, but "launches already
/// queued keep the library loaded until they ran". A shared-object binary unloaded under a
/// held launch: the unload succeeds, the launch runs the library's code afterwards.
#[test]
fn a_binary_unloaded_under_a_held_launch_keeps_its_library_until_the_launch_ran() {
    install_eight_devices();
    set_device(6);
    let n = 256;
    let HeldScale {
        scale,
        stream,
        args,
        dx,
        data,
    } = HeldScale::launch(n, 2.0);
    assert_eq!(
        launch(scale, 4, stream, &args, ptr::null_mut()),
        ACL_ERROR_RT_INVALID_HANDLE,
        "the unloaded binary's function"
    );
    recent_message();
    control::release(6).unwrap();
    acl!(aclrtSynchronizeStream(stream));
    let scaled: Vec<f32> = data.iter().map(|v| v * 2.0).collect();
    assert_eq!(download::<f32>(dx, n), scaled);
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(dx));
    a_held_launch_of_an_unloaded_binary_dropped_by_a_forced_destroy_never_runs();
}

/// `scale_f32` of the shipped kernel library, launched on `n` floats (0, 1, 2, ...) on a new
/// stream of device 6 held at the gate, its binary unloaded right after the launch.
struct HeldScale {
    scale: aclrtFuncHandle,
    stream: aclrtStream,
    args: ScaleArgs,
    dx: *mut c_void,
    data: Vec<f32>,
}

impl HeldScale {
    fn launch(n: usize, alpha: f32) -> HeldScale {
        let path = c_string(kernel::LIBRARY_PATH);
        let mut bin = ptr::null_mut();
        acl!(aclrtBinaryLoadFromFile(
            path.as_ptr(),
            ptr::null_mut(),
            &mut bin
        ));
        let scale = function(bin, kernel::SCALE_F32);
        let data: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let dx = malloc(n * 4);
        upload(dx, &data);
        let stream = create_stream();
        let args = ScaleArgs {
            x: dx as u64,
            n: n as u64,
            alpha,
            reserved: 0,
        };
        control::hold(6).unwrap();
        assert_eq!(launch(scale, 4, stream, &args, ptr::null_mut()), 0);
        acl!(aclrtBinaryUnLoad(bin));
        HeldScale {
            scale,
            stream,
            args,
            dx,
            data,
        }
    }
}

static CALLBACK_RUNS: AtomicU32 = AtomicU32::new(0);

unsafe extern "C" fn count_and_free(data: *mut c_void) {
    // SAFETY: data is a Box<u32> the test leaked for this callback; only a run reads it.
    let label = unsafe { *data.cast::<u32>() };
    assert!(label == 11 || label == 12);
    CALLBACK_RUNS.fetch_add(1, Ordering::SeqCst);
}

/// Promise (reference, aclrtUnSubscribeReport: "the stream's callbacks are no longer handled
/// by the thread"; docs: a callback a stream drops never runs once the call that dropped it has
/// returned). Callbacks held at the gate when the thread unsubscribes never run: not at a
/// later aclrtProcessReport of a new subscription of the same thread (their data is freed by
/// then), and the stream, a BLOCK one among them, does not hang.
#[test]
fn callbacks_held_when_their_thread_unsubscribes_never_run() {
    install_eight_devices();
    set_device(7);
    let stream = create_stream();
    let me = this_thread();
    acl!(aclrtSubscribeReport(me, stream));
    let blocking = Box::into_raw(Box::new(11u32));
    let free_running = Box::into_raw(Box::new(12u32));
    control::hold(7).unwrap();
    acl!(aclrtLaunchCallback(
        Some(count_and_free),
        free_running.cast(),
        ACL_CALLBACK_NO_BLOCK,
        stream
    ));
    acl!(aclrtLaunchCallback(
        Some(count_and_free),
        blocking.cast(),
        ACL_CALLBACK_BLOCK,
        stream
    ));
    acl!(aclrtUnSubscribeReport(me, stream));
    control::release(7).unwrap();
    let raw = Raw::of(stream);
    let code = bounded(
        "a stream past callbacks of an unsubscribed thread",
        move || {
            set_device(7);
            code!(aclrtSynchronizeStream(raw.ptr()))
        },
    );
    assert_eq!(code, 0, "{}", recent_message());
    // SAFETY: the callbacks' data, leaked above; the callbacks must never read it now.
    unsafe {
        drop(Box::from_raw(blocking));
        drop(Box::from_raw(free_running));
    }
    assert_eq!(
        code!(aclrtProcessReport(1)),
        ACL_ERROR_RT_THREAD_SUBSCRIBE,
        "not subscribed"
    );
    recent_message();
    acl!(aclrtSubscribeReport(me, stream));
    assert_eq!(
        code!(aclrtProcessReport(1)),
        ACL_ERROR_RT_REPORT_TIMEOUT,
        "nothing stale is delivered to the new subscription"
    );
    recent_message();
    assert_eq!(CALLBACK_RUNS.load(Ordering::SeqCst), 0);
    acl!(aclrtUnSubscribeReport(me, stream));
    acl!(aclrtDestroyStream(stream));
}

/// Promise: a forced reset racing an aclrtDestroyStream that waits for held work leaves codes,
/// not a hang or a double release: the reset returns 0, the destruction 0, 107002 (it came
/// while the reset was tearing the primary context down: the thread's current context is gone,
/// the stream not yet) or 107017 (the stream went with the context), and the device can be set
/// again. The destroyer sets the device before the reset (set after it, its new primary context
/// does not own the stream); nothing orders its aclrtDestroyStream with the reset.
#[test]
fn a_forced_reset_racing_a_waiting_stream_destruction_leaves_codes() {
    install_eight_devices();
    set_device(0);
    let dev = malloc(4096);
    let stream = create_stream();
    control::hold(0).unwrap();
    memset_async(dev, 4096, 8, stream);
    let raw = Raw::of(stream);
    let (ready, set) = mpsc::channel();
    let destroyer = thread::spawn(move || {
        set_device(0);
        ready.send(()).unwrap();
        code!(aclrtDestroyStream(raw.ptr()))
    });
    set.recv().unwrap(); // the destroyer's aclrtSetDevice precedes the reset
    let resetter = thread::spawn(|| code!(aclrtResetDeviceForce(0)));
    control::release(0).unwrap();
    let (destroyed, reset) = bounded("a reset racing a stream destruction", move || {
        (destroyer.join().unwrap(), resetter.join().unwrap())
    });
    assert_eq!(reset, 0);
    assert!(
        [0, ACL_ERROR_RT_CONTEXT_NULL, ACL_ERROR_RT_INVALID_HANDLE].contains(&destroyed),
        "aclrtDestroyStream returned {destroyed}"
    );
    set_device(0);
    assert_eq!(download::<u8>(dev, 4096), vec![8; 4096]);
    acl!(aclrtFree(dev));
}

/// (Runs on device 5 after the test above, so the two never share the hold gate.)
/// Promise (reference and docs together): an event destroyed while its record is held and a
/// wait for it is queued, whose record is then dropped by a forced destruction of its stream:
/// the wait fails with 107023 instead of hanging on a record that can never complete or
/// reading the destroyed event, and the copy behind it reads nothing the dropped memset wrote.
fn a_destroyed_event_whose_held_record_is_dropped_fails_the_queued_wait() {
    let dev = malloc(8192);
    let (recorder, waiter) = (create_stream(), create_stream());
    let event = create_event();
    control::hold(5).unwrap();
    memset_record_wait_copy(dev, 4, (recorder, waiter), event);
    acl!(aclrtDestroyEvent(event));
    acl!(aclrtDestroyStreamForce(recorder));
    control::release(5).unwrap();
    let raw = Raw::of(waiter);
    let synced = bounded("a wait on a destroyed event's dropped record", move || {
        set_device(5);
        let code = code!(aclrtSynchronizeStream(raw.ptr()));
        (code, recent_message())
    });
    assert_eq!(synced.0, ACL_ERROR_RT_STREAM_ABORT, "{}", synced.1);
    assert_eq!(download::<u8>(dev, 4096), vec![0; 4096]);
    acl!(aclrtDestroyStream(waiter));
    acl!(aclrtFree(dev));
}

/// (Runs on device 6 after the test above, so the two never share the hold gate.)
/// Promise (docs): a launch of an unloaded binary held at the gate and then dropped by a forced
/// destruction of its stream never runs, and the library it kept loaded is let go without the
/// launch touching it.
fn a_held_launch_of_an_unloaded_binary_dropped_by_a_forced_destroy_never_runs() {
    let n = 64;
    let HeldScale {
        stream, dx, data, ..
    } = HeldScale::launch(n, 3.0);
    acl!(aclrtDestroyStreamForce(stream));
    control::release(6).unwrap();
    acl!(aclrtSynchronizeDevice());
    assert_eq!(download::<f32>(dx, n), data, "the dropped launch never ran");
    acl!(aclrtFree(dx));
}

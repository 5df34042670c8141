//! Attacks on control flow in model runtime instances (labels, aclrtSwitchStream, conditional
//! tasks): an instance with branches executes as one program task whose worker chooses its
//! tasks as it goes. Each test names the promise it attacks: no UB, no touch of memory a task
//! no longer owns, no hang (every wait ends when the stream is aborted, force-destroyed,
//! stopped or its device lost), and typed errors naming the API for bad input.
//!
//! Devices: 0 for ordinary tests, 1 for aborts of a whole device, 2 is lost, 3 is reset, 4
//! has a timing model, 5 waits for the whole device (aclrtFreeWithDevSync); tests that affect
//! a whole device have it to themselves.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use common::flow::*;
use common::*;
use npu_sim::abi::*;
use npu_sys::*;

fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        npu_sim::SimConfig::default()
            .devices(6)
            .memory_per_device(1 << 28)
            .install()
            .unwrap();
        register_flow_kernels();
    });
}

fn trap(stream: aclrtStream) {
    let func = function(registry_binary(&["trap"]), "trap");
    assert_eq!(launch(func, 1, stream, &0u64, ptr::null_mut()), 0);
}

/// A WHILE loop that runs `turns` times on every execution (ASSIGN_DEFAULT): its branch runs
/// `body`, then counts the condition down.
fn counted_loop(turns: u32, body: impl FnOnce(aclrtStream)) -> aclmdlRI {
    let (stream, _, handle, branches) = capture_cond(
        ACL_MODEL_RI_COND_TYPE_WHILE,
        1,
        turns,
        ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT,
    );
    let word = cond_word(handle);
    let model = capture_end(stream);
    acl!(aclrtDestroyStream(stream));
    capture_branch(branches[0], |s| {
        body(s);
        count_down(s, word);
    });
    model
}

/// A built instance that loops for ever: `mark` counts its turns (so a caller sees it run),
/// then a switch on a zero index goes back to the top.
fn endless_label_loop(mark: *mut c_void) -> aclmdlRI {
    let head = persistent_stream();
    let index = zeroed(4);
    let model = build_on(&[head]);
    let top = label();
    let list = label_list(&[top]);
    acl!(aclrtSetLabel(top, head));
    add_one(head, mark);
    acl!(aclrtSwitchLabelByIndex(index, 1, list, head));
    build_end(model);
    model
}

/// A built instance that loops for ever without a single task: after one turn of `mark`, a
/// label and a switch back to it, nothing else.
fn bare_label_loop(mark: *mut c_void) -> aclmdlRI {
    let head = persistent_stream();
    let index = zeroed(4);
    let model = build_on(&[head]);
    let top = label();
    let list = label_list(&[top]);
    add_one(head, mark);
    acl!(aclrtSetLabel(top, head));
    acl!(aclrtSwitchLabelByIndex(index, 1, list, head));
    build_end(model);
    model
}

/// A WHILE loop whose branch runs `body`, with a condition that stays 1 unless the body
/// changes it: after the loop, `after` is incremented.
fn while_loop(body: impl FnOnce(aclrtStream, *mut c_void)) -> (aclmdlRI, *mut c_void) {
    let (stream, _, handle, branches) = capture_cond(
        ACL_MODEL_RI_COND_TYPE_WHILE,
        1,
        1,
        ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT,
    );
    let word = cond_word(handle);
    let model = capture_end(stream);
    acl!(aclrtDestroyStream(stream));
    capture_branch(branches[0], |s| body(s, word));
    (model, word)
}

/// Waits (bounded) until the u32 at `mark` differs from `before`: the program is running.
fn await_change(device: i32, mark: *mut c_void, before: u32) {
    let mark = Raw::of(mark);
    bounded("waiting for a program to run", move || {
        set_device(device);
        while read_u32(mark.ptr()) == before {
            std::thread::yield_now();
        }
    });
}

/// Polls aclmdlRIDestroy until the instance's executions are over (bounded): 107037 until
/// then, 0 once destroyed.
fn destroy_when_over(device: i32, model: aclmdlRI) {
    let model = Raw::of(model);
    bounded(
        "destroying an instance once its execution is over",
        move || {
            set_device(device);
            loop {
                match code!(aclmdlRIDestroy(model.ptr())) {
                    0 => return,
                    ACL_ERROR_RT_MODEL_RUNNING => {
                        recent_message();
                        std::thread::yield_now();
                    }
                    other => panic!("aclmdlRIDestroy: {other}: {}", recent_message()),
                }
            }
        },
    );
}

/// A gate a host function holds its stream at: `started` once it runs, until `open`.
#[derive(Default)]
struct Gate {
    started: AtomicBool,
    open: AtomicBool,
}

impl Gate {
    /// Waits (bounded) until the host function holding the stream runs.
    fn await_started(&'static self) {
        bounded("waiting for a host function to start", move || {
            while !self.started.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
        });
    }

    fn open(&self) {
        self.open.store(true, Ordering::Release);
    }
}

/// A host function that blocks its stream until its gate opens.
unsafe extern "C" fn hold_until_open(gate: *mut c_void) {
    // SAFETY: launched with a pointer to a leaked `Gate`.
    let gate = unsafe { &*gate.cast::<Gate>() };
    gate.started.store(true, Ordering::Release);
    while !gate.open.load(Ordering::Acquire) {
        std::thread::yield_now();
    }
}

/// A leaked gate for [`hold_until_open`].
fn gate() -> &'static Gate {
    Box::leak(Box::default())
}

fn hold_stream(stream: aclrtStream, gate: &'static Gate) {
    acl!(aclrtLaunchHostFunc(
        stream,
        Some(hold_until_open),
        ptr::from_ref(gate).cast_mut().cast()
    ));
}

/// Promise: an execution refused because its stream is being aborted leaves the events its
/// branches record as they were; before the fix, the program's records were made current
/// as the program was built, before the refused submission, and a wait for the event waited
/// for a record that never runs.
#[test]
fn an_execution_refused_by_an_aborting_stream_leaves_its_events_alone() {
    install();
    set_device(0);
    let event = create_event();
    let (stream, _, _, branches) = capture_cond(
        ACL_MODEL_RI_COND_TYPE_IF,
        1,
        1,
        ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT,
    );
    let model = capture_end(stream);
    capture_branch(branches[0], |s| acl!(aclrtRecordEvent(event, s)));
    // The event's record outside the instance, complete.
    let other = create_stream();
    acl!(aclrtRecordEvent(event, other));
    acl!(aclrtSynchronizeStream(other));
    let exec = create_stream();
    let gate = gate();
    hold_stream(exec, gate);
    // An abort waits for the running host function (one not started yet it would drop):
    // meanwhile the stream is aborting.
    gate.await_started();
    let raw = Raw::of(exec);
    let aborter = std::thread::spawn(move || {
        set_device(0);
        code!(aclrtStreamAbort(raw.ptr()))
    });
    // A probe that does not touch the event: refused once the stream is aborting (those
    // queued before are dropped by the abort).
    let probe = Raw::of(zeroed(4));
    let probed = bounded("waiting for the stream to be aborting", move || {
        set_device(0);
        loop {
            match code!(aclrtMemsetAsync(probe.ptr(), 4, 0, 4, raw.ptr())) {
                0 => std::thread::yield_now(),
                code => return (code, recent_message()),
            }
        }
    });
    assert_eq!(probed.0, ACL_ERROR_RT_STREAM_ABORT, "{}", probed.1);
    fails(
        code!(aclmdlRIExecuteAsync(model, exec)),
        ACL_ERROR_RT_STREAM_ABORT,
        "aclmdlRIExecuteAsync",
    );
    gate.open();
    assert_eq!(aborter.join().unwrap(), 0);
    recent_message();
    let raw_event = Raw::of(event);
    let (code, status) = bounded(
        "waiting for an event the refused execution records",
        move || {
            set_device(0);
            let code = code!(aclrtSynchronizeEvent(raw_event.ptr()));
            let mut status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
            acl!(aclrtQueryEventStatus(raw_event.ptr(), &mut status));
            (code, status)
        },
    );
    assert_eq!((code, status), (0, ACL_EVENT_RECORDED_STATUS_COMPLETE));
    destroy_when_over(0, model);
    for stream in [stream, other, exec] {
        acl!(aclrtDestroyStream(stream));
    }
    acl!(aclrtDestroyEvent(event));
}

/// Promise: a stopped stream destroyed with its queue drops the rest of its work, the
/// program running too, even one looping without a task (a label loop, a WHILE loop whose
/// branch is empty): its execution ends, so the instance can be destroyed.
#[test]
fn a_loop_without_tasks_ends_when_its_stopped_stream_is_destroyed() {
    install();
    set_device(0);
    for bare in [true, false] {
        let mark = zeroed(4);
        let (model, _) = match bare {
            true => (bare_label_loop(mark), ptr::null_mut::<c_void>()),
            false => while_loop(|_, _| {}),
        };
        let exec = create_stream();
        if !bare {
            // The WHILE loop has nothing to count: a kernel before it shows it has begun.
            add_one(exec, mark);
        }
        acl!(aclmdlRIExecuteAsync(model, exec));
        await_change(0, mark, 0);
        acl!(aclrtStreamStop(exec));
        let raw = Raw::of(exec);
        let code = bounded("destroying a stopped stream running a loop", move || {
            set_device(0);
            code!(aclrtDestroyStream(raw.ptr()))
        });
        recent_message();
        assert_eq!(code, 0, "bare {bare}");
        destroy_when_over(0, model);
    }
}

/// Promise: an endless loop, with tasks or without (a WHILE loop whose branch is empty),
/// ends when its stream is aborted or destroyed by force.
#[test]
fn endless_loops_end_on_an_abort_or_a_forced_destruction() {
    install();
    set_device(0);
    for (with_tasks, force) in [(true, false), (true, true), (false, false), (false, true)] {
        let mark = zeroed(4);
        let model = match with_tasks {
            true => endless_label_loop(mark),
            false => while_loop(|_, _| {}).0,
        };
        let exec = create_stream();
        add_one(exec, mark);
        acl!(aclmdlRIExecuteAsync(model, exec));
        await_change(0, mark, 0);
        let raw = Raw::of(exec);
        bounded("ending an endless loop", move || {
            set_device(0);
            match force {
                true => acl!(aclrtDestroyStreamForce(raw.ptr())),
                false => {
                    acl!(aclrtStreamAbort(raw.ptr()));
                    acl!(aclrtSynchronizeStream(raw.ptr()));
                    acl!(aclrtDestroyStream(raw.ptr()));
                }
            }
        });
        destroy_when_over(0, model);
    }
}

/// Promise: the host may end a WHILE loop by writing its condition word while the loop runs
/// (a synchronous copy does not wait for the endless execution first), and the loop ends.
#[test]
fn the_host_ends_a_running_while_loop_by_writing_its_condition() {
    install();
    set_device(0);
    let mark = zeroed(4);
    let after = zeroed(4);
    let (stream, _, handle, branches) = capture_cond(ACL_MODEL_RI_COND_TYPE_WHILE, 1, 1, 0);
    let word = cond_word(handle);
    add_one(stream, after);
    let model = capture_end(stream);
    capture_branch(branches[0], |s| add_one(s, mark));
    let exec = create_stream();
    acl!(aclmdlRIExecuteAsync(model, exec));
    await_change(0, mark, 0);
    let raw = (Raw::of(word), Raw::of(exec));
    bounded("ending a WHILE loop from the host", move || {
        set_device(0);
        upload(raw.0.ptr(), &[0u64]);
        acl!(aclrtSynchronizeStream(raw.1.ptr()));
    });
    assert_eq!(read_u32(after), 1);
    let turns = read_u32(mark);
    assert!(turns >= 1);
    // The program owns the word (no ASSIGN_DEFAULT): the next execution skips the loop.
    execute(model);
    assert_eq!((read_u32(mark), read_u32(after)), (turns, 2));
    acl!(aclmdlRIDestroy(model));
    for stream in [stream, exec] {
        acl!(aclrtDestroyStream(stream));
    }
}

/// Promise: memory a branch's memset writes, freed while the execution waits in the queue,
/// fails the execution with the DMA fault; nothing touches it.
#[test]
fn a_branch_writing_memory_freed_while_queued_fails_with_a_dma_fault() {
    install();
    set_device(0);
    let target = malloc(4096);
    let after = zeroed(4);
    let (stream, _, _, branches) = capture_cond(
        ACL_MODEL_RI_COND_TYPE_IF,
        1,
        1,
        ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT,
    );
    add_one(stream, after);
    let model = capture_end(stream);
    // A memset: memory a kernel reaches through pointers inside its arguments cannot be
    // checked (docs/simulator.md), a memset's range can.
    capture_branch(branches[0], |s| {
        acl!(aclrtMemsetAsync(target, 4096, 7, 4096, s));
    });
    let exec = create_stream();
    let gate = gate();
    hold_stream(exec, gate);
    acl!(aclmdlRIExecuteAsync(model, exec));
    acl!(aclrtFree(target));
    gate.open();
    let raw = Raw::of(exec);
    bounded("an execution writing freed memory", move || {
        set_device(0);
        sync_fails_with_dma(raw.ptr());
    });
    // The tasks after the faulty one still run (the stream continues on failure).
    assert_eq!(read_u32(after), 1);
    acl!(aclmdlRIDestroy(model));
    for stream in [stream, exec] {
        acl!(aclrtDestroyStream(stream));
    }
}

/// Promise: a failing kernel inside a branch of a stream in ACL_STOP_ON_FAILURE mode stops the
/// context: the rest of the program does not run (an endless WHILE loop ends, so its
/// instance can be destroyed) and synchronising reports the failure.
#[test]
fn a_failure_inside_a_branch_stops_a_stop_on_failure_stream() {
    install();
    // A context of its own (STOP_ON_FAILURE stops every stream of the context), on a thread
    // of its own.
    let (code, marks) = bounded("a failing branch in STOP_ON_FAILURE mode", || {
        let mut ctx = ptr::null_mut();
        acl!(aclrtCreateContext(&mut ctx, 0));
        let (before, after) = (zeroed(4), zeroed(4));
        let (stream, _, _, branches) = capture_cond(
            ACL_MODEL_RI_COND_TYPE_WHILE,
            1,
            1,
            ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT,
        );
        add_one(stream, after);
        let model = capture_end(stream);
        // An endless loop, but for the failure.
        capture_branch(branches[0], |s| {
            add_one(s, before);
            trap(s);
        });
        let exec = create_stream();
        acl!(aclrtSetStreamFailureMode(
            exec,
            u64::from(ACL_STOP_ON_FAILURE)
        ));
        acl!(aclmdlRIExecuteAsync(model, exec));
        let code = code!(aclrtSynchronizeStream(exec));
        recent_message();
        // The execution is over (the loop ended with the stop): the instance can go.
        while code!(aclmdlRIDestroy(model)) != 0 {
            recent_message();
            std::thread::yield_now();
        }
        // The context stays stopped for the rest of its life: its copies fail too, so the
        // marks are read from the device's primary context.
        let marks = (Raw::of(before), Raw::of(after));
        let marks = std::thread::spawn(move || {
            set_device(0);
            (read_u32(marks.0.ptr()), read_u32(marks.1.ptr()))
        })
        .join()
        .unwrap();
        for stream in [stream, exec] {
            code!(aclrtDestroyStream(stream));
        }
        recent_message();
        acl!(aclrtDestroyContext(ctx));
        (code, marks)
    });
    assert_eq!(code, ACL_ERROR_RT_AICORE_EXCEPTION);
    assert_eq!(marks, (1, 0));
}

/// Promise: a label switch to a label set in another instance, or never set, fails the
/// execution with 107000 naming aclrtSwitchLabelByIndex; the stream goes on afterwards.
#[test]
fn a_switch_to_a_label_outside_its_instance_fails_the_execution() {
    install();
    set_device(0);
    let foreign_head = persistent_stream();
    let foreign_model = build_on(&[foreign_head]);
    let foreign = label();
    acl!(aclrtSetLabel(foreign, foreign_head));
    build_end(foreign_model);
    let unset = label();
    for target in [foreign, unset] {
        let head = persistent_stream();
        let (index, mark) = (zeroed(4), zeroed(4));
        let model = build_on(&[head]);
        let list = label_list(&[target]);
        acl!(aclrtSwitchLabelByIndex(index, 1, list, head));
        add_one(head, mark);
        build_end(model);
        let exec = create_stream();
        acl!(aclmdlRIExecuteAsync(model, exec));
        let raw = Raw::of(exec);
        let (code, message) = bounded("a switch to a foreign label", move || {
            set_device(0);
            (code!(aclrtSynchronizeStream(raw.ptr())), recent_message())
        });
        assert_eq!(code, ACL_ERROR_RT_PARAM_INVALID, "{message}");
        assert!(message.contains("aclrtSwitchLabelByIndex"), "{message}");
        assert_eq!(read_u32(mark), 0);
        // Reported once; the stream runs what follows.
        add_one(exec, mark);
        acl!(aclrtSynchronizeStream(exec));
        assert_eq!(read_u32(mark), 1);
        acl!(aclmdlRIDestroy(model));
        acl!(aclrtDestroyLabelList(list));
        for stream in [head, exec] {
            acl!(aclrtDestroyStream(stream));
        }
    }
    acl!(aclmdlRIDestroy(foreign_model));
    for label in [foreign, unset] {
        acl!(aclrtDestroyLabel(label));
    }
    acl!(aclrtDestroyStream(foreign_head));
}

/// Promise: aclrtSwitchStream to the switching stream itself is a loop the execution runs (a
/// count in device memory ends it), not a hang or a crash; one to a HEAD stream, which would
/// run that stream's tasks twice, is refused with a code naming the call.
#[test]
fn a_stream_switch_to_itself_loops_until_its_condition_fails_and_one_to_a_head_is_refused() {
    install();
    set_device(0);
    let (head, other) = (persistent_stream(), persistent_stream());
    let (count, limit, mark) = (zeroed(4), malloc(4), zeroed(4));
    upload(limit, &[3i32]);
    let model = build_on(&[head]);
    acl!(aclmdlRIBindStream(model, other, ACTIVATED));
    add_one(head, mark);
    acl!(aclrtActiveStream(other, head));
    // `other` counts, then switches back to itself while the count is below the limit.
    add_one(other, count);
    let switch = |target| {
        code!(aclrtSwitchStream(
            count,
            ACL_RT_LESS,
            limit,
            ACL_RT_SWITCH_INT32,
            target,
            ptr::null_mut(),
            other
        ))
    };
    fails(
        switch(head),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclrtSwitchStream",
    );
    assert_eq!(switch(other), 0, "{}", recent_message());
    build_end(model);
    execute_within("a looping stream switch", 0, model);
    assert_eq!((read_u32(count), read_u32(mark)), (3, 1));
    acl!(aclmdlRIDestroy(model));
    for stream in [head, other] {
        acl!(aclrtDestroyStream(stream));
    }
}

/// Promise: losing the device ends every wait for an execution running an endless loop, with
/// tasks or without, with the loss's code, and the executions end.
#[test]
fn endless_loops_end_when_their_device_is_lost() {
    install();
    set_device(2);
    let mark = zeroed(4);
    let with_tasks = endless_label_loop(mark);
    let empty = while_loop(|_, _| {}).0;
    let (first, second) = (create_stream(), create_stream());
    acl!(aclmdlRIExecuteAsync(with_tasks, first));
    add_one(second, mark);
    acl!(aclmdlRIExecuteAsync(empty, second));
    await_change(2, mark, 0);
    npu_sim::control::lose_device(2).unwrap();
    let mut ctx = ptr::null_mut();
    acl!(aclrtGetCurrentContext(&mut ctx));
    let raw = (Raw::of(first), Raw::of(second), Raw::of(ctx));
    let codes = bounded("waiting for loops on a lost device", move || {
        // aclrtSetDevice of a lost device fails: the context is made current instead.
        acl!(aclrtSetCurrentContext(raw.2.ptr()));
        let codes = [raw.0, raw.1].map(|s| code!(aclrtSynchronizeStream(s.ptr())));
        recent_message();
        codes
    });
    assert_eq!(codes, [ACL_ERROR_RT_LOST_HEARTBEAT; 2]);
    // The executions end: their instances are not running any more.
    for model in [with_tasks, empty] {
        let raw = Raw::of(model);
        bounded("an execution on a lost device ending", move || {
            loop {
                match code!(aclmdlRIDestroy(raw.ptr())) {
                    ACL_ERROR_RT_MODEL_RUNNING => std::thread::yield_now(),
                    _ => return recent_message(),
                }
            }
        });
    }
}

/// Promise: resetting the device of a stopped stream running an endless loop (with a task, or
/// without) returns: the context's destruction drops the stopped streams' work, the program
/// running too.
#[test]
fn resetting_the_device_of_a_stopped_loop_returns() {
    install();
    let raw = bounded("resetting a device under an endless loop", || {
        set_device(3);
        let mark = zeroed(4);
        let with_tasks = endless_label_loop(mark);
        let empty = while_loop(|_, _| {}).0;
        let (first, second) = (create_stream(), create_stream());
        acl!(aclmdlRIExecuteAsync(with_tasks, first));
        add_one(second, mark);
        acl!(aclmdlRIExecuteAsync(empty, second));
        while read_u32(mark) < 2 {
            std::thread::yield_now();
        }
        acl!(aclrtStreamStop(first));
        acl!(aclrtStreamStop(second));
        acl!(aclrtResetDevice(3));
        (Raw::of(with_tasks), Raw::of(empty))
    });
    // The executions end (the reset does not wait for stopped work).
    for model in [raw.0, raw.1] {
        let code = bounded("an execution ending after a reset", move || {
            loop {
                match code!(aclmdlRIDestroy(model.ptr())) {
                    ACL_ERROR_RT_MODEL_RUNNING => std::thread::yield_now(),
                    code => return (code, recent_message()),
                }
            }
        });
        assert!(
            matches!(code.0, 0 | ACL_ERROR_RT_INVALID_HANDLE),
            "{code:?}"
        );
    }
}

/// Promise: a program's kernels are paced by the timing model, and the records its branches
/// make carry the simulated times: a WHILE loop of three turns of two kernels takes at least
/// six kernel durations between a record before it and one made in its last turn.
#[test]
fn a_timed_program_paces_its_tasks_and_timestamps_its_records() {
    install();
    set_device(4);
    const KERNEL_NS: u64 = 200_000;
    npu_sim::control::set_timing(
        4,
        Some(npu_sim::TimingModel::default().launch_latency_ns(KERNEL_NS)),
    )
    .unwrap();
    let (start, end) = (create_event(), create_event());
    let mark = zeroed(4);
    let model = counted_loop(3, |s| {
        add_one(s, mark);
        acl!(aclrtRecordEvent(end, s));
    });
    let exec = create_stream();
    acl!(aclrtRecordEvent(start, exec));
    acl!(aclmdlRIExecuteAsync(model, exec));
    let raw = Raw::of(end);
    bounded("a timed program", move || {
        set_device(4);
        acl!(aclrtSynchronizeEvent(raw.ptr()));
    });
    acl!(aclrtSynchronizeStream(exec));
    let mut ms = 0.0f32;
    acl!(aclrtEventElapsedTime(&mut ms, start, end));
    assert_eq!(read_u32(mark), 3);
    // Six kernels end before the last record (the last count down comes after it): five
    // whole durations at least.
    assert!(
        f64::from(ms) >= 5.0 * KERNEL_NS as f64 / 1e6 * 0.99,
        "{ms} ms"
    );
    npu_sim::control::set_timing(4, None).unwrap();
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyStream(exec));
    for event in [start, end] {
        acl!(aclrtDestroyEvent(event));
    }
}

/// Promise: records made inside a loop complete for the streams waiting on them, a reset in
/// the loop leaves an event that a synchronisation passes, and nothing waits for ever.
#[test]
fn records_and_resets_inside_a_loop_release_their_waiters() {
    install();
    set_device(0);
    let (recorded, reset) = (create_event(), create_event());
    let (mark, waited) = (zeroed(4), zeroed(4));
    let model = counted_loop(3, |s| {
        add_one(s, mark);
        acl!(aclrtRecordEvent(recorded, s));
        acl!(aclrtRecordEvent(reset, s));
        acl!(aclrtResetEvent(reset, s));
    });
    let (exec, waiter) = (create_stream(), create_stream());
    let gate = gate();
    hold_stream(exec, gate);
    acl!(aclmdlRIExecuteAsync(model, exec));
    acl!(aclrtStreamWaitEvent(waiter, recorded));
    add_one(waiter, waited);
    let mut status = ACL_EVENT_RECORDED_STATUS_COMPLETE;
    acl!(aclrtQueryEventStatus(recorded, &mut status));
    assert_eq!(status, ACL_EVENT_RECORDED_STATUS_NOT_READY);
    gate.open();
    let raw = (Raw::of(waiter), Raw::of(recorded), Raw::of(reset));
    bounded("waiters of records made in a loop", move || {
        set_device(0);
        acl!(aclrtSynchronizeStream(raw.0.ptr()));
        acl!(aclrtSynchronizeEvent(raw.1.ptr()));
        acl!(aclrtSynchronizeEvent(raw.2.ptr()));
    });
    assert_eq!(read_u32(waited), 1);
    acl!(aclrtSynchronizeStream(exec));
    assert_eq!(read_u32(mark), 3);
    acl!(aclrtQueryEventStatus(recorded, &mut status));
    assert_eq!(status, ACL_EVENT_RECORDED_STATUS_COMPLETE);
    acl!(aclmdlRIDestroy(model));
    for stream in [exec, waiter] {
        acl!(aclrtDestroyStream(stream));
    }
    for event in [recorded, reset] {
        acl!(aclrtDestroyEvent(event));
    }
}

static HOST_CALLS: AtomicU32 = AtomicU32::new(0);
static CALLBACKS: AtomicU32 = AtomicU32::new(0);

unsafe extern "C" fn count_host_call(_: *mut c_void) {
    HOST_CALLS.fetch_add(1, Ordering::AcqRel);
}

unsafe extern "C" fn count_callback(_: *mut c_void) {
    CALLBACKS.fetch_add(1, Ordering::AcqRel);
}

/// Promise: host functions and BLOCK callbacks inside a loop's branch run once per turn, the
/// callbacks on the report thread, and the stream waits for each before going on.
#[test]
fn host_functions_and_blocking_callbacks_run_inside_branches() {
    install();
    set_device(0);
    let mark = zeroed(4);
    let done = std::sync::Arc::new(AtomicBool::new(false));
    let (id_tx, id_rx) = std::sync::mpsc::channel();
    let reporting = done.clone();
    let reporter = std::thread::spawn(move || {
        set_device(0);
        id_tx.send(this_thread()).unwrap();
        while !reporting.load(Ordering::Acquire) {
            // Times out (an error) when no callback came: looks again.
            code!(aclrtProcessReport(10));
            recent_message();
        }
    });
    let reporter_id = id_rx.recv().unwrap();
    let model = counted_loop(3, |s| {
        // A callback is captured on a stream with a report thread.
        acl!(aclrtSubscribeReport(reporter_id, s));
        acl!(aclrtLaunchHostFunc(
            s,
            Some(count_host_call),
            ptr::null_mut()
        ));
        acl!(aclrtLaunchCallback(
            Some(count_callback),
            ptr::null_mut(),
            ACL_CALLBACK_BLOCK,
            s
        ));
        add_one(s, mark);
    });
    let exec = create_stream();
    acl!(aclrtSubscribeReport(reporter_id, exec));
    let before = (
        HOST_CALLS.load(Ordering::Acquire),
        CALLBACKS.load(Ordering::Acquire),
    );
    acl!(aclmdlRIExecuteAsync(model, exec));
    let raw = Raw::of(exec);
    bounded("an execution with callbacks in a loop", move || {
        set_device(0);
        acl!(aclrtSynchronizeStream(raw.ptr()));
    });
    done.store(true, Ordering::Release);
    reporter.join().unwrap();
    assert_eq!(read_u32(mark), 3);
    assert_eq!(HOST_CALLS.load(Ordering::Acquire) - before.0, 3);
    assert_eq!(CALLBACKS.load(Ordering::Acquire) - before.1, 3);
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyStream(exec));
}

/// Promise: destroying the labels, the label list and the bound streams of an instance while
/// its endless loop runs changes nothing in the running execution (it holds what it needs);
/// the instance refuses destruction (107037) until an abort ends the execution, and a later
/// execution, its HEAD stream gone, runs nothing and returns.
#[test]
fn destroying_what_a_running_loop_uses_leaves_it_running_until_aborted() {
    install();
    set_device(0);
    let head = persistent_stream();
    let (index, mark) = (zeroed(4), zeroed(4));
    let model = build_on(&[head]);
    let top = label();
    let list = label_list(&[top]);
    acl!(aclrtSetLabel(top, head));
    add_one(head, mark);
    acl!(aclrtSwitchLabelByIndex(index, 1, list, head));
    build_end(model);
    let exec = create_stream();
    acl!(aclmdlRIExecuteAsync(model, exec));
    await_change(0, mark, 0);
    acl!(aclrtDestroyLabelList(list));
    acl!(aclrtDestroyLabel(top));
    acl!(aclrtDestroyStream(head));
    fails(
        code!(aclmdlRIDestroy(model)),
        ACL_ERROR_RT_MODEL_RUNNING,
        "aclmdlRIDestroy",
    );
    let now = read_u32(mark);
    await_change(0, mark, now);
    let raw = Raw::of(exec);
    bounded("aborting a loop whose labels are gone", move || {
        set_device(0);
        acl!(aclrtStreamAbort(raw.ptr()));
        acl!(aclrtSynchronizeStream(raw.ptr()));
    });
    let after_abort = read_u32(mark);
    let raw_model = Raw::of(model);
    bounded("an execution without its HEAD stream", move || {
        set_device(0);
        execute(raw_model.ptr());
    });
    assert_eq!(read_u32(mark), after_abort);
    destroy_when_over(0, model);
    acl!(aclrtDestroyStream(exec));
}

/// Promise: the inspection APIs work on instances with branches and refuse branches with a
/// typed error naming the API; a conditional task is a DEFAULT task whose parameters cannot
/// be set into something else, and disabling it (aclmdlRIUpdate) skips its branches.
#[test]
fn instances_with_branches_can_be_inspected_and_their_conditional_task_disabled() {
    install();
    set_device(0);
    let (mark, after) = (zeroed(4), zeroed(4));
    let (stream, _, _, branches) = capture_cond(
        ACL_MODEL_RI_COND_TYPE_SWITCH,
        3,
        1,
        ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT,
    );
    add_one(stream, after);
    let model = capture_end(stream);
    capture_branch(branches[1], |s| add_one(s, mark));
    capture_branch(branches[0], |_| {});
    // branches[2] is never captured: an empty branch.
    acl!(aclmdlRIDebugPrint(model));
    let path = config_file("attack_control_flow.json", "");
    acl!(aclmdlRIDebugJsonPrint(model, path.as_ptr(), 0));
    let json = std::fs::read_to_string(path.to_str().unwrap()).unwrap();
    assert!(json.contains("switch of 3 branches"), "{json}");
    let tasks = first_stream_tasks(model);
    assert_eq!(tasks.len(), 2);
    let mut kind = ACL_MODEL_RI_TASK_KERNEL;
    acl!(aclmdlRITaskGetType(tasks[0], &mut kind));
    assert_eq!(kind, ACL_MODEL_RI_TASK_DEFAULT);
    let mut params = task_params(tasks[0]);
    params.type_ = ACL_MODEL_RI_TASK_KERNEL;
    fails(
        code!(aclmdlRITaskSetParams(tasks[0], &mut params)),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclmdlRITaskSetParams",
    );
    for branch in [branches[0], branches[1], branches[2]] {
        // A branch is no instance of its own to print or execute; whatever the code, it is
        // an error naming the API, or success.
        let code = code!(aclmdlRIDebugPrint(branch));
        let message = recent_message();
        assert!(
            code == 0 || message.contains("aclmdlRIDebugPrint"),
            "{code}: {message}"
        );
    }
    execute(model);
    assert_eq!((read_u32(mark), read_u32(after)), (1, 1));
    acl!(aclmdlRITaskDisable(tasks[0]));
    acl!(aclmdlRIUpdate(model));
    execute(model);
    assert_eq!((read_u32(mark), read_u32(after)), (1, 2));
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyStream(stream));
}

/// Promise: several threads executing the same instance with branches at once, each on its
/// own stream, each get every turn of the loop and every record, and nothing deadlocks.
#[test]
fn threads_executing_one_instance_with_branches_at_once_all_complete() {
    install();
    set_device(0);
    const THREADS: usize = 4;
    const RUNS: usize = 25;
    let event = create_event();
    let value = zeroed(8);
    // A SWITCH on a default of 1 (so racing defaults agree), its branch writing a value and
    // recording the shared event: nothing racy in the tasks themselves.
    let (stream, _, _, branches) = capture_cond(
        ACL_MODEL_RI_COND_TYPE_SWITCH,
        2,
        1,
        ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT,
    );
    let model = capture_end(stream);
    capture_branch(branches[1], |s| {
        acl!(aclrtValueWrite(value, 7, 0, s));
        acl!(aclrtRecordEvent(event, s));
    });
    let raw = (Raw::of(model), Raw::of(event));
    let workers: Vec<_> = (0..THREADS)
        .map(|_| {
            std::thread::spawn(move || {
                set_device(0);
                let exec = create_stream();
                for _ in 0..RUNS {
                    acl!(aclmdlRIExecuteAsync(raw.0.ptr(), exec));
                    acl!(aclrtStreamWaitEvent(exec, raw.1.ptr()));
                }
                acl!(aclrtSynchronizeStream(exec));
                acl!(aclrtDestroyStream(exec));
            })
        })
        .collect();
    bounded("threads executing one instance", move || {
        for worker in workers {
            worker.join().unwrap();
        }
    });
    assert_eq!(read_u64(value), 7);
    acl!(aclrtSynchronizeEvent(event));
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtDestroyEvent(event));
}

/// Promise (as documented): fault injection counts the tasks the host queued, not those a
/// program chooses as it runs: an injection aimed at the next device task passes over an
/// execution with branches and strikes the next task queued after it.
#[test]
fn an_injected_failure_passes_over_a_program_to_the_next_queued_task() {
    install();
    set_device(0);
    let (mark, next) = (zeroed(4), zeroed(4));
    let model = counted_loop(2, |s| add_one(s, mark));
    let exec = create_stream();
    npu_sim::control::fail_task(exec, 1, ACL_ERROR_RT_AICORE_EXCEPTION).unwrap();
    acl!(aclmdlRIExecuteAsync(model, exec));
    add_one(exec, next);
    let raw = Raw::of(exec);
    let code = bounded("a program under fault injection", move || {
        set_device(0);
        code!(aclrtSynchronizeStream(raw.ptr()))
    });
    recent_message();
    assert_eq!(code, ACL_ERROR_RT_AICORE_EXCEPTION);
    assert_eq!((read_u32(mark), read_u32(next)), (2, 0));
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyStream(exec));
}

/// Promise: an execution with branches queued on a stream that is not an ordinary queue (a
/// PERSISTENT stream, or one bound to an instance being built) is refused with a code naming
/// the call: such a stream would keep the execution as a task of its own, run by another
/// instance (or never) with records that could never complete, and whose condition words
/// its own instance frees. Nothing changes for the events it would record.
#[test]
fn an_execution_with_branches_is_refused_by_a_persistent_or_bound_stream() {
    install();
    set_device(0);
    let event = create_event();
    let mark = zeroed(4);
    let (stream, _, _, branches) = capture_cond(
        ACL_MODEL_RI_COND_TYPE_IF,
        1,
        1,
        ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT,
    );
    let inner = capture_end(stream);
    capture_branch(branches[0], |s| {
        add_one(s, mark);
        acl!(aclrtRecordEvent(event, s));
    });
    let persistent = persistent_stream();
    fails(
        code!(aclmdlRIExecuteAsync(inner, persistent)),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclmdlRIExecuteAsync",
    );
    let head = persistent_stream();
    let outer = build_on(&[head]);
    fails(
        code!(aclmdlRIExecuteAsync(inner, head)),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclmdlRIExecuteAsync",
    );
    build_end(outer);
    let raw_event = Raw::of(event);
    let code = bounded("an event a refused execution would record", move || {
        set_device(0);
        code!(aclrtSynchronizeEvent(raw_event.ptr()))
    });
    assert_eq!(code, 0);
    execute(outer);
    assert_eq!(read_u32(mark), 0);
    execute(inner);
    assert_eq!(read_u32(mark), 1);
    acl!(aclmdlRIDestroy(outer));
    acl!(aclmdlRIDestroy(inner));
    for stream in [stream, head, persistent] {
        acl!(aclrtDestroyStream(stream));
    }
    acl!(aclrtDestroyEvent(event));
}

/// Promise: an execution kept by an unbound PERSISTENT stream (which never runs its tasks)
/// does not make the events it records wait for ever, with branches or without: a record on
/// such a stream is refused because it could never complete, and the execution's records are
/// not made current either.
#[test]
fn an_execution_kept_by_a_persistent_stream_leaves_its_events_alone() {
    install();
    set_device(0);
    for branches in [false, true] {
        let event = create_event();
        let stream = create_stream();
        acl!(aclmdlRICaptureBegin(stream, RELAXED));
        let model = match branches {
            false => {
                acl!(aclrtRecordEvent(event, stream));
                capture_end(stream)
            }
            true => {
                let (mut status, mut model) = (0, ptr::null_mut());
                acl!(aclmdlRICaptureGetInfo(stream, &mut status, &mut model));
                let (_, branch) = cond_task(
                    model,
                    stream,
                    ACL_MODEL_RI_COND_TYPE_IF,
                    1,
                    1,
                    ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT,
                );
                let model = capture_end(stream);
                capture_branch(branch[0], |s| acl!(aclrtRecordEvent(event, s)));
                model
            }
        };
        // The event's record outside the instance, complete: what it must stay on.
        acl!(aclrtRecordEvent(event, stream));
        acl!(aclrtSynchronizeStream(stream));
        let persistent = persistent_stream();
        // Accepted or refused: either way no wait may hang on what it records.
        code!(aclmdlRIExecuteAsync(model, persistent));
        recent_message();
        let raw = Raw::of(event);
        let (code, status) = bounded("an event a kept execution records", move || {
            set_device(0);
            let code = code!(aclrtSynchronizeEvent(raw.ptr()));
            let mut status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
            acl!(aclrtQueryEventStatus(raw.ptr(), &mut status));
            (code, status)
        });
        assert_eq!(
            (code, status),
            (0, ACL_EVENT_RECORDED_STATUS_COMPLETE),
            "branches {branches}"
        );
        acl!(aclrtDestroyStream(persistent));
        destroy_when_over(0, model);
        acl!(aclrtDestroyStream(stream));
        acl!(aclrtDestroyEvent(event));
    }
}

/// Promise: a conditional task may be added from a stream that joined another stream's
/// capture (it goes into that capture's instance); a branch capture ended on a stream that
/// joined it but did not begin it is refused with a code naming aclmdlRICaptureEnd, and the
/// branch still ends on its own stream and runs.
#[test]
fn conditional_tasks_on_joined_streams_and_branch_captures_ended_elsewhere() {
    install();
    set_device(0);
    let mark = zeroed(4);
    let (origin, joined) = (create_stream(), create_stream());
    let fork = create_event();
    acl!(aclmdlRICaptureBegin(origin, RELAXED));
    acl!(aclrtRecordEvent(fork, origin));
    acl!(aclrtStreamWaitEvent(joined, fork));
    let (mut status, mut model) = (0, ptr::null_mut());
    acl!(aclmdlRICaptureGetInfo(origin, &mut status, &mut model));
    let (_, branch) = cond_task(
        model,
        joined,
        ACL_MODEL_RI_COND_TYPE_IF,
        1,
        1,
        ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT,
    );
    // The joined stream returns to the origin before the capture ends.
    let join = create_event();
    acl!(aclrtRecordEvent(join, joined));
    acl!(aclrtStreamWaitEvent(origin, join));
    assert_eq!(capture_end(origin), model);
    // The branch: begun on one stream, joined by another, ended on the wrong one first.
    let (branch_stream, helper) = (create_stream(), create_stream());
    let inner_fork = create_event();
    acl!(aclmdlRICaptureToModelRIBegin(
        branch_stream,
        branch[0],
        RELAXED
    ));
    acl!(aclrtRecordEvent(inner_fork, branch_stream));
    acl!(aclrtStreamWaitEvent(helper, inner_fork));
    add_one(helper, mark);
    let inner_join = create_event();
    acl!(aclrtRecordEvent(inner_join, helper));
    acl!(aclrtStreamWaitEvent(branch_stream, inner_join));
    let mut ended = ptr::null_mut();
    let code = code!(aclmdlRICaptureEnd(helper, &mut ended));
    let message = recent_message();
    assert_ne!(code, 0, "ending a branch capture on a joined stream");
    assert!(message.contains("aclmdlRICaptureEnd"), "{message}");
    assert_eq!(capture_end(branch_stream), branch[0]);
    execute_within("executing a branch captured on two streams", 0, model);
    assert_eq!(read_u32(mark), 1);
    acl!(aclmdlRIDestroy(model));
    for stream in [origin, joined, branch_stream, helper] {
        acl!(aclrtDestroyStream(stream));
    }
    for event in [fork, join, inner_fork, inner_join] {
        acl!(aclrtDestroyEvent(event));
    }
}

/// Promise: a SWITCH with many branches (4096) is created, executes the one its value
/// indexes, and is destroyed with its instance; a value past the last runs none.
#[test]
fn a_switch_of_thousands_of_branches_runs_the_one_indexed() {
    install();
    set_device(0);
    const SIZE: u32 = 4096;
    let mark = zeroed(4);
    let (stream, _, handle, branches) = capture_cond(ACL_MODEL_RI_COND_TYPE_SWITCH, SIZE, 0, 0);
    let word = cond_word(handle);
    let model = capture_end(stream);
    capture_branch(branches[SIZE as usize - 1], |s| add_one(s, mark));
    for (value, expected) in [
        (u64::from(SIZE) - 1, 1),
        (u64::from(SIZE), 1),
        (u64::MAX, 1),
        (0, 1),
    ] {
        upload(word, &[value]);
        execute_within("a switch of thousands of branches", 0, model);
        assert_eq!(read_u32(mark), expected, "value {value}");
    }
    acl!(aclmdlRIDestroy(model));
    // Its branches went with it.
    fails(
        code!(aclmdlRIDestroy(branches[0])),
        ACL_ERROR_RT_INVALID_HANDLE,
        "aclmdlRIDestroy",
    );
    acl!(aclrtDestroyStream(stream));
}

/// Promise: aclrtFreeWithDevSync, which waits until no task of the device can touch memory,
/// returns behind a program held by aclrtStreamStop between two of its tasks (a stopped
/// program never finishes before an abort; it touches no memory meanwhile).
#[test]
fn a_free_with_device_sync_returns_behind_a_stopped_program() {
    install();
    set_device(5);
    let mark = zeroed(4);
    let (model, _) = while_loop(|s, _| add_one(s, mark));
    let exec = create_stream();
    acl!(aclmdlRIExecuteAsync(model, exec));
    await_change(5, mark, 0);
    acl!(aclrtStreamStop(exec));
    let freed = malloc(64);
    let raw = Raw::of(freed);
    let code = bounded("a free waiting for a stopped program", move || {
        set_device(5);
        code!(aclrtFreeWithDevSync(raw.ptr()))
    });
    assert_eq!(code, 0, "{}", recent_message());
    acl!(aclrtStreamAbort(exec));
    acl!(aclrtSynchronizeStream(exec));
    destroy_when_over(5, model);
    acl!(aclrtDestroyStream(exec));
}

/// The callbacks [`a_report_thread_waiting_behind_a_program_with_a_blocking_callback_gets_a_code`]
/// ran: its own count, since other tests run [`count_callback`] concurrently.
static REPORT_TURNS: AtomicU32 = AtomicU32::new(0);

unsafe extern "C" fn count_report_turn(_: *mut c_void) {
    REPORT_TURNS.fetch_add(1, Ordering::AcqRel);
}

/// Promise: the report thread of a stream whose program holds BLOCK callbacks is refused
/// (207000) when it waits for that stream, as it is for a BLOCK callback queued there itself:
/// only its own aclrtProcessReport can run the callbacks the stream will stop at, the next
/// turn's too after it ran one.
#[test]
fn a_report_thread_waiting_behind_a_program_with_a_blocking_callback_gets_a_code() {
    install();
    set_device(0);
    let mark = zeroed(4);
    let raw = Raw::of(mark);
    bounded("a report thread waiting for its own callback", move || {
        set_device(0);
        let me = this_thread();
        let model = counted_loop(2, |s| {
            acl!(aclrtSubscribeReport(me, s));
            acl!(aclrtLaunchCallback(
                Some(count_report_turn),
                ptr::null_mut(),
                ACL_CALLBACK_BLOCK,
                s
            ));
            add_one(s, raw.ptr());
        });
        let exec = create_stream();
        acl!(aclrtSubscribeReport(me, exec));
        acl!(aclmdlRIExecuteAsync(model, exec));
        for turn in 1..=2 {
            fails(
                code!(aclrtSynchronizeStream(exec)),
                ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                "aclrtSynchronizeStream",
            );
            // Running this turn's callback lets the turn end. The loop counts the callbacks
            // run, not the turns' marks: waiting for this turn's mark, a call made before the
            // device wrote it could run the next turn's callback too, ending the program
            // before the next refusal was asked for (then the wait returned 0; seen with
            // tests run on 8 and 16 threads). aclrtProcessReport runs one callback a call.
            while REPORT_TURNS.load(Ordering::Acquire) < turn {
                code!(aclrtProcessReport(10));
                recent_message();
            }
        }
        // The stream holds for this thread until the program is over (a wait is refused
        // until then): the thread watches it end instead.
        let mut status = ACL_STREAM_STATUS_NOT_READY;
        while status != ACL_STREAM_STATUS_COMPLETE {
            acl!(aclrtStreamQuery(exec, &mut status));
            std::thread::yield_now();
        }
        acl!(aclrtSynchronizeStream(exec));
        assert_eq!(read_u32(raw.ptr()), 2, "the program ran both turns");
        acl!(aclrtUnSubscribeReport(me, exec));
        destroy_when_over(0, model);
        acl!(aclrtDestroyStream(exec));
    });
}

/// Promise: a loop on one HEAD stream, polling a word another HEAD stream writes, ends: the
/// HEAD streams run side by side on the device, so the serial order lets the other stream's
/// tasks run before the loop goes round again.
#[test]
fn a_loop_on_one_head_stream_lets_the_other_heads_run() {
    install();
    set_device(0);
    let (first, second) = (persistent_stream(), persistent_stream());
    let (index, mark) = (zeroed(4), zeroed(4));
    let model = build_on(&[first, second]);
    let (top, exit) = (label(), label());
    let list = label_list(&[top, exit]);
    acl!(aclrtSetLabel(top, first));
    acl!(aclrtSwitchLabelByIndex(index, 2, list, first));
    add_one(second, index);
    acl!(aclrtSetLabel(exit, first));
    add_one(first, mark);
    build_end(model);
    execute_within("a loop waiting for another HEAD stream", 0, model);
    assert_eq!((read_u32(index), read_u32(mark)), (1, 1));
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyLabelList(list));
    for label in [top, exit] {
        acl!(aclrtDestroyLabel(label));
    }
    for stream in [first, second] {
        acl!(aclrtDestroyStream(stream));
    }
}

/// Promise: a record a program skipped carries the failure a record there would have carried
/// (a task's since the last record, on a stream that goes on after failures), not success.
#[test]
fn a_record_a_program_skipped_carries_the_failure_before_it() {
    install();
    set_device(0);
    let mut event = ptr::null_mut();
    acl!(aclrtCreateEventExWithFlag(&mut event, ACL_EVENT_SYNC));
    let stream = create_stream();
    acl!(aclmdlRICaptureBegin(stream, RELAXED));
    trap(stream);
    let (mut status, mut model) = (0, ptr::null_mut());
    acl!(aclmdlRICaptureGetInfo(stream, &mut status, &mut model));
    let (_, branch) = cond_task(model, stream, ACL_MODEL_RI_COND_TYPE_IF, 1, 0, 0);
    let model = capture_end(stream);
    capture_branch(branch[0], |s| acl!(aclrtRecordEvent(event, s)));
    let exec = create_stream();
    acl!(aclmdlRIExecuteAsync(model, exec));
    let raw = Raw::of(event);
    let code = bounded("the skipped record", move || {
        set_device(0);
        code!(aclrtSynchronizeEvent(raw.ptr()))
    });
    recent_message();
    assert_eq!(code, ACL_ERROR_RT_AICORE_EXCEPTION);
    assert_eq!(
        code!(aclrtSynchronizeStream(exec)),
        ACL_ERROR_RT_AICORE_EXCEPTION
    );
    recent_message();
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyEvent(event));
    for stream in [stream, exec] {
        acl!(aclrtDestroyStream(stream));
    }
}

/// Promise: a HEAD stream may switch to itself (a loop), as a label switch on it may go back
/// to one of its labels.
#[test]
fn a_head_stream_switching_to_itself_loops() {
    install();
    set_device(0);
    let head = persistent_stream();
    let (count, limit) = (zeroed(4), malloc(4));
    upload(limit, &[3i32]);
    let model = build_on(&[head]);
    add_one(head, count);
    switch_while_less(head, count, limit, head);
    build_end(model);
    execute(model);
    assert_eq!(read_u32(count), 3);
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyStream(head));
}

/// Promise: a switch forward on one HEAD stream keeps submission order: a record the stream
/// makes after the switch still runs before another HEAD stream's wait for it (a wait on a
/// record of the same execution passes, so order is all that holds the copy behind it).
#[test]
fn a_forward_switch_keeps_a_record_before_another_head_streams_wait() {
    install();
    set_device(0);
    let (first, second) = (persistent_stream(), persistent_stream());
    let (index, x, y) = (zeroed(4), zeroed(4), zeroed(4));
    let event = create_event();
    let model = build_on(&[first, second]);
    let forward = label();
    let list = label_list(&[forward]);
    acl!(aclrtSwitchLabelByIndex(index, 1, list, first));
    acl!(aclrtSetLabel(forward, first));
    add_one(first, x);
    acl!(aclrtRecordEvent(event, first));
    acl!(aclrtStreamWaitEvent(second, event));
    acl!(aclrtMemcpyAsync(
        y,
        4,
        x,
        4,
        ACL_MEMCPY_DEVICE_TO_DEVICE,
        second
    ));
    build_end(model);
    execute(model);
    assert_eq!(read_u32(y), 1);
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyLabelList(list));
    acl!(aclrtDestroyLabel(forward));
    acl!(aclrtDestroyEvent(event));
    for stream in [first, second] {
        acl!(aclrtDestroyStream(stream));
    }
}

/// Promise: a cycle of a switch and an activation (S1 switches to S2, whose last task
/// activates S1 again: a while loop's shape) loops as the device would, without nesting one
/// level per turn (which overflowed the worker's stack); one whose activation is not its
/// stream's last task, which must nest, fails the execution with a code once too deep.
#[test]
fn a_cycle_of_switches_and_activations_loops_without_nesting() {
    install();
    set_device(0);
    for tail in [true, false] {
        let [head, s1, s2] = [(); 3].map(|()| persistent_stream());
        let (count, limit, after) = (zeroed(4), malloc(4), zeroed(4));
        upload(limit, &[1000i32]);
        let model = build_on(&[head]);
        acl!(aclmdlRIBindStream(model, s1, ACTIVATED));
        acl!(aclmdlRIBindStream(model, s2, ACTIVATED));
        acl!(aclrtActiveStream(s1, head));
        add_one(s1, count);
        switch_while_less(s1, count, limit, s2);
        acl!(aclrtActiveStream(s1, s2));
        if !tail {
            add_one(s2, after);
        }
        build_end(model);
        let exec = create_stream();
        acl!(aclmdlRIExecuteAsync(model, exec));
        let raw = Raw::of(exec);
        let (code, message) = bounded("a cycle of a switch and an activation", move || {
            set_device(0);
            let code = code!(aclrtSynchronizeStream(raw.ptr()));
            (code, recent_message())
        });
        match tail {
            true => {
                assert_eq!(code, 0, "{message}");
                assert_eq!(read_u32(count), 1000);
            }
            false => {
                assert_eq!(code, ACL_ERROR_RT_PARAM_INVALID);
                assert!(message.contains("nested"), "{message}");
                assert!(read_u32(count) < 1000);
            }
        }
        acl!(aclmdlRIDestroy(model));
        for stream in [head, s1, s2, exec] {
            acl!(aclrtDestroyStream(stream));
        }
    }
}

/// Promise: a loop on one HEAD stream that records an event after it keeps that record
/// before another HEAD stream's wait for it (the waiting stream stands aside while the loop
/// turns, as on the device it would block), however the third HEAD stream's tasks interleave.
#[test]
fn a_loop_then_a_record_stays_before_another_head_streams_wait() {
    install();
    set_device(0);
    let [a, b, c] = [(); 3].map(|()| persistent_stream());
    let (x, y, z, limit) = (zeroed(4), zeroed(4), zeroed(4), malloc(4));
    upload(limit, &[2i32]);
    let event = create_event();
    let model = build_on(&[a, b, c]);
    add_one(a, x);
    switch_while_less(a, x, limit, a);
    acl!(aclrtRecordEvent(event, a));
    acl!(aclrtStreamWaitEvent(b, event));
    acl!(aclrtMemcpyAsync(y, 4, x, 4, ACL_MEMCPY_DEVICE_TO_DEVICE, b));
    add_one(c, z);
    build_end(model);
    execute(model);
    assert_eq!((read_u32(x), read_u32(y), read_u32(z)), (2, 2, 1));
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyEvent(event));
    for stream in [a, b, c] {
        acl!(aclrtDestroyStream(stream));
    }
}

/// Promise: HEAD or switched-to streams with no tasks are nothing to run, not a crash of the
/// worker (which left the stream's synchronisation waiting for ever).
#[test]
fn streams_without_tasks_in_an_execution_are_nothing_to_run() {
    install();
    set_device(0);
    for switch_to_empty in [false, true] {
        let [a, b, empty] = [(); 3].map(|()| persistent_stream());
        let (count, limit, y) = (zeroed(4), malloc(4), zeroed(4));
        upload(limit, &[3i32]);
        let model = build_on(&[a, b]);
        acl!(aclmdlRIBindStream(model, empty, ACTIVATED));
        add_one(a, count);
        // Back to itself while below the limit, or once to the empty stream.
        let target = if switch_to_empty { empty } else { a };
        switch_while_less(a, count, limit, target);
        if switch_to_empty {
            add_one(b, y);
        }
        build_end(model);
        let exec = create_stream();
        acl!(aclmdlRIExecuteAsync(model, exec));
        let raw = Raw::of(exec);
        let code = bounded("an execution with streams without tasks", move || {
            set_device(0);
            code!(aclrtSynchronizeStream(raw.ptr()))
        });
        assert_eq!(code, 0);
        let expected = if switch_to_empty { (1, 1) } else { (3, 0) };
        assert_eq!((read_u32(count), read_u32(y)), expected);
        acl!(aclmdlRIDestroy(model));
        for stream in [a, b, empty, exec] {
            acl!(aclrtDestroyStream(stream));
        }
    }
}

/// Promise: a wait whose event the execution has recorded already is not held back by an
/// earlier record of the event that a looping stream never reaches: the record that ran
/// satisfies it, and the stream it unblocks ends the loop.
#[test]
fn a_wait_satisfied_by_a_record_that_ran_is_not_held_back_by_one_never_reached() {
    install();
    set_device(0);
    let [a, b, c] = [(); 3].map(|()| persistent_stream());
    let (flag, one, y) = (zeroed(4), malloc(4), zeroed(4));
    upload(one, &[1i32]);
    let event = create_event();
    let model = build_on(&[a, b, c]);
    switch_while_less(a, flag, one, a);
    acl!(aclrtRecordEvent(event, a));
    acl!(aclrtRecordEvent(event, c));
    acl!(aclrtStreamWaitEvent(b, event));
    add_one(b, flag);
    add_one(b, y);
    build_end(model);
    execute_within("a wait a ran record satisfies", 0, model);
    assert_eq!((read_u32(flag), read_u32(y)), (1, 1));
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyEvent(event));
    for stream in [a, b, c] {
        acl!(aclrtDestroyStream(stream));
    }
}

/// Promise: a stream switch whose target was bound again as a HEAD stream after the switch was
/// added does not run that stream's tasks twice in one execution: the execution fails there
/// with a code, as a label switch to another HEAD stream does.
#[test]
fn a_switch_to_a_stream_bound_again_as_a_head_fails_instead_of_running_it_twice() {
    install();
    set_device(0);
    let (head, x) = (persistent_stream(), persistent_stream());
    let (left, right, count) = (zeroed(4), zeroed(4), zeroed(4));
    let model = build_on(&[head]);
    acl!(aclmdlRIBindStream(model, x, ACTIVATED));
    acl!(aclrtSwitchStream(
        left,
        ACL_RT_EQUAL,
        right,
        ACL_RT_SWITCH_INT32,
        x,
        ptr::null_mut(),
        head
    ));
    acl!(aclmdlRIUnbindStream(model, x));
    acl!(aclmdlRIBindStream(model, x, HEAD));
    add_one(x, count);
    build_end(model);
    let exec = create_stream();
    acl!(aclmdlRIExecuteAsync(model, exec));
    let raw = Raw::of(exec);
    let (code, message) = bounded("a switch to a stream bound again as a HEAD", move || {
        set_device(0);
        let code = code!(aclrtSynchronizeStream(raw.ptr()));
        (code, recent_message())
    });
    assert_eq!(code, ACL_ERROR_RT_PARAM_INVALID, "{message}");
    assert!(message.contains("HEAD stream since"), "{message}");
    assert!(read_u32(count) <= 1);
    acl!(aclmdlRIDestroy(model));
    for stream in [head, x, exec] {
        acl!(aclrtDestroyStream(stream));
    }
}

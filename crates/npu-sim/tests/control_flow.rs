//! Control flow inside model runtime instances: labels and aclrtSwitchLabelByIndex,
//! aclrtSwitchStream, and conditional tasks (IF, WHILE, SWITCH) with their branches captured
//! by aclmdlRICaptureToModelRIBegin. Every branch reads its condition from device memory when
//! the execution reaches it, so the same instance takes different paths on different runs.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;

use common::cases::{Case, case, run_table};
use common::flow::*;
use common::*;
use npu_sim::abi::*;
use npu_sys::*;

fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        npu_sim::SimConfig::default().devices(2).install().unwrap();
        register_flow_kernels();
        // `*counter += 1; *index = (*counter < limit) as u32`: a loop's step and its test.
        npu_sim::kernel::register("step_below", |_, _, args: *mut c_void| {
            // SAFETY: launched with a `StepBelow` as its arguments.
            unsafe {
                let args = args.cast::<StepBelow>().read_unaligned();
                *(args.counter as *mut u32) += 1;
                *(args.index as *mut u32) = u32::from(*(args.counter as *const u32) < args.limit);
            }
            0
        })
        .unwrap();
    });
}

#[derive(Clone, Copy)]
#[repr(C)]
struct StepBelow {
    counter: u64,
    index: u64,
    limit: u32,
}

/// A label loop: the step runs, then the switch goes back to the top while the counter is
/// below the limit, then the tail runs once. The same instance, executed again, loops again.
#[test]
fn a_label_switch_loops_until_its_index_changes() {
    install();
    set_device(0);
    let head = persistent_stream();
    let (counter, index, tail) = (zeroed(4), zeroed(4), zeroed(4));
    let model = build_on(&[head]);
    let (top, exit) = (label(), label());
    let list = label_list(&[exit, top]);
    acl!(aclrtSetLabel(top, head));
    let step = function(registry_binary(&["step_below"]), "step_below");
    let args = StepBelow {
        counter: counter as u64,
        index: index as u64,
        limit: 5,
    };
    assert_eq!(launch(step, 1, head, &args, ptr::null_mut()), 0);
    acl!(aclrtSwitchLabelByIndex(index, 2, list, head));
    acl!(aclrtSetLabel(exit, head));
    add_one(head, tail);
    build_end(model);
    execute(model);
    assert_eq!((read_u32(counter), read_u32(tail)), (5, 1));
    // Once the counter is past the limit, the loop's first test leaves it.
    execute(model);
    assert_eq!((read_u32(counter), read_u32(tail)), (6, 2));
    upload(counter, &[0u32]);
    execute(model);
    assert_eq!((read_u32(counter), read_u32(tail)), (5, 3));
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyLabelList(list));
    for label in [top, exit] {
        acl!(aclrtDestroyLabel(label));
    }
    acl!(aclrtDestroyStream(head));
}

/// The index chooses among the first `maxValue` labels of the list, the last of them past
/// their end; labels set on another bound stream move the execution there.
#[test]
fn a_label_switch_goes_to_the_label_its_index_names() {
    install();
    set_device(0);
    let (head, other) = (persistent_stream(), persistent_stream());
    let index = zeroed(4);
    let marks = [(); 3].map(|()| zeroed(4));
    let model = build_on(&[head]);
    acl!(aclmdlRIBindStream(model, other, ACTIVATED));
    let labels = [(); 3].map(|()| label());
    let list = label_list(&labels);
    // maxValue 2: the third label of the list is never chosen.
    acl!(aclrtSwitchLabelByIndex(index, 2, list, head));
    acl!(aclrtSetLabel(labels[0], head));
    add_one(head, marks[0]);
    acl!(aclrtSetLabel(labels[2], head));
    add_one(head, marks[2]);
    acl!(aclrtSetLabel(labels[1], other));
    add_one(other, marks[1]);
    build_end(model);
    let marks_now = || marks.map(|m| read_u32(m));
    execute(model);
    // Index 0: label 0's task and what follows it on the head stream.
    assert_eq!(marks_now(), [1, 0, 1]);
    upload(index, &[1u32]);
    execute(model);
    // Index 1: the other stream, from its label; the head stream's rest is skipped.
    assert_eq!(marks_now(), [1, 1, 1]);
    upload(index, &[u32::MAX]);
    execute(model);
    assert_eq!(marks_now(), [1, 2, 1]);
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyLabelList(list));
    for label in labels {
        acl!(aclrtDestroyLabel(label));
    }
    for stream in [head, other] {
        acl!(aclrtDestroyStream(stream));
    }
}

/// aclrtSwitchStream compares two values (int32 or int64) when it runs: when the condition
/// holds the true stream runs instead of the rest of the switching stream.
#[test]
fn a_stream_switch_compares_its_values_when_it_runs() {
    install();
    set_device(0);
    let conditions = [
        (ACL_RT_EQUAL, [false, true, false]),
        (ACL_RT_NOT_EQUAL, [true, false, true]),
        (ACL_RT_GREATER, [false, false, true]),
        (ACL_RT_GREATER_OR_EQUAL, [false, true, true]),
        (ACL_RT_LESS, [true, false, false]),
        (ACL_RT_LESS_OR_EQUAL, [true, true, false]),
    ];
    for (data_type, width) in [(ACL_RT_SWITCH_INT32, 4), (ACL_RT_SWITCH_INT64, 8)] {
        for (cond, expected) in conditions {
            let (head, target) = (persistent_stream(), persistent_stream());
            let (left, right) = (zeroed(8), zeroed(8));
            let (taken, rest) = (zeroed(4), zeroed(4));
            let model = build_on(&[head]);
            acl!(aclmdlRIBindStream(model, target, ACTIVATED));
            acl!(aclrtSwitchStream(
                left,
                cond,
                right,
                data_type,
                target,
                ptr::null_mut(),
                head
            ));
            add_one(head, rest);
            add_one(target, taken);
            build_end(model);
            for (run, left_value) in [-1i64, 0, 1].into_iter().enumerate() {
                match width {
                    4 => upload(left, &[left_value as i32]),
                    _ => upload(left, &[left_value]),
                }
                execute(model);
                let holds = expected[run];
                let runs = run as u32 + 1;
                let taken_runs = expected[..=run].iter().filter(|&&h| h).count() as u32;
                assert_eq!(
                    (read_u32(taken), read_u32(rest)),
                    (taken_runs, runs - taken_runs),
                    "cond {cond}, type {data_type}, left {left_value}: holds {holds}"
                );
            }
            acl!(aclmdlRIDestroy(model));
            for stream in [head, target] {
                acl!(aclrtDestroyStream(stream));
            }
        }
    }
}

/// IF with two branches: the first when the word is non-zero, else the second; with
/// ASSIGN_DEFAULT the word starts every execution at its default.
#[test]
fn an_if_task_runs_the_branch_its_condition_chooses() {
    install();
    set_device(0);
    let (then_mark, else_mark, after) = (zeroed(4), zeroed(4), zeroed(4));
    let (stream, _, handle, branches) = capture_cond(
        ACL_MODEL_RI_COND_TYPE_IF,
        2,
        1,
        ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT,
    );
    let word = cond_word(handle);
    add_one(stream, after);
    let model = capture_end(stream);
    capture_branch(branches[0], |s| add_one(s, then_mark));
    capture_branch(branches[1], |s| add_one(s, else_mark));
    execute(model);
    assert_eq!(read_u64(word), 1);
    assert_eq!(
        [then_mark, else_mark, after].map(|m| read_u32(m)),
        [1, 0, 1]
    );
    // The program's 0 lasts only until the next execution starts: the default comes back.
    upload(word, &[0u64]);
    execute(model);
    assert_eq!(
        [then_mark, else_mark, after].map(|m| read_u32(m)),
        [2, 0, 2]
    );
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyStream(stream));
}

/// Without ASSIGN_DEFAULT the program owns the word: the default is its first value only. An
/// IF with one branch runs nothing when the word is zero.
#[test]
fn a_condition_without_assign_default_keeps_what_the_program_writes() {
    install();
    set_device(0);
    let mark = zeroed(4);
    let (stream, _, handle, branches) = capture_cond(ACL_MODEL_RI_COND_TYPE_IF, 1, 0, 0);
    let word = cond_word(handle);
    let model = capture_end(stream);
    capture_branch(branches[0], |s| add_one(s, mark));
    execute(model);
    assert_eq!(read_u32(mark), 0);
    upload(word, &[7u64]);
    execute(model);
    execute(model);
    assert_eq!(read_u32(mark), 2);
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyStream(stream));
}

/// WHILE runs its branch while the word is non-zero: a body counting the word down runs as
/// many times as the default says, on every execution.
#[test]
fn a_while_task_runs_its_branch_until_the_condition_is_zero() {
    install();
    set_device(0);
    let mark = zeroed(4);
    let (stream, _, handle, branches) = capture_cond(
        ACL_MODEL_RI_COND_TYPE_WHILE,
        1,
        4,
        ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT,
    );
    let word = cond_word(handle);
    let model = capture_end(stream);
    capture_branch(branches[0], |s| {
        add_one(s, mark);
        count_down(s, word);
    });
    execute(model);
    assert_eq!((read_u32(mark), read_u64(word)), (4, 0));
    execute(model);
    assert_eq!((read_u32(mark), read_u64(word)), (8, 0));
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyStream(stream));
}

/// SWITCH runs the branch the word indexes, none past the last.
#[test]
fn a_switch_task_runs_the_branch_its_value_indexes() {
    install();
    set_device(0);
    let marks = [(); 3].map(|()| zeroed(4));
    let (stream, _, handle, branches) = capture_cond(ACL_MODEL_RI_COND_TYPE_SWITCH, 3, 0, 0);
    let word = cond_word(handle);
    let model = capture_end(stream);
    for (branch, mark) in branches.iter().zip(marks) {
        capture_branch(*branch, |s| add_one(s, mark));
    }
    for (value, expected) in [
        (2u64, [0, 0, 1]),
        (0, [1, 0, 1]),
        (3, [1, 0, 1]),
        (1, [1, 1, 1]),
    ] {
        upload(word, &[value]);
        execute(model);
        assert_eq!(marks.map(|m| read_u32(m)), expected, "value {value}");
    }
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyStream(stream));
}

/// A branch may hold conditional tasks of its own, on handles made for it; its defaults are
/// set whenever it starts.
#[test]
fn branches_nest() {
    install();
    set_device(0);
    let mark = zeroed(4);
    let (stream, _, handle, outer) = capture_cond(
        ACL_MODEL_RI_COND_TYPE_WHILE,
        1,
        3,
        ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT,
    );
    let outer_word = cond_word(handle);
    let model = capture_end(stream);
    let branch_stream = create_stream();
    acl!(aclmdlRICaptureToModelRIBegin(
        branch_stream,
        outer[0],
        RELAXED
    ));
    let (inner_handle, inner) = cond_task(
        outer[0],
        branch_stream,
        ACL_MODEL_RI_COND_TYPE_WHILE,
        1,
        2,
        ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT,
    );
    let inner_word = cond_word(inner_handle);
    count_down(branch_stream, outer_word);
    assert_eq!(capture_end(branch_stream), outer[0]);
    capture_branch(inner[0], |s| {
        add_one(s, mark);
        count_down(s, inner_word);
    });
    execute(model);
    // Three outer turns, each running the inner loop twice.
    assert_eq!(read_u32(mark), 6);
    acl!(aclmdlRIDestroy(model));
    for stream in [stream, branch_stream] {
        acl!(aclrtDestroyStream(stream));
    }
}

/// Events recorded in a branch complete when it runs; those of a branch not taken complete
/// when the execution ends, so no wait for them is left waiting.
#[test]
fn records_in_branches_complete_taken_or_not() {
    install();
    set_device(0);
    let (taken, skipped) = (create_event(), create_event());
    let (stream, _, _, branches) = capture_cond(
        ACL_MODEL_RI_COND_TYPE_IF,
        2,
        1,
        ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT,
    );
    let model = capture_end(stream);
    capture_branch(branches[0], |s| acl!(aclrtRecordEvent(taken, s)));
    capture_branch(branches[1], |s| acl!(aclrtRecordEvent(skipped, s)));
    let exec = create_stream();
    let waiter = create_stream();
    acl!(aclmdlRIExecuteAsync(model, exec));
    acl!(aclrtStreamWaitEvent(waiter, taken));
    acl!(aclrtStreamWaitEvent(waiter, skipped));
    let raw = (Raw::of(taken), Raw::of(skipped), Raw::of(waiter));
    bounded("waiting for the branches' records", move || {
        set_device(0);
        acl!(aclrtSynchronizeEvent(raw.0.ptr()));
        acl!(aclrtSynchronizeEvent(raw.1.ptr()));
        acl!(aclrtSynchronizeStream(raw.2.ptr()));
    });
    let mut status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
    acl!(aclrtQueryEventStatus(taken, &mut status));
    assert_eq!(status, ACL_EVENT_RECORDED_STATUS_COMPLETE);
    acl!(aclmdlRIDestroy(model));
    for stream in [stream, exec, waiter] {
        acl!(aclrtDestroyStream(stream));
    }
    for event in [taken, skipped] {
        acl!(aclrtDestroyEvent(event));
    }
}

/// A loop that never ends (its index always goes back to the top) is stopped by
/// aclmdlRIAbort and by aclrtStreamAbort: the stream running it comes back.
#[test]
fn an_endless_loop_is_stopped_by_an_abort() {
    install();
    set_device(1);
    let head = persistent_stream();
    let (index, mark) = (zeroed(4), zeroed(4));
    let model = build_on(&[head]);
    let top = label();
    let list = label_list(&[top]);
    acl!(aclrtSetLabel(top, head));
    add_one(head, mark);
    acl!(aclrtSwitchLabelByIndex(index, 1, list, head));
    build_end(model);
    for abort_stream in [false, true] {
        let exec = create_stream();
        acl!(aclmdlRIExecuteAsync(model, exec));
        // The loop is running once its task has run at least once.
        let before = read_u32(mark);
        while read_u32(mark) == before {
            std::thread::yield_now();
        }
        let raw = (Raw::of(model), Raw::of(exec));
        bounded("stopping an endless loop", move || {
            set_device(1);
            match abort_stream {
                false => acl!(aclmdlRIAbort(raw.0.ptr())),
                true => acl!(aclrtStreamAbort(raw.1.ptr())),
            }
            // SAFETY: a live stream.
            unsafe { aclrtSynchronizeStream(raw.1.ptr()) };
        });
        recent_message();
        acl!(aclrtDestroyStream(exec));
    }
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyLabelList(list));
    acl!(aclrtDestroyLabel(top));
    acl!(aclrtDestroyStream(head));
}

/// A branch's condition read from memory freed before the execution fails the execution
/// with the DMA fault a task touching it would report, once.
#[test]
fn a_switch_reading_freed_memory_fails_its_execution() {
    install();
    set_device(0);
    let head = persistent_stream();
    let index = malloc(4);
    let mark = zeroed(4);
    let model = build_on(&[head]);
    let top = label();
    let list = label_list(&[top]);
    acl!(aclrtSwitchLabelByIndex(index, 1, list, head));
    acl!(aclrtSetLabel(top, head));
    add_one(head, mark);
    build_end(model);
    acl!(aclrtFree(index));
    let exec = create_stream();
    acl!(aclmdlRIExecuteAsync(model, exec));
    sync_fails_with_dma(exec);
    assert_eq!(read_u32(mark), 0);
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyLabelList(list));
    acl!(aclrtDestroyLabel(top));
    for stream in [head, exec] {
        acl!(aclrtDestroyStream(stream));
    }
}

/// A switch to a label set nowhere in the instance fails the execution where it stands,
/// once, and the stream goes on.
#[test]
fn a_switch_to_a_label_never_set_fails_its_execution() {
    install();
    set_device(0);
    let head = persistent_stream();
    let (index, mark) = (zeroed(4), zeroed(4));
    let model = build_on(&[head]);
    let nowhere = label();
    let list = label_list(&[nowhere]);
    acl!(aclrtSwitchLabelByIndex(index, 1, list, head));
    add_one(head, mark);
    build_end(model);
    let exec = create_stream();
    acl!(aclmdlRIExecuteAsync(model, exec));
    assert_eq!(
        code!(aclrtSynchronizeStream(exec)),
        ACL_ERROR_RT_PARAM_INVALID
    );
    assert!(recent_message().contains("is not set in this instance"));
    acl!(aclrtSynchronizeStream(exec));
    assert_eq!(read_u32(mark), 0);
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyLabelList(list));
    acl!(aclrtDestroyLabel(nowhere));
    for stream in [head, exec] {
        acl!(aclrtDestroyStream(stream));
    }
}

/// An EXTERNAL wait for an event whose only record in the execution sits in a branch not
/// taken waits for the record made before the execution, not for the skipped one (which could
/// only complete when the execution ends, after the wait).
#[test]
fn a_wait_after_a_branch_not_taken_does_not_wait_for_its_record() {
    install();
    set_device(0);
    let mark = zeroed(4);
    let mut event = ptr::null_mut();
    acl!(aclrtCreateEventExWithFlag(&mut event, ACL_EVENT_SYNC));
    let (stream, _, _, branches) = capture_cond(ACL_MODEL_RI_COND_TYPE_IF, 1, 0, 0);
    acl!(aclrtStreamWaitEventWithFlag(
        stream,
        event,
        0,
        ACL_EVENT_WAIT_EXTERNAL
    ));
    add_one(stream, mark);
    let model = capture_end(stream);
    capture_branch(branches[0], |s| acl!(aclrtRecordEvent(event, s)));
    let raw = Raw::of(model);
    bounded("an execution waiting after a skipped record", move || {
        set_device(0);
        execute(raw.ptr());
        // Now the event's latest record is the execution's (skipped, completed at its end).
        execute(raw.ptr());
    });
    assert_eq!(read_u32(mark), 2);
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyEvent(event));
    acl!(aclrtDestroyStream(stream));
}

/// The reference supports EXTERNAL records and waits in a capture's main graph only: a stream
/// capturing a branch of a conditional task (a sub-graph) refuses both (107000), while the
/// capture holding the conditional task takes them.
#[test]
fn a_branch_capture_takes_no_external_record_or_wait() {
    install();
    set_device(0);
    let (mut recorded, mut waited) = (ptr::null_mut(), ptr::null_mut());
    acl!(aclrtCreateEventExWithFlag(&mut recorded, ACL_EVENT_SYNC));
    acl!(aclrtCreateEventExWithFlag(&mut waited, ACL_EVENT_SYNC));
    let (stream, _, _, branches) = capture_cond(ACL_MODEL_RI_COND_TYPE_IF, 1, 0, 0);
    acl!(aclrtRecordEventWithFlag(
        recorded,
        stream,
        ACL_EVENT_RECORD_EXTERNAL
    ));
    acl!(aclrtStreamWaitEventWithFlag(
        stream,
        waited,
        0,
        ACL_EVENT_WAIT_EXTERNAL
    ));
    let model = capture_end(stream);
    capture_branch(branches[0], |branch| {
        fails!(
            aclrtRecordEventWithFlag(recorded, branch, ACL_EVENT_RECORD_EXTERNAL),
            ACL_ERROR_RT_PARAM_INVALID,
            "aclrtRecordEventWithFlag"
        );
        fails!(
            aclrtStreamWaitEventWithFlag(branch, waited, 0, ACL_EVENT_WAIT_EXTERNAL),
            ACL_ERROR_RT_PARAM_INVALID,
            "aclrtStreamWaitEventWithFlag"
        );
    });
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyEvent(recorded));
    acl!(aclrtDestroyEvent(waited));
    acl!(aclrtDestroyStream(stream));
}

/// In a built instance, a wait for an event recorded on another of its streams, behind a
/// switch not taken, waits for the record only if the execution has run it.
#[test]
fn a_built_wait_behind_a_switch_not_taken_does_not_hang() {
    install();
    set_device(0);
    let (head, other) = (persistent_stream(), persistent_stream());
    let (left, right, mark) = (zeroed(4), zeroed(4), zeroed(4));
    upload(left, &[1u32]);
    let event = create_event();
    let model = build_on(&[head]);
    acl!(aclmdlRIBindStream(model, other, ACTIVATED));
    acl!(aclrtRecordEvent(event, other));
    acl!(aclrtSwitchStream(
        left,
        ACL_RT_EQUAL,
        right,
        ACL_RT_SWITCH_INT32,
        other,
        ptr::null_mut(),
        head
    ));
    acl!(aclrtStreamWaitEvent(head, event));
    add_one(head, mark);
    build_end(model);
    execute_within("a wait behind a switch not taken", 0, model);
    assert_eq!(read_u32(mark), 1);
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyEvent(event));
    for stream in [head, other] {
        acl!(aclrtDestroyStream(stream));
    }
}

/// Several HEAD streams interleave their tasks in the order they were submitted, as an
/// instance without branches does: a wait on one for a record of another follows the
/// record's memset, whether or not the instance has a switch.
#[test]
fn head_streams_keep_their_submission_order_with_a_switch() {
    install();
    set_device(0);
    for with_switch in [false, true] {
        let [first, second, target] = [(); 3].map(|()| persistent_stream());
        let (x, y, left, right) = (zeroed(4), zeroed(4), zeroed(4), zeroed(4));
        upload(left, &[1u32]);
        let event = create_event();
        let model = build_on(&[first, second]);
        acl!(aclmdlRIBindStream(model, target, ACTIVATED));
        add_one(second, x);
        acl!(aclrtRecordEvent(event, second));
        acl!(aclrtStreamWaitEvent(first, event));
        acl!(aclrtMemcpyAsync(
            y,
            4,
            x,
            4,
            ACL_MEMCPY_DEVICE_TO_DEVICE,
            first
        ));
        if with_switch {
            acl!(aclrtSwitchStream(
                left,
                ACL_RT_EQUAL,
                right,
                ACL_RT_SWITCH_INT32,
                target,
                ptr::null_mut(),
                first
            ));
        }
        build_end(model);
        execute(model);
        assert_eq!(read_u32(y), 1, "with a switch: {with_switch}");
        acl!(aclmdlRIDestroy(model));
        acl!(aclrtDestroyEvent(event));
        for stream in [first, second, target] {
            acl!(aclrtDestroyStream(stream));
        }
    }
}

/// Records a failed execution skipped carry its failure, as the next record of a stream
/// whose task failed does.
#[test]
fn records_a_failed_execution_skipped_carry_its_failure() {
    install();
    set_device(0);
    let head = persistent_stream();
    let index = zeroed(4);
    let event = create_event();
    let model = build_on(&[head]);
    let nowhere = label();
    let list = label_list(&[nowhere]);
    acl!(aclrtSwitchLabelByIndex(index, 1, list, head));
    acl!(aclrtRecordEvent(event, head));
    build_end(model);
    let exec = create_stream();
    acl!(aclmdlRIExecuteAsync(model, exec));
    let raw = Raw::of(event);
    let code = bounded("the skipped record", move || {
        set_device(0);
        // SAFETY: a live event.
        unsafe { aclrtSynchronizeEvent(raw.ptr()) }
    });
    assert_eq!(code, ACL_ERROR_RT_PARAM_INVALID);
    assert_eq!(
        code!(aclrtSynchronizeStream(exec)),
        ACL_ERROR_RT_PARAM_INVALID
    );
    recent_message();
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyLabelList(list));
    acl!(aclrtDestroyLabel(nowhere));
    acl!(aclrtDestroyEvent(event));
    for stream in [head, exec] {
        acl!(aclrtDestroyStream(stream));
    }
}

/// A WHILE loop whose branch runs no task never ends by itself: aclrtStreamStop holds it and
/// aclrtStreamAbort ends it.
#[test]
fn an_empty_endless_loop_is_held_by_a_stop_and_ended_by_an_abort() {
    install();
    set_device(1);
    let (stream, _, _, branches) = capture_cond(ACL_MODEL_RI_COND_TYPE_WHILE, 1, 1, 0);
    let model = capture_end(stream);
    capture_branch(branches[0], |_| {});
    let exec = create_stream();
    acl!(aclmdlRIExecuteAsync(model, exec));
    let raw = Raw::of(exec);
    bounded("stopping and aborting an empty endless loop", move || {
        set_device(1);
        acl!(aclrtStreamStop(raw.ptr()));
        acl!(aclrtStreamAbort(raw.ptr()));
        acl!(aclrtSynchronizeStream(raw.ptr()));
    });
    acl!(aclmdlRIDestroy(model));
    for stream in [stream, exec] {
        acl!(aclrtDestroyStream(stream));
    }
}

/// Branches live and die with their instance: they are not destroyed or executed on their
/// own, the condition word is the runtime's to free, and once the instance is destroyed
/// its handles are stale.
#[test]
fn branches_and_condition_words_belong_to_their_instance() {
    install();
    set_device(0);
    let (stream, _, handle, branches) = capture_cond(ACL_MODEL_RI_COND_TYPE_IF, 1, 1, 0);
    let word = cond_word(handle);
    let model = capture_end(stream);
    let exec = create_stream();
    fails(
        code!(aclmdlRIDestroy(branches[0])),
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "aclmdlRIDestroy",
    );
    fails(
        code!(aclmdlRIExecuteAsync(branches[0], exec)),
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "aclmdlRIExecuteAsync",
    );
    fails(
        code!(aclrtFree(word)),
        ACL_ERROR_RT_MEMORY_FREE,
        "aclrtFree",
    );
    // A branch being captured holds back its instance's executions and destruction.
    let branch_stream = create_stream();
    acl!(aclmdlRICaptureToModelRIBegin(
        branch_stream,
        branches[0],
        RELAXED
    ));
    fails(
        code!(aclmdlRIExecuteAsync(model, exec)),
        ACL_ERROR_RT_MODEL_CAPTURED,
        "aclmdlRIExecuteAsync",
    );
    fails(
        code!(aclmdlRIDestroy(model)),
        ACL_ERROR_RT_MODEL_CAPTURED,
        "aclmdlRIDestroy",
    );
    fails(
        code!(aclmdlRICaptureToModelRIBegin(
            create_stream(),
            branches[0],
            RELAXED
        )),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclmdlRICaptureToModelRIBegin",
    );
    assert_eq!(capture_end(branch_stream), branches[0]);
    // A branch is captured once.
    fails(
        code!(aclmdlRICaptureToModelRIBegin(
            create_stream(),
            branches[0],
            RELAXED
        )),
        ACL_ERROR_RT_PARAM_INVALID,
        "aclmdlRICaptureToModelRIBegin",
    );
    fails(
        code!(aclmdlRIExecuteAsync(branches[0], exec)),
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "aclmdlRIExecuteAsync",
    );
    acl!(aclmdlRIExecuteAsync(model, exec));
    acl!(aclrtSynchronizeStream(exec));
    acl!(aclmdlRIDestroy(model));
    let mut out = ptr::null_mut();
    fails(
        code!(aclmdlRICondHandleGetCondPtr(handle, &mut out)),
        ACL_ERROR_RT_INVALID_HANDLE,
        "aclmdlRICondHandleGetCondPtr",
    );
    fails(
        code!(aclmdlRIDestroy(branches[0])),
        ACL_ERROR_RT_INVALID_HANDLE,
        "aclmdlRIDestroy",
    );
    for stream in [stream, exec, branch_stream] {
        acl!(aclrtDestroyStream(stream));
    }
}

/// A branch whose capture failed holds nothing and can be captured again.
#[test]
fn a_branch_whose_capture_failed_can_be_captured_again() {
    install();
    set_device(0);
    let mark = zeroed(4);
    let (stream, _, _, branches) = capture_cond(ACL_MODEL_RI_COND_TYPE_IF, 1, 1, 0);
    let model = capture_end(stream);
    let branch_stream = create_stream();
    acl!(aclmdlRICaptureToModelRIBegin(
        branch_stream,
        branches[0],
        RELAXED
    ));
    add_one(branch_stream, mark);
    // Synchronising a capturing stream is refused, which invalidates the capture.
    assert_eq!(
        code!(aclrtSynchronizeStream(branch_stream)),
        ACL_ERROR_RT_STREAM_CAPTURED
    );
    recent_message();
    let mut ended = ptr::null_mut();
    assert_eq!(
        code!(aclmdlRICaptureEnd(branch_stream, &mut ended)),
        ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED
    );
    recent_message();
    // It runs nothing meanwhile.
    execute(model);
    assert_eq!(read_u32(mark), 0);
    // While it is captured again, its instance neither executes nor goes.
    let again = create_stream();
    acl!(aclmdlRICaptureToModelRIBegin(again, branches[0], RELAXED));
    let exec = create_stream();
    fails(
        code!(aclmdlRIExecuteAsync(model, exec)),
        ACL_ERROR_RT_MODEL_CAPTURED,
        "aclmdlRIExecuteAsync",
    );
    fails(
        code!(aclmdlRIDestroy(model)),
        ACL_ERROR_RT_MODEL_CAPTURED,
        "aclmdlRIDestroy",
    );
    add_one(again, mark);
    add_one(again, mark);
    assert_eq!(capture_end(again), branches[0]);
    execute(model);
    assert_eq!(read_u32(mark), 2);
    acl!(aclmdlRIDestroy(model));
    for stream in [stream, branch_stream, again, exec] {
        acl!(aclrtDestroyStream(stream));
    }
}

/// A stream bound to an instance being built.
fn bound_stream() -> aclrtStream {
    let stream = persistent_stream();
    build_on(&[stream]);
    stream
}

fn word() -> *mut c_void {
    zeroed(8)
}

fn stale_label() -> aclrtLabel {
    let stale = label();
    acl!(aclrtDestroyLabel(stale));
    stale
}

fn a_list() -> aclrtLabelList {
    label_list(&[label(), label()])
}

fn capturing_model() -> (aclrtStream, aclmdlRI) {
    let stream = create_stream();
    acl!(aclmdlRICaptureBegin(stream, RELAXED));
    let (mut status, mut model) = (0, ptr::null_mut());
    acl!(aclmdlRICaptureGetInfo(stream, &mut status, &mut model));
    (stream, model)
}

fn cond_handle_of(model: aclmdlRI) -> aclmdlRICondHandle {
    let mut handle = ptr::null_mut();
    acl!(aclmdlRICondHandleCreate(model, 0, 0, &mut handle));
    handle
}

fn add_cond(
    handle: aclmdlRICondHandle,
    kind: aclmdlRICondTaskType,
    size: u32,
    stream: aclrtStream,
    flags: u32,
) -> aclError {
    let mut branches = [ptr::null_mut(); 4];
    let params = aclmdlRICondTaskParams {
        handle,
        type_: kind,
        size,
        modelRIArray: branches.as_mut_ptr(),
    };
    code!(aclmdlRIAddCondTask(params, stream, flags))
}

fn switch_stream(
    left: *mut c_void,
    cond: aclrtCondition,
    data_type: aclrtCompareDataType,
    target: aclrtStream,
    stream: aclrtStream,
) -> aclError {
    code!(aclrtSwitchStream(
        left,
        cond,
        word(),
        data_type,
        target,
        ptr::null_mut(),
        stream
    ))
}

const CASES: &[Case] = &[
    // A NULL pointer argument is the ACL layer's refusal (100000), made before the runtime
    // looks a handle up (107017).
    case(
        "cond handle of a destroyed instance into NULL",
        "aclmdlRICondHandleCreate",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let (stream, model) = capturing_model();
            let mut ended = ptr::null_mut();
            acl!(aclmdlRICaptureEnd(stream, &mut ended));
            acl!(aclmdlRIDestroy(model));
            code!(aclmdlRICondHandleCreate(model, 0, 0, ptr::null_mut()))
        },
    ),
    case(
        "cond pointer of garbage into NULL",
        "aclmdlRICondHandleGetCondPtr",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            code!(aclmdlRICondHandleGetCondPtr(
                0x1234 as aclmdlRICondHandle,
                ptr::null_mut()
            ))
        },
    ),
    case(
        "cond task of a NULL handle with type 9",
        "aclmdlRIAddCondTask",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let (stream, _) = capturing_model();
            let params = aclmdlRICondTaskParams {
                handle: ptr::null_mut(),
                type_: 9,
                size: 1,
                modelRIArray: ptr::null_mut(),
            };
            code!(aclmdlRIAddCondTask(params, stream, 0))
        },
    ),
    case(
        "cond task of a garbage handle with NULL branches",
        "aclmdlRIAddCondTask",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let (stream, _) = capturing_model();
            let params = aclmdlRICondTaskParams {
                handle: 0x1234 as aclmdlRICondHandle,
                type_: ACL_MODEL_RI_COND_TYPE_IF,
                size: 1,
                modelRIArray: ptr::null_mut(),
            };
            code!(aclmdlRIAddCondTask(params, stream, 0))
        },
    ),
    case(
        "create NULL",
        "aclrtCreateLabel",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclrtCreateLabel(ptr::null_mut())),
    ),
    case(
        "create NULL without a context: the pointer is checked first",
        "aclrtCreateLabel",
        ACL_ERROR_INVALID_PARAM,
        -1,
        || code!(aclrtCreateLabel(ptr::null_mut())),
    ),
    case(
        "create without a context",
        "aclrtCreateLabel",
        ACL_ERROR_RT_CONTEXT_NULL,
        -1,
        || {
            let mut label: aclrtLabel = ptr::dangling_mut();
            let code = code!(aclrtCreateLabel(&mut label));
            assert_eq!(label, ptr::dangling_mut(), "a refused label was written");
            code
        },
    ),
    case(
        "set NULL label",
        "aclrtSetLabel",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclrtSetLabel(ptr::null_mut(), bound_stream())),
    ),
    case(
        "set destroyed label",
        "aclrtSetLabel",
        ACL_ERROR_RT_INVALID_HANDLE,
        0,
        || code!(aclrtSetLabel(stale_label(), bound_stream())),
    ),
    case(
        "set on an unbound stream",
        "aclrtSetLabel",
        ACL_ERROR_RT_STREAM_MODEL,
        0,
        || code!(aclrtSetLabel(label(), create_stream())),
    ),
    case(
        "set twice",
        "aclrtSetLabel",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            let (label, stream) = (label(), bound_stream());
            acl!(aclrtSetLabel(label, stream));
            code!(aclrtSetLabel(label, stream))
        },
    ),
    case(
        "set a label of another context",
        "aclrtSetLabel",
        ACL_ERROR_RT_LABEL_CONTEXT,
        0,
        || {
            let mut ctx = ptr::null_mut();
            acl!(aclrtCreateContext(&mut ctx, 0));
            let foreign = label();
            acl!(aclrtDestroyContext(ctx));
            set_device(0);
            code!(aclrtSetLabel(foreign, bound_stream()))
        },
    ),
    case(
        "set after the build ended",
        "aclrtSetLabel",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            let stream = persistent_stream();
            let model = build_on(&[stream]);
            build_end(model);
            code!(aclrtSetLabel(label(), stream))
        },
    ),
    case(
        "destroy NULL",
        "aclrtDestroyLabel",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclrtDestroyLabel(ptr::null_mut())),
    ),
    case(
        "destroy twice",
        "aclrtDestroyLabel",
        ACL_ERROR_RT_INVALID_HANDLE,
        0,
        || code!(aclrtDestroyLabel(stale_label())),
    ),
    case(
        "list of NULL labels",
        "aclrtCreateLabelList",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let mut list = ptr::null_mut();
            code!(aclrtCreateLabelList(ptr::null_mut(), 1, &mut list))
        },
    ),
    case(
        "list NULL out",
        "aclrtCreateLabelList",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let mut labels = [label()];
            code!(aclrtCreateLabelList(
                labels.as_mut_ptr(),
                1,
                ptr::null_mut()
            ))
        },
    ),
    case(
        "list of 0",
        "aclrtCreateLabelList",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let (mut labels, mut list) = ([label()], ptr::null_mut());
            code!(aclrtCreateLabelList(labels.as_mut_ptr(), 0, &mut list))
        },
    ),
    case(
        "list of 65536",
        "aclrtCreateLabelList",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let (mut labels, mut list) = ([label()], ptr::null_mut());
            code!(aclrtCreateLabelList(labels.as_mut_ptr(), 65_536, &mut list))
        },
    ),
    case(
        "list at a misaligned address (it aborted the process: a slice made of it)",
        "aclrtCreateLabelList",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            let mut bytes = [0u8; 3 * size_of::<aclrtLabel>()];
            let aligned = bytes.as_ptr().align_offset(align_of::<aclrtLabel>());
            let misaligned = bytes[aligned + 1..].as_mut_ptr().cast::<aclrtLabel>();
            // SAFETY: the label fits in `bytes` after the misaligned address.
            unsafe { misaligned.write_unaligned(label()) };
            let mut list = ptr::null_mut();
            code!(aclrtCreateLabelList(misaligned, 1, &mut list))
        },
    ),
    case(
        "list with a destroyed label before a NULL one: every label is checked for NULL \
         before any is looked up",
        "aclrtCreateLabelList",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let stale = label();
            acl!(aclrtDestroyLabel(stale));
            let mut labels = [stale, ptr::null_mut()];
            let mut list: aclrtLabelList = ptr::dangling_mut();
            code!(aclrtCreateLabelList(labels.as_mut_ptr(), 2, &mut list))
        },
    ),
    case(
        "list with a NULL label",
        "aclrtCreateLabelList",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let mut labels = [label(), ptr::null_mut()];
            let mut list: aclrtLabelList = ptr::dangling_mut();
            let code = code!(aclrtCreateLabelList(labels.as_mut_ptr(), 2, &mut list));
            assert_eq!(list, ptr::dangling_mut(), "a refused list was written");
            code
        },
    ),
    case(
        "list of a destroyed label",
        "aclrtCreateLabelList",
        ACL_ERROR_RT_INVALID_HANDLE,
        0,
        || {
            let (mut labels, mut list) = ([label(), stale_label()], ptr::null_mut());
            code!(aclrtCreateLabelList(labels.as_mut_ptr(), 2, &mut list))
        },
    ),
    case(
        "destroy NULL list",
        "aclrtDestroyLabelList",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclrtDestroyLabelList(ptr::null_mut())),
    ),
    case(
        "destroy a list twice",
        "aclrtDestroyLabelList",
        ACL_ERROR_RT_INVALID_HANDLE,
        0,
        || {
            let list = a_list();
            acl!(aclrtDestroyLabelList(list));
            code!(aclrtDestroyLabelList(list))
        },
    ),
    case(
        "switch NULL ptr",
        "aclrtSwitchLabelByIndex",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            code!(aclrtSwitchLabelByIndex(
                ptr::null_mut(),
                1,
                a_list(),
                bound_stream()
            ))
        },
    ),
    case(
        "switch NULL list",
        "aclrtSwitchLabelByIndex",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            code!(aclrtSwitchLabelByIndex(
                word(),
                1,
                ptr::null_mut(),
                bound_stream()
            ))
        },
    ),
    case(
        "switch maxValue 0",
        "aclrtSwitchLabelByIndex",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclrtSwitchLabelByIndex(word(), 0, a_list(), bound_stream())),
    ),
    case(
        "switch maxValue 0 of a destroyed list",
        "aclrtSwitchLabelByIndex",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let list = a_list();
            acl!(aclrtDestroyLabelList(list));
            code!(aclrtSwitchLabelByIndex(word(), 0, list, bound_stream()))
        },
    ),
    case(
        "switch a destroyed list",
        "aclrtSwitchLabelByIndex",
        ACL_ERROR_RT_INVALID_HANDLE,
        0,
        || {
            let list = a_list();
            acl!(aclrtDestroyLabelList(list));
            code!(aclrtSwitchLabelByIndex(word(), 1, list, create_stream()))
        },
    ),
    case(
        "switch maxValue past the list",
        "aclrtSwitchLabelByIndex",
        ACL_ERROR_INVALID_PARAM,
        0,
        || code!(aclrtSwitchLabelByIndex(word(), 3, a_list(), bound_stream())),
    ),
    case(
        "switch on an unbound stream",
        "aclrtSwitchLabelByIndex",
        ACL_ERROR_RT_STREAM_MODEL,
        0,
        || {
            code!(aclrtSwitchLabelByIndex(
                word(),
                1,
                a_list(),
                create_stream()
            ))
        },
    ),
    case(
        "switch on host memory",
        "aclrtSwitchLabelByIndex",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            code!(aclrtSwitchLabelByIndex(
                malloc_host(8),
                1,
                a_list(),
                bound_stream()
            ))
        },
    ),
    case(
        "switch index unaligned with a destroyed list: the index is checked first",
        "aclrtSwitchLabelByIndex",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            let list = a_list();
            acl!(aclrtDestroyLabelList(list));
            let unaligned = word().cast::<u8>().wrapping_add(2).cast();
            code!(aclrtSwitchLabelByIndex(unaligned, 1, list, bound_stream()))
        },
    ),
    case(
        "stream switch unaligned to a destroyed stream: the values are checked first",
        "aclrtSwitchStream",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            let stream = bound_stream();
            let stale = destroyed_stream();
            let unaligned = word().cast::<u8>().wrapping_add(4).cast();
            switch_stream(unaligned, ACL_RT_EQUAL, ACL_RT_SWITCH_INT64, stale, stream)
        },
    ),
    case(
        "switch index unaligned",
        "aclrtSwitchLabelByIndex",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            let unaligned = word().cast::<u8>().wrapping_add(2).cast();
            code!(aclrtSwitchLabelByIndex(
                unaligned,
                1,
                a_list(),
                bound_stream()
            ))
        },
    ),
    case(
        "stream switch NULL left",
        "aclrtSwitchStream",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let stream = bound_stream();
            switch_stream(
                ptr::null_mut(),
                ACL_RT_EQUAL,
                ACL_RT_SWITCH_INT32,
                stream,
                stream,
            )
        },
    ),
    case(
        "stream switch cond 6",
        "aclrtSwitchStream",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let stream = bound_stream();
            switch_stream(word(), 6, ACL_RT_SWITCH_INT32, stream, stream)
        },
    ),
    case(
        "stream switch type 2",
        "aclrtSwitchStream",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let stream = bound_stream();
            switch_stream(word(), ACL_RT_EQUAL, 2, stream, stream)
        },
    ),
    case(
        "stream switch NULL target",
        "aclrtSwitchStream",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            switch_stream(
                word(),
                ACL_RT_EQUAL,
                ACL_RT_SWITCH_INT32,
                ptr::null_mut(),
                bound_stream(),
            )
        },
    ),
    case(
        "stream switch with a false stream",
        "aclrtSwitchStream",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let stream = bound_stream();
            code!(aclrtSwitchStream(
                word(),
                ACL_RT_EQUAL,
                word(),
                ACL_RT_SWITCH_INT32,
                stream,
                stream,
                stream
            ))
        },
    ),
    case(
        "stream switch to another instance's stream",
        "aclrtSwitchStream",
        ACL_ERROR_RT_STREAM_MODEL,
        0,
        || {
            switch_stream(
                word(),
                ACL_RT_EQUAL,
                ACL_RT_SWITCH_INT32,
                bound_stream(),
                bound_stream(),
            )
        },
    ),
    case(
        "stream switch on an unbound stream",
        "aclrtSwitchStream",
        ACL_ERROR_RT_STREAM_MODEL,
        0,
        || {
            switch_stream(
                word(),
                ACL_RT_EQUAL,
                ACL_RT_SWITCH_INT32,
                bound_stream(),
                create_stream(),
            )
        },
    ),
    case(
        "stream switch to a HEAD stream",
        "aclrtSwitchStream",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            let (head, other) = (persistent_stream(), persistent_stream());
            let model = build_on(&[head]);
            acl!(aclmdlRIBindStream(model, other, HEAD));
            switch_stream(word(), ACL_RT_EQUAL, ACL_RT_SWITCH_INT32, other, head)
        },
    ),
    case(
        "switch among labels of another context",
        "aclrtSwitchLabelByIndex",
        ACL_ERROR_RT_LABEL_CONTEXT,
        0,
        || {
            let mut ctx = ptr::null_mut();
            acl!(aclrtCreateContext(&mut ctx, 0));
            let foreign = label_list(&[label()]);
            acl!(aclrtDestroyContext(ctx));
            set_device(0);
            code!(aclrtSwitchLabelByIndex(word(), 1, foreign, bound_stream()))
        },
    ),
    case(
        "stream switch int64 unaligned",
        "aclrtSwitchStream",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            let stream = bound_stream();
            let unaligned = word().cast::<u8>().wrapping_add(4).cast();
            switch_stream(unaligned, ACL_RT_EQUAL, ACL_RT_SWITCH_INT64, stream, stream)
        },
    ),
    case(
        "handle create NULL out",
        "aclmdlRICondHandleCreate",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            code!(aclmdlRICondHandleCreate(
                capturing_model().1,
                0,
                0,
                ptr::null_mut()
            ))
        },
    ),
    case(
        "handle create flag 2",
        "aclmdlRICondHandleCreate",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let mut handle = ptr::null_mut();
            code!(aclmdlRICondHandleCreate(
                capturing_model().1,
                0,
                2,
                &mut handle
            ))
        },
    ),
    case(
        "handle create NULL model",
        "aclmdlRICondHandleCreate",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let mut handle = ptr::null_mut();
            code!(aclmdlRICondHandleCreate(ptr::null_mut(), 0, 0, &mut handle))
        },
    ),
    case(
        "handle create for a built instance",
        "aclmdlRICondHandleCreate",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            let (mut handle, mut model) = (ptr::null_mut(), ptr::null_mut());
            acl!(aclmdlRIBuildBegin(&mut model, 0));
            code!(aclmdlRICondHandleCreate(model, 0, 0, &mut handle))
        },
    ),
    case(
        "cond ptr NULL out",
        "aclmdlRICondHandleGetCondPtr",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            code!(aclmdlRICondHandleGetCondPtr(
                cond_handle_of(capturing_model().1),
                ptr::null_mut()
            ))
        },
    ),
    case(
        "cond ptr NULL handle",
        "aclmdlRICondHandleGetCondPtr",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let mut word = ptr::null_mut();
            code!(aclmdlRICondHandleGetCondPtr(ptr::null_mut(), &mut word))
        },
    ),
    case(
        "cond task on a stream not capturing",
        "aclmdlRIAddCondTask",
        ACL_ERROR_RT_STREAM_NOT_CAPTURED,
        0,
        || {
            let handle = cond_handle_of(capturing_model().1);
            add_cond(handle, ACL_MODEL_RI_COND_TYPE_IF, 1, create_stream(), 0)
        },
    ),
    case(
        "cond task with another instance's handle",
        "aclmdlRIAddCondTask",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            let handle = cond_handle_of(capturing_model().1);
            add_cond(handle, ACL_MODEL_RI_COND_TYPE_IF, 1, capturing_model().0, 0)
        },
    ),
    case(
        "cond task type 3",
        "aclmdlRIAddCondTask",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let (stream, model) = capturing_model();
            add_cond(cond_handle_of(model), 3, 1, stream, 0)
        },
    ),
    case(
        "cond task IF of 3",
        "aclmdlRIAddCondTask",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let (stream, model) = capturing_model();
            add_cond(
                cond_handle_of(model),
                ACL_MODEL_RI_COND_TYPE_IF,
                3,
                stream,
                0,
            )
        },
    ),
    case(
        "cond task WHILE of 2",
        "aclmdlRIAddCondTask",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let (stream, model) = capturing_model();
            add_cond(
                cond_handle_of(model),
                ACL_MODEL_RI_COND_TYPE_WHILE,
                2,
                stream,
                0,
            )
        },
    ),
    case(
        "cond task SWITCH of 0",
        "aclmdlRIAddCondTask",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let (stream, model) = capturing_model();
            add_cond(
                cond_handle_of(model),
                ACL_MODEL_RI_COND_TYPE_SWITCH,
                0,
                stream,
                0,
            )
        },
    ),
    case(
        "cond task SWITCH of 65536",
        "aclmdlRIAddCondTask",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let (stream, model) = capturing_model();
            add_cond(
                cond_handle_of(model),
                ACL_MODEL_RI_COND_TYPE_SWITCH,
                65_536,
                stream,
                0,
            )
        },
    ),
    case(
        "cond task in a task group",
        "aclmdlRIAddCondTask",
        ACL_ERROR_RT_TASK_TYPE_NOT_SUPPORT,
        0,
        || {
            let (stream, model) = capturing_model();
            let handle = cond_handle_of(model);
            acl!(aclmdlRICaptureTaskGrpBegin(stream));
            add_cond(handle, ACL_MODEL_RI_COND_TYPE_IF, 1, stream, 0)
        },
    ),
    case(
        "cond task flags 1",
        "aclmdlRIAddCondTask",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let (stream, model) = capturing_model();
            add_cond(
                cond_handle_of(model),
                ACL_MODEL_RI_COND_TYPE_IF,
                1,
                stream,
                1,
            )
        },
    ),
    case(
        "cond task NULL branches",
        "aclmdlRIAddCondTask",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            let (stream, model) = capturing_model();
            let params = aclmdlRICondTaskParams {
                handle: cond_handle_of(model),
                type_: ACL_MODEL_RI_COND_TYPE_IF,
                size: 1,
                modelRIArray: ptr::null_mut(),
            };
            code!(aclmdlRIAddCondTask(params, stream, 0))
        },
    ),
    case(
        "capture into a model that is not a branch",
        "aclmdlRICaptureToModelRIBegin",
        ACL_ERROR_RT_PARAM_INVALID,
        0,
        || {
            code!(aclmdlRICaptureToModelRIBegin(
                create_stream(),
                capturing_model().1,
                RELAXED
            ))
        },
    ),
    case(
        "capture into a branch on the default stream",
        "aclmdlRICaptureToModelRIBegin",
        ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT,
        0,
        || {
            let (stream, model) = capturing_model();
            let (_, branches) = cond_task(model, stream, ACL_MODEL_RI_COND_TYPE_IF, 1, 0, 0);
            code!(aclmdlRICaptureToModelRIBegin(
                ptr::null_mut(),
                branches[0],
                RELAXED
            ))
        },
    ),
    case(
        "capture into a branch in mode 3",
        "aclmdlRICaptureToModelRIBegin",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            code!(aclmdlRICaptureToModelRIBegin(
                create_stream(),
                capturing_model().1,
                3
            ))
        },
    ),
    // The NULL instance and the mode need no lookup: refused before the destroyed stream.
    case(
        "capture into NULL from a destroyed stream",
        "aclmdlRICaptureToModelRIBegin",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            code!(aclmdlRICaptureToModelRIBegin(
                destroyed_stream(),
                ptr::null_mut(),
                RELAXED
            ))
        },
    ),
    case(
        "capture in mode 3 from a destroyed stream",
        "aclmdlRICaptureToModelRIBegin",
        ACL_ERROR_INVALID_PARAM,
        0,
        || {
            code!(aclmdlRICaptureToModelRIBegin(
                destroyed_stream(),
                capturing_model().1,
                3
            ))
        },
    ),
];

#[test]
fn every_error_path() {
    install();
    run_table(CASES);
}

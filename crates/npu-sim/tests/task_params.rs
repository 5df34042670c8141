//! The parameters of a task of a model runtime instance (aclmdlRITaskGetParams,
//! aclmdlRITaskSetParams): what each kind of task reports, and new parameters reaching the
//! executions queued afterwards.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;

use common::cases::{case, run_table};
use common::*;
use npu_sim::abi::*;
use npu_sys::*;

fn add_one() -> aclrtFuncHandle {
    function(registry_binary(&["add_one_u32"]), "add_one_u32")
}

/// A captured launch, value write and wait, event record, wait and reset and a memset report
/// their parameters; new ones for the launch and the value tasks (and new operator
/// information) reach the next execution, and a queried launch set back unchanged runs as it
/// did.
#[test]
fn tasks_report_and_take_their_parameters() {
    install_eight_devices();
    set_device(2);
    let func = add_one();
    let (counters, words) = (malloc(16), malloc(16));
    upload::<u32>(counters, &[0, 0, 0, 0]);
    upload::<u64>(words, &[0, 0]);
    let (first, second) = (counters as u64, counters as u64 + 4);
    let (word, other_word) = (words, words.wrapping_byte_add(8));
    let stream = create_stream();
    let mut event = ptr::null_mut();
    acl!(aclrtCreateEventWithFlag(&mut event, ACL_EVENT_SYNC));
    acl!(aclmdlRICaptureBegin(
        stream,
        ACL_MODEL_RI_CAPTURE_MODE_RELAXED
    ));
    acl!(aclmdlRICaptureTaskGrpBegin(stream));
    assert_eq!(launch(func, 1, stream, &first, ptr::null_mut()), 0);
    let mut group = ptr::null_mut();
    acl!(aclmdlRICaptureTaskGrpEnd(stream, &mut group));
    acl!(aclrtValueWrite(word, 5, 0, stream));
    acl!(aclrtValueWait(word, 5, ACL_STREAM_WAIT_VALUE_EQ, stream));
    acl!(aclrtRecordEvent(event, stream));
    acl!(aclrtStreamWaitEvent(stream, event));
    acl!(aclrtResetEvent(event, stream));
    acl!(aclrtMemsetAsync(word, 8, 0, 8, stream));
    let model = capture_end(stream);
    let all = first_stream_tasks(model);
    let [kernel, write, wait, record, event_wait, reset, memset] = all[..] else {
        panic!("{} tasks", all.len());
    };

    let got = task_params(kernel);
    assert_eq!(got.type_, ACL_MODEL_RI_TASK_KERNEL);
    assert_eq!(got.taskGrp, group);
    assert!(got.opInfoPtr.is_null() && got.opInfoSize == 0);
    // SAFETY: a KERNEL task's parameters are kernelTaskParams.
    let launched = unsafe { got.__bindgen_anon_1.kernelTaskParams };
    assert_eq!(launched.funcHandle, func);
    assert!(launched.cfg.is_null());
    assert_eq!((launched.isHostArgs, launched.argsSize), (0, 8));
    assert_eq!(launched.numBlocks, 1);
    // SAFETY: the task's copy of the 8 bytes of arguments, alive with the instance.
    let argument = unsafe { launched.args.cast::<u64>().read_unaligned() };
    assert_eq!(argument, first);

    let got = task_params(write);
    assert_eq!(got.type_, ACL_MODEL_RI_TASK_VALUE_WRITE);
    assert!(got.taskGrp.is_null());
    // SAFETY: a VALUE_WRITE task's parameters are valueWriteTaskParams.
    let written = unsafe { got.__bindgen_anon_1.valueWriteTaskParams };
    assert_eq!((written.devAddr, written.value), (word, 5));
    let got = task_params(wait);
    // SAFETY: a VALUE_WAIT task's parameters are valueWaitTaskParams.
    let waited = unsafe { got.__bindgen_anon_1.valueWaitTaskParams };
    assert_eq!(got.type_, ACL_MODEL_RI_TASK_VALUE_WAIT);
    assert_eq!(
        (waited.devAddr, waited.value, waited.flag),
        (word, 5, ACL_STREAM_WAIT_VALUE_EQ)
    );
    let got = task_params(record);
    // SAFETY: an EVENT_RECORD task's parameters are eventRecordTaskParams.
    let recorded = unsafe { got.__bindgen_anon_1.eventRecordTaskParams };
    assert_eq!(got.type_, ACL_MODEL_RI_TASK_EVENT_RECORD);
    assert_eq!(
        (recorded.event, recorded.eventFlag, recorded.recordFlag),
        (event, ACL_EVENT_SYNC, ACL_EVENT_RECORD_DEFAULT)
    );
    let got = task_params(event_wait);
    // SAFETY: an EVENT_WAIT task's parameters are eventWaitTaskParams.
    let awaited = unsafe { got.__bindgen_anon_1.eventWaitTaskParams };
    assert_eq!(got.type_, ACL_MODEL_RI_TASK_EVENT_WAIT);
    assert_eq!(
        (awaited.event, awaited.eventFlag, awaited.waitFlag),
        (event, ACL_EVENT_SYNC, ACL_EVENT_WAIT_DEFAULT)
    );
    let got = task_params(reset);
    // SAFETY: an EVENT_RESET task's parameters are eventResetTaskParams.
    let was_reset = unsafe { got.__bindgen_anon_1.eventResetTaskParams };
    assert_eq!(got.type_, ACL_MODEL_RI_TASK_EVENT_RESET);
    assert_eq!(
        (was_reset.event, was_reset.eventFlag, was_reset.resetFlag),
        (event, ACL_EVENT_SYNC, 0)
    );
    let got = task_params(memset);
    assert_eq!(got.type_, ACL_MODEL_RI_TASK_DEFAULT);
    // SAFETY: the union's bytes, all plain data.
    assert_eq!(unsafe { got.__bindgen_anon_1.rsv2 }, [0; 128]);

    // Set back as queried: the launch keeps its own arguments.
    let mut unchanged = task_params(kernel);
    acl!(aclmdlRITaskSetParams(kernel, &mut unchanged));
    execute(model);
    assert_eq!(download::<u32>(counters, 2), [1, 0]);

    // New parameters: the launch counts the second counter, from host arguments; the value
    // tasks use the other word and value 9; the memset keeps its parameters and takes
    // operator information.
    let mut changed = task_params(kernel);
    // SAFETY: as above.
    let kernel_params = unsafe { &mut changed.__bindgen_anon_1.kernelTaskParams };
    kernel_params.args = (&raw const second).cast_mut().cast();
    kernel_params.isHostArgs = 1;
    acl!(aclmdlRITaskSetParams(kernel, &mut changed));
    let mut changed = task_params(write);
    changed.__bindgen_anon_1.valueWriteTaskParams = aclmdlRIValueWriteTaskParams {
        devAddr: other_word,
        value: 9,
    };
    acl!(aclmdlRITaskSetParams(write, &mut changed));
    let mut changed = task_params(wait);
    changed.__bindgen_anon_1.valueWaitTaskParams = aclmdlRIValueWaitTaskParams {
        devAddr: other_word,
        value: 9,
        flag: ACL_STREAM_WAIT_VALUE_GEQ,
    };
    acl!(aclmdlRITaskSetParams(wait, &mut changed));
    let info = *b"shape 2x3";
    let mut changed = task_params(memset);
    changed.opInfoPtr = info.as_ptr().cast_mut().cast();
    changed.opInfoSize = info.len();
    acl!(aclmdlRITaskSetParams(memset, &mut changed));
    let got = task_params(memset);
    // SAFETY: the instance's copy of the information, alive with it.
    let cached = unsafe { std::slice::from_raw_parts(got.opInfoPtr.cast::<u8>(), got.opInfoSize) };
    assert_eq!(cached, info);
    // SAFETY: as above.
    let waited = unsafe { task_params(wait).__bindgen_anon_1.valueWaitTaskParams };
    assert_eq!(waited.flag, ACL_STREAM_WAIT_VALUE_GEQ);

    upload::<u64>(words, &[0, 0]);
    execute(model);
    assert_eq!(download::<u32>(counters, 2), [1, 1]);
    assert_eq!((read_u64(word), read_u64(other_word)), (0, 9));

    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyEvent(event));
    acl!(aclrtDestroyStream(stream));
}

/// A captured instance on device 0 of one launch, value write, value wait and event record,
/// from a fresh thread: its tasks in that order.
fn four_tasks() -> Vec<aclmdlRITask> {
    let (stream, words) = (create_stream(), malloc(8));
    let target = words as u64;
    acl!(aclmdlRICaptureBegin(
        stream,
        ACL_MODEL_RI_CAPTURE_MODE_RELAXED
    ));
    assert_eq!(launch(add_one(), 1, stream, &target, ptr::null_mut()), 0);
    acl!(aclrtValueWrite(words, 1, 0, stream));
    acl!(aclrtValueWait(words, 1, ACL_STREAM_WAIT_VALUE_EQ, stream));
    acl!(aclrtRecordEvent(create_event(), stream));
    first_stream_tasks(capture_end(stream))
}

/// Sets the task's queried parameters after `change`.
fn set(task: aclmdlRITask, change: impl FnOnce(&mut aclmdlRITaskParams)) -> aclError {
    let mut changed = task_params(task);
    change(&mut changed);
    code!(aclmdlRITaskSetParams(task, &mut changed))
}

fn set_kernel(change: fn(&mut aclmdlRIKernelTaskParams)) -> aclError {
    set(four_tasks()[0], |params| {
        // SAFETY: the KERNEL task's parameters.
        change(unsafe { &mut params.__bindgen_anon_1.kernelTaskParams })
    })
}

fn stale_task() -> aclmdlRITask {
    let stream = create_stream();
    acl!(aclmdlRICaptureBegin(
        stream,
        ACL_MODEL_RI_CAPTURE_MODE_RELAXED
    ));
    acl!(aclrtRecordEvent(create_event(), stream));
    let model = capture_end(stream);
    let task = first_stream_tasks(model)[0];
    acl!(aclmdlRIDestroy(model));
    task
}

const GET: &str = "aclmdlRITaskGetParams";
const SET: &str = "aclmdlRITaskSetParams";

#[test]
fn every_error_path() {
    install_eight_devices();
    run_table(&[
        case("get of NULL", GET, 100000, 0, || {
            let mut params = std::mem::MaybeUninit::<aclmdlRITaskParams>::zeroed();
            code!(aclmdlRITaskGetParams(ptr::null_mut(), params.as_mut_ptr()))
        }),
        case("get of a destroyed instance's task", GET, 107017, 0, || {
            let mut params = std::mem::MaybeUninit::<aclmdlRITaskParams>::zeroed();
            code!(aclmdlRITaskGetParams(stale_task(), params.as_mut_ptr()))
        }),
        case("get into NULL", GET, 100000, 0, || {
            code!(aclmdlRITaskGetParams(four_tasks()[0], ptr::null_mut()))
        }),
        case("set of NULL", SET, 100000, 0, || {
            let mut params = std::mem::MaybeUninit::<aclmdlRITaskParams>::zeroed();
            code!(aclmdlRITaskSetParams(ptr::null_mut(), params.as_mut_ptr()))
        }),
        case("set of a destroyed instance's task", SET, 107017, 0, || {
            let mut params = std::mem::MaybeUninit::<aclmdlRITaskParams>::zeroed();
            code!(aclmdlRITaskSetParams(stale_task(), params.as_mut_ptr()))
        }),
        case("set from NULL", SET, 100000, 0, || {
            code!(aclmdlRITaskSetParams(four_tasks()[0], ptr::null_mut()))
        }),
        case("set of another type", SET, 107000, 0, || {
            set(four_tasks()[0], |p| p.type_ = ACL_MODEL_RI_TASK_VALUE_WRITE)
        }),
        case(
            "set operator information of 0 bytes",
            SET,
            100000,
            0,
            || {
                set(four_tasks()[3], |p| {
                    p.opInfoPtr = ptr::NonNull::<u8>::dangling().as_ptr().cast();
                    p.opInfoSize = 0;
                })
            },
        ),
        case(
            "set operator information over 64 KiB",
            SET,
            100000,
            0,
            || {
                set(four_tasks()[3], |p| {
                    p.opInfoPtr = ptr::NonNull::<u8>::dangling().as_ptr().cast();
                    p.opInfoSize = (64 << 10) + 1;
                })
            },
        ),
        case("set a NULL function", SET, 100000, 0, || {
            set_kernel(|k| k.funcHandle = ptr::null_mut())
        }),
        case("set 0 blocks", SET, 100000, 0, || {
            set_kernel(|k| k.numBlocks = 0)
        }),
        case("set NULL arguments with a size", SET, 100000, 0, || {
            set_kernel(|k| k.args = ptr::null_mut())
        }),
        case(
            "set fewer arguments than the kernel reads",
            SET,
            107000,
            0,
            || set_kernel(|k| k.argsSize = 4),
        ),
        case("set isHostArgs 2", SET, 107000, 0, || {
            set_kernel(|k| k.isHostArgs = 2)
        }),
        case(
            "set host memory as device arguments",
            SET,
            107000,
            0,
            || set_kernel(|k| k.args = Box::leak(Box::new(0u64)) as *mut u64 as *mut c_void),
        ),
        case("set a function of another device", SET, 107044, 1, || {
            let func = add_one();
            set_device(0);
            let tasks = four_tasks();
            let mut params = task_params(tasks[0]);
            params.__bindgen_anon_1.kernelTaskParams.funcHandle = func;
            code!(aclmdlRITaskSetParams(tasks[0], &mut params))
        }),
        case("set a stale function", SET, 107017, 0, || {
            let bin = registry_binary(&["add_one_u32"]);
            let func = function(bin, "add_one_u32");
            acl!(aclrtBinaryUnLoad(bin));
            let tasks = four_tasks();
            let mut params = task_params(tasks[0]);
            params.__bindgen_anon_1.kernelTaskParams.funcHandle = func;
            code!(aclmdlRITaskSetParams(tasks[0], &mut params))
        }),
        // A launch's configuration is checked, as the launches check it, before its function
        // is looked up.
        case("set a stale function on engine 10", SET, 107000, 0, || {
            let bin = registry_binary(&["add_one_u32"]);
            let func = function(bin, "add_one_u32");
            acl!(aclrtBinaryUnLoad(bin));
            let tasks = four_tasks();
            let mut params = task_params(tasks[0]);
            let mut attr = aclrtLaunchKernelAttr {
                id: ACL_RT_LAUNCH_KERNEL_ATTR_ENGINE_TYPE,
                value: aclrtLaunchKernelAttrValue { engineType: 10 },
            };
            let mut cfg = aclrtLaunchKernelCfg {
                attrs: &mut attr,
                numAttrs: 1,
            };
            // SAFETY: the KERNEL task's parameters.
            let kernel = unsafe { &mut params.__bindgen_anon_1.kernelTaskParams };
            kernel.funcHandle = func;
            kernel.cfg = &mut cfg;
            code!(aclmdlRITaskSetParams(tasks[0], &mut params))
        }),
        case("set a value write to NULL", SET, 100000, 0, || {
            set(four_tasks()[1], |p| {
                p.__bindgen_anon_1.valueWriteTaskParams.devAddr = ptr::null_mut()
            })
        }),
        case(
            "set a value write to an unaligned word",
            SET,
            107000,
            0,
            || {
                set(four_tasks()[1], |p| {
                    // SAFETY: the VALUE_WRITE task's parameters.
                    let write = unsafe { &mut p.__bindgen_anon_1.valueWriteTaskParams };
                    write.devAddr = write.devAddr.wrapping_byte_add(4);
                })
            },
        ),
        case("set a value wait on NULL", SET, 100000, 0, || {
            set(four_tasks()[2], |p| {
                p.__bindgen_anon_1.valueWaitTaskParams.devAddr = ptr::null_mut()
            })
        }),
        case("set a value wait with flag 9", SET, 100000, 0, || {
            set(four_tasks()[2], |p| {
                p.__bindgen_anon_1.valueWaitTaskParams.flag = 9
            })
        }),
        case("set a value wait on host memory", SET, 107000, 0, || {
            set(four_tasks()[2], |p| {
                p.__bindgen_anon_1.valueWaitTaskParams.devAddr =
                    Box::leak(Box::new(0u64)) as *mut u64 as *mut c_void
            })
        }),
    ]);
}

/// A refused set changes nothing: the task keeps its parameters.
#[test]
fn a_refused_set_changes_nothing() {
    install_eight_devices();
    set_device(3);
    let tasks = four_tasks();
    let before = task_params(tasks[1]);
    let info = [1u8; 4];
    let mut changed = before;
    changed.opInfoPtr = info.as_ptr().cast_mut().cast();
    changed.opInfoSize = info.len();
    changed.__bindgen_anon_1.valueWriteTaskParams.devAddr = ptr::null_mut();
    assert_eq!(code!(aclmdlRITaskSetParams(tasks[1], &mut changed)), 100000);
    let after = task_params(tasks[1]);
    assert!(after.opInfoPtr.is_null());
    // SAFETY: the VALUE_WRITE task's parameters.
    let (was, is) = unsafe {
        (
            before.__bindgen_anon_1.valueWriteTaskParams,
            after.__bindgen_anon_1.valueWriteTaskParams,
        )
    };
    assert_eq!((was.devAddr, was.value), (is.devAddr, is.value));
}

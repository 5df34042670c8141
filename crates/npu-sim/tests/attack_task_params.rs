//! Attacks on the task-parameter and code queries (aclmdlRITaskGetParams,
//! aclmdlRITaskSetParams, aclmdlRIKernelTaskGetAttribute, aclrtGetFunctionSize,
//! aclrtGetFunctionAttribute, aclrtBinaryGetDevAddress): garbage, stale and wrong-type handles,
//! new parameters while executions of the instance are queued under a closed hold gate,
//! queried parameters set back after the instance changed, pointers to freed, host or another
//! device's memory, and queries racing the destruction of what they query. Each must come back
//! with the reference's code, never a crash, and an execution must run with the parameters it
//! was queued with. Tests that close a hold gate use a device of their own.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;
use std::sync::{Arc, Barrier};
use std::thread;

use common::*;
use npu_sim::abi::*;
use npu_sim::control;
use npu_sys::*;

/// A handle or pointer sent to another thread (the simulator's handles are opaque tokens).
#[derive(Clone, Copy)]
struct Raw(usize);

impl Raw {
    fn of<T>(ptr: *mut T) -> Raw {
        Raw(ptr as usize)
    }
    fn ptr<T>(self) -> *mut T {
        self.0 as *mut T
    }
}

/// Host-packed arguments of `read_through`: `value` at 0, the placeholder at 8 pointing at it
/// (in the launch's copy), the output at 16.
#[repr(C)]
#[derive(Clone, Copy)]
struct Through {
    value: u64,
    pointer: u64,
    out: u64,
}

/// Captures one `read_through` launch on `stream` reading `value` through a placeholder into
/// `out`; returns the instance and its task.
fn capture_read_through(
    stream: aclrtStream,
    value: u64,
    out: *mut c_void,
) -> (aclmdlRI, aclmdlRITask) {
    let func = read_through();
    acl!(aclmdlRICaptureBegin(
        stream,
        ACL_MODEL_RI_CAPTURE_MODE_RELAXED
    ));
    let mut args = Through {
        value,
        pointer: 0,
        out: out as u64,
    };
    let mut holder = aclrtPlaceHolderInfo {
        addrOffset: 8,
        dataOffset: 0,
    };
    acl!(aclrtLaunchKernelWithHostArgs(
        func,
        1,
        stream,
        ptr::null_mut(),
        (&raw mut args).cast(),
        size_of::<Through>(),
        &mut holder,
        1
    ));
    let model = end(stream);
    (model, first_stream_tasks(model)[0])
}

fn end(stream: aclrtStream) -> aclmdlRI {
    let mut model = ptr::null_mut();
    acl!(aclmdlRICaptureEnd(stream, &mut model));
    model
}

fn kernel_params(params: &mut aclmdlRITaskParams) -> &mut aclmdlRIKernelTaskParams {
    // SAFETY: the callers pass a KERNEL task's parameters, whose union is kernelTaskParams.
    unsafe { &mut params.__bindgen_anon_1.kernelTaskParams }
}

const OLD: u64 = 0x0123_4567_89ab_cdef;
const NEW: u64 = 0x0fed_cba9_8765_4321;

/// Promise: a launch's parameters set back as queried run as they did (the reference's
/// get-modify-set pattern). Its packed arguments hold a placeholder pointing into the task's
/// own copy of them; after the set, the kernel must still read the value through it.
#[test]
fn a_placeholder_launch_set_back_as_queried_still_reads_its_data() {
    install_eight_devices();
    set_device(3);
    let (stream, out) = (create_stream(), malloc(8));
    let (model, task) = capture_read_through(stream, OLD, out);
    execute(model);
    assert_eq!(read_u64(out), OLD);
    let mut same = task_params(task);
    acl!(aclmdlRITaskSetParams(task, &mut same));
    upload::<u64>(out, &[0]);
    execute(model);
    assert_eq!(read_u64(out), OLD, "the placeholder points at freed memory");
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(out));
}

/// Promise: a launch's queried arguments copied into the caller's own buffer and set as host
/// arguments (get, copy, set) run as they did. The copy's placeholder slot still holds the
/// address of its data in the task's replaced arguments, which must stay readable memory, not
/// memory the set freed (found by review: a kernel read freed host memory through it).
#[test]
fn queried_arguments_copied_and_set_as_host_arguments_still_read_their_data() {
    install_eight_devices();
    set_device(4);
    let (stream, out) = (create_stream(), malloc(8));
    let (model, task) = capture_read_through(stream, OLD, out);
    let mut changed = task_params(task);
    let kernel = kernel_params(&mut changed);
    // SAFETY: the task's own arguments, `argsSize` bytes, valid until it changes.
    let mut copied =
        unsafe { std::slice::from_raw_parts(kernel.args.cast::<u8>(), kernel.argsSize) }.to_vec();
    kernel.args = copied.as_mut_ptr().cast();
    kernel.isHostArgs = 1;
    acl!(aclmdlRITaskSetParams(task, &mut changed));
    drop(copied);
    // Churn the allocator, so memory the set freed would be reused.
    let churn: Vec<Vec<u64>> = (0..64).map(|i| vec![i; 3]).collect();
    for _ in 0..3 {
        upload::<u64>(out, &[0]);
        execute(model);
        assert_eq!(read_u64(out), OLD, "the placeholder's data is gone");
    }
    drop(churn);
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(out));
}

/// Promise: executions queued before a set run the task as it was, those queued after with
/// the new parameters; the queued one must not read the arguments the set replaced.
#[test]
fn an_execution_queued_before_a_set_runs_the_old_arguments() {
    install_eight_devices();
    set_device(1);
    let (stream, exec, outs) = (create_stream(), create_stream(), malloc(16));
    upload::<u64>(outs, &[0, 0]);
    let (first, second) = (outs, outs.wrapping_byte_add(8));
    let (model, task) = capture_read_through(stream, OLD, first);
    control::hold(1).unwrap();
    acl!(aclmdlRIExecuteAsync(model, exec));
    // New host arguments: NEW, read through a pointer to the test's own copy, into `second`.
    let new_value = Box::new(NEW);
    let mut args = Through {
        value: 0,
        pointer: &raw const *new_value as u64,
        out: second as u64,
    };
    let mut changed = task_params(task);
    let kernel = kernel_params(&mut changed);
    kernel.args = (&raw mut args).cast();
    kernel.isHostArgs = 1;
    acl!(aclmdlRITaskSetParams(task, &mut changed));
    // Churn the allocator, so memory the set freed is likely reused.
    let churn: Vec<Vec<u64>> = (0..64).map(|i| vec![i; 3]).collect();
    control::release(1).unwrap();
    acl!(aclrtSynchronizeStream(exec));
    drop(churn);
    assert_eq!(download::<u64>(outs, 2), [OLD, 0], "the queued execution");
    execute(model);
    assert_eq!(download::<u64>(outs, 2), [OLD, NEW], "the next execution");
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyStream(exec));
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(outs));
}

/// Promise: value-task parameters set while an execution is queued reach only later
/// executions.
#[test]
fn a_value_write_set_while_an_execution_is_held_reaches_only_later_ones() {
    install_eight_devices();
    set_device(2);
    let (stream, exec, words) = (create_stream(), create_stream(), malloc(16));
    upload::<u64>(words, &[0, 0]);
    let other = words.wrapping_byte_add(8);
    acl!(aclmdlRICaptureBegin(
        stream,
        ACL_MODEL_RI_CAPTURE_MODE_RELAXED
    ));
    acl!(aclrtValueWrite(words, 5, 0, stream));
    let model = end(stream);
    let task = first_stream_tasks(model)[0];
    control::hold(2).unwrap();
    acl!(aclmdlRIExecuteAsync(model, exec));
    let mut changed = task_params(task);
    changed.__bindgen_anon_1.valueWriteTaskParams = aclmdlRIValueWriteTaskParams {
        devAddr: other,
        value: 9,
    };
    acl!(aclmdlRITaskSetParams(task, &mut changed));
    // Destroying an instance with a queued execution is refused, and changes nothing.
    assert_eq!(code!(aclmdlRIDestroy(model)), ACL_ERROR_RT_MODEL_RUNNING);
    control::release(2).unwrap();
    acl!(aclrtSynchronizeStream(exec));
    assert_eq!(download::<u64>(words, 2), [5, 0]);
    execute(model);
    assert_eq!(download::<u64>(words, 2), [5, 9]);
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyStream(exec));
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(words));
}

/// Captures a launch of `add_one_u32` whose 8 bytes of arguments are in device memory
/// (`args`, holding the address of a u32).
fn capture_device_args(stream: aclrtStream, args: *mut c_void) -> (aclmdlRI, aclmdlRITask) {
    let func = function(registry_binary(&["add_one_u32"]), "add_one_u32");
    acl!(aclmdlRICaptureBegin(
        stream,
        ACL_MODEL_RI_CAPTURE_MODE_RELAXED
    ));
    acl!(aclrtLaunchKernel(func, 1, args, 8, stream));
    let model = end(stream);
    (model, first_stream_tasks(model)[0])
}

/// Promise: device arguments that are not device memory of the instance's device → 107000,
/// also when they are the arguments the task already has and that memory was freed since.
#[test]
fn device_arguments_freed_since_the_capture_are_refused_when_set_back() {
    install_eight_devices();
    set_device(3);
    let (stream, counter, args) = (create_stream(), malloc(4), malloc(8));
    upload::<u64>(args, &[counter as u64]);
    let (model, task) = capture_device_args(stream, args);
    let mut queried = task_params(task);
    assert_eq!(kernel_params(&mut queried).args, args);
    acl!(aclrtFree(args));
    assert_eq!(
        code!(aclmdlRITaskSetParams(task, &mut queried)),
        ACL_ERROR_RT_PARAM_INVALID
    );
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(counter));
}

/// Promise: the arguments a query gave, set back after the task took new ones, are no longer
/// the task's: its old copy is freed host memory, refused as device arguments (107000).
#[test]
fn queried_arguments_set_back_after_the_task_changed_are_refused() {
    install_eight_devices();
    set_device(3);
    let (stream, out) = (create_stream(), malloc(8));
    let (model, task) = capture_read_through(stream, OLD, out);
    let mut stale = task_params(task);
    let new_value = Box::new(NEW);
    let mut args = Through {
        value: 0,
        pointer: &raw const *new_value as u64,
        out: out as u64,
    };
    let mut changed = task_params(task);
    let kernel = kernel_params(&mut changed);
    kernel.args = (&raw mut args).cast();
    kernel.isHostArgs = 1;
    acl!(aclmdlRITaskSetParams(task, &mut changed));
    assert_eq!(
        code!(aclmdlRITaskSetParams(task, &mut stale)),
        ACL_ERROR_RT_PARAM_INVALID
    );
    execute(model);
    assert_eq!(read_u64(out), NEW);
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(out));
}

/// Promise: device arguments in another device's memory, in freed memory or in host memory
/// are refused as the launches refuse them (107000); huge host sizes come back as a code,
/// never an allocation or a read of that many bytes. Nothing changes.
#[test]
fn bad_arguments_are_refused_and_change_nothing() {
    install_eight_devices();
    set_device(4);
    let (stream, counter, args) = (create_stream(), malloc(4), malloc(16));
    upload::<u32>(counter, &[0]);
    upload::<u64>(args, &[counter as u64, 0]);
    let (model, task) = capture_device_args(stream, args);
    let other_device = malloc_on(5, 16);
    set_device(4);
    let freed = freed_device_address(16);
    let host = Box::leak(Box::new([0u64; 2])).as_mut_ptr().cast::<c_void>();
    let attempt = |change: &dyn Fn(&mut aclmdlRIKernelTaskParams)| {
        let mut changed = task_params(task);
        change(kernel_params(&mut changed));
        code!(aclmdlRITaskSetParams(task, &mut changed))
    };
    assert_eq!(
        attempt(&|k| k.args = other_device),
        ACL_ERROR_RT_PARAM_INVALID
    );
    assert_eq!(attempt(&|k| k.args = freed), ACL_ERROR_RT_PARAM_INVALID);
    assert_eq!(attempt(&|k| k.args = host), ACL_ERROR_RT_PARAM_INVALID);
    for size in [usize::MAX, isize::MAX as usize + 1] {
        let code = attempt(&|k| {
            k.args = host;
            k.isHostArgs = 1;
            k.argsSize = size;
        });
        assert_ne!(code, 0, "argsSize {size}");
    }
    let mut queried = task_params(task);
    let kernel = kernel_params(&mut queried);
    assert_eq!((kernel.args, kernel.argsSize), (args, 8));
    execute(model);
    assert_eq!(download::<u32>(counter, 1), [1]);
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(counter));
    acl!(aclrtFree(args));
}

/// Promise: operator information of exactly 64 KiB is taken and reported back byte for byte;
/// one byte more → 100000 and the task keeps what it had.
#[test]
fn operator_information_at_and_over_the_limit() {
    install_eight_devices();
    set_device(4);
    let (stream, out) = (create_stream(), malloc(8));
    let (model, task) = capture_read_through(stream, OLD, out);
    let info: Vec<u8> = (0..64 << 10).map(|i| (i % 251) as u8).collect();
    let mut changed = task_params(task);
    changed.opInfoPtr = info.as_ptr().cast_mut().cast();
    changed.opInfoSize = info.len();
    acl!(aclmdlRITaskSetParams(task, &mut changed));
    let got = task_params(task);
    // SAFETY: the instance's copy of the information, alive until it is replaced.
    let cached = unsafe { std::slice::from_raw_parts(got.opInfoPtr.cast::<u8>(), got.opInfoSize) };
    assert_eq!(cached, &info[..]);
    let bigger = vec![7u8; (64 << 10) + 1];
    let mut over = task_params(task);
    over.opInfoPtr = bigger.as_ptr().cast_mut().cast();
    over.opInfoSize = bigger.len();
    assert_eq!(
        code!(aclmdlRITaskSetParams(task, &mut over)),
        ACL_ERROR_INVALID_PARAM
    );
    assert_eq!(task_params(task).opInfoSize, 64 << 10);
    // The queried information set back: its own bytes, replaced by a copy of themselves.
    let mut same = task_params(task);
    acl!(aclmdlRITaskSetParams(task, &mut same));
    let got = task_params(task);
    // SAFETY: as above.
    let cached = unsafe { std::slice::from_raw_parts(got.opInfoPtr.cast::<u8>(), got.opInfoSize) };
    assert_eq!(cached, &info[..]);
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(out));
}

/// Promise: garbage, destroyed-instance and wrong-type task handles are codes: garbage and
/// stale → 107017, a kernel attribute of a task that is no kernel launch → 507009.
#[test]
fn garbage_stale_and_wrong_type_tasks() {
    install_eight_devices();
    set_device(6);
    let garbage = 0xdead_beef_usize as aclmdlRITask;
    // SAFETY: plain data, for which all-zero is valid.
    let mut out: aclmdlRITaskParams = unsafe { std::mem::zeroed() };
    let mut value = aclrtLaunchKernelAttrValue { rsv: [0; 4] };
    assert_eq!(
        code!(aclmdlRITaskGetParams(garbage, &mut out)),
        ACL_ERROR_RT_INVALID_HANDLE
    );
    assert_eq!(
        code!(aclmdlRITaskSetParams(garbage, &mut out)),
        ACL_ERROR_RT_INVALID_HANDLE
    );
    assert_eq!(
        code!(aclmdlRIKernelTaskGetAttribute(
            garbage,
            ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT,
            &mut value
        )),
        ACL_ERROR_RT_INVALID_HANDLE
    );
    let (stream, word) = (create_stream(), malloc(8));
    acl!(aclmdlRICaptureBegin(
        stream,
        ACL_MODEL_RI_CAPTURE_MODE_RELAXED
    ));
    acl!(aclrtValueWrite(word, 1, 0, stream));
    let model = end(stream);
    let task = first_stream_tasks(model)[0];
    assert_eq!(
        code!(aclmdlRIKernelTaskGetAttribute(
            task,
            ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT,
            &mut value
        )),
        ACL_ERROR_RT_TASK_TYPE_NOT_SUPPORT
    );
    // A kernel's parameters given to a value write: a type mismatch.
    let mut wrong = task_params(task);
    wrong.type_ = ACL_MODEL_RI_TASK_KERNEL;
    assert_eq!(
        code!(aclmdlRITaskSetParams(task, &mut wrong)),
        ACL_ERROR_RT_PARAM_INVALID
    );
    wrong.type_ = 0x7fff_ffff;
    assert_eq!(
        code!(aclmdlRITaskSetParams(task, &mut wrong)),
        ACL_ERROR_RT_PARAM_INVALID
    );
    acl!(aclmdlRIDestroy(model));
    for call in [
        code!(aclmdlRITaskGetParams(task, &mut out)),
        code!(aclmdlRITaskSetParams(task, &mut out)),
        code!(aclmdlRIKernelTaskGetAttribute(
            task,
            ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT,
            &mut value
        )),
    ] {
        assert_eq!(call, ACL_ERROR_RT_INVALID_HANDLE);
    }
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(word));
}

/// Promise: a set's launch configuration is checked (a bad value → 107000, nothing changes)
/// and its attributes are what aclmdlRIKernelTaskGetAttribute reports afterwards.
#[test]
fn a_set_configuration_is_checked_and_reported() {
    install_eight_devices();
    set_device(6);
    let (stream, out) = (create_stream(), malloc(8));
    let (model, task) = capture_read_through(stream, OLD, out);
    let mut attrs = [
        aclrtLaunchKernelAttr {
            id: ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT,
            value: aclrtLaunchKernelAttrValue { timeout: 7 },
        },
        aclrtLaunchKernelAttr {
            id: ACL_RT_LAUNCH_KERNEL_ATTR_SCHEM_MODE,
            value: aclrtLaunchKernelAttrValue { schemMode: 2 },
        },
    ];
    let mut cfg = aclrtLaunchKernelCfg {
        attrs: attrs.as_mut_ptr(),
        numAttrs: 2,
    };
    let mut changed = task_params(task);
    kernel_params(&mut changed).cfg = &mut cfg;
    assert_eq!(
        code!(aclmdlRITaskSetParams(task, &mut changed)),
        ACL_ERROR_RT_PARAM_INVALID
    );
    let timeout = |task| {
        let mut value = aclrtLaunchKernelAttrValue { rsv: [0; 4] };
        acl!(aclmdlRIKernelTaskGetAttribute(
            task,
            ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT,
            &mut value
        ));
        // SAFETY: TIMEOUT's member.
        unsafe { value.timeout }
    };
    assert_eq!(timeout(task), 0);
    // Fewer bytes of arguments than the kernel declares → 107000.
    cfg.numAttrs = 1;
    kernel_params(&mut changed).cfg = &mut cfg;
    kernel_params(&mut changed).argsSize = 0;
    assert_eq!(
        code!(aclmdlRITaskSetParams(task, &mut changed)),
        ACL_ERROR_RT_PARAM_INVALID
    );
    kernel_params(&mut changed).argsSize = 24;
    acl!(aclmdlRITaskSetParams(task, &mut changed));
    assert_eq!(timeout(task), 7);
    execute(model);
    assert_eq!(read_u64(out), OLD);
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(out));
}

/// Promise: threads getting and setting a task's parameters while another destroys its
/// instance each get 0 or 107017, and every call after the destroy 107017.
#[test]
fn gets_and_sets_racing_a_destroy_come_back_with_codes() {
    install_eight_devices();
    set_device(7);
    for _ in 0..8 {
        let (stream, out) = (create_stream(), malloc(8));
        let (model, task) = capture_read_through(stream, OLD, out);
        let (raw, start) = (Raw::of(task), Arc::new(Barrier::new(5)));
        let workers: Vec<_> = (0..4)
            .map(|i| {
                let start = start.clone();
                thread::spawn(move || {
                    set_device(7);
                    start.wait();
                    let task = raw.ptr::<c_void>();
                    let mut codes = Vec::new();
                    for _ in 0..200 {
                        // SAFETY: plain data, for which all-zero is valid.
                        let mut got: aclmdlRITaskParams = unsafe { std::mem::zeroed() };
                        let code = code!(aclmdlRITaskGetParams(task, &mut got));
                        codes.push(code);
                        if code == 0 && i % 2 == 0 {
                            codes.push(code!(aclmdlRITaskSetParams(task, &mut got)));
                        }
                        let mut value = aclrtLaunchKernelAttrValue { rsv: [0; 4] };
                        codes.push(code!(aclmdlRIKernelTaskGetAttribute(
                            task,
                            ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT,
                            &mut value
                        )));
                    }
                    codes
                })
            })
            .collect();
        start.wait();
        acl!(aclmdlRIDestroy(model));
        for worker in workers {
            for code in worker.join().unwrap() {
                assert!(
                    code == 0 || code == ACL_ERROR_RT_INVALID_HANDLE,
                    "a racing call got {code}"
                );
            }
        }
        // SAFETY: plain data, for which all-zero is valid.
        let mut got: aclmdlRITaskParams = unsafe { std::mem::zeroed() };
        assert_eq!(
            code!(aclmdlRITaskGetParams(task, &mut got)),
            ACL_ERROR_RT_INVALID_HANDLE
        );
        acl!(aclrtDestroyStream(stream));
        acl!(aclrtFree(out));
    }
}

/// Promise: garbage and unloaded function and binary handles → 107017 (NULL → 100000), and
/// threads querying code sizes, attributes and images while another unloads the binary get
/// 0 or 107017, with the values of the loaded binary.
#[test]
fn code_queries_racing_an_unload_come_back_with_codes() {
    install_eight_devices();
    set_device(5);
    let garbage = 0xdead_beef_usize as *mut c_void;
    let (mut aic, mut aiv, mut attr) = (0usize, 0usize, 0i64);
    let (mut address, mut size) = (ptr::null_mut(), 0usize);
    assert_eq!(
        code!(aclrtGetFunctionSize(garbage, &mut aic, &mut aiv)),
        ACL_ERROR_RT_INVALID_HANDLE
    );
    assert_eq!(
        code!(aclrtGetFunctionAttribute(
            garbage,
            ACL_FUNC_ATTR_KERNEL_TYPE,
            &mut attr
        )),
        ACL_ERROR_RT_INVALID_HANDLE
    );
    assert_eq!(
        code!(aclrtBinaryGetDevAddress(garbage, &mut address, &mut size)),
        ACL_ERROR_RT_INVALID_HANDLE
    );
    assert_eq!(
        code!(aclrtGetFunctionSize(ptr::null_mut(), &mut aic, &mut aiv)),
        ACL_ERROR_INVALID_PARAM
    );
    let path = c_string(npu_sim::kernel::LIBRARY_PATH);
    for _ in 0..8 {
        let mut bin = ptr::null_mut();
        acl!(aclrtBinaryLoadFromFile(
            path.as_ptr(),
            ptr::null_mut(),
            &mut bin
        ));
        let func = function(bin, npu_sim::kernel::SCALE_F32);
        acl!(aclrtGetFunctionSize(func, &mut aic, &mut aiv));
        acl!(aclrtBinaryGetDevAddress(bin, &mut address, &mut size));
        let expected = (aic, address as usize, size);
        let (raw_bin, raw_func, start) = (Raw::of(bin), Raw::of(func), Arc::new(Barrier::new(5)));
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let start = start.clone();
                thread::spawn(move || {
                    set_device(5);
                    start.wait();
                    let mut codes = Vec::new();
                    for _ in 0..200 {
                        let (mut aic, mut aiv, mut attr) = (0usize, 0usize, -1i64);
                        let (mut address, mut size) = (ptr::null_mut(), 0usize);
                        let func = raw_func.ptr::<c_void>();
                        let code = code!(aclrtGetFunctionSize(func, &mut aic, &mut aiv));
                        if code == 0 {
                            assert_eq!((aic, aiv), (expected.0, expected.0));
                        }
                        codes.push(code);
                        let kind = ACL_FUNC_ATTR_KERNEL_TYPE;
                        let code = code!(aclrtGetFunctionAttribute(func, kind, &mut attr));
                        if code == 0 {
                            assert_eq!(attr, i64::from(ACL_KERNEL_TYPE_AICORE));
                        }
                        codes.push(code);
                        let bin = raw_bin.ptr::<c_void>();
                        let code = code!(aclrtBinaryGetDevAddress(bin, &mut address, &mut size));
                        if code == 0 {
                            assert_eq!((address as usize, size), (expected.1, expected.2));
                        }
                        codes.push(code);
                    }
                    codes
                })
            })
            .collect();
        start.wait();
        acl!(aclrtBinaryUnLoad(bin));
        for worker in workers {
            for code in worker.join().unwrap() {
                assert!(
                    code == 0 || code == ACL_ERROR_RT_INVALID_HANDLE,
                    "a racing query got {code}"
                );
            }
        }
        assert_eq!(
            code!(aclrtGetFunctionSize(func, &mut aic, &mut aiv)),
            ACL_ERROR_RT_INVALID_HANDLE
        );
        assert_eq!(
            code!(aclrtGetFunctionAttribute(
                func,
                ACL_FUNC_ATTR_KERNEL_RATIO,
                &mut attr
            )),
            ACL_ERROR_RT_INVALID_HANDLE
        );
        assert_eq!(
            code!(aclrtBinaryGetDevAddress(bin, &mut address, &mut size)),
            ACL_ERROR_RT_INVALID_HANDLE
        );
    }
}

/// Promise: a launch set to a function of another binary runs it in the executions queued
/// afterwards even when that binary is unloaded before they run (a queued launch keeps its
/// code), and the task's queries stay answerable.
#[test]
fn a_set_function_whose_binary_is_unloaded_under_a_held_execution_still_runs() {
    install_eight_devices();
    set_device(0);
    let (stream, exec, out, args) = (create_stream(), create_stream(), malloc(8), malloc(8));
    let counter = malloc(4);
    upload::<u32>(counter, &[0]);
    upload::<u64>(args, &[counter as u64]);
    let (model, task) = capture_device_args(stream, args);
    // Registered here: the other tests register it on first use, and this one may run first
    // (it then found no "read_through" in its image: seen with 16 test threads).
    register_read_through();
    let bin = registry_binary(&[READ_THROUGH]);
    let func = function(bin, READ_THROUGH);
    let mut through = Through {
        value: OLD,
        pointer: 0,
        out: out as u64,
    };
    through.pointer = &raw const through.value as u64;
    let mut changed = task_params(task);
    let kernel = kernel_params(&mut changed);
    kernel.funcHandle = func;
    kernel.args = (&raw mut through).cast();
    kernel.argsSize = size_of::<Through>();
    kernel.isHostArgs = 1;
    // The host copy's pointer still points at `through.value`, which outlives the executions.
    acl!(aclmdlRITaskSetParams(task, &mut changed));
    control::hold(0).unwrap();
    acl!(aclmdlRIExecuteAsync(model, exec));
    acl!(aclrtBinaryUnLoad(bin));
    let mut value = aclrtLaunchKernelAttrValue { rsv: [0; 4] };
    acl!(aclmdlRIKernelTaskGetAttribute(
        task,
        ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT,
        &mut value
    ));
    assert_eq!(kernel_params(&mut task_params(task)).funcHandle, func);
    control::release(0).unwrap();
    acl!(aclrtSynchronizeStream(exec));
    assert_eq!(read_u64(out), OLD);
    assert_eq!(download::<u32>(counter, 1), [0], "the old launch is gone");
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyStream(exec));
    acl!(aclrtDestroyStream(stream));
    for dev in [out, args, counter] {
        acl!(aclrtFree(dev));
    }
}

/// Promise: threads setting new host arguments while executions are queued and run: every
/// execution reads one of the values set (never freed memory), and the last set wins.
#[test]
fn concurrent_sets_under_running_executions_never_expose_freed_arguments() {
    install_eight_devices();
    set_device(7);
    let (stream, exec, out) = (create_stream(), create_stream(), malloc(8));
    let (model, task) = capture_read_through(stream, 1, out);
    let (raw_task, raw_out, start) = (Raw::of(task), Raw::of(out), Arc::new(Barrier::new(4)));
    let setters: Vec<_> = (0..3u64)
        .map(|i| {
            let start = start.clone();
            thread::spawn(move || {
                set_device(7);
                start.wait();
                for round in 0..100u64 {
                    let value = 1 + i * 1000 + round;
                    // The set copies the bytes, so the pointer must lead to memory that lives
                    // on: a leaked copy of the value.
                    let mut args = Through {
                        value,
                        pointer: Box::leak(Box::new(value)) as *mut u64 as u64,
                        out: raw_out.ptr::<c_void>() as u64,
                    };
                    let mut holder = task_params(raw_task.ptr());
                    let kernel = kernel_params(&mut holder);
                    kernel.args = (&raw mut args).cast();
                    kernel.isHostArgs = 1;
                    acl!(aclmdlRITaskSetParams(raw_task.ptr(), &mut holder));
                }
            })
        })
        .collect();
    start.wait();
    for _ in 0..100 {
        acl!(aclmdlRIExecuteAsync(model, exec));
        acl!(aclrtSynchronizeStream(exec));
        let seen = read_u64(out);
        assert!(
            (1..3000).contains(&seen) && (seen - 1) % 1000 < 100,
            "an execution read {seen:#x}"
        );
    }
    for setter in setters {
        setter.join().unwrap();
    }
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyStream(exec));
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(out));
}

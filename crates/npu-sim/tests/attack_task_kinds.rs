//! Attacks on the task kinds the other lifetime attacks leave out: batch copies, indirect
//! copies (a descriptor or base pointers in device memory), reductions, random number tasks,
//! 2D copies, value waits, and event and notify waits whose event or notify is destroyed while
//! the wait is queued. The promise attacked is the one of docs/simulator.md: a task whose
//! memory was freed since its submission (or its capture) fails with 507013
//! ACL_ERROR_RT_SYS_DMA and touches nothing; a destroyed event or notify leaves the tasks
//! already queued on it working. Tests that close a hold gate use a device of their own; the
//! file is meant to run under valgrind as well.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;

use common::*;
use npu_sim::abi::*;
use npu_sim::control;
use npu_sys::*;

const INNER: aclrtMemcpyKind = ACL_MEMCPY_INNER_DEVICE_TO_DEVICE;

fn host_bytes(host: *const c_void, len: usize) -> Vec<u8> {
    // SAFETY: `host` is live pinned memory of at least `len` bytes that no task writes now.
    unsafe { std::slice::from_raw_parts(host.cast::<u8>(), len).to_vec() }
}

fn capture(stream: aclrtStream, body: impl FnOnce()) -> aclmdlRI {
    acl!(aclmdlRICaptureBegin(
        stream,
        ACL_MODEL_RI_CAPTURE_MODE_RELAXED
    ));
    body();
    capture_end(stream)
}

/// A one-way batch of copies of `len` bytes each, host to device or device to host.
fn batch_async(
    dsts: &[*mut c_void],
    srcs: &[*mut c_void],
    len: usize,
    to_device: bool,
    device: i32,
    stream: aclrtStream,
) -> aclError {
    let (host, dev) = (
        aclrtMemLocation {
            type_: ACL_MEM_LOCATION_TYPE_HOST,
            id: 0,
        },
        aclrtMemLocation {
            type_: ACL_MEM_LOCATION_TYPE_DEVICE,
            id: device as u32,
        },
    );
    let mut attr = aclrtMemcpyBatchAttr {
        srcLoc: if to_device { host } else { dev },
        dstLoc: if to_device { dev } else { host },
        ..Default::default()
    };
    let mut dsts = dsts.to_vec();
    let mut srcs = srcs.to_vec();
    let mut sizes = vec![len; dsts.len()];
    let mut maxes = sizes.clone();
    let mut start = 0usize;
    let mut fail_index = 0usize;
    code!(aclrtMemcpyBatchAsync(
        dsts.as_mut_ptr(),
        maxes.as_mut_ptr(),
        srcs.as_mut_ptr(),
        sizes.as_mut_ptr(),
        dsts.len(),
        &mut attr,
        &mut start,
        1,
        &mut fail_index,
        stream
    ))
}

/// Promise: each copy of an asynchronous batch is a task of the stream; a copy whose device
/// memory, or whose pinned host memory, was freed before it runs fails with 507013 and the
/// copies whose memory lives run.
#[test]
fn batch_copies_whose_memory_was_freed_before_they_ran_fault() {
    install_eight_devices();
    set_device(0);
    let stream = create_stream();
    let host = malloc_host(4096);
    // SAFETY: 4096 bytes of live pinned memory.
    unsafe { ptr::write_bytes(host.cast::<u8>(), 9, 4096) };
    let (kept, freed) = (malloc(4096), malloc(4096));
    fault_after_free(0, stream, freed, || {
        assert_eq!(
            batch_async(&[kept, freed], &[host, host], 4096, true, 0, stream),
            0
        );
    });
    assert_eq!(
        download::<u8>(kept, 4096),
        vec![9; 4096],
        "the live copy ran"
    );

    // Device to host, the pinned destination freed.
    upload::<u8>(kept, &[4; 4096]);
    let doomed = malloc_host(4096);
    control::hold(0).unwrap();
    assert_eq!(batch_async(&[doomed], &[kept], 4096, false, 0, stream), 0);
    acl!(aclrtFreeHost(doomed));
    control::release(0).unwrap();
    sync_fails_with_dma(stream);
    acl!(aclrtFreeHost(host));
    acl!(aclrtFree(kept));
    acl!(aclrtDestroyStream(stream));
}

/// Queues what `submit` queues on `stream` while device `device` is held at the gate, frees
/// `doomed` (aclrtFree) before the gate opens, and checks that the stream reports a DMA fault.
fn fault_after_free(device: i32, stream: aclrtStream, doomed: *mut c_void, submit: impl FnOnce()) {
    control::hold(device).unwrap();
    submit();
    acl!(aclrtFree(doomed));
    control::release(device).unwrap();
    sync_fails_with_dma(stream);
}

/// The stream's value wait blocks: a bounded synchronisation times out, and gives the worker
/// the time to read the word and sleep on it (were it not asleep yet when the word goes, the
/// test would pass without attacking anything, never fail for it).
fn assert_blocks(stream: aclrtStream) {
    assert_eq!(
        code!(aclrtSynchronizeStreamWithTimeout(stream, 100)),
        ACL_ERROR_RT_STREAM_SYNC_TIMEOUT,
        "the wait blocks: {}",
        recent_message()
    );
    recent_message();
}

fn set_desc(desc: *mut c_void, src: *mut c_void, dst: *mut c_void, count: usize) {
    acl!(aclrtSetMemcpyDesc(
        desc,
        INNER,
        src,
        dst,
        count,
        ptr::null_mut()
    ));
}

/// Promise (docs: indirect copies): a copy through a descriptor fails with 507013 when the
/// descriptor's memory, or the memory it names, was freed before it ran; the same through base
/// pointers held in device memory, the slot of a pointer freed.
#[test]
fn indirect_copies_whose_descriptor_or_target_was_freed_fault() {
    install_eight_devices();
    set_device(1);
    let stream = create_stream();
    let (src, dst) = (malloc(256), malloc(256));
    upload::<u8>(src, &[5; 256]);

    // The descriptor freed.
    let desc = malloc(32);
    set_desc(desc, src, dst, 256);
    fault_after_free(1, stream, desc, || {
        acl!(aclrtMemcpyAsyncWithDesc(desc, INNER, stream));
    });
    assert_eq!(download::<u8>(dst, 256), vec![0; 256]);

    // The destination it names freed.
    let (desc, doomed) = (malloc(32), malloc(256));
    set_desc(desc, src, doomed, 256);
    fault_after_free(1, stream, doomed, || {
        acl!(aclrtMemcpyAsyncWithDesc(desc, INNER, stream));
    });

    // The source it names freed.
    let doomed = malloc(256);
    set_desc(desc, doomed, dst, 256);
    fault_after_free(1, stream, doomed, || {
        acl!(aclrtMemcpyAsyncWithDesc(desc, INNER, stream));
    });
    assert_eq!(download::<u8>(dst, 256), vec![0; 256]);

    // Base pointers: the slot of the destination pointer freed.
    let (dst_slot, src_slot) = (malloc(8), malloc(8));
    upload(dst_slot, &[dst as u64]);
    upload(src_slot, &[src as u64]);
    fault_after_free(1, stream, dst_slot, || {
        acl!(aclrtMemcpyAsyncWithOffset(
            dst_slot.cast(),
            256,
            0,
            src_slot.cast(),
            256,
            0,
            INNER,
            stream
        ));
    });
    assert_eq!(download::<u8>(dst, 256), vec![0; 256]);
    for ptr in [src, dst, desc, src_slot] {
        acl!(aclrtFree(ptr));
    }
    acl!(aclrtDestroyStream(stream));
}

/// Promise (model runtime instances, point 7): an indirect copy captured, replayed after its
/// descriptor was freed, fails with 507013.
#[test]
fn a_captured_indirect_copy_replayed_after_its_descriptor_was_freed_faults() {
    install_eight_devices();
    set_device(7);
    let stream = create_stream();
    let (src, dst, desc) = (malloc(64), malloc(64), malloc(32));
    upload::<u8>(src, &[3; 64]);
    set_desc(desc, src, dst, 64);
    let model = capture(stream, || {
        acl!(aclrtMemcpyAsyncWithDesc(desc, INNER, stream));
    });
    acl!(aclmdlRIExecuteAsync(model, stream));
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(download::<u8>(dst, 64), vec![3; 64], "the replay ran");
    acl!(aclrtFree(desc));
    acl!(aclmdlRIExecuteAsync(model, stream));
    sync_fails_with_dma(stream);
    acl!(aclmdlRIDestroy(model));
    for ptr in [src, dst] {
        acl!(aclrtFree(ptr));
    }
    acl!(aclrtDestroyStream(stream));
}

fn reduce_sum_i32(dst: *mut c_void, src: *mut c_void, len: usize, stream: aclrtStream) {
    acl!(aclrtReduceAsync(
        dst,
        src,
        len as u64,
        ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM,
        ACL_INT32,
        stream,
        ptr::null_mut()
    ));
}

/// Promise: a reduction whose destination or source was freed before it ran fails with 507013;
/// captured, replayed after the free, too.
#[test]
fn reductions_whose_memory_was_freed_fault_queued_and_replayed() {
    install_eight_devices();
    set_device(2);
    let stream = create_stream();
    let (dst, src) = (malloc(1024), malloc(1024));
    upload::<i32>(src, &[1; 256]);
    let doomed = malloc(1024);
    fault_after_free(2, stream, doomed, || {
        reduce_sum_i32(doomed, src, 1024, stream);
    });

    let doomed = malloc(1024);
    fault_after_free(2, stream, doomed, || {
        reduce_sum_i32(dst, doomed, 1024, stream);
    });
    assert_eq!(download::<i32>(dst, 256), vec![0; 256]);

    let doomed = malloc(1024);
    upload::<i32>(doomed, &[2; 256]);
    let model = capture(stream, || reduce_sum_i32(dst, doomed, 1024, stream));
    acl!(aclmdlRIExecuteAsync(model, stream));
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(download::<i32>(dst, 256), vec![2; 256], "the replay ran");
    acl!(aclrtFree(doomed));
    acl!(aclmdlRIExecuteAsync(model, stream));
    sync_fails_with_dma(stream);
    assert_eq!(download::<i32>(dst, 256), vec![2; 256]);
    acl!(aclmdlRIDestroy(model));
    for ptr in [dst, src] {
        acl!(aclrtFree(ptr));
    }
    acl!(aclrtDestroyStream(stream));
}

/// A uniform f32 task of `n` values into `result`, its minimum read from `min` if not NULL.
fn uniform(result: *mut c_void, min: *mut c_void, n: u64) -> aclrtRandomNumTaskInfo {
    let mut para = aclrtRandomNumFuncParaInfo {
        funcType: ACL_RT_RANDOM_NUM_FUNC_TYPE_UNIFORM_DIS,
        ..Default::default()
    };
    para.paramInfo.uniformDisInfo = aclrtUniformDisInfo {
        min: if min.is_null() {
            random_value(&0f32.to_ne_bytes())
        } else {
            random_at(min)
        },
        max: random_value(&1f32.to_ne_bytes()),
    };
    aclrtRandomNumTaskInfo {
        dataType: ACL_FLOAT,
        randomNumFuncParaInfo: para,
        randomResultAddr: result,
        randomSeed: random_value(&7u64.to_ne_bytes()),
        randomNum: random_value(&n.to_ne_bytes()),
        ..Default::default()
    }
}

/// Promise: a random number task whose result, counter, parameter or randomParaAddr memory was
/// freed before it ran fails with 507013; captured, replayed after the result's free, too.
#[test]
fn random_tasks_whose_memory_was_freed_fault_queued_and_replayed() {
    install_eight_devices();
    set_device(3);
    let stream = create_stream();
    let out = malloc(256);
    let run_with_freed = |info: &aclrtRandomNumTaskInfo, doomed: *mut c_void| {
        fault_after_free(3, stream, doomed, || {
            acl!(aclrtRandomNumAsync(info, stream, ptr::null_mut()));
        });
    };
    let doomed = malloc(256);
    run_with_freed(&uniform(doomed, ptr::null_mut(), 64), doomed);

    let counter = malloc(8);
    let mut info = uniform(out, ptr::null_mut(), 64);
    info.randomCounterAddr = counter;
    run_with_freed(&info, counter);
    assert_eq!(download::<u8>(out, 256), vec![0; 256]);

    let min = malloc(8);
    upload(min, &[0f32]);
    run_with_freed(&uniform(out, min, 64), min);
    assert_eq!(download::<u8>(out, 256), vec![0; 256]);

    let para = malloc(256);
    let mut info = uniform(out, ptr::null_mut(), 64);
    info.randomParaAddr = para;
    run_with_freed(&info, para);
    assert_eq!(download::<u8>(out, 256), vec![0; 256]);

    let doomed = malloc(256);
    let info = uniform(doomed, ptr::null_mut(), 64);
    let model = capture(stream, || {
        acl!(aclrtRandomNumAsync(&info, stream, ptr::null_mut()));
    });
    acl!(aclmdlRIExecuteAsync(model, stream));
    acl!(aclrtSynchronizeStream(stream));
    acl!(aclrtFree(doomed));
    acl!(aclmdlRIExecuteAsync(model, stream));
    sync_fails_with_dma(stream);
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtFree(out));
    acl!(aclrtDestroyStream(stream));
}

/// Promise: a 2D copy is checked whole at submission, so rows that would cross from a live
/// allocation into whatever follows it are refused (107000); a queued 2D copy whose device or
/// pinned host memory was freed before it ran fails with 507013.
#[test]
fn two_dimensional_copies_stay_in_their_memory() {
    install_eight_devices();
    set_device(4);
    let stream = create_stream();
    let host = malloc_host(4096);
    // SAFETY: 4096 bytes of live pinned memory.
    unsafe { ptr::write_bytes(host.cast::<u8>(), 6, 4096) };
    let (dev, neighbour) = (malloc(4096), malloc(4096));
    acl!(aclrtFree(neighbour));
    let copy_2d = |dst: *mut c_void, dpitch: usize, src: *mut c_void, kind| {
        code!(aclrtMemcpy2dAsync(
            dst, dpitch, src, 64, 64, 4, kind, stream
        ))
    };
    // The last row would start 6144 bytes in: past the 4096-byte allocation.
    assert_eq!(
        copy_2d(dev, 2048, host, ACL_MEMCPY_HOST_TO_DEVICE),
        ACL_ERROR_RT_PARAM_INVALID,
        "{}",
        recent_message()
    );
    recent_message();
    // SAFETY: 4096 bytes of live pinned memory.
    let host_tail = unsafe { host.cast::<u8>().add(4096 - 64) }.cast::<c_void>();
    assert_eq!(
        copy_2d(dev, 1024, host_tail, ACL_MEMCPY_HOST_TO_DEVICE),
        ACL_ERROR_RT_PARAM_INVALID,
        "a source whose rows run past the pinned allocation: {}",
        recent_message()
    );
    recent_message();
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(download::<u8>(dev, 4096), vec![0; 4096]);

    let doomed = malloc(4096);
    fault_after_free(4, stream, doomed, || {
        assert_eq!(copy_2d(doomed, 1024, host, ACL_MEMCPY_HOST_TO_DEVICE), 0);
    });

    upload::<u8>(dev, &[8; 4096]);
    let doomed = malloc_host(4096);
    control::hold(4).unwrap();
    assert_eq!(
        code!(aclrtMemcpy2dAsync(
            doomed,
            1024,
            dev,
            1024,
            64,
            4,
            ACL_MEMCPY_DEVICE_TO_HOST,
            stream
        )),
        0
    );
    acl!(aclrtFreeHost(doomed));
    control::release(4).unwrap();
    sync_fails_with_dma(stream);
    assert_eq!(host_bytes(host, 4096), vec![6; 4096]);
    acl!(aclrtFreeHost(host));
    acl!(aclrtFree(dev));
    acl!(aclrtDestroyStream(stream));
}

/// Promise (docs: stream memory operations): "a word freed under a wait fails it with 507013",
/// also when nothing else writes memory afterwards (a wait blocked on the word must notice the
/// free itself, not hang).
#[test]
fn a_value_wait_whose_word_is_freed_while_it_waits_fails() {
    install_eight_devices();
    set_device(7);
    let stream = create_stream();
    let word = malloc(8);
    upload(word, &[0u64]);
    acl!(aclrtValueWait(word, 1, ACL_STREAM_WAIT_VALUE_EQ, stream));
    assert_blocks(stream);
    acl!(aclrtFree(word));
    wait_fails_with_dma(stream);

    // The same on virtual memory unmapped under the wait.
    let mut va = ptr::null_mut();
    acl!(aclrtReserveMemAddress(
        &mut va,
        2 << 20,
        0,
        ptr::null_mut(),
        0
    ));
    let mut physical = ptr::null_mut();
    acl!(aclrtMallocPhysical(
        &mut physical,
        2 << 20,
        &huge_physical_prop(7),
        0
    ));
    acl!(aclrtMapMem(va, 2 << 20, 0, physical, 0));
    acl!(aclrtValueWait(va, 1, ACL_STREAM_WAIT_VALUE_EQ, stream));
    assert_blocks(stream);
    acl!(aclrtUnmapMem(va));
    wait_fails_with_dma(stream);
    acl!(aclrtFreePhysical(physical));
    acl!(aclrtReleaseMemAddress(va));
    acl!(aclrtDestroyStream(stream));
}

/// A bounded synchronisation only so that a defect fails the test instead of hanging it; the
/// promise is the code.
fn wait_fails_with_dma(stream: aclrtStream) {
    assert_eq!(
        code!(aclrtSynchronizeStreamWithTimeout(stream, 20_000)),
        ACL_ERROR_RT_SYS_DMA,
        "{}",
        recent_message()
    );
    recent_message();
    acl!(aclrtSynchronizeStream(stream));
}

/// Promise (docs: events, IPC events): destroying an event, exported or not, leaves the waits
/// already queued on it working: they complete once the record they wait for runs.
#[test]
fn waits_on_events_destroyed_while_queued_complete() {
    install_eight_devices();
    set_device(5);
    let (recorder, waiter) = (create_stream(), create_stream());
    let dev = malloc(64);
    let plain = create_event();
    let mut ipc = ptr::null_mut();
    acl!(aclrtCreateEventExWithFlag(&mut ipc, ACL_EVENT_IPC));
    let mut handle = aclrtIpcEventHandle::default();
    acl!(aclrtIpcGetEventHandle(ipc, &mut handle));
    control::hold(5).unwrap();
    for event in [plain, ipc] {
        acl!(aclrtMemsetAsync(dev, 64, 1, 64, recorder));
        acl!(aclrtRecordEvent(event, recorder));
        acl!(aclrtStreamWaitEvent(waiter, event));
        acl!(aclrtDestroyEvent(event));
    }
    acl!(aclrtMemsetAsync(dev, 64, 2, 32, waiter));
    control::release(5).unwrap();
    acl!(aclrtSynchronizeStream(waiter));
    acl!(aclrtSynchronizeStream(recorder));
    let bytes = download::<u8>(dev, 64);
    assert_eq!(
        (&bytes[..32], &bytes[32..]),
        (&[2u8; 32][..], &[1u8; 32][..])
    );
    acl!(aclrtFree(dev));
    acl!(aclrtDestroyStream(recorder));
    acl!(aclrtDestroyStream(waiter));
}

/// Promise (docs: notifies): "Destroying a notify leaves the tasks already queued on it
/// working": a wait and a record queued, the notify destroyed, both run.
#[test]
fn a_wait_on_a_notify_destroyed_while_queued_completes() {
    install_eight_devices();
    set_device(6);
    let (recorder, waiter) = (create_stream(), create_stream());
    let mut notify = ptr::null_mut();
    acl!(aclrtCreateNotify(&mut notify, 0));
    control::hold(6).unwrap();
    acl!(aclrtWaitAndResetNotify(notify, waiter, 0));
    acl!(aclrtRecordNotify(notify, recorder));
    acl!(aclrtDestroyNotify(notify));
    control::release(6).unwrap();
    acl!(aclrtSynchronizeStream(recorder));
    acl!(aclrtSynchronizeStream(waiter));
    fails!(
        aclrtRecordNotify(notify, recorder),
        ACL_ERROR_RT_INVALID_HANDLE,
        "aclrtRecordNotify"
    );
    acl!(aclrtDestroyStream(recorder));
    acl!(aclrtDestroyStream(waiter));
}

/// Promise (model runtime instances, point 7): a value wait and a batch copy captured, replayed
/// after their memory was freed, fail with 507013 (the wait does not pass on whatever the freed
/// word's pages hold, the copy writes nothing).
#[test]
fn a_captured_value_wait_and_batch_copy_replayed_after_the_free_fault() {
    install_eight_devices();
    set_device(7);
    let stream = create_stream();
    let word = malloc(8);
    upload(word, &[1u64]);
    let wait = capture(stream, || {
        acl!(aclrtValueWait(word, 1, ACL_STREAM_WAIT_VALUE_EQ, stream));
    });
    acl!(aclmdlRIExecuteAsync(wait, stream));
    acl!(aclrtSynchronizeStream(stream));
    acl!(aclrtFree(word));
    acl!(aclmdlRIExecuteAsync(wait, stream));
    wait_fails_with_dma(stream);
    acl!(aclmdlRIDestroy(wait));

    let host = malloc_host(4096);
    let dev = malloc(4096);
    upload::<u8>(dev, &[2; 4096]);
    let copy = capture(stream, || {
        assert_eq!(batch_async(&[host], &[dev], 4096, false, 7, stream), 0);
    });
    acl!(aclmdlRIExecuteAsync(copy, stream));
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(host_bytes(host, 4096), vec![2; 4096], "the replay ran");
    acl!(aclrtFreeHost(host));
    acl!(aclmdlRIExecuteAsync(copy, stream));
    sync_fails_with_dma(stream);
    acl!(aclmdlRIDestroy(copy));
    acl!(aclrtFree(dev));
    acl!(aclrtDestroyStream(stream));
}

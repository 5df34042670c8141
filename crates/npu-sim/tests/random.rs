//! aclrtRandomNumAsync and aclrtTaskUpdateAsync through the exported C ABI: the values of
//! each function and data type, determinism by seed and counter, parameters read from device
//! memory when the task runs, random tasks in captured and built instances, updates of their
//! random and kernel tasks, the failures of tasks that read bad values, and every error path.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;

use common::cases::{Case, case, run_table};
use common::*;
use npu_sim::abi::*;
use npu_sys::*;

const UNIFORM: aclrtRandomNumFuncType = ACL_RT_RANDOM_NUM_FUNC_TYPE_UNIFORM_DIS;
const NORMAL: aclrtRandomNumFuncType = ACL_RT_RANDOM_NUM_FUNC_TYPE_NORMAL_DIS;
const TRUNCATED: aclrtRandomNumFuncType = ACL_RT_RANDOM_NUM_FUNC_TYPE_TRUNCATED_NORMAL_DIS;
const DROPOUT: aclrtRandomNumFuncType = ACL_RT_RANDOM_NUM_FUNC_TYPE_DROPOUT_BITMASK;
const HEAD: u32 = 0;

fn install() {
    install_eight_devices();
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Block 0 adds the block count to the u32 at the address in its arguments.
        npu_sim::kernel::register("add_blocks_u32", |block, blocks, args: *mut c_void| {
            if block == 0 {
                // SAFETY: launched with 8 bytes of arguments holding the address of a u32.
                unsafe {
                    let target = args.cast::<u64>().read_unaligned() as *mut u32;
                    *target += blocks;
                }
            }
            0
        })
        .unwrap();
    });
}

fn u64_value(v: u64) -> aclrtRandomParaInfo {
    random_value(&v.to_ne_bytes())
}

/// The function `func` with parameters `a` and `b` (a bitmask takes `a` only).
fn func(
    func: aclrtRandomNumFuncType,
    a: aclrtRandomParaInfo,
    b: aclrtRandomParaInfo,
) -> aclrtRandomNumFuncParaInfo {
    let mut info = aclrtRandomNumFuncParaInfo {
        funcType: func,
        ..Default::default()
    };
    info.paramInfo.uniformDisInfo = aclrtUniformDisInfo { min: a, max: b };
    info
}

fn task(
    data_type: aclDataType,
    para: aclrtRandomNumFuncParaInfo,
    result: *mut c_void,
    seed: u64,
    count: u64,
) -> aclrtRandomNumTaskInfo {
    aclrtRandomNumTaskInfo {
        dataType: data_type,
        randomNumFuncParaInfo: para,
        randomResultAddr: result,
        randomSeed: u64_value(seed),
        randomNum: u64_value(count),
        ..Default::default()
    }
}

fn f32s(values: &[f32]) -> (aclrtRandomParaInfo, aclrtRandomParaInfo) {
    (
        random_value(&values[0].to_ne_bytes()),
        random_value(&values[1].to_ne_bytes()),
    )
}

/// Runs `info` on a stream of its own and returns `len` elements of the result.
fn generated<T: Copy + Default>(info: &aclrtRandomNumTaskInfo, len: usize) -> Vec<T> {
    let stream = create_stream();
    acl!(aclrtRandomNumAsync(info, stream, ptr::null_mut()));
    acl!(aclrtSynchronizeStream(stream));
    acl!(aclrtDestroyStream(stream));
    download(info.randomResultAddr, len)
}

/// `n` f32 values of the uniform distribution over [min, max) from `seed`, offset 0.
fn uniform_f32(min: f32, max: f32, seed: u64, n: usize) -> Vec<f32> {
    let out = malloc(n * 4);
    let (a, b) = f32s(&[min, max]);
    let values = generated(
        &task(ACL_FLOAT, func(UNIFORM, a, b), out, seed, n as u64),
        n,
    );
    acl!(aclrtFree(out));
    values
}

fn mean_and_stddev(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
    (mean, variance.sqrt())
}

#[test]
fn values_follow_their_distributions() {
    install();
    set_device(0);
    let values = uniform_f32(-2.0, 3.0, 11, 20_000);
    assert!(values.iter().all(|v| (-2.0..3.0).contains(v)));
    let (mean, _) = mean_and_stddev(&values.iter().map(|&v| f64::from(v)).collect::<Vec<_>>());
    assert!((mean - 0.5).abs() < 0.1, "mean {mean}");

    // Integers: every value of a small range, and the extremes of the 64-bit types.
    let out = malloc(8 * 4096);
    let i32s = func(
        UNIFORM,
        random_value(&(-5i32).to_ne_bytes()),
        random_value(&5i32.to_ne_bytes()),
    );
    let ints: Vec<i32> = generated(&task(ACL_INT32, i32s, out, 3, 4096), 4096);
    let seen: std::collections::BTreeSet<i32> = ints.into_iter().collect();
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        (-5..5).collect::<Vec<_>>()
    );
    let high = func(
        UNIFORM,
        random_value(&(1u64 << 63).to_ne_bytes()),
        random_value(&u64::MAX.to_ne_bytes()),
    );
    let u64s: Vec<u64> = generated(&task(ACL_UINT64, high, out, 3, 4096), 4096);
    assert!(u64s.iter().all(|v| (1 << 63..u64::MAX).contains(v)));
    let wide = func(
        UNIFORM,
        random_value(&i64::MIN.to_ne_bytes()),
        random_value(&i64::MAX.to_ne_bytes()),
    );
    let i64s: Vec<i64> = generated(&task(ACL_INT64, wide, out, 3, 4096), 4096);
    assert!(i64s.iter().any(|&v| v < 0) && i64s.iter().any(|&v| v > 0));
    let u32s = func(
        UNIFORM,
        random_value(&7u32.to_ne_bytes()),
        random_value(&9u32.to_ne_bytes()),
    );
    let small: Vec<u32> = generated(&task(ACL_UINT32, u32s, out, 3, 64), 64);
    assert!(small.iter().all(|v| (7..9).contains(v)));

    // Halves: [1, 2) is 0x3c00..0x4000 in fp16 and 0x3f80..0x4000 in bf16.
    let fp16 = func(
        UNIFORM,
        random_value(&0x3c00u16.to_ne_bytes()),
        random_value(&0x4000u16.to_ne_bytes()),
    );
    let halves: Vec<u16> = generated(&task(ACL_FLOAT16, fp16, out, 5, 4096), 4096);
    assert!(halves.iter().all(|v| (0x3c00..0x4000).contains(v)));
    let bf16 = func(
        UNIFORM,
        random_value(&0x3f80u16.to_ne_bytes()),
        random_value(&0x4000u16.to_ne_bytes()),
    );
    let halves: Vec<u16> = generated(&task(ACL_BF16, bf16, out, 5, 4096), 4096);
    assert!(halves.iter().all(|v| (0x3f80..0x4000).contains(v)));

    // Normal and truncated normal values, mean 3 and standard deviation 2.
    let n = 20_000;
    let big = malloc(n * 4);
    let (mean, stddev) = f32s(&[3.0, 2.0]);
    let normal: Vec<f32> = generated(
        &task(ACL_FLOAT, func(NORMAL, mean, stddev), big, 9, n as u64),
        n,
    );
    let normal: Vec<f64> = normal.into_iter().map(f64::from).collect();
    let (m, s) = mean_and_stddev(&normal);
    assert!(
        (m - 3.0).abs() < 0.1 && (s - 2.0).abs() < 0.1,
        "normal: {m} {s}"
    );
    assert!(
        normal.iter().any(|v| (v - 3.0).abs() > 4.0),
        "some beyond 2 deviations"
    );
    let truncated: Vec<f32> = generated(
        &task(ACL_FLOAT, func(TRUNCATED, mean, stddev), big, 9, n as u64),
        n,
    );
    let truncated: Vec<f64> = truncated.into_iter().map(f64::from).collect();
    assert!(truncated.iter().all(|v| (v - 3.0).abs() <= 4.0));
    let (m, s) = mean_and_stddev(&truncated);
    // A normal truncated at 2 deviations keeps 88% of its standard deviation.
    assert!(
        (m - 3.0).abs() < 0.1 && (s - 1.76).abs() < 0.1,
        "truncated: {m} {s}"
    );
    // bf16: mean 3 (0x4040), stddev 2 (0x4000).
    let bf16 = func(
        NORMAL,
        random_value(&0x4040u16.to_ne_bytes()),
        random_value(&0x4000u16.to_ne_bytes()),
    );
    let halves: Vec<u16> = generated(&task(ACL_BF16, bf16, big, 9, 4096), 4096);
    let halves: Vec<f64> = halves
        .into_iter()
        .map(|h| f64::from(f32::from_bits(u32::from(h) << 16)))
        .collect();
    let (m, _) = mean_and_stddev(&halves);
    assert!((m - 3.0).abs() < 0.2, "bf16 normal: {m}");

    // Dropout bitmasks: a bit per value, 1 = kept with probability 1 - ratio.
    let bits = 80_000u64;
    let ratio = func(
        DROPOUT,
        random_value(&0.25f32.to_ne_bytes()),
        aclrtRandomParaInfo::default(),
    );
    let mask: Vec<u8> = generated(&task(ACL_FLOAT, ratio, big, 21, bits), 10_000);
    let kept: u32 = mask.iter().map(|b| b.count_ones()).sum();
    let kept = f64::from(kept) / bits as f64;
    assert!((kept - 0.75).abs() < 0.02, "kept {kept}");
    for (ratio, byte) in [(0.0f32, 0xffu8), (1.0, 0)] {
        let ratio = func(
            DROPOUT,
            random_value(&ratio.to_ne_bytes()),
            aclrtRandomParaInfo::default(),
        );
        let mask: Vec<u8> = generated(&task(ACL_FLOAT, ratio, big, 21, 20), 3);
        assert_eq!(mask, [byte, byte, byte & 0x0f], "bits past the count are 0");
    }
    let fp16 = func(
        DROPOUT,
        random_value(&0x3800u16.to_ne_bytes()),
        aclrtRandomParaInfo::default(),
    );
    let mask: Vec<u8> = generated(&task(ACL_FLOAT16, fp16, big, 21, 8000), 1000);
    let kept: u32 = mask.iter().map(|b| b.count_ones()).sum();
    assert!(
        (3700..4300).contains(&kept),
        "an fp16 ratio of 0.5 keeps {kept} of 8000"
    );

    // No values: the task runs and writes nothing.
    upload(out, &[0xabu8]);
    let (a, b) = f32s(&[0.0, 1.0]);
    let _: Vec<u8> = generated(&task(ACL_FLOAT, func(UNIFORM, a, b), out, 1, 0), 1);
    assert_eq!(download::<u8>(out, 1), [0xab]);
    acl!(aclrtFree(out));
    acl!(aclrtFree(big));
}

#[test]
fn equal_seeds_and_counters_give_equal_values() {
    install();
    set_device(0);
    let n = 64;
    let first = uniform_f32(0.0, 1.0, 42, n);
    assert_eq!(uniform_f32(0.0, 1.0, 42, n), first);
    assert_ne!(uniform_f32(0.0, 1.0, 43, n), first);
    // Value i comes from counter offset + i: an offset of 5 starts 5 values in.
    let out = malloc(n * 4);
    let counter = malloc(8);
    upload(counter, &[5u64]);
    let (a, b) = f32s(&[0.0, 1.0]);
    let mut info = task(ACL_FLOAT, func(UNIFORM, a, b), out, 42, n as u64);
    info.randomCounterAddr = counter;
    let shifted: Vec<f32> = generated(&info, n);
    assert_eq!(shifted[..n - 5], first[5..]);
    // A bitmask takes four bits per counter: offset 1 starts 4 bits in.
    upload(counter, &[1u64]);
    let ratio = func(
        DROPOUT,
        random_value(&0.5f32.to_ne_bytes()),
        aclrtRandomParaInfo::default(),
    );
    let mut mask = task(ACL_FLOAT, ratio, out, 42, 64);
    let plain: Vec<u8> = generated(&mask, 8);
    mask.randomCounterAddr = counter;
    let later: Vec<u8> = generated(&mask, 8);
    let plain = u64::from_le_bytes(plain.try_into().unwrap());
    let later = u64::from_le_bytes(later.try_into().unwrap());
    assert_eq!(later & ((1 << 60) - 1), plain >> 4);
    acl!(aclrtFree(out));
    acl!(aclrtFree(counter));
}

/// A stream held until `release_held` writes 1 to `flag`: it waits for an event recorded by
/// another stream after a value wait on the flag.
fn held_stream(flag: *mut c_void) -> (aclrtStream, aclrtStream) {
    let (gate, held) = (create_stream(), create_stream());
    let event = create_event();
    upload(flag, &[0u64]);
    acl!(aclrtValueWait(flag, 1, ACL_STREAM_WAIT_VALUE_EQ, gate));
    acl!(aclrtRecordEvent(event, gate));
    acl!(aclrtStreamWaitEvent(held, event));
    (gate, held)
}

fn release_held(flag: *mut c_void) {
    upload(flag, &[1u64]);
}

#[test]
fn parameters_given_by_address_are_read_when_the_task_runs() {
    install();
    set_device(1);
    let n = 256;
    let out = malloc(n * 4);
    let (min, max, seed, count, counter, para, flag) = (
        malloc(4),
        malloc(4),
        malloc(8),
        malloc(8),
        malloc(8),
        malloc(64),
        malloc(8),
    );
    upload(min, &[0.0f32]);
    upload(max, &[1.0f32]);
    upload(seed, &[1u64]);
    upload(count, &[1u64]);
    upload(counter, &[0u64]);
    let (gate, held) = held_stream(flag);
    let mut info = task(
        ACL_FLOAT,
        func(UNIFORM, random_at(min), random_at(max)),
        out,
        0,
        0,
    );
    info.randomSeed = random_at(seed);
    info.randomNum = random_at(count);
    info.randomCounterAddr = counter;
    info.randomParaAddr = para;
    acl!(aclrtRandomNumAsync(&info, held, ptr::null_mut()));
    // Changed after the submission, before the stream reaches the task.
    upload(min, &[10.0f32]);
    upload(max, &[20.0f32]);
    upload(seed, &[77u64]);
    upload(count, &[n as u64]);
    upload(counter, &[3u64]);
    release_held(flag);
    acl!(aclrtSynchronizeStream(held));
    let read: Vec<f32> = download(out, n);
    // The same values from the final parameters given as values.
    let expected = uniform_f32(10.0, 20.0, 77, n + 3);
    assert_eq!(read, expected[3..]);
    // The runtime wrote the submitted parameters to randomParaAddr when the task ran.
    let written: Vec<u8> = download(para, 36);
    let submitted = info.randomNumFuncParaInfo;
    // SAFETY: the struct has no padding: all 36 bytes are fields.
    let bytes: [u8; 36] = unsafe { std::mem::transmute(submitted) };
    assert_eq!(written, bytes);
    for ptr in [out, min, max, seed, count, counter, para, flag] {
        acl!(aclrtFree(ptr));
    }
    acl!(aclrtDestroyStream(gate));
    acl!(aclrtDestroyStream(held));
}

#[test]
fn values_read_at_run_time_that_make_no_sense_fail_the_task() {
    install();
    set_device(2);
    let (out, min) = (malloc(64), malloc(4));
    let stream = create_stream();
    // min at an address, 5, is not below max 1: the submission cannot know.
    upload(min, &[5.0f32]);
    let info = task(
        ACL_FLOAT,
        func(UNIFORM, random_at(min), f32s(&[0.0, 1.0]).1),
        out,
        1,
        4,
    );
    acl!(aclrtRandomNumAsync(&info, stream, ptr::null_mut()));
    fails!(
        aclrtSynchronizeStream(stream),
        ACL_ERROR_RT_TS_ERROR,
        "aclrtSynchronizeStream"
    );
    // A count read at run time that the result does not hold: a DMA fault.
    let count = malloc(8);
    upload(count, &[1u64 << 20]);
    let (a, b) = f32s(&[0.0, 1.0]);
    let mut info = task(ACL_FLOAT, func(UNIFORM, a, b), out, 1, 0);
    info.randomNum = random_at(count);
    acl!(aclrtRandomNumAsync(&info, stream, ptr::null_mut()));
    fails!(
        aclrtSynchronizeStream(stream),
        ACL_ERROR_RT_SYS_DMA,
        "aclrtSynchronizeStream"
    );
    acl!(aclrtFree(count));
    acl!(aclrtFree(out));
    acl!(aclrtFree(min));
    acl!(aclrtDestroyStream(stream));
}

fn last_task_id() -> u32 {
    let mut id = 0;
    acl!(aclrtGetThreadLastTaskId(&mut id));
    id
}

/// Writes `info` to device memory, where an update reads it.
fn device_task_info(info: &aclrtRandomNumTaskInfo) -> *mut c_void {
    let dev = malloc(size_of::<aclrtRandomNumTaskInfo>());
    upload(dev, std::slice::from_ref(info));
    dev
}

fn random_update(src: *mut c_void) -> aclrtTaskUpdateInfo {
    let mut info = aclrtTaskUpdateInfo {
        id: ACL_RT_UPDATE_RANDOM_TASK,
        ..Default::default()
    };
    info.val.randomTaskAttr = aclrtRandomTaskUpdateAttr {
        srcAddr: src,
        size: size_of::<aclrtRandomNumTaskInfo>(),
        rsv: [0; 4],
    };
    info
}

fn kernel_update(
    bin: aclrtBinHandle,
    entry: *mut c_void,
    blocks: *mut c_void,
) -> aclrtTaskUpdateInfo {
    let mut info = aclrtTaskUpdateInfo {
        id: ACL_RT_UPDATE_AIC_AIV_TASK,
        ..Default::default()
    };
    info.val.aicAivTaskAttr = aclrtAicAivTaskUpdateAttr {
        binHandle: bin,
        funcEntryAddr: entry,
        blockDimAddr: blocks,
        rsv: [0; 4],
    };
    info
}

/// A captured random task replays with the counter as it is at each execution; an update of
/// it changes the executions queued after the update on the same stream, not the one before.
#[test]
fn updates_change_a_captured_random_task_from_the_next_execution() {
    install();
    set_device(3);
    let n = 16;
    let (first, second, counter) = (malloc(n * 4), malloc(n * 4), malloc(8));
    upload(counter, &[0u64]);
    let (capture, exec) = (create_stream(), create_stream());
    acl!(aclmdlRICaptureBegin(
        capture,
        ACL_MODEL_RI_CAPTURE_MODE_RELAXED
    ));
    let (a, b) = f32s(&[0.0, 1.0]);
    let mut info = task(ACL_FLOAT, func(UNIFORM, a, b), first, 8, n as u64);
    info.randomCounterAddr = counter;
    acl!(aclrtRandomNumAsync(&info, capture, ptr::null_mut()));
    let task_id = last_task_id();
    let mut model = ptr::null_mut();
    acl!(aclmdlRICaptureEnd(capture, &mut model));
    let reference = uniform_f32(0.0, 1.0, 8, n + 1);
    acl!(aclmdlRIExecuteAsync(model, exec));
    acl!(aclrtSynchronizeStream(exec));
    assert_eq!(download::<f32>(first, n), reference[..n]);
    upload(counter, &[1u64]);
    acl!(aclmdlRIExecuteAsync(model, exec));
    acl!(aclrtSynchronizeStream(exec));
    assert_eq!(download::<f32>(first, n), reference[1..]);

    // The update: another result, seed and count, no counter, and the parameters of a
    // uniform distribution over [10, 11) at a new randomParaAddr.
    let mut streams = [ptr::null_mut(); 1];
    let mut count = 1;
    acl!(aclmdlRIGetStreams(model, streams.as_mut_ptr(), &mut count));
    let (a, b) = f32s(&[10.0, 11.0]);
    let para = malloc(36);
    upload(para, &[func(UNIFORM, a, b)]);
    let mut new = task(
        ACL_FLOAT,
        aclrtRandomNumFuncParaInfo::default(),
        second,
        99,
        8,
    );
    new.randomParaAddr = para;
    let src = device_task_info(&new);
    upload(first, &vec![0f32; n]);
    acl!(aclmdlRIExecuteAsync(model, exec));
    let mut update = random_update(src);
    acl!(aclrtTaskUpdateAsync(streams[0], task_id, &mut update, exec));
    acl!(aclmdlRIExecuteAsync(model, exec));
    acl!(aclrtSynchronizeStream(exec));
    assert_eq!(
        download::<f32>(first, n),
        reference[1..],
        "queued before the update"
    );
    assert_eq!(download::<f32>(second, 8), uniform_f32(10.0, 11.0, 99, 8));

    // An update whose fields make no sense fails on its stream, and the task keeps its own.
    let mut bad = new;
    bad.randomSeed.isAddr = 7;
    let bad_src = device_task_info(&bad);
    let mut update = random_update(bad_src);
    acl!(aclrtTaskUpdateAsync(streams[0], task_id, &mut update, exec));
    fails!(
        aclrtSynchronizeStream(exec),
        ACL_ERROR_RT_TS_ERROR,
        "aclrtSynchronizeStream"
    );
    upload(second, &[0f32; 8]);
    acl!(aclmdlRIExecuteAsync(model, exec));
    acl!(aclrtSynchronizeStream(exec));
    assert_eq!(download::<f32>(second, 8), uniform_f32(10.0, 11.0, 99, 8));

    // A counter the update puts in host memory: the next execution's task faults.
    let host = malloc_host(8);
    let mut faulty = new;
    faulty.randomCounterAddr = host;
    let faulty_src = device_task_info(&faulty);
    let mut update = random_update(faulty_src);
    acl!(aclrtTaskUpdateAsync(streams[0], task_id, &mut update, exec));
    acl!(aclmdlRIExecuteAsync(model, exec));
    fails!(
        aclrtSynchronizeStream(exec),
        ACL_ERROR_RT_SYS_DMA,
        "aclrtSynchronizeStream"
    );
    acl!(aclmdlRIDestroy(model));
    for ptr in [first, second, counter, para, src, bad_src, faulty_src] {
        acl!(aclrtFree(ptr));
    }
    acl!(aclrtFreeHost(host));
    acl!(aclrtDestroyStream(capture));
    acl!(aclrtDestroyStream(exec));
}

/// A built instance's kernel launch takes another function and block count from an update,
/// its random task another seed, for the executions queued after the updates (on the same
/// stream, or synchronous); updates that read bad fields fail and change nothing.
#[test]
fn updates_change_a_built_instances_kernel_and_random_tasks() {
    install();
    set_device(4);
    let bin = registry_binary(&["add_one_u32", "add_blocks_u32"]);
    let (add_one, add_blocks) = (
        function(bin, "add_one_u32"),
        function(bin, "add_blocks_u32"),
    );
    let (counter, out) = (malloc(4), malloc(64));
    upload(counter, &[0u32]);
    let bound = persistent_stream();
    let exec = create_stream();
    let mut model = ptr::null_mut();
    acl!(aclmdlRIBuildBegin(&mut model, 0));
    acl!(aclmdlRIBindStream(model, bound, HEAD));
    let address = counter as u64;
    assert_eq!(launch(add_one, 1, bound, &address, ptr::null_mut()), 0);
    let kernel_id = last_task_id();
    let (a, b) = f32s(&[0.0, 1.0]);
    acl!(aclrtRandomNumAsync(
        &task(ACL_FLOAT, func(UNIFORM, a, b), out, 5, 4),
        bound,
        ptr::null_mut()
    ));
    let random_id = last_task_id();
    assert_eq!((kernel_id, random_id), (1, 2));
    acl!(aclmdlRIBuildEnd(model, ptr::null_mut()));
    acl!(aclmdlRIExecuteAsync(model, exec));
    acl!(aclrtSynchronizeStream(exec));
    assert_eq!(download::<u32>(counter, 1), [1]);
    assert_eq!(download::<f32>(out, 4), uniform_f32(0.0, 1.0, 5, 4));

    // add_blocks_u32 on 4 blocks adds 4.
    let (mut aic, mut aiv) = (ptr::null_mut(), ptr::null_mut());
    acl!(aclrtGetFunctionAddr(add_blocks, &mut aic, &mut aiv));
    let (entry, blocks) = (malloc(8), malloc(4));
    upload(entry, &[aic as u64]);
    upload(blocks, &[4u32]);
    let mut update = kernel_update(bin, entry, blocks);
    acl!(aclrtTaskUpdateAsync(bound, kernel_id, &mut update, exec));
    let src = device_task_info(&task(
        ACL_FLOAT,
        aclrtRandomNumFuncParaInfo::default(),
        out,
        6,
        4,
    ));
    let mut update = random_update(src);
    acl!(aclrtTaskUpdateAsync(bound, random_id, &mut update, exec));
    acl!(aclmdlRIExecuteAsync(model, exec));
    acl!(aclrtSynchronizeStream(exec));
    assert_eq!(download::<u32>(counter, 1), [5]);
    assert_eq!(download::<f32>(out, 4), uniform_f32(0.0, 1.0, 6, 4));
    // A synchronous execution takes the update too.
    acl!(aclmdlRIExecute(model, -1));
    assert_eq!(download::<u32>(counter, 1), [9]);

    // An entry of no function of the binary, and a block count of 0, fail the update.
    for (entry_value, block_value) in [(aic as u64 + 1, 4u32), (aic as u64, 0)] {
        upload(entry, &[entry_value]);
        upload(blocks, &[block_value]);
        let mut update = kernel_update(bin, entry, blocks);
        acl!(aclrtTaskUpdateAsync(bound, kernel_id, &mut update, exec));
        fails!(
            aclrtSynchronizeStream(exec),
            ACL_ERROR_RT_TS_ERROR,
            "aclrtSynchronizeStream"
        );
    }
    acl!(aclmdlRIExecute(model, -1));
    assert_eq!(
        download::<u32>(counter, 1),
        [13],
        "the last good update stays"
    );
    acl!(aclmdlRIDestroy(model));
    for ptr in [counter, out, entry, blocks, src] {
        acl!(aclrtFree(ptr));
    }
    acl!(aclrtDestroyStream(bound));
    acl!(aclrtDestroyStream(exec));
}

// ---- error paths ----

fn dev(bytes: usize) -> *mut c_void {
    malloc(bytes)
}

/// An address whose next `need` bytes run one past the end of an allocation (aclrtMalloc of
/// 64 bytes reserves 96: 32-byte rounding and 32 bytes of padding).
fn past_end(need: usize) -> *mut c_void {
    dev(64).wrapping_byte_add(96 + 1 - need)
}

/// A valid uniform f32 task of 4 values into fresh device memory.
fn good() -> aclrtRandomNumTaskInfo {
    let (a, b) = f32s(&[0.0, 1.0]);
    task(ACL_FLOAT, func(UNIFORM, a, b), dev(16), 1, 4)
}

fn submit(info: aclrtRandomNumTaskInfo) -> aclError {
    code!(aclrtRandomNumAsync(&info, ptr::null_mut(), ptr::null_mut()))
}

fn with(change: impl FnOnce(&mut aclrtRandomNumTaskInfo)) -> aclError {
    let mut info = good();
    change(&mut info);
    submit(info)
}

fn min_param(info: &mut aclrtRandomNumTaskInfo) -> &mut aclrtRandomParaInfo {
    // SAFETY: the union's members are plain bytes; the uniform one is the one in use.
    unsafe { &mut info.randomNumFuncParaInfo.paramInfo.uniformDisInfo.min }
}

const P: aclError = ACL_ERROR_INVALID_PARAM;
const RT: aclError = ACL_ERROR_RT_PARAM_INVALID;
const API: &str = "aclrtRandomNumAsync";

#[test]
fn every_random_error_path() {
    install();
    let cases: &[Case] = &[
        case("NULL taskInfo", API, P, 0, || {
            code!(aclrtRandomNumAsync(
                ptr::null(),
                ptr::null_mut(),
                ptr::null_mut()
            ))
        }),
        case("reserve not NULL", API, P, 0, || {
            let info = good();
            let mut reserve = 0u8;
            code!(aclrtRandomNumAsync(
                &info,
                ptr::null_mut(),
                (&raw mut reserve).cast()
            ))
        }),
        case("a data type not listed", API, RT, 0, || {
            with(|i| i.dataType = ACL_INT8)
        }),
        case("an unknown function", API, RT, 0, || {
            with(|i| i.randomNumFuncParaInfo.funcType = 4)
        }),
        case("a normal distribution of integers", API, RT, 0, || {
            with(|i| {
                i.dataType = ACL_INT32;
                i.randomNumFuncParaInfo.funcType = NORMAL;
            })
        }),
        case("a bitmask with an integer ratio", API, RT, 0, || {
            with(|i| {
                i.dataType = ACL_UINT32;
                i.randomNumFuncParaInfo.funcType = DROPOUT;
            })
        }),
        case("isAddr 2", API, RT, 0, || with(|i| min_param(i).isAddr = 2)),
        case("a value of the wrong size", API, RT, 0, || {
            with(|i| min_param(i).size = 2)
        }),
        case("a parameter's rsv", API, RT, 0, || {
            with(|i| min_param(i).rsv[5] = 1)
        }),
        case("an address of 4 bytes", API, RT, 0, || {
            with(|i| {
                *min_param(i) = aclrtRandomParaInfo {
                    size: 4,
                    ..random_at(dev(4))
                }
            })
        }),
        case("a NULL parameter address", API, RT, 0, || {
            with(|i| *min_param(i) = random_at(ptr::null_mut()))
        }),
        case("min not below max", API, RT, 0, || {
            with(|i| *min_param(i) = random_value(&1.0f32.to_ne_bytes()))
        }),
        case("integer min not below max", API, RT, 0, || {
            let bound = random_value(&5i32.to_ne_bytes());
            with(|i| {
                i.dataType = ACL_INT32;
                i.randomNumFuncParaInfo = func(UNIFORM, bound, bound);
            })
        }),
        case("a negative stddev", API, RT, 0, || {
            let (mean, stddev) = f32s(&[0.0, -1.0]);
            with(|i| i.randomNumFuncParaInfo = func(NORMAL, mean, stddev))
        }),
        case("a ratio above 1", API, RT, 0, || {
            let ratio = random_value(&1.5f32.to_ne_bytes());
            with(|i| i.randomNumFuncParaInfo = func(DROPOUT, ratio, Default::default()))
        }),
        case("NULL randomResultAddr", API, RT, 0, || {
            with(|i| i.randomResultAddr = ptr::null_mut())
        }),
        case("a seed of 3 bytes", API, RT, 0, || {
            with(|i| i.randomSeed.size = 3)
        }),
        case("randomNum isAddr 5", API, RT, 0, || {
            with(|i| i.randomNum.isAddr = 5)
        }),
        case("rsv not 0", API, RT, 0, || with(|i| i.rsv[0] = 1)),
        case("no context", API, ACL_ERROR_RT_CONTEXT_NULL, -1, || {
            submit(good_on(0))
        }),
        case(
            "a stream of another context",
            API,
            ACL_ERROR_RT_STREAM_CONTEXT,
            0,
            || {
                let info = good();
                code!(aclrtRandomNumAsync(
                    &info,
                    stream_of_device(1),
                    ptr::null_mut()
                ))
            },
        ),
        case("randomParaAddr not device memory", API, RT, 0, || {
            with(|i| i.randomParaAddr = malloc_host(64))
        }),
        case("randomParaAddr too small", API, RT, 0, || {
            with(|i| i.randomParaAddr = past_end(36))
        }),
        case("a parameter address on another device", API, RT, 0, || {
            with(|i| *min_param(i) = random_at(malloc_on(1, 4)))
        }),
        case("a result too small for the count", API, RT, 0, || {
            // 16 bytes of aclrtMalloc reserve 64: 17 floats do not fit.
            with(|i| i.randomNum = u64_value(17))
        }),
        case("a count too large", API, RT, 0, || {
            with(|i| i.randomNum = u64_value(u64::MAX))
        }),
        case("randomCounterAddr in host memory", API, RT, 0, || {
            with(|i| i.randomCounterAddr = malloc_host(8))
        }),
        case("a seed address in host memory", API, RT, 0, || {
            with(|i| i.randomSeed = random_at(malloc_host(8)))
        }),
        case("a count address too small", API, RT, 0, || {
            with(|i| i.randomNum = random_at(past_end(8)))
        }),
    ];
    run_table(cases);
}

/// A valid task whose memory is device `device`'s (allocated from another thread).
fn good_on(device: i32) -> aclrtRandomNumTaskInfo {
    let (a, b) = f32s(&[0.0, 1.0]);
    task(ACL_FLOAT, func(UNIFORM, a, b), malloc_on(device, 16), 1, 4)
}

const UPDATE: &str = "aclrtTaskUpdateAsync";

/// A built instance on the calling thread's device with a kernel launch (task 1) and a
/// random task (task 2) on its bound stream; returns the stream and the binary.
fn built() -> (aclrtStream, aclrtBinHandle) {
    let bin = registry_binary(&["add_one_u32"]);
    let add_one = function(bin, "add_one_u32");
    let bound = persistent_stream();
    let mut model = ptr::null_mut();
    acl!(aclmdlRIBuildBegin(&mut model, 0));
    acl!(aclmdlRIBindStream(model, bound, HEAD));
    let address = dev(4) as u64;
    assert_eq!(launch(add_one, 1, bound, &address, ptr::null_mut()), 0);
    acl!(aclrtRandomNumAsync(&good(), bound, ptr::null_mut()));
    acl!(aclrtMemsetAsync(dev(4), 4, 0, 4, bound));
    acl!(aclmdlRIBuildEnd(model, ptr::null_mut()));
    (bound, bin)
}

fn good_random_update() -> aclrtTaskUpdateInfo {
    random_update(device_task_info(&good()))
}

fn good_kernel_update(bin: aclrtBinHandle) -> aclrtTaskUpdateInfo {
    kernel_update(bin, dev(8), dev(4))
}

/// Updates task `id` of a fresh built instance with `info` made for it, on the default
/// stream.
fn update_built(id: u32, info: impl FnOnce(aclrtBinHandle) -> aclrtTaskUpdateInfo) -> aclError {
    let (bound, bin) = built();
    let mut info = info(bin);
    code!(aclrtTaskUpdateAsync(bound, id, &mut info, ptr::null_mut()))
}

#[test]
fn every_update_error_path() {
    install();
    let cases: &[Case] = &[
        case("NULL info", UPDATE, P, 0, || {
            let (bound, _) = built();
            code!(aclrtTaskUpdateAsync(
                bound,
                2,
                ptr::null_mut(),
                ptr::null_mut()
            ))
        }),
        case(
            "a task stream of another context",
            UPDATE,
            ACL_ERROR_RT_STREAM_CONTEXT,
            0,
            || {
                let mut info = good_random_update();
                code!(aclrtTaskUpdateAsync(
                    stream_of_device(1),
                    1,
                    &mut info,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "an ordinary task stream",
            UPDATE,
            ACL_ERROR_RT_STREAM_MODEL,
            0,
            || {
                let mut info = good_random_update();
                code!(aclrtTaskUpdateAsync(
                    create_stream(),
                    1,
                    &mut info,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "the default stream",
            UPDATE,
            ACL_ERROR_RT_STREAM_MODEL,
            0,
            || {
                let mut info = good_random_update();
                code!(aclrtTaskUpdateAsync(
                    ptr::null_mut(),
                    1,
                    &mut info,
                    ptr::null_mut()
                ))
            },
        ),
        // The attribute is checked before either stream is looked up.
        case(
            "NULL srcAddr for a task stream of another context",
            UPDATE,
            RT,
            0,
            || {
                let mut info = random_update(ptr::null_mut());
                code!(aclrtTaskUpdateAsync(
                    stream_of_device(1),
                    1,
                    &mut info,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "an unknown id for the default stream",
            UPDATE,
            RT,
            0,
            || {
                let mut info = aclrtTaskUpdateInfo {
                    id: 3,
                    ..good_random_update()
                };
                code!(aclrtTaskUpdateAsync(
                    ptr::null_mut(),
                    1,
                    &mut info,
                    stream_of_device(1)
                ))
            },
        ),
        case(
            "NULL binHandle for an ordinary task stream",
            UPDATE,
            RT,
            0,
            || {
                let mut info = kernel_update(ptr::null_mut(), dev(8), dev(4));
                code!(aclrtTaskUpdateAsync(
                    create_stream(),
                    1,
                    &mut info,
                    ptr::null_mut()
                ))
            },
        ),
        case("an unknown id", UPDATE, RT, 0, || {
            update_built(2, |_| aclrtTaskUpdateInfo {
                id: 3,
                ..good_random_update()
            })
        }),
        case("NULL srcAddr", UPDATE, RT, 0, || {
            update_built(2, |_| random_update(ptr::null_mut()))
        }),
        case("a size smaller than the struct", UPDATE, RT, 0, || {
            update_built(2, |_| {
                let mut info = good_random_update();
                info.val.randomTaskAttr.size = 103;
                info
            })
        }),
        case("a random attribute's rsv", UPDATE, RT, 0, || {
            update_built(2, |_| {
                let mut info = good_random_update();
                // SAFETY: the union member in use; its fields are plain data.
                unsafe {
                    info.val.randomTaskAttr.rsv[3] = 1;
                }
                info
            })
        }),
        case("NULL binHandle", UPDATE, RT, 0, || {
            update_built(1, |_| kernel_update(ptr::null_mut(), dev(8), dev(4)))
        }),
        case("NULL funcEntryAddr", UPDATE, RT, 0, || {
            update_built(1, |bin| kernel_update(bin, ptr::null_mut(), dev(4)))
        }),
        case("NULL blockDimAddr", UPDATE, RT, 0, || {
            update_built(1, |bin| kernel_update(bin, dev(8), ptr::null_mut()))
        }),
        case("a kernel attribute's rsv", UPDATE, RT, 0, || {
            update_built(1, |bin| {
                let mut info = good_kernel_update(bin);
                // SAFETY: the union member in use; its fields are plain data.
                unsafe {
                    info.val.aicAivTaskAttr.rsv[0] = 1;
                }
                info
            })
        }),
        case("task id 0", UPDATE, RT, 0, || {
            update_built(0, |_| good_random_update())
        }),
        case("no such task", UPDATE, RT, 0, || {
            update_built(9, |_| good_random_update())
        }),
        case("a task no update changes", UPDATE, RT, 0, || {
            update_built(3, |_| good_random_update())
        }),
        case("a random update of a kernel launch", UPDATE, RT, 0, || {
            update_built(1, |_| good_random_update())
        }),
        case("a kernel update of a random task", UPDATE, RT, 0, || {
            update_built(2, good_kernel_update)
        }),
        case(
            "an exec stream of another context",
            UPDATE,
            ACL_ERROR_RT_STREAM_CONTEXT,
            0,
            || {
                let (bound, _) = built();
                let mut info = good_random_update();
                code!(aclrtTaskUpdateAsync(
                    bound,
                    2,
                    &mut info,
                    stream_of_device(1)
                ))
            },
        ),
        case("srcAddr in host memory", UPDATE, RT, 0, || {
            update_built(2, |_| random_update(malloc_host(128)))
        }),
        case("srcAddr smaller than its size", UPDATE, RT, 0, || {
            update_built(2, |_| random_update(dev(64)))
        }),
        case(
            "an unloaded binary",
            UPDATE,
            ACL_ERROR_RT_INVALID_HANDLE,
            0,
            || {
                update_built(1, |bin| {
                    acl!(aclrtBinaryUnLoad(bin));
                    good_kernel_update(bin)
                })
            },
        ),
        case("funcEntryAddr in host memory", UPDATE, RT, 0, || {
            update_built(1, |bin| kernel_update(bin, malloc_host(8), dev(4)))
        }),
        case("blockDimAddr on another device", UPDATE, RT, 0, || {
            update_built(1, |bin| kernel_update(bin, dev(8), malloc_on(1, 4)))
        }),
    ];
    run_table(cases);
}

/// An update captured into another instance patches its target at each of that instance's
/// executions.
#[test]
fn a_captured_update_patches_at_each_execution() {
    install();
    set_device(5);
    let (out, seeds) = (malloc(16), malloc(8));
    let bound = persistent_stream();
    let mut target = ptr::null_mut();
    acl!(aclmdlRIBuildBegin(&mut target, 0));
    acl!(aclmdlRIBindStream(target, bound, HEAD));
    let (a, b) = f32s(&[0.0, 1.0]);
    acl!(aclrtRandomNumAsync(
        &task(ACL_FLOAT, func(UNIFORM, a, b), out, 1, 4),
        bound,
        ptr::null_mut()
    ));
    let task_id = last_task_id();
    acl!(aclmdlRIBuildEnd(target, ptr::null_mut()));
    // The captured update gives the task the seed at `seeds`, as it is at each execution.
    let mut fields = task(ACL_FLOAT, aclrtRandomNumFuncParaInfo::default(), out, 0, 4);
    fields.randomSeed = random_at(seeds);
    let src = device_task_info(&fields);
    let capture = create_stream();
    acl!(aclmdlRICaptureBegin(
        capture,
        ACL_MODEL_RI_CAPTURE_MODE_RELAXED
    ));
    let mut update = random_update(src);
    acl!(aclrtTaskUpdateAsync(bound, task_id, &mut update, capture));
    let mut updater = ptr::null_mut();
    acl!(aclmdlRICaptureEnd(capture, &mut updater));
    let exec = create_stream();
    acl!(aclmdlRIExecuteAsync(target, exec));
    acl!(aclrtSynchronizeStream(exec));
    assert_eq!(
        download::<f32>(out, 4),
        uniform_f32(0.0, 1.0, 1, 4),
        "not updated yet"
    );
    for seed in [30u64, 31] {
        upload(seeds, &[seed]);
        acl!(aclmdlRIExecuteAsync(updater, exec));
        acl!(aclmdlRIExecuteAsync(target, exec));
        acl!(aclrtSynchronizeStream(exec));
        assert_eq!(download::<f32>(out, 4), uniform_f32(0.0, 1.0, seed, 4));
    }
    acl!(aclmdlRIDestroy(updater));
    acl!(aclmdlRIDestroy(target));
    for ptr in [out, seeds, src] {
        acl!(aclrtFree(ptr));
    }
    for stream in [bound, capture, exec] {
        acl!(aclrtDestroyStream(stream));
    }
}

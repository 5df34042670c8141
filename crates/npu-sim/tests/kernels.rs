//! Kernels: the shipped vector add / scale / reduction through the shared-object path (file and
//! memory image) and the in-process path, checked against the CPU; argument packing (host
//! args, placeholders, the aclrtKernelArgs builder, device args); declared argument sizes and
//! NULL for no arguments; launch-copy-launch ordering.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;

use common::cases::{case, run_table};
use common::*;
use npu_sim::abi::*;
use npu_sim::kernel::{self, ReduceSumArgs, ScaleArgs, VectorAddArgs};
use npu_sys::*;

/// Deterministic pseudo-random f32s in [-100, 100).
fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed;
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 200.0 - 100.0
        })
        .collect()
}

fn load_file(path: &str) -> aclrtBinHandle {
    let path = c_string(path);
    let mut bin = ptr::null_mut();
    acl!(aclrtBinaryLoadFromFile(
        path.as_ptr(),
        ptr::null_mut(),
        &mut bin
    ));
    bin
}

/// The three ways to get a kernel binary.
fn binaries() -> Vec<(&'static str, aclrtBinHandle)> {
    let so = std::fs::read(kernel::LIBRARY_PATH).unwrap();
    vec![
        ("shared object file", load_file(kernel::LIBRARY_PATH)),
        ("shared object image", load_image(&so)),
        (
            "in-process registry",
            registry_binary(&[
                kernel::VECTOR_ADD_F32,
                kernel::SCALE_F32,
                kernel::REDUCE_SUM_F32,
            ]),
        ),
    ]
}

/// Random inputs for vector_add_f32 on the device, with arguments for `c = a + b`.
struct AddInputs {
    a: Vec<f32>,
    b: Vec<f32>,
    da: *mut c_void,
    dc: *mut c_void,
    args: VectorAddArgs,
}

impl AddInputs {
    fn new(n: usize, seed: u64) -> AddInputs {
        let (a, b) = (random(n, seed), random(n, seed + 1));
        let (da, db, dc) = (upload_new(&a), upload_new(&b), malloc(n * 4));
        let args = VectorAddArgs {
            a: da as u64,
            b: db as u64,
            c: dc as u64,
            n: n as u64,
        };
        AddInputs { a, b, da, dc, args }
    }

    fn sum(&self) -> Vec<f32> {
        self.a.iter().zip(&self.b).map(|(x, y)| x + y).collect()
    }

    fn result(&self) -> Vec<f32> {
        download::<f32>(self.dc, self.a.len())
    }
}

fn upload_new(data: &[f32]) -> *mut c_void {
    let dev = malloc(std::mem::size_of_val(data));
    upload(dev, data);
    dev
}

#[test]
fn vector_add_matches_the_cpu_on_every_path() {
    set_device(0);
    for (path, bin) in binaries() {
        let add = function(bin, kernel::VECTOR_ADD_F32);
        let inputs = AddInputs::new(100_003, 1);
        assert_eq!(
            launch(add, 7, ptr::null_mut(), &inputs.args, ptr::null_mut()),
            0
        );
        acl!(aclrtSynchronizeStream(ptr::null_mut()));
        assert_eq!(inputs.result(), inputs.sum(), "{path}");
        acl!(aclrtBinaryUnLoad(bin));
    }
}

#[test]
fn scale_and_two_pass_reduction_match_the_cpu_on_every_path() {
    set_device(0);
    const N: usize = 50_000;
    const BLOCKS: u32 = 16;
    let x = random(N, 3);
    let scaled: Vec<f32> = x.iter().map(|v| v * 0.25).collect();
    // The CPU sum in the kernels' order: per-block partial sums, then their sum.
    let partials: Vec<f32> = (0..BLOCKS)
        .map(|b| {
            scaled[kernel::block_range(b, BLOCKS, N as u64)]
                .iter()
                .sum()
        })
        .collect();
    let total: f32 = partials.iter().sum();
    for (path, bin) in binaries() {
        let (scale, reduce) = (
            function(bin, kernel::SCALE_F32),
            function(bin, kernel::REDUCE_SUM_F32),
        );
        let (dx, dp, dt) = (upload_new(&x), malloc(BLOCKS as usize * 4), malloc(4));
        let stream = create_stream();
        let scale_args = ScaleArgs {
            x: dx as u64,
            n: N as u64,
            alpha: 0.25,
            reserved: 0,
        };
        let pass1 = ReduceSumArgs {
            x: dx as u64,
            partials: dp as u64,
            n: N as u64,
        };
        let pass2 = ReduceSumArgs {
            x: dp as u64,
            partials: dt as u64,
            n: u64::from(BLOCKS),
        };
        assert_eq!(
            launch(scale, BLOCKS, stream, &scale_args, ptr::null_mut()),
            0
        );
        assert_eq!(launch(reduce, BLOCKS, stream, &pass1, ptr::null_mut()), 0);
        assert_eq!(launch(reduce, 1, stream, &pass2, ptr::null_mut()), 0);
        acl!(aclrtSynchronizeStream(stream));
        assert_eq!(download::<f32>(dx, N), scaled, "{path}");
        assert_eq!(download::<f32>(dp, BLOCKS as usize), partials, "{path}");
        assert_eq!(download::<f32>(dt, 1), [total], "{path}");
        acl!(aclrtDestroyStream(stream));
    }
}

#[test]
fn launch_copy_launch_on_one_stream_runs_in_order() {
    set_device(1);
    const N: usize = 4096;
    let add = function(load_file(kernel::LIBRARY_PATH), kernel::VECTOR_ADD_F32);
    let inputs = AddInputs::new(N, 4);
    let stream = create_stream();
    // c = a + b; a = c; c = a + b  →  c = (a + b) + b
    assert_eq!(launch(add, 4, stream, &inputs.args, ptr::null_mut()), 0);
    acl!(aclrtMemcpyAsync(
        inputs.da,
        N * 4,
        inputs.dc,
        N * 4,
        ACL_MEMCPY_DEVICE_TO_DEVICE,
        stream
    ));
    assert_eq!(launch(add, 4, stream, &inputs.args, ptr::null_mut()), 0);
    acl!(aclrtSynchronizeStream(stream));
    let expected: Vec<f32> = inputs
        .sum()
        .iter()
        .zip(&inputs.b)
        .map(|(x, y)| x + y)
        .collect();
    assert_eq!(inputs.result(), expected);
}

/// Kernel args: a placeholder pointer to a u32, and the address to store it at.
#[repr(C)]
#[derive(Clone, Copy)]
struct StoreArgs {
    value: u64,
    out: u64,
}

fn register_store() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        kernel::register("store_u32", |_, _, args: *mut c_void| {
            // SAFETY: launched with a StoreArgs whose `value` points at a u32 and whose `out`
            // is the device address of a u32.
            unsafe {
                let args = args.cast::<StoreArgs>().read_unaligned();
                *(args.out as *mut u32) = *(args.value as *const u32);
            }
            0
        })
        .unwrap();
    });
}

#[test]
fn host_args_with_placeholders() {
    set_device(1);
    register_store();
    let store = function(registry_binary(&["store_u32"]), "store_u32");
    let out = malloc(4);
    // Layout: StoreArgs (16 bytes) followed by the placeholder's data (a u32 at offset 16).
    let mut blob = [0u64; 3];
    blob[1] = out as u64;
    blob[2] = 0xC0FFEE;
    let mut holder = aclrtPlaceHolderInfo {
        addrOffset: 0,
        dataOffset: 16,
    };
    acl!(aclrtLaunchKernelWithHostArgs(
        store,
        1,
        ptr::null_mut(),
        ptr::null_mut(),
        blob.as_mut_ptr().cast(),
        24,
        &mut holder,
        1
    ));
    blob.fill(0); // the arguments were copied at the call
    acl!(aclrtSynchronizeStream(ptr::null_mut()));
    assert_eq!(download::<u32>(out, 1), [0xC0FFEE]);
}

#[test]
fn the_kernel_args_builder() {
    set_device(1);
    register_store();
    let store = function(registry_binary(&["store_u32"]), "store_u32");
    let out = malloc(4);
    let (mut args, mut value, mut out_param) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
    acl!(aclrtKernelArgsInit(store, &mut args));
    acl!(aclrtKernelArgsAppendPlaceHolder(args, &mut value));
    let mut address = out as u64;
    acl!(aclrtKernelArgsAppend(
        args,
        (&raw mut address).cast(),
        8,
        &mut out_param
    ));
    let mut buffer = ptr::null_mut();
    acl!(aclrtKernelArgsGetPlaceHolderBuffer(
        args,
        value,
        4,
        &mut buffer
    ));
    // SAFETY: the buffer has 4 bytes.
    unsafe { buffer.cast::<u32>().write_unaligned(41) };
    acl!(aclrtKernelArgsFinalize(args));
    assert_eq!(launch_built(store, 1, args, ptr::null_mut()), 0);
    acl!(aclrtSynchronizeStream(ptr::null_mut()));
    assert_eq!(download::<u32>(out, 1), [41]);

    // Updating a parameter requires finalizing again.
    let other = malloc(4);
    let mut other_address = other as u64;
    acl!(aclrtKernelArgsParaUpdate(
        args,
        out_param,
        (&raw mut other_address).cast(),
        8
    ));
    assert_eq!(
        launch_built(store, 1, args, ptr::null_mut()),
        ACL_ERROR_RT_PARAM_INVALID
    );
    acl!(aclrtKernelArgsFinalize(args));
    assert_eq!(launch_built(store, 1, args, ptr::null_mut()), 0);
    acl!(aclrtSynchronizeStream(ptr::null_mut()));
    assert_eq!(download::<u32>(other, 1), [41]);
}

#[test]
fn args_in_device_memory() {
    set_device(1);
    let add = function(registry_binary(&[]), kernel::VECTOR_ADD_F32);
    let inputs = AddInputs::new(1000, 6);
    let size = std::mem::size_of::<VectorAddArgs>();
    let dargs = malloc(size);
    upload(dargs, std::slice::from_ref(&inputs.args));
    acl!(aclrtLaunchKernel(add, 3, dargs, size, ptr::null_mut()));
    acl!(aclrtSynchronizeStream(ptr::null_mut()));
    assert_eq!(inputs.result(), inputs.sum());
}

#[test]
fn function_handles_are_cached_per_binary() {
    set_device(1);
    let bin = load_file(kernel::LIBRARY_PATH);
    assert_eq!(
        function(bin, kernel::SCALE_F32),
        function(bin, kernel::SCALE_F32)
    );
    acl!(aclrtBinaryUnLoad(bin));
    assert_eq!(code!(aclrtBinaryUnLoad(bin)), ACL_ERROR_RT_INVALID_HANDLE);
}

/// Every way of launching `func` with `size` bytes of arguments (zeroed; NULL when 0): host
/// args, device args and the args builder. Returns the launch codes.
fn launch_codes(func: aclrtFuncHandle, size: usize) -> [aclError; 3] {
    let mut host = vec![0u8; size];
    let host_ptr = if size == 0 {
        ptr::null_mut()
    } else {
        host.as_mut_ptr().cast()
    };
    let device = if size == 0 {
        ptr::null_mut()
    } else {
        malloc(size)
    };
    let mut args = ptr::null_mut();
    acl!(aclrtKernelArgsInit(func, &mut args));
    if size > 0 {
        let mut param = ptr::null_mut();
        acl!(aclrtKernelArgsAppend(
            args,
            host.as_mut_ptr().cast(),
            size,
            &mut param
        ));
    }
    acl!(aclrtKernelArgsFinalize(args));
    [
        code!(aclrtLaunchKernelWithHostArgs(
            func,
            1,
            ptr::null_mut(),
            ptr::null_mut(),
            host_ptr,
            size,
            ptr::null_mut(),
            0
        )),
        code!(aclrtLaunchKernel(func, 1, device, size, ptr::null_mut())),
        launch_built(func, 1, args, ptr::null_mut()),
    ]
}

#[test]
fn shipped_kernels_refuse_arguments_shorter_than_they_declare() {
    set_device(0);
    let sizes = [
        (kernel::VECTOR_ADD_F32, size_of::<VectorAddArgs>()),
        (kernel::SCALE_F32, size_of::<ScaleArgs>()),
        (kernel::REDUCE_SUM_F32, size_of::<ReduceSumArgs>()),
    ];
    for (path, bin) in binaries() {
        for (name, size) in sizes {
            let func = function(bin, name);
            for short in [0, 8, size - 4] {
                assert_eq!(
                    launch_codes(func, short),
                    [ACL_ERROR_RT_PARAM_INVALID; 3],
                    "{name} with {short} bytes, {path}"
                );
            }
        }
        acl!(aclrtBinaryUnLoad(bin));
    }
}

#[test]
fn a_launch_without_arguments_passes_null() {
    set_device(1);
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Traps unless it gets NULL.
        kernel::register("expects_null_args", |_, _, args: *mut c_void| {
            i32::from(!args.is_null())
        })
        .unwrap();
    });
    let func = function(registry_binary(&["expects_null_args"]), "expects_null_args");
    assert_eq!(launch_codes(func, 0), [0; 3]);
    // A kernel given a buffer would have trapped (507015).
    acl!(aclrtSynchronizeStream(ptr::null_mut()));
}

unsafe extern "C" fn store_block_count(_: u32, blocks: u32, args: *mut c_void) -> i32 {
    // SAFETY: registered as reading 8 bytes: the address of a u32.
    unsafe { *(args.cast::<u64>().read_unaligned() as *mut u32) = blocks };
    0
}

#[test]
fn kernels_registered_from_c_declare_their_argument_size() {
    set_device(1);
    let name = c_string("store_block_count");
    assert_eq!(
        code!(npusimRegisterKernelWithArgsSize(
            name.as_ptr(),
            Some(store_block_count),
            8
        )),
        0
    );
    let func = function(registry_binary(&["store_block_count"]), "store_block_count");
    assert_eq!(launch_codes(func, 4), [ACL_ERROR_RT_PARAM_INVALID; 3]);
    let out = malloc(4);
    let address = out as u64;
    assert_eq!(
        launch(func, 3, ptr::null_mut(), &address, ptr::null_mut()),
        0
    );
    acl!(aclrtSynchronizeStream(ptr::null_mut()));
    assert_eq!(download::<u32>(out, 1), [3]);
}

/// Loads `bytes` through the older path: aclrtCreateBinary, then aclrtBinaryLoad.
fn load_described(bytes: &[u8]) -> (aclrtBinary, aclrtBinHandle) {
    // SAFETY: `bytes` stays alive until the load below has read it.
    let binary = unsafe { aclrtCreateBinary(bytes.as_ptr().cast(), bytes.len()) };
    assert!(!binary.is_null(), "{}", recent_message());
    let mut bin = ptr::null_mut();
    acl!(aclrtBinaryLoad(binary, &mut bin));
    (binary, bin)
}

#[test]
fn the_older_load_path_loads_what_the_data_describes() {
    set_device(0);
    let so = std::fs::read(kernel::LIBRARY_PATH).unwrap();
    let image = kernel::registry_image(&[kernel::VECTOR_ADD_F32]);
    for (path, bytes) in [("shared object", &so), ("registry image", &image)] {
        let (binary, bin) = load_described(bytes);
        // The loaded binary no longer needs its description.
        acl!(aclrtDestroyBinary(binary));
        assert_eq!(
            code!(aclrtDestroyBinary(binary)),
            ACL_ERROR_RT_INVALID_HANDLE
        );
        let add = function(bin, kernel::VECTOR_ADD_F32);
        let inputs = AddInputs::new(10_001, 9);
        let cfg = ptr::null_mut();
        assert_eq!(launch(add, 4, ptr::null_mut(), &inputs.args, cfg), 0);
        acl!(aclrtSynchronizeStream(ptr::null_mut()));
        assert_eq!(inputs.result(), inputs.sum(), "{path}");
        acl!(aclrtBinaryUnLoad(bin));
    }
}

/// A C-ABI kernel registered below, whose address aclrtGetFunctionAddr must report.
unsafe extern "C" fn addressed(_block: u32, _blocks: u32, _args: *mut c_void) -> i32 {
    0
}

#[test]
fn a_function_knows_its_binary_name_and_entry() {
    set_device(1);
    kernel::register_entry("addressed_kernel", addressed).unwrap();
    let bin = registry_binary(&["addressed_kernel"]);
    let func = function(bin, "addressed_kernel");
    let mut owner = ptr::null_mut();
    acl!(aclrtFunctionGetBinary(func, &mut owner));
    assert_eq!(owner, bin);

    let mut name = [0x55u8; 17];
    // The name needs 17 bytes with its NUL: 16 are refused and nothing is written.
    let short = code!(aclrtGetFunctionName(func, 16, name.as_mut_ptr().cast()));
    assert_eq!(short, ACL_ERROR_RT_PARAM_INVALID);
    assert!(recent_message().contains("aclrtGetFunctionName"));
    assert_eq!(name, [0x55; 17]);
    acl!(aclrtGetFunctionName(func, 17, name.as_mut_ptr().cast()));
    assert_eq!(&name, b"addressed_kernel\0");

    // Not a SIMT kernel: no dynamic UB buffer.
    let mut ubuf = usize::MAX;
    acl!(aclrtFunctionGetAvailDynUbufPerBlock(func, 0, &mut ubuf));
    assert_eq!(ubuf, 0);

    let (mut aic, mut aiv) = (ptr::null_mut(), ptr::null_mut());
    acl!(aclrtGetFunctionAddr(func, &mut aic, &mut aiv));
    let entry = addressed as unsafe extern "C" fn(u32, u32, *mut c_void) -> i32;
    assert_eq!(
        (aic as usize, aiv as usize),
        (entry as usize, entry as usize)
    );

    // A shared object's kernel: its exported symbol.
    let so = load_file(kernel::LIBRARY_PATH);
    acl!(aclrtGetFunctionAddr(
        function(so, kernel::SCALE_F32),
        &mut aic,
        &mut aiv
    ));
    // SAFETY: dlopen of a library already loaded returns it; dlsym only looks the symbol up.
    let symbol = unsafe {
        let path = c_string(kernel::LIBRARY_PATH);
        let library = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        assert!(!library.is_null());
        let symbol = libc::dlsym(library, c"scale_f32".as_ptr());
        libc::dlclose(library);
        symbol
    };
    assert_eq!((aic, aiv), (symbol, symbol));
    acl!(aclrtBinaryUnLoad(so));
    acl!(aclrtBinaryUnLoad(bin));
    assert_eq!(
        code!(aclrtFunctionGetBinary(func, &mut owner)),
        ACL_ERROR_RT_INVALID_HANDLE
    );
}

#[test]
fn launch_kernel_v2_takes_device_arguments_and_a_configuration() {
    set_device(0);
    let bin = registry_binary(&[kernel::VECTOR_ADD_F32]);
    let add = function(bin, kernel::VECTOR_ADD_F32);
    let size = std::mem::size_of::<VectorAddArgs>();
    let stream = create_stream();
    for engine in [ACL_RT_ENGINE_TYPE_AIC, ACL_RT_ENGINE_TYPE_AIV] {
        let inputs = AddInputs::new(5000, u64::from(engine) + 20);
        let dargs = malloc(size);
        upload(dargs, std::slice::from_ref(&inputs.args));
        let mut attr = aiv_attr();
        attr.value.engineType = engine;
        let mut cfg = aclrtLaunchKernelCfg {
            attrs: &mut attr,
            numAttrs: 1,
        };
        acl!(aclrtLaunchKernelV2(add, 3, dargs, size, &mut cfg, stream));
        acl!(aclrtSynchronizeStream(stream));
        assert_eq!(inputs.result(), inputs.sum(), "engine {engine}");
    }
    let inputs = AddInputs::new(77, 30);
    let dargs = malloc(size);
    upload(dargs, std::slice::from_ref(&inputs.args));
    let no_cfg = ptr::null_mut();
    acl!(aclrtLaunchKernelV2(add, 2, dargs, size, no_cfg, stream));
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(inputs.result(), inputs.sum(), "no configuration");
    // Fewer bytes than the kernel declares are refused, as by aclrtLaunchKernel.
    let short = code!(aclrtLaunchKernelV2(add, 1, dargs, 8, no_cfg, stream));
    assert_eq!(short, ACL_ERROR_RT_PARAM_INVALID);
    recent_message();
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtBinaryUnLoad(bin));
}

#[test]
fn kernel_args_built_in_caller_memory() {
    set_device(0);
    let bin = registry_binary(&[kernel::SCALE_F32]);
    let scale = function(bin, kernel::SCALE_F32);
    let (mut handle_size, mut args_size) = (0, 0);
    acl!(aclrtKernelArgsGetHandleMemSize(scale, &mut handle_size));
    // ScaleArgs: x (8), n (8), alpha (4, 8-aligned: 8), reserved (4, 8-aligned: 8).
    acl!(aclrtKernelArgsGetMemSize(scale, 32, &mut args_size));
    assert_eq!((handle_size, args_size), (8, 32));
    let mut handle_memory = vec![0u64; handle_size.div_ceil(8)];
    let mut args_memory = vec![0u8; args_size];
    let args: aclrtArgsHandle = handle_memory.as_mut_ptr().cast();
    acl!(aclrtKernelArgsInitByUserMem(
        scale,
        args,
        args_memory.as_mut_ptr().cast(),
        args_size
    ));

    let data = [1.0f32, 2.0, 3.0];
    let x = upload_new(&data);
    let mut param = ptr::null_mut();
    let mut append = |value: &mut [u8]| {
        code!(aclrtKernelArgsAppend(
            args,
            value.as_mut_ptr().cast(),
            value.len(),
            &mut param
        ))
    };
    assert_eq!(append(&mut (x as u64).to_ne_bytes()), 0);
    assert_eq!(append(&mut 3u64.to_ne_bytes()), 0);
    assert_eq!(append(&mut 4.0f32.to_ne_bytes()), 0);
    assert_eq!(append(&mut 0u32.to_ne_bytes()), 0);
    // 24 bytes are packed; a 16-byte value would need 24..40 of the 32.
    assert_eq!(append(&mut [0u8; 16]), ACL_ERROR_RT_PARAM_INVALID);
    assert!(recent_message().contains("aclrtKernelArgsInitByUserMem holds 32"));
    acl!(aclrtKernelArgsFinalize(args));
    assert_eq!(launch_built(scale, 2, args, ptr::null_mut()), 0);
    acl!(aclrtSynchronizeStream(ptr::null_mut()));
    assert_eq!(download::<f32>(x, 3), [4.0, 8.0, 12.0]);

    // Initializing the same memory again starts afresh: the old parameters are gone.
    acl!(aclrtKernelArgsInitByUserMem(
        scale,
        args,
        args_memory.as_mut_ptr().cast(),
        args_size
    ));
    let stale = code!(aclrtKernelArgsParaUpdate(
        args,
        param,
        (&raw mut args_size).cast(),
        8
    ));
    assert_eq!(stale, ACL_ERROR_RT_INVALID_HANDLE);
    recent_message();
    // Unloading the binary retires the handle with the function.
    acl!(aclrtBinaryUnLoad(bin));
    assert_eq!(
        code!(aclrtKernelArgsFinalize(args)),
        ACL_ERROR_RT_INVALID_HANDLE
    );
    recent_message();
}

#[test]
fn shipped_kernels_declare_their_parameter_lists() {
    set_device(1);
    for (path, bin) in binaries() {
        let scale = function(bin, kernel::SCALE_F32);
        let mut count = 0;
        acl!(aclrtFunctionGetParamCount(scale, &mut count));
        assert_eq!(count, 4, "{path}");
        let layout: Vec<(usize, usize)> = (0..count)
            .map(|i| {
                let (mut offset, mut size) = (0, 0);
                acl!(aclrtFunctionGetParamInfo(scale, i, &mut offset, &mut size));
                (offset, size)
            })
            .collect();
        // ScaleArgs { float *x; uint64_t n; float alpha; uint32_t reserved; }
        assert_eq!(layout, [(0, 8), (8, 8), (16, 4), (20, 4)], "{path}");
        let (mut offset, mut size) = (0, 0);
        let past = code!(aclrtFunctionGetParamInfo(scale, 4, &mut offset, &mut size));
        assert_eq!(past, ACL_ERROR_RT_PARAM_INVALID);
        assert!(recent_message().contains("past the kernel's 4 parameters"));
        acl!(aclrtBinaryUnLoad(bin));
    }
    // A kernel that declares no parameter list has none to report.
    register_test_kernels();
    let bin = registry_binary(&["trap"]);
    let mut count = 0;
    let none = code!(aclrtFunctionGetParamCount(
        function(bin, "trap"),
        &mut count
    ));
    assert_eq!(none, ACL_ERROR_RT_PARAM_INVALID);
    assert!(recent_message().contains("declares no parameter list"));
}

#[test]
fn launch_with_an_array_of_parameter_pointers() {
    set_device(0);
    let stream = create_stream();
    for (path, bin) in binaries() {
        let add = function(bin, kernel::VECTOR_ADD_F32);
        let inputs = AddInputs::new(3001, 40);
        let VectorAddArgs { a, b, c, n } = inputs.args;
        let (mut a, mut b, mut c, mut n) = (a, b, c, n);
        let mut args: [*mut c_void; 4] = [
            (&raw mut a).cast(),
            (&raw mut b).cast(),
            (&raw mut c).cast(),
            (&raw mut n).cast(),
        ];
        let cfg = ptr::null_mut();
        acl!(aclrtLaunchKernelWithArgsArray(
            add,
            5,
            stream,
            cfg,
            args.as_mut_ptr()
        ));
        // The parameters were copied at the call: changing them now changes nothing.
        // SAFETY: args[3] points at `n`, a live local.
        unsafe { args[3].cast::<u64>().write(0) };
        acl!(aclrtSynchronizeStream(stream));
        assert_eq!(inputs.result(), inputs.sum(), "{path}");
        acl!(aclrtBinaryUnLoad(bin));
    }
    register_test_kernels();
    let bin = registry_binary(&["trap"]);
    let mut no_args: [*mut c_void; 0] = [];
    let refused = code!(aclrtLaunchKernelWithArgsArray(
        function(bin, "trap"),
        1,
        stream,
        ptr::null_mut(),
        no_args.as_mut_ptr()
    ));
    assert_eq!(refused, ACL_ERROR_RT_PARAM_INVALID);
    recent_message();
    acl!(aclrtDestroyStream(stream));
}

/// aclrtBinaryGetGlobal's refusals (`tests/c/global_flow.c` runs its success path, with a
/// library that declares a global).
#[test]
fn binary_globals_error_paths() {
    fn global(bin: aclrtBinHandle, name: &str) -> aclError {
        let name = c_string(name);
        let (mut dptr, mut size) = (ptr::null_mut(), 0);
        code!(aclrtBinaryGetGlobal(
            bin,
            name.as_ptr(),
            &mut dptr,
            &mut size
        ))
    }
    run_table(&[
        case(
            "global of NULL binary",
            "aclrtBinaryGetGlobal",
            100000,
            0,
            || global(ptr::null_mut(), "bias"),
        ),
        case(
            "global named NULL",
            "aclrtBinaryGetGlobal",
            100000,
            0,
            || {
                let mut size = 0;
                let bin = load_file(kernel::LIBRARY_PATH);
                code!(aclrtBinaryGetGlobal(
                    bin,
                    ptr::null(),
                    ptr::null_mut(),
                    &mut size
                ))
            },
        ),
        case(
            "global into two NULLs",
            "aclrtBinaryGetGlobal",
            100000,
            0,
            || {
                let bin = load_file(kernel::LIBRARY_PATH);
                let name = c_string("bias");
                code!(aclrtBinaryGetGlobal(
                    bin,
                    name.as_ptr(),
                    ptr::null_mut(),
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "global no library declares",
            "aclrtBinaryGetGlobal",
            107042,
            0,
            || global(load_file(kernel::LIBRARY_PATH), "vector_add_f32"),
        ),
        case(
            "global of a registry image",
            "aclrtBinaryGetGlobal",
            107042,
            0,
            || global(registry_binary(&[]), "bias"),
        ),
        case(
            "global of an unloaded binary",
            "aclrtBinaryGetGlobal",
            107017,
            0,
            || {
                let bin = load_file(kernel::LIBRARY_PATH);
                acl!(aclrtBinaryUnLoad(bin));
                global(bin, "bias")
            },
        ),
        case(
            "global without a context",
            "aclrtBinaryGetGlobal",
            107002,
            -1,
            || {
                let bin = std::thread::spawn(|| {
                    set_device(0);
                    load_file(kernel::LIBRARY_PATH) as usize
                })
                .join()
                .unwrap();
                global(bin as aclrtBinHandle, "bias")
            },
        ),
    ]);
}

/// The device-variable functions' refusals for addresses that are no device variable
/// (`tests/c/symbol_flow.c` runs their success paths and the range and kind checks).
#[test]
fn symbol_error_paths() {
    static NOT_A_GLOBAL: [f32; 4] = [0.0; 4];
    fn not_a_global() -> *const c_void {
        NOT_A_GLOBAL.as_ptr().cast()
    }
    run_table(&[
        case(
            "address of NULL symbol",
            "aclrtGetSymbolAddress",
            100000,
            0,
            || {
                let mut address = ptr::null_mut();
                code!(aclrtGetSymbolAddress(ptr::null(), &mut address))
            },
        ),
        case(
            "address into NULL",
            "aclrtGetSymbolAddress",
            100000,
            0,
            || code!(aclrtGetSymbolAddress(not_a_global(), ptr::null_mut())),
        ),
        case(
            "address of a host variable",
            "aclrtGetSymbolAddress",
            107043,
            0,
            || {
                let mut address = ptr::null_mut();
                code!(aclrtGetSymbolAddress(not_a_global(), &mut address))
            },
        ),
        case(
            "address without a context",
            "aclrtGetSymbolAddress",
            107002,
            -1,
            || {
                let mut address = ptr::null_mut();
                code!(aclrtGetSymbolAddress(not_a_global(), &mut address))
            },
        ),
        case("size into NULL", "aclrtGetSymbolSize", 100000, 0, || {
            code!(aclrtGetSymbolSize(not_a_global(), ptr::null_mut()))
        }),
        case(
            "size of a host variable",
            "aclrtGetSymbolSize",
            107043,
            0,
            || {
                let mut size = 0;
                code!(aclrtGetSymbolSize(not_a_global(), &mut size))
            },
        ),
        case(
            "copy to NULL symbol",
            "aclrtMemcpyToSymbol",
            100000,
            0,
            || {
                let data = [0u8; 4];
                code!(aclrtMemcpyToSymbol(
                    ptr::null(),
                    data.as_ptr().cast(),
                    4,
                    0,
                    ACL_MEMCPY_HOST_TO_DEVICE
                ))
            },
        ),
        case(
            "async copy to a host variable",
            "aclrtMemcpyToSymbolAsync",
            107043,
            0,
            || {
                let data = [0u8; 4];
                code!(aclrtMemcpyToSymbolAsync(
                    not_a_global(),
                    data.as_ptr().cast(),
                    4,
                    0,
                    ACL_MEMCPY_HOST_TO_DEVICE,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "copy from a host variable",
            "aclrtMemcpyFromSymbol",
            107043,
            0,
            || {
                let mut data = [0u8; 4];
                code!(aclrtMemcpyFromSymbol(
                    data.as_mut_ptr().cast(),
                    4,
                    not_a_global(),
                    4,
                    0,
                    ACL_MEMCPY_DEVICE_TO_HOST
                ))
            },
        ),
        // The ACL layer's checks (100000) come before the variable is looked up.
        case(
            "copy to a host variable from NULL",
            "aclrtMemcpyToSymbolAsync",
            100000,
            0,
            || {
                code!(aclrtMemcpyToSymbolAsync(
                    not_a_global(),
                    ptr::null(),
                    4,
                    0,
                    ACL_MEMCPY_HOST_TO_DEVICE,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "copy 0 bytes to a host variable from NULL",
            "aclrtMemcpyToSymbol",
            100000,
            0,
            || {
                code!(aclrtMemcpyToSymbol(
                    not_a_global(),
                    ptr::null(),
                    0,
                    0,
                    ACL_MEMCPY_HOST_TO_DEVICE
                ))
            },
        ),
        case(
            "copy to a host variable of the wrong kind",
            "aclrtMemcpyToSymbol",
            100000,
            0,
            || {
                let data = [0u8; 4];
                code!(aclrtMemcpyToSymbol(
                    not_a_global(),
                    data.as_ptr().cast(),
                    4,
                    0,
                    ACL_MEMCPY_DEVICE_TO_HOST
                ))
            },
        ),
        case(
            "copy from a host variable into NULL",
            "aclrtMemcpyFromSymbol",
            100000,
            0,
            || {
                code!(aclrtMemcpyFromSymbol(
                    ptr::null_mut(),
                    4,
                    not_a_global(),
                    4,
                    0,
                    ACL_MEMCPY_DEVICE_TO_HOST
                ))
            },
        ),
        case(
            "copy from a host variable past dstMax",
            "aclrtMemcpyFromSymbolAsync",
            100000,
            0,
            || {
                let mut data = [0u8; 4];
                code!(aclrtMemcpyFromSymbolAsync(
                    data.as_mut_ptr().cast(),
                    2,
                    not_a_global(),
                    4,
                    0,
                    ACL_MEMCPY_DEVICE_TO_HOST,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "async copy from NULL symbol",
            "aclrtMemcpyFromSymbolAsync",
            100000,
            0,
            || {
                let mut data = [0u8; 4];
                code!(aclrtMemcpyFromSymbolAsync(
                    data.as_mut_ptr().cast(),
                    4,
                    ptr::null(),
                    4,
                    0,
                    ACL_MEMCPY_DEVICE_TO_HOST,
                    ptr::null_mut()
                ))
            },
        ),
    ]);
}

/// aclrtGetFuncBySymbol: a kernel's address gives the function aclrtBinaryGetFunction gives;
/// anything else is refused.
#[test]
fn functions_by_symbol() {
    set_device(0);
    // The kernel must be one of a loaded binary.
    let _binary = load_file(kernel::LIBRARY_PATH);
    // SAFETY: the shipped library, already loaded by the binary: opening it again only counts
    // a reference; the symbol's address is read, never called here.
    let entry = unsafe {
        let library = libloading::Library::new(kernel::LIBRARY_PATH).unwrap();
        let entry = *library.get::<*const c_void>(b"vector_add_f32\0").unwrap();
        std::mem::forget(library);
        entry
    };
    let mut by_symbol = ptr::null_mut();
    acl!(aclrtGetFuncBySymbol(entry, &mut by_symbol));
    // Other tests load the same library too (one instance): the function may come from any of
    // their binaries, and is that kernel.
    let mut name = [0 as std::ffi::c_char; 32];
    acl!(aclrtGetFunctionName(by_symbol, 32, name.as_mut_ptr()));
    // SAFETY: the simulator wrote a NUL-terminated name into the buffer.
    let name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) };
    assert_eq!(name.to_str().unwrap(), kernel::VECTOR_ADD_F32);
    run_table(&[
        case(
            "kernel of NULL symbol",
            "aclrtGetFuncBySymbol",
            100000,
            0,
            || {
                let mut func = ptr::null_mut();
                code!(aclrtGetFuncBySymbol(ptr::null(), &mut func))
            },
        ),
        case(
            "kernel by symbol into NULL",
            "aclrtGetFuncBySymbol",
            100000,
            0,
            || {
                code!(aclrtGetFuncBySymbol(
                    random as *const c_void,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "kernel by symbol of a host function",
            "aclrtGetFuncBySymbol",
            107042,
            0,
            || {
                let mut func = ptr::null_mut();
                code!(aclrtGetFuncBySymbol(random as *const c_void, &mut func))
            },
        ),
        case(
            "kernel by symbol without a context",
            "aclrtGetFuncBySymbol",
            107002,
            -1,
            || {
                let mut func = ptr::null_mut();
                code!(aclrtGetFuncBySymbol(random as *const c_void, &mut func))
            },
        ),
    ]);
}

/// Each load option is checked: a type outside aclrtBinaryLoadOptionType → 100000, a value the
/// option does not allow → 107000; the documented values load, from a file and from data.
#[test]
fn load_options_are_checked() {
    set_device(0);
    let path = c_string(kernel::LIBRARY_PATH);
    let so = std::fs::read(kernel::LIBRARY_PATH).unwrap();
    let load = |type_: aclrtBinaryLoadOptionType, word: u32| {
        let mut option = aclrtBinaryLoadOption {
            type_,
            value: aclrtBinaryLoadOptionValue { isLazyLoad: word },
        };
        let mut options = aclrtBinaryLoadOptions {
            options: &mut option,
            numOpt: 1,
        };
        let mut bin = ptr::null_mut();
        let from_file = code!(aclrtBinaryLoadFromFile(
            path.as_ptr(),
            &mut options,
            &mut bin
        ));
        if from_file == ACL_SUCCESS {
            acl!(aclrtBinaryUnLoad(bin));
        }
        let from_data = code!(aclrtBinaryLoadFromData(
            so.as_ptr().cast(),
            so.len(),
            &options,
            &mut bin
        ));
        if from_data == ACL_SUCCESS {
            acl!(aclrtBinaryUnLoad(bin));
        }
        assert_eq!(from_file, from_data, "type {type_}, value {word:#x}");
        if from_file != ACL_SUCCESS {
            let message = recent_message();
            assert!(message.contains("options->options[0]"), "{message}");
        }
        from_file
    };
    for word in [0, 1] {
        assert_eq!(load(ACL_RT_BINARY_LOAD_OPT_LAZY_LOAD, word), ACL_SUCCESS);
    }
    for magic in [
        ACL_RT_BINARY_MAGIC_ELF_AICORE,
        ACL_RT_BINARY_MAGIC_ELF_VECTOR_CORE,
        ACL_RT_BINARY_MAGIC_ELF_CUBE_CORE,
    ] {
        assert_eq!(load(ACL_RT_BINARY_LOAD_OPT_MAGIC, magic), ACL_SUCCESS);
    }
    for mode in [0, 1, 2] {
        assert_eq!(
            load(ACL_RT_BINARY_LOAD_OPT_CPU_KERNEL_MODE, mode),
            ACL_SUCCESS
        );
    }
    let invalid = ACL_ERROR_RT_PARAM_INVALID;
    assert_eq!(load(ACL_RT_BINARY_LOAD_OPT_LAZY_LOAD, 7), invalid);
    assert_eq!(load(ACL_RT_BINARY_LOAD_OPT_MAGIC, 0x1234_5678), invalid);
    assert_eq!(load(ACL_RT_BINARY_LOAD_OPT_CPU_KERNEL_MODE, 3), invalid);
    assert_eq!(
        load(ACL_RT_BINARY_LOAD_OPT_CPU_KERNEL_MODE, u32::MAX),
        invalid
    );
    assert_eq!(load(0, 0), ACL_ERROR_INVALID_PARAM);
    assert_eq!(load(77, 0), ACL_ERROR_INVALID_PARAM);
}

/// A function handle is valid on the device it was resolved on: launched on a stream of
/// another device it is refused with 107044 (by the launch forms with host and with device
/// arguments), and resolving it again with that device current gives a handle that runs there.
#[test]
fn a_function_runs_only_on_the_device_it_was_resolved_on() {
    set_device(0);
    let bin = load_file(kernel::LIBRARY_PATH);
    let on_zero = function(bin, kernel::VECTOR_ADD_F32);
    set_device(1);
    let stream = create_stream();
    let inputs = AddInputs::new(256, 7);
    let refused = launch(on_zero, 1, stream, &inputs.args, ptr::null_mut());
    assert_eq!(refused, ACL_ERROR_RT_INVALID_DEVICE_FUNCTION);
    let message = recent_message();
    assert!(
        message.contains("resolved on device 0") && message.contains("stream is on device 1"),
        "{message}"
    );
    let device_args = malloc(std::mem::size_of::<VectorAddArgs>());
    upload(device_args, std::slice::from_ref(&inputs.args));
    let refused = code!(aclrtLaunchKernel(
        on_zero,
        1,
        device_args,
        std::mem::size_of::<VectorAddArgs>(),
        stream
    ));
    assert_eq!(refused, ACL_ERROR_RT_INVALID_DEVICE_FUNCTION);
    recent_message();

    let on_one = function(bin, kernel::VECTOR_ADD_F32);
    assert_ne!(on_one, on_zero);
    assert_eq!(
        function(bin, kernel::VECTOR_ADD_F32),
        on_one,
        "cached per device"
    );
    assert_eq!(launch(on_one, 1, stream, &inputs.args, ptr::null_mut()), 0);
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(inputs.result(), inputs.sum());
    acl!(aclrtFree(device_args));
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtBinaryUnLoad(bin));
}

/// What a function and its binary tell about their code: a library kernel's size is its ELF
/// symbol's, the same for both engines, and lies inside the binary's mapped image; a Rust
/// closure has no symbol (0); a lazily loaded binary has no address, a registry image no image.
#[test]
fn code_sizes_attributes_and_binary_images() {
    set_device(0);
    let sizes = |func| {
        let (mut aic, mut aiv) = (usize::MAX, usize::MAX);
        acl!(aclrtGetFunctionSize(func, &mut aic, &mut aiv));
        (aic, aiv)
    };
    let image = |bin| {
        let (mut address, mut size) = (ptr::null_mut(), usize::MAX);
        acl!(aclrtBinaryGetDevAddress(bin, &mut address, &mut size));
        (address as usize, size)
    };
    let so = load_file(kernel::LIBRARY_PATH);
    let (start, len) = image(so);
    assert!(start != 0 && len > 0);
    for name in [kernel::VECTOR_ADD_F32, kernel::SCALE_F32] {
        let func = function(so, name);
        let (aic, aiv) = sizes(func);
        assert!(aic > 0 && aic == aiv, "{name}: {aic}, {aiv}");
        let (mut aic_addr, mut aiv_addr) = (ptr::null_mut(), ptr::null_mut());
        acl!(aclrtGetFunctionAddr(func, &mut aic_addr, &mut aiv_addr));
        let code = aic_addr as usize;
        assert!(
            code >= start && code + aic <= start + len,
            "{name} lies in the image"
        );
        for (attr, expected) in [
            (ACL_FUNC_ATTR_KERNEL_TYPE, i64::from(ACL_KERNEL_TYPE_AICORE)),
            (ACL_FUNC_ATTR_KERNEL_RATIO, 0),
            (ACL_FUNC_ATTR_KERNEL_SCHED_MODE, 0),
        ] {
            let mut value = -1;
            acl!(aclrtGetFunctionAttribute(func, attr, &mut value));
            assert_eq!(value, expected, "{name}, attribute {attr}");
        }
    }
    // The same library loaded lazily, from its bytes: no address, the same image size.
    let bytes = std::fs::read(kernel::LIBRARY_PATH).unwrap();
    let mut lazy = aclrtBinaryLoadOption {
        type_: ACL_RT_BINARY_LOAD_OPT_LAZY_LOAD,
        value: aclrtBinaryLoadOptionValue { isLazyLoad: 1 },
    };
    let options = aclrtBinaryLoadOptions {
        options: &mut lazy,
        numOpt: 1,
    };
    let mut lazy_bin = ptr::null_mut();
    acl!(aclrtBinaryLoadFromData(
        bytes.as_ptr().cast(),
        bytes.len(),
        &options,
        &mut lazy_bin
    ));
    let (lazy_start, lazy_len) = image(lazy_bin);
    assert_eq!(lazy_start, 0);
    assert!(lazy_len > 0);
    acl!(aclrtBinaryUnLoad(lazy_bin));
    acl!(aclrtBinaryUnLoad(so));

    // A closure registered in-process: no symbol, so no size; its image is the program's.
    kernel::register("sized_closure", |_, _, _| 0).unwrap();
    let registry = registry_binary(&["sized_closure"]);
    assert_eq!(sizes(function(registry, "sized_closure")), (0, 0));
    assert_eq!(image(registry), (0, 0));
    acl!(aclrtBinaryUnLoad(registry));
}

#[test]
fn code_size_attribute_and_image_error_paths() {
    fn size(func: aclrtFuncHandle) -> aclError {
        let (mut aic, mut aiv) = (0, 0);
        code!(aclrtGetFunctionSize(func, &mut aic, &mut aiv))
    }
    fn attribute(func: aclrtFuncHandle, attr: aclrtFuncAttribute) -> aclError {
        let mut value = 0;
        code!(aclrtGetFunctionAttribute(func, attr, &mut value))
    }
    fn image(bin: aclrtBinHandle) -> aclError {
        let (mut address, mut size) = (ptr::null_mut(), 0);
        code!(aclrtBinaryGetDevAddress(bin, &mut address, &mut size))
    }
    const SIZE: &str = "aclrtGetFunctionSize";
    const ATTRIBUTE: &str = "aclrtGetFunctionAttribute";
    const IMAGE: &str = "aclrtBinaryGetDevAddress";
    run_table(&[
        case("size of NULL function", SIZE, 100000, 0, || {
            size(ptr::null_mut())
        }),
        case("size of an unloaded function", SIZE, 107017, 0, || {
            size(unloaded_function())
        }),
        case("size into NULL aicSize", SIZE, 100000, 0, || {
            let mut aiv = 0;
            code!(aclrtGetFunctionSize(
                library_function(),
                ptr::null_mut(),
                &mut aiv
            ))
        }),
        case("size into NULL aivSize", SIZE, 100000, 0, || {
            let mut aic = 0;
            code!(aclrtGetFunctionSize(
                library_function(),
                &mut aic,
                ptr::null_mut()
            ))
        }),
        case("attribute of NULL function", ATTRIBUTE, 100000, 0, || {
            attribute(ptr::null_mut(), ACL_FUNC_ATTR_KERNEL_TYPE)
        }),
        case(
            "attribute of an unloaded function",
            ATTRIBUTE,
            107017,
            0,
            || attribute(unloaded_function(), ACL_FUNC_ATTR_KERNEL_TYPE),
        ),
        case("attribute 0", ATTRIBUTE, 107000, 0, || {
            attribute(library_function(), 0)
        }),
        // Values are checked before the function is looked up: an unknown attribute, and a
        // name's maxLen 0, which nothing fits in.
        case(
            "attribute 4 of an unloaded function",
            ATTRIBUTE,
            107000,
            0,
            || attribute(unloaded_function(), 4),
        ),
        case(
            "name of an unloaded function with maxLen 0",
            "aclrtGetFunctionName",
            107000,
            0,
            || {
                let mut name = [0 as std::ffi::c_char; 1];
                code!(aclrtGetFunctionName(
                    unloaded_function(),
                    0,
                    name.as_mut_ptr()
                ))
            },
        ),
        case("attribute 4", ATTRIBUTE, 107000, 0, || {
            attribute(library_function(), 4)
        }),
        // The ACL layer's NULL check comes before the runtime's check of the attribute.
        case("unknown attribute into NULL", ATTRIBUTE, 100000, 0, || {
            code!(aclrtGetFunctionAttribute(
                library_function(),
                4,
                ptr::null_mut()
            ))
        }),
        case("attribute into NULL", ATTRIBUTE, 100000, 0, || {
            code!(aclrtGetFunctionAttribute(
                library_function(),
                ACL_FUNC_ATTR_KERNEL_TYPE,
                ptr::null_mut()
            ))
        }),
        case("image of NULL binary", IMAGE, 100000, 0, || {
            image(ptr::null_mut())
        }),
        case("image of an unloaded binary", IMAGE, 107017, 0, || {
            let bin = load_file(kernel::LIBRARY_PATH);
            acl!(aclrtBinaryUnLoad(bin));
            image(bin)
        }),
        case("image address into NULL", IMAGE, 100000, 0, || {
            let mut size = 0;
            let bin = load_file(kernel::LIBRARY_PATH);
            code!(aclrtBinaryGetDevAddress(bin, ptr::null_mut(), &mut size))
        }),
        case("image size into NULL", IMAGE, 100000, 0, || {
            let mut address = ptr::null_mut();
            let bin = load_file(kernel::LIBRARY_PATH);
            code!(aclrtBinaryGetDevAddress(bin, &mut address, ptr::null_mut()))
        }),
    ]);
}

/// `scale_f32` of a library binary that has been unloaded again: a stale function handle.
fn unloaded_function() -> aclrtFuncHandle {
    let bin = load_file(kernel::LIBRARY_PATH);
    let func = function(bin, kernel::SCALE_F32);
    acl!(aclrtBinaryUnLoad(bin));
    func
}

/// `scale_f32` of a freshly loaded library binary.
fn library_function() -> aclrtFuncHandle {
    function(load_file(kernel::LIBRARY_PATH), kernel::SCALE_F32)
}

/// A NULL pointer argument is the ACL layer's refusal (100000), made before the runtime looks
/// the function up (an unloaded function → 107017) or checks the other arguments (107000).
#[test]
fn null_arguments_are_refused_before_the_function_is_looked_up() {
    run_table(&[
        case(
            "binary of an unloaded function into NULL",
            "aclrtFunctionGetBinary",
            100000,
            0,
            || code!(aclrtFunctionGetBinary(unloaded_function(), ptr::null_mut())),
        ),
        case(
            "name of an unloaded function into NULL",
            "aclrtGetFunctionName",
            100000,
            0,
            || {
                code!(aclrtGetFunctionName(
                    unloaded_function(),
                    64,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "name into NULL with maxLen 0",
            "aclrtGetFunctionName",
            100000,
            0,
            || code!(aclrtGetFunctionName(library_function(), 0, ptr::null_mut())),
        ),
        case(
            "address of an unloaded function into NULL",
            "aclrtGetFunctionAddr",
            100000,
            0,
            || {
                let mut aiv = ptr::null_mut();
                code!(aclrtGetFunctionAddr(
                    unloaded_function(),
                    ptr::null_mut(),
                    &mut aiv
                ))
            },
        ),
        case(
            "size of an unloaded function into NULL",
            "aclrtGetFunctionSize",
            100000,
            0,
            || {
                let mut aic = 0;
                code!(aclrtGetFunctionSize(
                    unloaded_function(),
                    &mut aic,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "attribute of an unloaded function into NULL",
            "aclrtGetFunctionAttribute",
            100000,
            0,
            || {
                code!(aclrtGetFunctionAttribute(
                    unloaded_function(),
                    ACL_FUNC_ATTR_KERNEL_TYPE,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "param count of an unloaded function into NULL",
            "aclrtFunctionGetParamCount",
            100000,
            0,
            || {
                code!(aclrtFunctionGetParamCount(
                    unloaded_function(),
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "param info of an unloaded function into NULL",
            "aclrtFunctionGetParamInfo",
            100000,
            0,
            || {
                let mut size = 0;
                code!(aclrtFunctionGetParamInfo(
                    unloaded_function(),
                    0,
                    ptr::null_mut(),
                    &mut size
                ))
            },
        ),
        case(
            "ubuf of an unloaded function into NULL",
            "aclrtFunctionGetAvailDynUbufPerBlock",
            100000,
            0,
            || {
                code!(aclrtFunctionGetAvailDynUbufPerBlock(
                    unloaded_function(),
                    0,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "ubuf flags 1 into NULL",
            "aclrtFunctionGetAvailDynUbufPerBlock",
            100000,
            0,
            || {
                code!(aclrtFunctionGetAvailDynUbufPerBlock(
                    library_function(),
                    1,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "launch an unloaded function with NULL args",
            "aclrtLaunchKernel",
            100000,
            0,
            || {
                code!(aclrtLaunchKernel(
                    unloaded_function(),
                    1,
                    ptr::null(),
                    8,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "V2 launch of an unloaded function with NULL args",
            "aclrtLaunchKernelV2",
            100000,
            0,
            || {
                code!(aclrtLaunchKernelV2(
                    unloaded_function(),
                    1,
                    ptr::null(),
                    8,
                    ptr::null_mut(),
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "host-args launch of an unloaded function with NULL args",
            "aclrtLaunchKernelWithHostArgs",
            100000,
            0,
            || {
                code!(aclrtLaunchKernelWithHostArgs(
                    unloaded_function(),
                    1,
                    ptr::null_mut(),
                    ptr::null_mut(),
                    ptr::null_mut(),
                    8,
                    ptr::null_mut(),
                    0
                ))
            },
        ),
        case(
            "host-args launch of an unloaded function with NULL placeholders",
            "aclrtLaunchKernelWithHostArgs",
            100000,
            0,
            || {
                let mut args = [0u8; 8];
                code!(aclrtLaunchKernelWithHostArgs(
                    unloaded_function(),
                    1,
                    ptr::null_mut(),
                    ptr::null_mut(),
                    args.as_mut_ptr().cast(),
                    args.len(),
                    ptr::null_mut(),
                    1
                ))
            },
        ),
        case(
            "config launch of an unloaded function with NULL args",
            "aclrtLaunchKernelWithConfig",
            100000,
            0,
            || {
                code!(aclrtLaunchKernelWithConfig(
                    unloaded_function(),
                    1,
                    ptr::null_mut(),
                    ptr::null_mut(),
                    ptr::null_mut(),
                    ptr::null_mut()
                ))
            },
        ),
        // A configuration counting attributes in a NULL array is refused with the pointers.
        case(
            "V2 launch of an unloaded function with NULL cfg attrs",
            "aclrtLaunchKernelV2",
            100000,
            0,
            || {
                let mut cfg = aclrtLaunchKernelCfg {
                    attrs: ptr::null_mut(),
                    numAttrs: 1,
                };
                code!(aclrtLaunchKernelV2(
                    unloaded_function(),
                    1,
                    ptr::null(),
                    0,
                    &mut cfg,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "args-array launch of an unloaded function with NULL cfg attrs",
            "aclrtLaunchKernelWithArgsArray",
            100000,
            0,
            || {
                let mut word = 0u64;
                let mut args: [*mut c_void; 1] = [(&raw mut word).cast()];
                let mut cfg = aclrtLaunchKernelCfg {
                    attrs: ptr::null_mut(),
                    numAttrs: 2,
                };
                code!(aclrtLaunchKernelWithArgsArray(
                    unloaded_function(),
                    1,
                    ptr::null_mut(),
                    &mut cfg,
                    args.as_mut_ptr()
                ))
            },
        ),
    ]);
}

/// A launch configuration of one attribute, `id` with the value `set` gives it.
struct OneAttr {
    attr: aclrtLaunchKernelAttr,
    cfg: aclrtLaunchKernelCfg,
}

impl OneAttr {
    fn new(id: aclrtLaunchKernelAttrId, set: fn(&mut aclrtLaunchKernelAttrValue)) -> OneAttr {
        let mut attr = aclrtLaunchKernelAttr {
            id,
            value: aclrtLaunchKernelAttrValue { rsv: [0; 4] },
        };
        set(&mut attr.value);
        let cfg = aclrtLaunchKernelCfg {
            attrs: ptr::null_mut(),
            numAttrs: 1,
        };
        OneAttr { attr, cfg }
    }

    /// The configuration, pointing at the attribute where it now lies (valid while `self`
    /// is not moved).
    fn cfg(&mut self) -> *mut aclrtLaunchKernelCfg {
        self.cfg.attrs = &mut self.attr;
        &mut self.cfg
    }
}

/// A stream of the calling thread's context, which then stops being current: a new context
/// is created and made current (so the stream → 107003 once looked up).
fn stream_of_another_context() -> aclrtStream {
    let stream = create_stream();
    let mut other = ptr::null_mut();
    acl!(aclrtCreateContext(&mut other, 0));
    stream
}

/// A launch's values (the configuration's attributes, a placeholder's offsets) need nothing
/// looked up, so they are refused (107000) before the function is (an unloaded one → 107017);
/// the handles are then looked up in parameter order: the function before the stream (another
/// context's → 107003), the stream before aclrtLaunchKernelWithConfig's args handle, and what
/// needs only the function (its parameter list) before the stream.
#[test]
fn launch_values_come_before_the_function_and_handles_in_parameter_order() {
    fn engine_10(value: &mut aclrtLaunchKernelAttrValue) {
        value.engineType = 10;
    }
    run_table(&[
        case(
            "V2 launch of an unloaded function on engine 10",
            "aclrtLaunchKernelV2",
            107000,
            0,
            || {
                let mut cfg = OneAttr::new(ACL_RT_LAUNCH_KERNEL_ATTR_ENGINE_TYPE, engine_10);
                code!(aclrtLaunchKernelV2(
                    unloaded_function(),
                    1,
                    ptr::null(),
                    0,
                    cfg.cfg(),
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "host-args launch of an unloaded function with schedule mode 2",
            "aclrtLaunchKernelWithHostArgs",
            107000,
            0,
            || {
                let mut cfg = OneAttr::new(ACL_RT_LAUNCH_KERNEL_ATTR_SCHEM_MODE, |value| {
                    value.schemMode = 2;
                });
                let mut args = [0u8; 24];
                code!(aclrtLaunchKernelWithHostArgs(
                    unloaded_function(),
                    1,
                    ptr::null_mut(),
                    cfg.cfg(),
                    args.as_mut_ptr().cast(),
                    args.len(),
                    ptr::null_mut(),
                    0
                ))
            },
        ),
        case(
            "host-args launch of an unloaded function with a placeholder past the arguments",
            "aclrtLaunchKernelWithHostArgs",
            107000,
            0,
            || {
                let mut args = [0u8; 24];
                let mut holder = aclrtPlaceHolderInfo {
                    addrOffset: 20,
                    dataOffset: 0,
                };
                code!(aclrtLaunchKernelWithHostArgs(
                    unloaded_function(),
                    1,
                    ptr::null_mut(),
                    ptr::null_mut(),
                    args.as_mut_ptr().cast(),
                    args.len(),
                    &mut holder,
                    1
                ))
            },
        ),
        case(
            "args-array launch of an unloaded function with dynamic UB",
            "aclrtLaunchKernelWithArgsArray",
            107000,
            0,
            || {
                let mut cfg = OneAttr::new(ACL_RT_LAUNCH_KERNEL_ATTR_DYN_UBUF_SIZE, |value| {
                    value.dynUBufSize = 1024;
                });
                let mut word = 0u64;
                let mut args: [*mut c_void; 1] = [(&raw mut word).cast()];
                code!(aclrtLaunchKernelWithArgsArray(
                    unloaded_function(),
                    1,
                    ptr::null_mut(),
                    cfg.cfg(),
                    args.as_mut_ptr()
                ))
            },
        ),
        case(
            "config launch of an unloaded function with an unknown attribute",
            "aclrtLaunchKernelWithConfig",
            107000,
            0,
            || {
                let mut cfg = OneAttr::new(99, |_| {});
                let mut args = ptr::null_mut();
                acl!(aclrtKernelArgsInit(library_function(), &mut args));
                code!(aclrtLaunchKernelWithConfig(
                    unloaded_function(),
                    1,
                    ptr::null_mut(),
                    cfg.cfg(),
                    args,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "config launch of an unloaded function on another context's stream",
            "aclrtLaunchKernelWithConfig",
            107017,
            0,
            || {
                let mut args = ptr::null_mut();
                acl!(aclrtKernelArgsInit(library_function(), &mut args));
                code!(aclrtLaunchKernelWithConfig(
                    unloaded_function(),
                    1,
                    stream_of_another_context(),
                    ptr::null_mut(),
                    args,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "config launch on another context's stream with args of an unloaded function",
            "aclrtLaunchKernelWithConfig",
            107003,
            0,
            || {
                let bin = load_file(kernel::LIBRARY_PATH);
                let mut args = ptr::null_mut();
                acl!(aclrtKernelArgsInit(
                    function(bin, kernel::SCALE_F32),
                    &mut args
                ));
                acl!(aclrtBinaryUnLoad(bin));
                code!(aclrtLaunchKernelWithConfig(
                    library_function(),
                    1,
                    stream_of_another_context(),
                    ptr::null_mut(),
                    args,
                    ptr::null_mut()
                ))
            },
        ),
        // The stream's device is checked against the function's as soon as the stream is
        // known, before the args handle is looked up and compared with the function.
        case(
            "config launch of another device's function with args of another function",
            "aclrtLaunchKernelWithConfig",
            107044,
            0,
            || {
                set_device(1);
                let func = library_function();
                set_device(0);
                let mut args = ptr::null_mut();
                acl!(aclrtKernelArgsInit(library_function(), &mut args));
                code!(aclrtLaunchKernelWithConfig(
                    func,
                    1,
                    ptr::null_mut(),
                    ptr::null_mut(),
                    args,
                    ptr::null_mut()
                ))
            },
        ),
        case(
            "args-array launch of a kernel without a parameter list on another context's stream",
            "aclrtLaunchKernelWithArgsArray",
            107000,
            0,
            || {
                register_test_kernels();
                let trap = function(registry_binary(&["trap"]), "trap");
                let mut word = 0u64;
                let mut args: [*mut c_void; 1] = [(&raw mut word).cast()];
                code!(aclrtLaunchKernelWithArgsArray(
                    trap,
                    1,
                    stream_of_another_context(),
                    ptr::null_mut(),
                    args.as_mut_ptr()
                ))
            },
        ),
    ]);
}

/// Each device runs its kernels' blocks on cores of its own, as separate NPUs do: a launch
/// whose every block waits for a launch on another device to start runs to its end, however
/// many blocks it has and however few host cores there are. The blocks of all devices once
/// ran on one pool of host threads (as many as cores), so a kernel on one device whose blocks
/// waited for another device's kernel (a collective's flag, a test's gate) took every thread and
/// the other device's kernel never started: both hung. A block gives up after a long bound and
/// traps once the test's bound has passed, so a regression fails the launch instead of hanging
/// the test.
#[test]
fn kernels_on_two_devices_do_not_share_cores() {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::{Duration, Instant};

    static STARTED: [AtomicU32; 2] = [AtomicU32::new(0), AtomicU32::new(0)];
    // One bound for every block, so that a regression fails in this time, not a block's worth
    // of it per block.
    static GIVE_UP: OnceLock<Instant> = OnceLock::new();
    GIVE_UP
        .set(Instant::now() + Duration::from_secs(30))
        .unwrap();
    const NAME: &str = "wait_for_the_other_device";
    kernel::register_with_args_size(NAME, 4, |_, _, args| {
        // SAFETY: the launch passes one u32, this launch's side (0 or 1), as declared.
        let side = unsafe { *args.cast::<u32>() } as usize;
        STARTED[side].fetch_add(1, Ordering::SeqCst);
        while STARTED[1 - side].load(Ordering::SeqCst) == 0 {
            if Instant::now() > GIVE_UP.get().copied().unwrap() {
                return 1;
            }
            std::thread::yield_now();
        }
        0
    })
    .unwrap();
    // More blocks than any test machine has cores.
    let blocks = 1024;
    let streams: Vec<aclrtStream> = (0..2)
        .map(|side| {
            set_device(side);
            let func = function(registry_binary(&[NAME]), NAME);
            let stream = create_stream();
            assert_eq!(
                launch(func, blocks, stream, &(side as u32), ptr::null_mut()),
                0
            );
            stream
        })
        .collect();
    for (side, stream) in streams.into_iter().enumerate() {
        set_device(side as i32);
        let synced = code!(aclrtSynchronizeStream(stream));
        assert_eq!(
            synced, 0,
            "device {side}'s kernel waited for the other in vain"
        );
        acl!(aclrtDestroyStream(stream));
    }
    let started = [0, 1].map(|side| STARTED[side].load(Ordering::SeqCst));
    assert_eq!(started, [blocks; 2]);
}

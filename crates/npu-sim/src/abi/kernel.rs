//! Kernel binaries, functions and launches.

use std::ffi::{c_char, c_void};
use std::sync::Arc;

use npu_sys::*;

use super::check::{array, bytes, c_path, c_str, optional};
use super::kernel_args::{resolve_args, retire_args};
use crate::context;
use crate::error::{Res, ensure, fail, guard, non_null, write_out};
use crate::handle::{self, Handle};
use crate::indirect::check_on_device;
use crate::kernel::{ArgsBlob, Binary, Function, Launch, LaunchArgs, LaunchAttrs};
use crate::op_timeout;
use crate::sim::{Sim, sim};
use crate::stream::Stream;
use crate::task::{Op, Task};

/// Checks the load options: each a known type (else 100000) with a value it allows (else
/// 107000). They do not change how a host-function kernel is loaded; whether a lazy load was
/// asked for (the last such option wins) is returned, for aclrtBinaryGetDevAddress.
fn check_options(options: *const aclrtBinaryLoadOptions) -> Res<bool> {
    let Some(options) = optional(options) else {
        return Ok(false);
    };
    let mut lazy = false;
    for (i, option) in array(options.options, options.numOpt, "options->options")?
        .iter()
        .enumerate()
    {
        // SAFETY: every member of the value union is a 32-bit integer, so any bits are valid.
        let (word, mode) = unsafe { (option.value.isLazyLoad, option.value.cpuKernelMode) };
        let allowed = match option.type_ {
            ACL_RT_BINARY_LOAD_OPT_LAZY_LOAD => {
                lazy = word == 1;
                word <= 1
            }
            ACL_RT_BINARY_LOAD_OPT_MAGIC => matches!(
                word,
                ACL_RT_BINARY_MAGIC_ELF_AICORE
                    | ACL_RT_BINARY_MAGIC_ELF_VECTOR_CORE
                    | ACL_RT_BINARY_MAGIC_ELF_CUBE_CORE
            ),
            ACL_RT_BINARY_LOAD_OPT_CPU_KERNEL_MODE => (0..=2).contains(&mode),
            other => fail!(
                ACL_ERROR_INVALID_PARAM,
                "options->options[{i}].type {other} is not an aclrtBinaryLoadOptionType"
            ),
        };
        ensure!(
            allowed,
            ACL_ERROR_RT_PARAM_INVALID,
            "options->options[{i}] (type {}) has the value {word:#x}, which that option does \
             not allow (lazy load 0 or 1; magic one of the ACL_RT_BINARY_MAGIC_ELF_* values; \
             CPU kernel mode 0 to 2)",
            option.type_
        );
    }
    Ok(lazy)
}

pub(super) fn store_binary(binary: Binary, out: *mut aclrtBinHandle) -> Res<()> {
    let handle = sim()?.binaries.insert(Arc::new(binary))?;
    write_out(out, "binHandle", handle::to_ptr(handle))
}

/// Loads a kernel binary: on the simulator, a shared object exporting kernels with the
/// `npusim/kernel.h` signature. The path is any bytes but NUL, UTF-8 or not, as a Linux path.
/// Unreadable file → 107009; not loadable → 100003.
///
/// # Safety
/// `binPath` must be NULL or NUL-terminated; `options` NULL or valid; `binHandle` NULL or valid
/// for a write. Loading runs the library's initialisers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtBinaryLoadFromFile(
    binPath: *const c_char,
    options: *mut aclrtBinaryLoadOptions,
    binHandle: *mut aclrtBinHandle,
) -> aclError {
    guard("aclrtBinaryLoadFromFile", || {
        let path = c_path(binPath, "binPath")?;
        non_null(binHandle, "binHandle")?;
        let lazy = check_options(options)?;
        store_binary(Binary::from_file(path)?.loaded_lazily(lazy), binHandle)
    })
}

/// Loads a kernel binary from memory: an ELF shared object, or an npu-sim registry image
/// (`npu_sim::kernel::registry_image`). Anything else → 107000.
///
/// # Safety
/// `data` must be NULL or valid for `length` bytes; `options` NULL or valid; `binHandle` NULL
/// or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtBinaryLoadFromData(
    data: *const c_void,
    length: usize,
    options: *const aclrtBinaryLoadOptions,
    binHandle: *mut aclrtBinHandle,
) -> aclError {
    guard("aclrtBinaryLoadFromData", || {
        non_null(data, "data")?;
        non_null(binHandle, "binHandle")?;
        ensure!(length != 0, ACL_ERROR_INVALID_PARAM, "length is 0");
        let lazy = check_options(options)?;
        let binary = Binary::from_data(bytes(data, length, "data")?)?;
        store_binary(binary.loaded_lazily(lazy), binHandle)
    })
}

fn retire_function(sim: &Sim, handle: Handle) {
    let Some(function) = sim.functions.remove(handle) else {
        return;
    };
    for args in function.retire() {
        retire_args(sim, args);
    }
}

/// Unloads a binary: its function and args handles become invalid (launches already queued
/// still run; the library is closed after them).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtBinaryUnLoad(binHandle: aclrtBinHandle) -> aclError {
    guard("aclrtBinaryUnLoad", || {
        non_null(binHandle, "binHandle")?;
        let sim = sim()?;
        let handle = handle::from_ptr(binHandle);
        let binary = sim.binaries.remove_live(handle)?;
        for function in binary.unload() {
            retire_function(sim, function);
        }
        binary.release_globals(&sim.memory);
        Ok(())
    })
}

/// Resolves a kernel of a binary by name (a symbol, or a registered kernel). Unknown name →
/// 107042. Needs a current context.
///
/// # Safety
/// `kernelName` must be NULL or NUL-terminated; `funcHandle` NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtBinaryGetFunction(
    binHandle: aclrtBinHandle,
    kernelName: *const c_char,
    funcHandle: *mut aclrtFuncHandle,
) -> aclError {
    guard("aclrtBinaryGetFunction", || {
        non_null(binHandle, "binHandle")?;
        let name = c_str(kernelName, "kernelName")?;
        non_null(funcHandle, "funcHandle")?;
        let sim = sim()?;
        let device = context::current(sim)?.device.id;
        let bin = handle::from_ptr(binHandle);
        let binary = sim.binaries.resolve(bin)?;
        let handle = function_of(sim, &binary, bin, name, device)?;
        write_out(funcHandle, "funcHandle", handle::to_ptr(handle))
    })
}

/// The function handle of the kernel `name` of a binary (handle `bin`) on `device`: the cached
/// one, or a new one.
fn function_of(sim: &Sim, binary: &Binary, bin: Handle, name: &str, device: i32) -> Res<Handle> {
    binary.function_handle(
        name,
        device,
        |handle| sim.functions.get(handle).is_some(),
        || {
            sim.functions
                .insert(Arc::new(binary.function(name, bin, device)?))
        },
    )
}

/// Refuses a launch on a stream of another device than the one `function` was resolved on:
/// the runtime copied the kernel's code to that device only.
fn check_function_device(function: &Function, stream_device: i32) -> Res<()> {
    ensure!(
        function.device == stream_device,
        ACL_ERROR_RT_INVALID_DEVICE_FUNCTION,
        "function {:?} was resolved on device {}, but the stream is on device {stream_device} \
         (resolve it again with that device's context current)",
        function.name,
        function.device
    );
    Ok(())
}

/// The function handle of the kernel at `symbol`: the address of a kernel a loaded binary's
/// library exports (as a program linked against the library takes `&kernel`, the way a CANN
/// program names its `__global__` function), the handle aclrtBinaryGetFunction gives for it.
/// NULL symbol or funcHandle → 100000; an address that is no kernel of a loaded binary →
/// 107042; no current context → 107002.
///
/// # Safety
/// `funcHandle` must be NULL or valid for a write; `symbol` is only looked up.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetFuncBySymbol(
    symbol: *const c_void,
    funcHandle: *mut aclrtFuncHandle,
) -> aclError {
    guard("aclrtGetFuncBySymbol", || {
        non_null(symbol, "symbol")?;
        non_null(funcHandle, "funcHandle")?;
        let sim = sim()?;
        let device = context::current(sim)?.device.id;
        let address = symbol as usize;
        if let Some(name) = crate::kernel::symbol_name(address) {
            for (bin, binary) in sim.binaries.live_with_handles() {
                if binary.exports_at(&name, address) {
                    let handle = function_of(sim, &binary, bin, &name, device)?;
                    return write_out(funcHandle, "funcHandle", handle::to_ptr(handle));
                }
            }
        }
        fail!(
            ACL_ERROR_RT_SYMBOL_NOT_FOUND,
            "{symbol:p} is not a kernel of a loaded binary"
        )
    })
}

/// The device address and size of a global variable the binary declares (`NPUSIM_GLOBAL` in
/// a kernel library: the variable itself, which its kernels use directly and copies reach as
/// device memory of the current context's device while the binary is loaded). Either output
/// may be NULL, not both (100000); NULL binary or name → 100000; an unloaded binary → 107017;
/// an undeclared name, or a registry image → 107042; no current context → 107002.
///
/// # Safety
/// `name` must be NULL or NUL-terminated; `dptr` and `size` NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtBinaryGetGlobal(
    binHandle: aclrtBinHandle,
    name: *const c_char,
    dptr: *mut *mut c_void,
    size: *mut usize,
) -> aclError {
    guard("aclrtBinaryGetGlobal", || {
        non_null(binHandle, "binHandle")?;
        let name = c_str(name, "name")?;
        ensure!(
            !dptr.is_null() || !size.is_null(),
            ACL_ERROR_INVALID_PARAM,
            "dptr and size are both NULL"
        );
        let sim = sim()?;
        let device = context::current(sim)?.device.id;
        let binary = sim.binaries.resolve(handle::from_ptr(binHandle))?;
        let (address, len) = binary.global(&sim.memory, name, device)?;
        if !dptr.is_null() {
            write_out(dptr, "dptr", address as *mut c_void)?;
        }
        if !size.is_null() {
            write_out(size, "size", len)?;
        }
        Ok(())
    })
}

/// Where the binary's image lies and its size: a kernel library as the loader mapped it,
/// which holds the code aclrtGetFunctionAddr points into (its address NULL if the binary was
/// loaded lazily); a registry image has none (NULL, 0). NULL binary or output → 100000 (in
/// the reference's order); an unloaded binary → 107017.
///
/// # Safety
/// `binAddr` and `binSize` must be NULL or valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtBinaryGetDevAddress(
    binHandle: aclrtBinHandle,
    binAddr: *mut *mut c_void,
    binSize: *mut usize,
) -> aclError {
    guard("aclrtBinaryGetDevAddress", || {
        non_null(binHandle, "binHandle")?;
        non_null(binAddr, "binAddr")?;
        non_null(binSize, "binSize")?;
        let binary = sim()?.binaries.resolve(handle::from_ptr(binHandle))?;
        let (address, size) = binary.image();
        write_out(binAddr, "binAddr", address as *mut c_void)?;
        write_out(binSize, "binSize", size)
    })
}

/// What a launch configuration asks of a launch beyond its arguments.
#[derive(Clone, Copy, Default)]
struct LaunchOptions {
    /// The AIV (vector) engine rather than the AI core.
    vector_engine: bool,
    /// Its own execute timeout, µs ([`op_timeout::NEVER`] for none).
    timeout_us: Option<u64>,
    /// The attributes as given, for aclmdlRIKernelTaskGetAttribute.
    attrs: LaunchAttrs,
}

/// Reads a launch configuration: the engine and the launch's own execute timeout. The other
/// attributes are checked against the values the reference lists (the switches SCHEM_MODE,
/// BLOCK_TASK_PREFETCH, DATA_DUMP and ENABLE_PROFILING 0 or 1, DYN_UBUF_SIZE 0 for a kernel
/// that is not a SIMT kernel; else 107000) and have no effect on the simulator. The two
/// timeout attributes exclude each other, as the reference says; a timeout of 0 (either form)
/// waits for ever.
fn launch_options(cfg: *mut aclrtLaunchKernelCfg) -> Res<LaunchOptions> {
    let Some(cfg) = optional(cfg) else {
        return Ok(LaunchOptions::default());
    };
    let mut options = LaunchOptions::default();
    let (mut seconds, mut micros) = (None, None);
    for attr in array(cfg.attrs, cfg.numAttrs, "cfg->attrs")? {
        match attr.id {
            ACL_RT_LAUNCH_KERNEL_ATTR_ENGINE_TYPE => {
                // SAFETY: every member of the 16-byte union is plain data; ENGINE_TYPE
                // carries engineType.
                let engine = unsafe { attr.value.engineType };
                options.vector_engine = match engine {
                    ACL_RT_ENGINE_TYPE_AIC => false,
                    ACL_RT_ENGINE_TYPE_AIV => true,
                    other => fail!(ACL_ERROR_RT_PARAM_INVALID, "unknown engine type {other}"),
                };
            }
            ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT => {
                // SAFETY: as above; TIMEOUT carries timeout, in seconds.
                let timeout = unsafe { attr.value.timeout };
                options.attrs.timeout_s = timeout;
                seconds = Some(u64::from(timeout));
            }
            ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT_US => {
                // SAFETY: as above; TIMEOUT_US carries timeoutUs, a 64-bit count in halves.
                let halves = unsafe { attr.value.timeoutUs };
                let us = u64::from(halves.timeoutHigh) << 32 | u64::from(halves.timeoutLow);
                options.attrs.timeout_us = us;
                micros = Some(us);
            }
            ACL_RT_LAUNCH_KERNEL_ATTR_SCHEM_MODE
            | ACL_RT_LAUNCH_KERNEL_ATTR_BLOCK_TASK_PREFETCH
            | ACL_RT_LAUNCH_KERNEL_ATTR_DATA_DUMP
            | ACL_RT_LAUNCH_KERNEL_ATTR_ENABLE_PROFILING => {
                // SAFETY: as above; these four carry a one-byte switch at the union's start
                // (schemMode, isBlockTaskPrefetch, isDataDump, enableProfiling), each
                // documented as 0 or 1 (enableProfiling by CANN's header, the reference
                // calling it a switch).
                let switch = unsafe { attr.value.schemMode };
                ensure!(
                    switch <= 1,
                    ACL_ERROR_RT_PARAM_INVALID,
                    "launch attribute {} takes 0 or 1, not {switch}",
                    attr.id
                );
                match attr.id {
                    ACL_RT_LAUNCH_KERNEL_ATTR_SCHEM_MODE => options.attrs.schem_mode = switch,
                    ACL_RT_LAUNCH_KERNEL_ATTR_DATA_DUMP => options.attrs.data_dump = switch,
                    ACL_RT_LAUNCH_KERNEL_ATTR_ENABLE_PROFILING => options.attrs.profiling = switch,
                    _ => {}
                }
            }
            ACL_RT_LAUNCH_KERNEL_ATTR_DYN_UBUF_SIZE => {
                // SAFETY: as above; DYN_UBUF_SIZE carries dynUBufSize.
                let size = unsafe { attr.value.dynUBufSize };
                ensure!(
                    size == 0,
                    ACL_ERROR_RT_PARAM_INVALID,
                    "dynUBufSize {size}: a kernel that is not a SIMT kernel takes only 0 (a \
                     simulated kernel is none)"
                );
            }
            ACL_RT_LAUNCH_KERNEL_ATTR_BLOCKDIM_OFFSET => {}
            other => fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "unknown launch attribute {other}"
            ),
        }
    }
    let timeout_us = match (seconds, micros) {
        (Some(_), Some(_)) => fail!(
            ACL_ERROR_RT_PARAM_INVALID,
            "ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT and ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT_US cannot both be given"
        ),
        (Some(s), None) => Some(s.saturating_mul(1_000_000)),
        (None, us) => us,
    };
    options.timeout_us = timeout_us.map(|us| if us == 0 { op_timeout::NEVER } else { us });
    Ok(options)
}

/// The checks every launch makes before it looks anything up, after the NULL pointers each
/// caller checks first in its own parameter order: `blocks` 0 and a configuration counting
/// attributes in a NULL array (100000), then the attributes' values (107000,
/// [`launch_options`]). None of them needs the function or the stream, so a bad value is
/// refused whatever the handles are; a caller's other values (a placeholder's offsets) follow,
/// still before any lookup.
fn launch_values(blocks: u32, cfg: *mut aclrtLaunchKernelCfg) -> Res<LaunchOptions> {
    ensure!(blocks != 0, ACL_ERROR_INVALID_PARAM, "numBlocks is 0");
    if let Some(cfg) = optional(cfg.cast_const())
        && cfg.numAttrs != 0
    {
        non_null(cfg.attrs, "cfg->attrs")?;
    }
    launch_options(cfg)
}

/// Refuses NULL `func` and NULL arguments `args` (named `name` in errors) counted by `size`
/// bytes (100000): the pointer checks of a launch whose arguments come as one buffer.
fn args_pointers(func: aclrtFuncHandle, args: *const c_void, size: usize, name: &str) -> Res<()> {
    non_null(func, "funcHandle")?;
    ensure!(
        !args.is_null() || size == 0,
        ACL_ERROR_INVALID_PARAM,
        "{name} is NULL but argsSize is {size}"
    );
    Ok(())
}

/// The function of a launch, looked up once its values have passed ([`launch_values`]).
fn launch_function(func: aclrtFuncHandle) -> Res<Arc<Function>> {
    sim()?.functions.resolve(handle::from_ptr(func))
}

/// The function and options of a launch whose `size` bytes of arguments are at `args` (named
/// `name` in errors): NULL only with no arguments, and no fewer than the function reads,
/// which can only be checked once the function is looked up.
fn checked_launch(
    func: aclrtFuncHandle,
    blocks: u32,
    cfg: *mut aclrtLaunchKernelCfg,
    (args, size): (*const c_void, usize),
    name: &str,
) -> Res<(Arc<Function>, LaunchOptions)> {
    args_pointers(func, args, size, name)?;
    let options = launch_values(blocks, cfg)?;
    let function = launch_function(func)?;
    function.check_args(size)?;
    Ok((function, options))
}

/// The stream a launch of `function` is queued on, looked up after the function (the
/// parameter order of every launch) and refused if it is on another device than the one the
/// function was resolved on.
fn launch_stream(stream: aclrtStream, function: &Function) -> Res<Arc<Stream>> {
    let stream = context::submit_stream(sim()?, stream)?;
    check_function_device(function, stream.device.id)?;
    Ok(stream)
}

/// The launch of `function` (handle `func`) with `args` and the configuration's options.
fn launch(
    func: aclrtFuncHandle,
    function: Arc<Function>,
    blocks: u32,
    args: LaunchArgs,
    options: LaunchOptions,
) -> Launch {
    Launch {
        function,
        handle: handle::from_ptr(func),
        blocks,
        args,
        vector_engine: options.vector_engine,
        timeout_us: options.timeout_us,
        attrs: options.attrs,
    }
}

/// Queues on `stream` (from [`launch_stream`]) a launch with arguments owned by the task.
fn submit_launch(
    stream: &Arc<Stream>,
    func: aclrtFuncHandle,
    function: Arc<Function>,
    blocks: u32,
    blob: ArgsBlob,
    options: LaunchOptions,
) -> Res<()> {
    let args = LaunchArgs::Owned(Arc::new(blob));
    let launch = launch(func, function, blocks, args, options);
    stream.submit(Task::new(Op::Kernel(launch)))
}

/// Arguments at `args` (named `name` in errors) in device memory of `device` (107000
/// otherwise), `size` bytes the kernel reads when it runs.
fn device_args((args, size, name): (*const c_void, usize, &str), device: i32) -> Res<LaunchArgs> {
    if !args.is_null() {
        check_on_device(&sim()?.memory, args as usize, size, device, name)?;
    }
    Ok(LaunchArgs::Device(args as usize, size))
}

/// aclrtLaunchKernel and aclrtLaunchKernelV2: a launch whose arguments are already in device
/// memory of the stream's device.
fn launch_device_args(
    func: aclrtFuncHandle,
    blocks: u32,
    argsData: *const c_void,
    argsSize: usize,
    cfg: *mut aclrtLaunchKernelCfg,
    stream: aclrtStream,
) -> Res<()> {
    let args = (argsData, argsSize);
    let (function, options) = checked_launch(func, blocks, cfg, args, "argsData")?;
    let target = launch_stream(stream, &function)?;
    let args = device_args((argsData, argsSize, "argsData"), target.device.id)?;
    let launch = launch(func, function, blocks, args, options);
    target.submit(Task::new(Op::Kernel(launch)))
}

/// Host-packed arguments: a copy of the `len` bytes at `data` (passed as `name`).
fn copied_args(data: *const c_void, len: usize, name: &str) -> Res<ArgsBlob> {
    let mut blob = ArgsBlob::zeroed(len)?;
    if len > 0 {
        blob.bytes_mut().copy_from_slice(bytes(data, len, name)?);
    }
    Ok(blob)
}

/// A launch for a task of an instance on `device` (aclmdlRITaskSetParams), checked as the
/// launches check theirs: `size` bytes of arguments at `args`, host memory copied now
/// (`host_args`) or device memory of `device` read when it runs. Arguments that are the task's
/// own copy (those of its `current` launch, where a query said they are) stay its arguments;
/// device arguments are checked even when the task already had them (they may be freed since).
pub(super) fn task_launch(
    func: aclrtFuncHandle,
    blocks: u32,
    (args, size): (*const c_void, usize),
    host_args: bool,
    cfg: *mut aclrtLaunchKernelCfg,
    device: i32,
    current: Option<&Launch>,
) -> Res<Launch> {
    let (function, options) = checked_launch(func, blocks, cfg, (args, size), "args")?;
    check_function_device(&function, device)?;
    let own_copy = |launch: &&Launch| {
        matches!(launch.args, LaunchArgs::Owned(_)) && launch.args() == (args.cast_mut(), size)
    };
    let args = match current.filter(own_copy) {
        Some(current) if !host_args => current.args.clone(),
        _ if !host_args => device_args((args, size, "args"), device)?,
        _ => LaunchArgs::Owned(Arc::new(copied_args(args, size, "args")?)),
    };
    Ok(launch(func, function, blocks, args, options))
}

/// Launches a kernel with its arguments already in device memory (on the stream's device):
/// the kernel gets `argsData` itself.
///
/// # Safety
/// `argsData` must be NULL (with `argsSize` 0) or device memory; the kernel's contract governs
/// what it points at.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtLaunchKernel(
    funcHandle: aclrtFuncHandle,
    numBlocks: u32,
    argsData: *const c_void,
    argsSize: usize,
    stream: aclrtStream,
) -> aclError {
    guard("aclrtLaunchKernel", || {
        let cfg = std::ptr::null_mut();
        launch_device_args(funcHandle, numBlocks, argsData, argsSize, cfg, stream)
    })
}

/// aclrtLaunchKernel with a launch configuration (NULL allowed; the ENGINE_TYPE attribute
/// selects the engine whose exception a trap reports, other known attributes are accepted).
///
/// # Safety
/// As aclrtLaunchKernel; `cfg` must be NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtLaunchKernelV2(
    funcHandle: aclrtFuncHandle,
    numBlocks: u32,
    argsData: *const c_void,
    argsSize: usize,
    cfg: *mut aclrtLaunchKernelCfg,
    stream: aclrtStream,
) -> aclError {
    guard("aclrtLaunchKernelV2", || {
        launch_device_args(funcHandle, numBlocks, argsData, argsSize, cfg, stream)
    })
}

/// Launches a kernel with arguments packed in host memory (copied at the call, so the buffer
/// may be reused at once). Each placeholder's pointer slot (`addrOffset`) is set to the copy
/// of its data (`dataOffset`); a slot or data offset outside `argsSize` → 107000, checked with
/// the configuration before the function is looked up.
///
/// # Safety
/// `hostArgs` must be valid for `argsSize` bytes; `placeHolderArray` for `placeHolderNum`
/// entries; `cfg` NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtLaunchKernelWithHostArgs(
    funcHandle: aclrtFuncHandle,
    numBlocks: u32,
    stream: aclrtStream,
    cfg: *mut aclrtLaunchKernelCfg,
    hostArgs: *mut c_void,
    argsSize: usize,
    placeHolderArray: *mut aclrtPlaceHolderInfo,
    placeHolderNum: usize,
) -> aclError {
    guard("aclrtLaunchKernelWithHostArgs", || {
        let args = hostArgs.cast_const();
        args_pointers(funcHandle, args, argsSize, "hostArgs")?;
        if placeHolderNum != 0 {
            non_null(placeHolderArray, "placeHolderArray")?;
        }
        let options = launch_values(numBlocks, cfg)?;
        let placeholders = array(
            placeHolderArray.cast_const(),
            placeHolderNum,
            "placeHolderArray",
        )?;
        // The offsets are values: they are checked against argsSize before anything is
        // looked up, as the configuration's attributes are.
        let mut offsets = Vec::with_capacity(placeholders.len());
        for (i, placeholder) in placeholders.iter().enumerate() {
            let (slot, data) = (
                placeholder.addrOffset as usize,
                placeholder.dataOffset as usize,
            );
            ensure!(
                slot + 8 <= argsSize && data < argsSize,
                ACL_ERROR_RT_PARAM_INVALID,
                "placeholder {i} (addrOffset {slot}, dataOffset {data}) lies outside the {argsSize} bytes of arguments"
            );
            offsets.push((slot, data));
        }
        let function = launch_function(funcHandle)?;
        function.check_args(argsSize)?;
        let target = launch_stream(stream, &function)?;
        let mut blob = copied_args(hostArgs, argsSize, "hostArgs")?;
        for (slot, data) in offsets {
            let address = blob.address_of(data);
            blob.bytes_mut()[slot..slot + 8].copy_from_slice(&address.to_ne_bytes());
        }
        submit_launch(&target, funcHandle, function, numBlocks, blob, options)
    })
}

/// Refuses a SIMT launch: an Atlas A2 has no SIMT kernels. Its handles are looked up first
/// as every launch looks them up, in parameter order (the function: unloaded → 107017; the
/// stream: no context → 107002, destroyed → 107017, another context's → 107003, on another
/// device than the function → 107044), so that a stale handle gets the code any launch gives.
fn simt_unsupported(func: aclrtFuncHandle, stream: aclrtStream) -> Res<()> {
    let function = launch_function(func)?;
    launch_stream(stream, &function)?;
    fail!(
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "SIMT kernel launches are not supported on an Atlas A2"
    )
}

/// Not supported on an Atlas A2 (207000), after the pointer checks (NULL `func` or `args` →
/// 100000, as every launch refuses them first) and the lookups of the function and the stream.
///
/// # Safety
/// No preconditions: no pointer is dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtLaunchSIMTKernelWithArgsArray(
    func: *mut c_void,
    gridDim: dim3,
    blockDim: dim3,
    dynUbufSize: usize,
    stream: aclrtStream,
    cfg: *mut aclrtLaunchKernelCfg,
    args: *mut *mut c_void,
) -> aclError {
    let _ = (gridDim, blockDim, dynUbufSize, cfg);
    guard("aclrtLaunchSIMTKernelWithArgsArray", || {
        non_null(func, "func")?;
        non_null(args, "args")?;
        simt_unsupported(func, stream)
    })
}

/// Not supported on an Atlas A2 (207000), after the pointer checks (NULL `func`, NULL
/// `hostArgs` with a non-zero `argsSize`, NULL `placeHolderArray` with a non-zero
/// `placeHolderNum` → 100000, as aclrtLaunchKernelWithHostArgs refuses them first) and the
/// lookups of the function and the stream.
///
/// # Safety
/// No preconditions: no pointer is dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtLaunchSIMTKernelWithHostArgs(
    func: *mut c_void,
    gridDim: dim3,
    blockDim: dim3,
    dynUbufSize: usize,
    stream: aclrtStream,
    cfg: *mut aclrtLaunchKernelCfg,
    hostArgs: *mut c_void,
    argsSize: usize,
    placeHolderArray: *mut aclrtPlaceHolderInfo,
    placeHolderNum: usize,
) -> aclError {
    let _ = (gridDim, blockDim, dynUbufSize, cfg);
    guard("aclrtLaunchSIMTKernelWithHostArgs", || {
        // Named as this function names it before args_pointers checks it as a handle.
        non_null(func, "func")?;
        args_pointers(func, hostArgs.cast_const(), argsSize, "hostArgs")?;
        if placeHolderNum != 0 {
            non_null(placeHolderArray, "placeHolderArray")?;
        }
        simt_unsupported(func, stream)
    })
}

/// Launches a kernel whose arguments are given as an array of pointers to each parameter's
/// host data, packed (copied at the call) by the kernel's declared parameter list. `func` must
/// be a function handle (the simulator has no compiler-generated kernel symbols). NULL `func`
/// or `args`, or `numBlocks` 0 → 100000, then the configuration's values (107000), before
/// the function is looked up (the reference lets `cfg` alone be NULL); then a stale function
/// → 107017, a kernel without a parameter list → 107000, and a NULL entry among the parameter
/// count's (known only from the function) → 100000; then the stream.
///
/// # Safety
/// `args` must hold one pointer per declared parameter, each valid for that parameter's size;
/// `cfg` NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtLaunchKernelWithArgsArray(
    func: *mut c_void,
    numBlocks: u32,
    stream: aclrtStream,
    cfg: *mut aclrtLaunchKernelCfg,
    args: *mut *mut c_void,
) -> aclError {
    guard("aclrtLaunchKernelWithArgsArray", || {
        // The ACL layer's refusals (100000) and the configuration's values come before the
        // function is looked up; only the entries wait for it, as their number is the
        // function's parameter count. Like every check needing only the function, they come
        // before the stream, the next parameter to be looked up.
        non_null(func, "func")?;
        non_null(args, "args")?;
        let options = launch_values(numBlocks, cfg)?;
        let function = launch_function(func)?;
        let params = function.param_list()?;
        let values = array(args.cast_const(), params.len(), "args")?;
        let mut blob = ArgsBlob::zeroed(function.args_size)?;
        for (i, (&(offset, size), &value)) in params.iter().zip(values).enumerate() {
            let value = bytes(value, size, &format!("args[{i}]"))?;
            blob.bytes_mut()[offset..offset + size].copy_from_slice(value);
        }
        let target = launch_stream(stream, &function)?;
        submit_launch(&target, func, function, numBlocks, blob, options)
    })
}

/// Launches a kernel with arguments built by aclrtKernelArgs* (finalized; else 107000).
/// `reserve` must be NULL. The NULL pointers, `numBlocks` and the configuration are checked
/// first; then the handles are looked up in parameter order (function, stream, args), and
/// the args are checked against the function last.
///
/// # Safety
/// `cfg` must be NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtLaunchKernelWithConfig(
    funcHandle: aclrtFuncHandle,
    numBlocks: u32,
    stream: aclrtStream,
    cfg: *mut aclrtLaunchKernelCfg,
    argsHandle: aclrtArgsHandle,
    reserve: *mut c_void,
) -> aclError {
    guard("aclrtLaunchKernelWithConfig", || {
        non_null(funcHandle, "funcHandle")?;
        non_null(argsHandle, "argsHandle")?;
        ensure!(
            reserve.is_null(),
            ACL_ERROR_INVALID_PARAM,
            "reserve must be NULL"
        );
        let options = launch_values(numBlocks, cfg)?;
        // The three handles in parameter order: the function, the stream, the args.
        let function = launch_function(funcHandle)?;
        let target = launch_stream(stream, &function)?;
        let (_, args) = resolve_args(sim()?, argsHandle)?;
        ensure!(
            args.function == handle::from_ptr(funcHandle),
            ACL_ERROR_RT_PARAM_INVALID,
            "the args were built for another function"
        );
        let blob = args.blob()?;
        function.check_args(blob.len())?;
        submit_launch(&target, funcHandle, function, numBlocks, blob, options)
    })
}

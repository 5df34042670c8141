//! The aclrtKernelArgs* builder of launch arguments: handles the runtime allocates
//! (aclrtKernelArgsInit) or that live in the caller's memory (aclrtKernelArgsInitByUserMem).

use std::ffi::c_void;
use std::sync::Arc;

use npu_sys::*;

use super::check::bytes;
use crate::error::{Res, ensure, guard, non_null, write_out};
use crate::handle::{self, Handle};
use crate::kernel::{ArgsBuilder, Function, ParamRef};
use crate::sim::{Sim, sim};
use crate::sync::lock;

/// Starts building the arguments of a launch of `funcHandle`.
///
/// # Safety
/// `argsHandle` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtKernelArgsInit(
    funcHandle: aclrtFuncHandle,
    argsHandle: *mut aclrtArgsHandle,
) -> aclError {
    guard("aclrtKernelArgsInit", || {
        non_null(funcHandle, "funcHandle")?;
        non_null(argsHandle, "argsHandle")?;
        let sim = sim()?;
        let func = handle::from_ptr(funcHandle);
        let function = sim.functions.resolve(func)?;
        let handle = sim.args.insert(Arc::new(ArgsBuilder::new(func)))?;
        adopt(sim, &function, handle)?;
        write_out(argsHandle, "argsHandle", handle::to_ptr(handle))
    })
}

fn new_param(
    sim: &Sim,
    args: Handle,
    builder: &ArgsBuilder,
    index: usize,
    out: *mut aclrtParamHandle,
) -> Res<()> {
    let handle = sim.params.insert(Arc::new(ParamRef { args, index }))?;
    builder.remember_param(handle);
    write_out(out, "paramHandle", handle::to_ptr(handle))
}

/// Appends a parameter (the value is copied), aligned as in a C struct; at most 128.
///
/// # Safety
/// `param` must be valid for `paramSize` bytes; `paramHandle` NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtKernelArgsAppend(
    argsHandle: aclrtArgsHandle,
    param: *mut c_void,
    paramSize: usize,
    paramHandle: *mut aclrtParamHandle,
) -> aclError {
    guard("aclrtKernelArgsAppend", || {
        non_null(argsHandle, "argsHandle")?;
        non_null(paramHandle, "paramHandle")?;
        ensure!(paramSize != 0, ACL_ERROR_INVALID_PARAM, "paramSize is 0");
        let value = bytes(param, paramSize, "param")?;
        let sim = sim()?;
        let (args, builder) = resolve_args(sim, argsHandle)?;
        let index = builder.append(value)?;
        new_param(sim, args, &builder, index, paramHandle)
    })
}

/// Appends a placeholder: a pointer slot set at launch to a copy of the data written into its
/// buffer (aclrtKernelArgsGetPlaceHolderBuffer).
///
/// # Safety
/// `paramHandle` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtKernelArgsAppendPlaceHolder(
    argsHandle: aclrtArgsHandle,
    paramHandle: *mut aclrtParamHandle,
) -> aclError {
    guard("aclrtKernelArgsAppendPlaceHolder", || {
        non_null(argsHandle, "argsHandle")?;
        non_null(paramHandle, "paramHandle")?;
        let sim = sim()?;
        let (args, builder) = resolve_args(sim, argsHandle)?;
        let index = builder.append_placeholder()?;
        new_param(sim, args, &builder, index, paramHandle)
    })
}

/// The parameter a param handle names, checked to belong to `args`.
fn param_of(
    sim: &Sim,
    args: aclrtArgsHandle,
    param: aclrtParamHandle,
) -> Res<(Arc<ArgsBuilder>, usize)> {
    non_null(args, "argsHandle")?;
    non_null(param, "paramHandle")?;
    let (args, builder) = resolve_args(sim, args)?;
    let param = sim.params.resolve(handle::from_ptr(param))?;
    ensure!(
        param.args == args,
        ACL_ERROR_RT_PARAM_INVALID,
        "the parameter belongs to other kernel args"
    );
    Ok((builder, param.index))
}

/// A zeroed host buffer of `dataSize` bytes for a placeholder's data (valid until the next call
/// for the same placeholder).
///
/// # Safety
/// `bufferAddr` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtKernelArgsGetPlaceHolderBuffer(
    argsHandle: aclrtArgsHandle,
    paramHandle: aclrtParamHandle,
    dataSize: usize,
    bufferAddr: *mut *mut c_void,
) -> aclError {
    guard("aclrtKernelArgsGetPlaceHolderBuffer", || {
        non_null(bufferAddr, "bufferAddr")?;
        ensure!(dataSize != 0, ACL_ERROR_INVALID_PARAM, "dataSize is 0");
        let (builder, index) = param_of(sim()?, argsHandle, paramHandle)?;
        let buffer = builder.placeholder_buffer(index, dataSize)?;
        write_out(bufferAddr, "bufferAddr", buffer.cast::<c_void>())
    })
}

/// Replaces a value parameter (same size; placeholders cannot be updated). Finalize again
/// before the next launch.
///
/// # Safety
/// `param` must be valid for `paramSize` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtKernelArgsParaUpdate(
    argsHandle: aclrtArgsHandle,
    paramHandle: aclrtParamHandle,
    param: *mut c_void,
    paramSize: usize,
) -> aclError {
    guard("aclrtKernelArgsParaUpdate", || {
        ensure!(paramSize != 0, ACL_ERROR_INVALID_PARAM, "paramSize is 0");
        let value = bytes(param, paramSize, "param")?;
        let (builder, index) = param_of(sim()?, argsHandle, paramHandle)?;
        builder.update(index, value)
    })
}

/// Marks the arguments complete; launches use them as they are now. Arguments in the
/// caller's memory must fit it, placeholders' data included (107000).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtKernelArgsFinalize(argsHandle: aclrtArgsHandle) -> aclError {
    guard("aclrtKernelArgsFinalize", || {
        non_null(argsHandle, "argsHandle")?;
        resolve_args(sim()?, argsHandle)?.1.finalize()
    })
}

/// The token of an args handle and its builder: the handle itself, or, for caller memory given
/// to aclrtKernelArgsInitByUserMem, the token registered for that address. The caller's
/// memory is never read.
pub(super) fn resolve_args(sim: &Sim, args: aclrtArgsHandle) -> Res<(Handle, Arc<ArgsBuilder>)> {
    let token = lock(&sim.user_args)
        .get(&(args as usize))
        .copied()
        .unwrap_or(handle::from_ptr(args));
    Ok((token, sim.args.resolve(token)?))
}

/// Retires an args handle with its param handles (and its caller-memory address).
/// Gives a new args handle to its function, or retires it if the function was retired since.
fn adopt(sim: &Sim, function: &Function, args: Handle) -> Res<()> {
    let adopted = function.adopt_args(args);
    if adopted.is_err() {
        retire_args(sim, args);
    }
    adopted
}

pub(super) fn retire_args(sim: &Sim, args: Handle) {
    let Some(builder) = sim.args.remove(args) else {
        return;
    };
    for param in builder.param_handles() {
        sim.params.remove(param);
    }
    if let Some((address, _)) = builder.user_memory {
        let mut user_args = lock(&sim.user_args);
        if user_args.get(&address) == Some(&args) {
            user_args.remove(&address);
        }
    }
}

/// The bytes of caller memory an args handle of aclrtKernelArgsInitByUserMem takes. The
/// simulator keeps the arguments' state itself, keyed by the memory's address, so the memory
/// only has to exist: it is never read or written.
const HANDLE_MEM_SIZE: usize = 8;

/// The caller memory an args handle for aclrtKernelArgsInitByUserMem needs (8 bytes).
///
/// # Safety
/// `memSize` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtKernelArgsGetHandleMemSize(
    funcHandle: aclrtFuncHandle,
    memSize: *mut usize,
) -> aclError {
    guard("aclrtKernelArgsGetHandleMemSize", || {
        non_null(funcHandle, "funcHandle")?;
        non_null(memSize, "memSize")?;
        sim()?.functions.resolve(handle::from_ptr(funcHandle))?;
        write_out(memSize, "memSize", HANDLE_MEM_SIZE)
    })
}

/// The argument memory a launch needs for `userArgsSize` bytes of parameters (their 8-aligned
/// sizes summed, placeholders' data included): the same, since a simulated kernel has no
/// arguments of the runtime's own to add.
///
/// # Safety
/// `actualArgsSize` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtKernelArgsGetMemSize(
    funcHandle: aclrtFuncHandle,
    userArgsSize: usize,
    actualArgsSize: *mut usize,
) -> aclError {
    guard("aclrtKernelArgsGetMemSize", || {
        non_null(funcHandle, "funcHandle")?;
        non_null(actualArgsSize, "actualArgsSize")?;
        sim()?.functions.resolve(handle::from_ptr(funcHandle))?;
        write_out(actualArgsSize, "actualArgsSize", userArgsSize)
    })
}

/// Starts building the arguments of a launch of `funcHandle` in caller memory: `argsHandle`
/// (aclrtKernelArgsGetHandleMemSize bytes) becomes the handle, and the packed arguments must
/// fit the `actualArgsSize` bytes of `userHostMem` (aclrtKernelArgsGetMemSize), else appending
/// or finalizing fails with 107000. Initializing the same handle memory again starts afresh.
///
/// # Safety
/// No preconditions: the caller's memory is never dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtKernelArgsInitByUserMem(
    funcHandle: aclrtFuncHandle,
    argsHandle: aclrtArgsHandle,
    userHostMem: *mut c_void,
    actualArgsSize: usize,
) -> aclError {
    guard("aclrtKernelArgsInitByUserMem", || {
        non_null(funcHandle, "funcHandle")?;
        non_null(argsHandle, "argsHandle")?;
        non_null(userHostMem, "userHostMem")?;
        let sim = sim()?;
        let func = handle::from_ptr(funcHandle);
        let function = sim.functions.resolve(func)?;
        let address = argsHandle as usize;
        let builder = ArgsBuilder::in_user_memory(func, address, actualArgsSize);
        let token = sim.args.insert(Arc::new(builder))?;
        adopt(sim, &function, token)?;
        let previous = lock(&sim.user_args).insert(address, token);
        if let Some(previous) = previous {
            retire_args(sim, previous);
        }
        Ok(())
    })
}

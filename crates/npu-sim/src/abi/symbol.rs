//! Device variables by their symbol (aclrtGetSymbolAddress, aclrtGetSymbolSize,
//! aclrtMemcpyToSymbol[Async], aclrtMemcpyFromSymbol[Async]). On CANN the symbol is the address
//! of a `__gm__` variable of a program compiled together with its kernels; on the simulator it
//! is the address of a device global (NPUSIM_GLOBAL) of a loaded kernel library, which a program
//! linked against that library takes as `&variable`. The dynamic loader names the symbol at that
//! address; a loaded binary of the same library exporting it there makes it a device variable.

use std::ffi::c_void;

use npu_sys::*;

use super::copy::memcpy;
use crate::context;
use crate::error::{Res, ensure, fail, guard, non_null, write_out};
use crate::sim::sim;

/// The device variable at `symbol`: its address and size. NULL → 100000; no current context →
/// 107002; an address that is not the start of a device global of a loaded binary → 107043
/// ACL_ERROR_RT_INVALID_SYMBOL, the code every symbol function's header names for an invalid
/// device symbol (aclrtGetFuncBySymbol, whose header names none, keeps 107042).
fn variable(symbol: *const c_void) -> Res<(usize, usize)> {
    non_null(symbol, "symbol")?;
    let sim = sim()?;
    let device = context::current(sim)?.device.id;
    let address = symbol as usize;
    if let Some(name) = crate::kernel::symbol_name(address) {
        for binary in sim.binaries.live() {
            if binary.exports_at(&name, address) {
                return binary.global(&sim.memory, &name, device);
            }
        }
    }
    fail!(
        ACL_ERROR_RT_INVALID_SYMBOL,
        "{symbol:p} is not a device variable: no loaded binary declares a global there \
         (NPUSIM_GLOBAL)"
    )
}

/// The device address of the variable `symbol` names. NULL devPtr → 100000.
///
/// # Safety
/// `devPtr` must be NULL or valid for a write; `symbol` is only looked up.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetSymbolAddress(
    symbol: *const c_void,
    devPtr: *mut *mut c_void,
) -> aclError {
    guard("aclrtGetSymbolAddress", || {
        non_null(devPtr, "devPtr")?;
        let (address, _) = variable(symbol)?;
        write_out(devPtr, "devPtr", address as *mut c_void)
    })
}

/// The size of the variable `symbol` names. NULL size → 100000.
///
/// # Safety
/// `size` must be NULL or valid for a write; `symbol` is only looked up.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetSymbolSize(symbol: *const c_void, size: *mut usize) -> aclError {
    guard("aclrtGetSymbolSize", || {
        non_null(size, "size")?;
        let (_, len) = variable(symbol)?;
        write_out(size, "size", len)
    })
}

/// The device address `offset` bytes into the variable `symbol` names, with the bytes left
/// from there, after the checks of a copy to or from it, all but the variable's lookup made
/// first (ACL_ERROR_INVALID_PARAM, the one code besides 107043 the headers name, "for error
/// input"): NULL `symbol`, a NULL `host` pointer (the copy's `src` or `dst`; whatever `count`,
/// as aclrtMemcpy refuses it), `count` above `dst_max` (the copies from the variable), a
/// `kind` not one of `kinds`; then the variable is looked up (107002, 107043) and
/// `offset + count` must stay inside it (100000), a copy of 0 bytes included: the reference
/// states the bound for every copy.
fn inside(
    symbol: *const c_void,
    host: *const c_void,
    dst_max: Option<usize>,
    count: usize,
    offset: usize,
    kind: aclrtMemcpyKind,
    kinds: [aclrtMemcpyKind; 2],
) -> Res<(*mut c_void, usize)> {
    non_null(symbol, "symbol")?;
    let host_name = if dst_max.is_some() { "dst" } else { "src" };
    non_null(host, host_name)?;
    if let Some(dst_max) = dst_max {
        ensure!(
            count <= dst_max,
            ACL_ERROR_INVALID_PARAM,
            "count ({count}) is greater than dstMax ({dst_max})"
        );
    }
    ensure!(
        kinds.contains(&kind),
        ACL_ERROR_INVALID_PARAM,
        "copy kind {kind} is neither {} nor ACL_MEMCPY_DEFAULT ({})",
        kinds[0],
        ACL_MEMCPY_DEFAULT
    );
    let (address, len) = variable(symbol)?;
    ensure!(
        offset.checked_add(count).is_some_and(|end| end <= len),
        ACL_ERROR_INVALID_PARAM,
        "offset {offset} + count {count} runs past the {len}-byte variable"
    );
    Ok(((address + offset) as *mut c_void, len - offset))
}

const TO: [aclrtMemcpyKind; 2] = [ACL_MEMCPY_HOST_TO_DEVICE, ACL_MEMCPY_DEFAULT];
const FROM: [aclrtMemcpyKind; 2] = [ACL_MEMCPY_DEVICE_TO_HOST, ACL_MEMCPY_DEFAULT];

/// Copies `count` bytes from `src` into the variable at `offset`, as aclrtMemcpy.
///
/// # Safety
/// `src` must be valid for reads of `count` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemcpyToSymbol(
    symbol: *const c_void,
    src: *const c_void,
    count: usize,
    offset: usize,
    kind: aclrtMemcpyKind,
) -> aclError {
    guard("aclrtMemcpyToSymbol", || {
        let (dst, room) = inside(symbol, src, None, count, offset, kind, TO)?;
        memcpy(dst, room, src, count, kind, None)
    })
}

/// Copies `count` bytes from `src` into the variable at `offset` on a stream, as
/// aclrtMemcpyAsync (pageable host memory: the call returns once the copy is done).
///
/// # Safety
/// `src` must stay valid for reads of `count` bytes until the copy has run.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemcpyToSymbolAsync(
    symbol: *const c_void,
    src: *const c_void,
    count: usize,
    offset: usize,
    kind: aclrtMemcpyKind,
    stream: aclrtStream,
) -> aclError {
    guard("aclrtMemcpyToSymbolAsync", || {
        let (dst, room) = inside(symbol, src, None, count, offset, kind, TO)?;
        memcpy(dst, room, src, count, kind, Some(stream))
    })
}

/// Copies `count` bytes of the variable from `offset` into `dst` (at most `dstMax`), as
/// aclrtMemcpy.
///
/// # Safety
/// `dst` must be valid for writes of `dstMax` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemcpyFromSymbol(
    dst: *mut c_void,
    dstMax: usize,
    symbol: *const c_void,
    count: usize,
    offset: usize,
    kind: aclrtMemcpyKind,
) -> aclError {
    guard("aclrtMemcpyFromSymbol", || {
        let (src, _) = inside(
            symbol,
            dst.cast_const(),
            Some(dstMax),
            count,
            offset,
            kind,
            FROM,
        )?;
        memcpy(dst, dstMax, src, count, kind, None)
    })
}

/// Copies `count` bytes of the variable from `offset` into `dst` on a stream, as
/// aclrtMemcpyAsync (pageable host memory: the call returns once the copy is done).
///
/// # Safety
/// `dst` must stay valid for writes of `dstMax` bytes until the copy has run.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemcpyFromSymbolAsync(
    dst: *mut c_void,
    dstMax: usize,
    symbol: *const c_void,
    count: usize,
    offset: usize,
    kind: aclrtMemcpyKind,
    stream: aclrtStream,
) -> aclError {
    guard("aclrtMemcpyFromSymbolAsync", || {
        let (src, _) = inside(
            symbol,
            dst.cast_const(),
            Some(dstMax),
            count,
            offset,
            kind,
            FROM,
        )?;
        memcpy(dst, dstMax, src, count, kind, Some(stream))
    })
}

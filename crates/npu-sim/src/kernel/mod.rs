//! Simulated kernels: host functions with one C signature, loaded from shared objects or
//! registered in-process.
//!
//! A kernel is `int32_t kernel(uint32_t blockIdx, uint32_t blockNum, void *args)` (see
//! `include/npusim/kernel.h`). A launch with `numBlocks` blocks calls it once per block, in
//! parallel across the host's cores; a non-zero return is a trap and fails the launch with
//! ACL_ERROR_RT_AICORE_EXCEPTION (507015), or ACL_ERROR_RT_VECTOR_CORE_EXCEPTION (507035) on the
//! AIV engine.
//!
//! `args` is NULL when the launch passes no arguments. The ABI passes no size, so a kernel
//! declares how many bytes of arguments it reads, as a real kernel binary describes its
//! parameters: a shared object with `NPUSIM_KERNEL_ARGS_SIZE(kernel, bytes)`, an in-process
//! kernel with [`register_with_args_size`]. A launch passing fewer bytes is refused with
//! ACL_ERROR_RT_PARAM_INVALID (107000) before it is queued, so such a kernel never sees a NULL
//! or short argument buffer. Kernels that declare nothing get whatever the launch passes.
//!
//! Kernels reach the ACL API in two ways:
//! - a shared object exporting them by name, loaded with `aclrtBinaryLoadFromFile` (or
//!   `aclrtBinaryLoadFromData` with the file's bytes); [`LIBRARY_PATH`] is such a library with
//!   the shipped kernels;
//! - kernels registered in-process with [`register`] / [`register_entry`] (or their
//!   `_with_args_size` forms), made loadable by passing [`registry_image`] to
//!   `aclrtBinaryLoadFromData`.
//!
//! Either way `aclrtBinaryGetFunction(bin, name, &func)` yields the function handle.
//!
//! ```
//! # extern crate ascendcl as npu_sim;
//! use std::ffi::{CString, c_void};
//! use std::ptr;
//! use npu_sim::abi::*;
//! use npu_sim::kernel;
//!
//! // A kernel that stores its block count through the pointer it gets as argument.
//! kernel::register("count_blocks", |_block, blocks, args: *mut c_void| {
//!     // SAFETY: launched below with a pointer to one u32 of device memory as argument.
//!     unsafe { *(args as *mut u32) = blocks };
//!     0
//! })
//! .unwrap();
//!
//! let image = kernel::registry_image(&["count_blocks"]);
//! // SAFETY: every pointer passed is valid for the call's contract.
//! unsafe {
//!     assert_eq!(aclrtSetDevice(0), 0);
//!     let (mut bin, mut func, mut out) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
//!     assert_eq!(aclrtBinaryLoadFromData(image.as_ptr().cast(), image.len(), ptr::null(), &mut bin), 0);
//!     let name = CString::new("count_blocks").unwrap();
//!     assert_eq!(aclrtBinaryGetFunction(bin, name.as_ptr(), &mut func), 0);
//!     assert_eq!(aclrtMalloc(&mut out, 4, 0), 0);
//!     // aclrtLaunchKernel passes device memory as the args pointer.
//!     assert_eq!(aclrtLaunchKernel(func, 8, out, 4, ptr::null_mut()), 0);
//!     assert_eq!(aclrtSynchronizeStream(ptr::null_mut()), 0);
//!     let mut blocks = 0u32;
//!     assert_eq!(aclrtMemcpy((&raw mut blocks).cast(), 4, out, 4, 2), 0);
//!     assert_eq!(blocks, 8);
//! }
//! ```

mod args;
mod builtin;
pub(crate) mod globals;
mod image;
mod launch;
mod library;
mod registry;

use std::ffi::c_void;
use std::ops::Range;

pub(crate) use args::{ArgsBuilder, MAX_PARAMS, ParamRef, param_offsets, valid_param_list};
pub use builtin::{
    REDUCE_SUM_F32, ReduceSumArgs, SCALE_F32, ScaleArgs, VECTOR_ADD_F32, VectorAddArgs,
};
pub(crate) use image::symbol_name;
pub(crate) use launch::{ArgsBlob, Launch, LaunchArgs, LaunchAttrs};
pub(crate) use library::{Binary, BinaryData, Function, OpCallback};
pub use registry::{
    KernelError, register, register_entry, register_entry_with_args_size, register_with_args_size,
    register_with_params, registry_image,
};

/// The C signature of a simulated kernel.
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use std::ffi::c_void;
/// use npu_sim::kernel::{self, KernelEntry};
///
/// /// Sets the u32 its argument points at to the block count.
/// unsafe extern "C" fn count_blocks(_block: u32, blocks: u32, args: *mut c_void) -> i32 {
///     // SAFETY: launched with a pointer to one u32 as argument.
///     unsafe { *args.cast::<u32>() = blocks };
///     0
/// }
///
/// let entry: KernelEntry = count_blocks;
/// kernel::register_entry("count_blocks_entry", entry).unwrap();
/// ```
pub type KernelEntry =
    unsafe extern "C" fn(block_idx: u32, block_num: u32, args: *mut c_void) -> i32;

/// The prefix of the symbol through which a kernel library declares a kernel's argument size:
/// `NPUSIM_KERNEL_ARGS_SIZE(kernel, bytes)` in `npusim/kernel.h` defines the `uint64_t`
/// `npusimArgsSize_<kernel>`.
pub(crate) const ARGS_SIZE_PREFIX: &str = "npusimArgsSize_";

/// The prefix of the symbol through which a kernel library declares a kernel's parameter
/// list: `NPUSIM_KERNEL_PARAMS(kernel, sizes...)` defines the zero-terminated `uint64_t`
/// array `npusimParams_<kernel>`.
pub(crate) const PARAMS_PREFIX: &str = "npusimParams_";

/// The prefix of the symbol through which a kernel library declares a device global:
/// `NPUSIM_GLOBAL(name)` defines the `uint64_t` `npusimGlobalSize_<name>`, the variable's size.
pub(crate) const GLOBAL_SIZE_PREFIX: &str = "npusimGlobalSize_";

/// Path of the shared object with the shipped C kernels ([`VECTOR_ADD_F32`], [`SCALE_F32`],
/// [`REDUCE_SUM_F32`]), built by npu-sim's build script; load it with
/// `aclrtBinaryLoadFromFile`.
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use std::{ffi::CString, ptr};
/// use npu_sim::{abi::*, kernel};
///
/// let path = CString::new(kernel::LIBRARY_PATH).unwrap();
/// // SAFETY: every pointer passed is valid for the call's contract; the library is npu-sim's.
/// unsafe {
///     assert_eq!(aclrtSetDevice(0), 0);
///     let (mut bin, mut add) = (ptr::null_mut(), ptr::null_mut());
///     assert_eq!(aclrtBinaryLoadFromFile(path.as_ptr(), ptr::null_mut(), &mut bin), 0);
///     assert_eq!(aclrtBinaryGetFunction(bin, c"vector_add_f32".as_ptr(), &mut add), 0);
///     assert_eq!(aclrtBinaryUnLoad(bin), 0);
/// }
/// ```
pub const LIBRARY_PATH: &str = env!("NPU_SIM_KERNELS_SO");

/// The share of `n` elements that block `block_idx` of `block_num` handles (the same split as
/// `npusimBlockRange` in `npusim/kernel.h`).
///
/// ```
/// # extern crate ascendcl as npu_sim;
/// use npu_sim::kernel::block_range;
/// assert_eq!(block_range(0, 3, 10), 0..4);
/// assert_eq!(block_range(2, 3, 10), 8..10);
/// assert_eq!(block_range(5, 8, 3), 3..3);
/// ```
pub fn block_range(block_idx: u32, block_num: u32, n: u64) -> Range<usize> {
    let chunk = if block_num == 0 {
        n
    } else {
        n.div_ceil(u64::from(block_num))
    };
    let begin = u64::from(block_idx).saturating_mul(chunk).min(n);
    let end = begin.saturating_add(chunk).min(n);
    begin as usize..end as usize
}

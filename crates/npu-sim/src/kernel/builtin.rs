//! The kernels the simulator ships, in Rust (registered in-process at start-up). The same
//! kernels are compiled from `kernels/npusim_kernels.c` into [`super::LIBRARY_PATH`].

use std::ffi::c_void;

use bytemuck::{Pod, Zeroable};

use super::block_range;

/// Name of the f32 vector add kernel (args: [`VectorAddArgs`]).
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use std::{ffi::CString, ptr};
/// use npu_sim::{abi::*, kernel::VECTOR_ADD_F32};
///
/// // SAFETY: every pointer passed is valid for the call's contract.
/// unsafe {
/// #   assert_eq!(aclrtSetDevice(0), 0);
/// #   let path = CString::new(npu_sim::kernel::LIBRARY_PATH).unwrap();
/// #   let mut bin = ptr::null_mut();
/// #   assert_eq!(aclrtBinaryLoadFromFile(path.as_ptr(), ptr::null_mut(), &mut bin), 0);
///     // The shipped C library and the in-process registry both define it under this name.
///     let name = CString::new(VECTOR_ADD_F32).unwrap();
///     let mut function = ptr::null_mut();
///     assert_eq!(aclrtBinaryGetFunction(bin, name.as_ptr(), &mut function), 0);
/// }
/// ```
pub const VECTOR_ADD_F32: &str = "vector_add_f32";
/// Name of the in-place f32 scale kernel (args: [`ScaleArgs`]).
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use std::{ffi::CString, ptr};
/// use npu_sim::{abi::*, kernel::SCALE_F32};
///
/// // SAFETY: every pointer passed is valid for the call's contract.
/// unsafe {
/// #   assert_eq!(aclrtSetDevice(0), 0);
/// #   let path = CString::new(npu_sim::kernel::LIBRARY_PATH).unwrap();
/// #   let mut bin = ptr::null_mut();
/// #   assert_eq!(aclrtBinaryLoadFromFile(path.as_ptr(), ptr::null_mut(), &mut bin), 0);
///     // The shipped C library and the in-process registry both define it under this name.
///     let name = CString::new(SCALE_F32).unwrap();
///     let mut function = ptr::null_mut();
///     assert_eq!(aclrtBinaryGetFunction(bin, name.as_ptr(), &mut function), 0);
/// }
/// ```
pub const SCALE_F32: &str = "scale_f32";
/// Name of the f32 partial-sum kernel (args: [`ReduceSumArgs`]).
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use std::{ffi::CString, ptr};
/// use npu_sim::{abi::*, kernel::REDUCE_SUM_F32};
///
/// // SAFETY: every pointer passed is valid for the call's contract.
/// unsafe {
/// #   assert_eq!(aclrtSetDevice(0), 0);
/// #   let path = CString::new(npu_sim::kernel::LIBRARY_PATH).unwrap();
/// #   let mut bin = ptr::null_mut();
/// #   assert_eq!(aclrtBinaryLoadFromFile(path.as_ptr(), ptr::null_mut(), &mut bin), 0);
///     // The shipped C library and the in-process registry both define it under this name.
///     let name = CString::new(REDUCE_SUM_F32).unwrap();
///     let mut function = ptr::null_mut();
///     assert_eq!(aclrtBinaryGetFunction(bin, name.as_ptr(), &mut function), 0);
/// }
/// ```
pub const REDUCE_SUM_F32: &str = "reduce_sum_f32";

/// Arguments of [`VECTOR_ADD_F32`]: `c[i] = a[i] + b[i]` for `i < n`. Pointers are device
/// addresses as integers, so the struct is plain bytes (C: `npusimVectorAddArgs`).
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use std::ptr;
/// use npu_sim::abi::*;
/// use npu_sim::kernel::{VECTOR_ADD_F32, VectorAddArgs};
///
/// # /// Copies `data` into new device memory and returns its address.
/// # fn upload(data: &[f32]) -> u64 {
/// #     let (mut dev, bytes) = (ptr::null_mut(), size_of_val(data).max(4));
/// #     // SAFETY: `dev` is a valid out pointer and `data` holds `bytes` readable bytes.
/// #     unsafe {
/// #         assert_eq!(aclrtMalloc(&mut dev, bytes, 0), 0);
/// #         if !data.is_empty() {
/// #             assert_eq!(aclrtMemcpy(dev, bytes, data.as_ptr().cast(), bytes, 1), 0);
/// #         }
/// #     }
/// #     dev as u64
/// # }
/// # /// Reads `n` f32 back from device address `addr`.
/// # fn download(addr: u64, n: usize) -> Vec<f32> {
/// #     let mut out = vec![0f32; n];
/// #     // SAFETY: `addr` holds `n` f32 and `out` has room for them.
/// #     unsafe { assert_eq!(aclrtMemcpy(out.as_mut_ptr().cast(), n * 4, addr as _, n * 4, 2), 0) };
/// #     out
/// # }
/// # /// Launches the kernel `name` with `blocks` blocks and the arguments `args` on the
/// # /// default stream, and waits for it.
/// # fn launch<T: bytemuck::Pod>(name: &str, blocks: u32, args: T) {
/// #     let image = npu_sim::kernel::registry_image(&[name]);
/// #     let name = std::ffi::CString::new(name).unwrap();
/// #     let mut bytes = bytemuck::bytes_of(&args).to_vec();
/// #     let (mut bin, mut function, null) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
/// #     // SAFETY: every pointer passed is valid for the call's contract.
/// #     unsafe {
/// #         assert_eq!(aclrtBinaryLoadFromData(image.as_ptr().cast(), image.len(), ptr::null(), &mut bin), 0);
/// #         assert_eq!(aclrtBinaryGetFunction(bin, name.as_ptr(), &mut function), 0);
/// #         let (args, size) = (bytes.as_mut_ptr().cast(), bytes.len());
/// #         assert_eq!(aclrtLaunchKernelWithHostArgs(function, blocks, null, ptr::null_mut(), args, size, ptr::null_mut(), 0), 0);
/// #         assert_eq!(aclrtSynchronizeStream(null), 0);
/// #     }
/// # }
/// # // SAFETY: no pointers.
/// # assert_eq!(unsafe { aclrtSetDevice(0) }, 0);
/// let (a, b, c) = (upload(&[1.0, 2.0, 3.0]), upload(&[10.0, 20.0, 30.0]), upload(&[0.0; 3]));
/// launch(VECTOR_ADD_F32, 2, VectorAddArgs { a, b, c, n: 3 });
/// assert_eq!(download(c, 3), [11.0, 22.0, 33.0]);
/// ```
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Pod, Zeroable)]
pub struct VectorAddArgs {
    /// Address of the first input (`n` f32).
    pub a: u64,
    /// Address of the second input (`n` f32).
    pub b: u64,
    /// Address of the output (`n` f32).
    pub c: u64,
    /// Element count.
    pub n: u64,
}

/// Arguments of [`SCALE_F32`]: `x[i] *= alpha` for `i < n` (C: `npusimScaleArgs`).
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use std::ptr;
/// use npu_sim::abi::*;
/// use npu_sim::kernel::{SCALE_F32, ScaleArgs};
///
/// # /// Copies `data` into new device memory and returns its address.
/// # fn upload(data: &[f32]) -> u64 {
/// #     let (mut dev, bytes) = (ptr::null_mut(), size_of_val(data).max(4));
/// #     // SAFETY: `dev` is a valid out pointer and `data` holds `bytes` readable bytes.
/// #     unsafe {
/// #         assert_eq!(aclrtMalloc(&mut dev, bytes, 0), 0);
/// #         if !data.is_empty() {
/// #             assert_eq!(aclrtMemcpy(dev, bytes, data.as_ptr().cast(), bytes, 1), 0);
/// #         }
/// #     }
/// #     dev as u64
/// # }
/// # /// Reads `n` f32 back from device address `addr`.
/// # fn download(addr: u64, n: usize) -> Vec<f32> {
/// #     let mut out = vec![0f32; n];
/// #     // SAFETY: `addr` holds `n` f32 and `out` has room for them.
/// #     unsafe { assert_eq!(aclrtMemcpy(out.as_mut_ptr().cast(), n * 4, addr as _, n * 4, 2), 0) };
/// #     out
/// # }
/// # /// Launches the kernel `name` with `blocks` blocks and the arguments `args` on the
/// # /// default stream, and waits for it.
/// # fn launch<T: bytemuck::Pod>(name: &str, blocks: u32, args: T) {
/// #     let image = npu_sim::kernel::registry_image(&[name]);
/// #     let name = std::ffi::CString::new(name).unwrap();
/// #     let mut bytes = bytemuck::bytes_of(&args).to_vec();
/// #     let (mut bin, mut function, null) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
/// #     // SAFETY: every pointer passed is valid for the call's contract.
/// #     unsafe {
/// #         assert_eq!(aclrtBinaryLoadFromData(image.as_ptr().cast(), image.len(), ptr::null(), &mut bin), 0);
/// #         assert_eq!(aclrtBinaryGetFunction(bin, name.as_ptr(), &mut function), 0);
/// #         let (args, size) = (bytes.as_mut_ptr().cast(), bytes.len());
/// #         assert_eq!(aclrtLaunchKernelWithHostArgs(function, blocks, null, ptr::null_mut(), args, size, ptr::null_mut(), 0), 0);
/// #         assert_eq!(aclrtSynchronizeStream(null), 0);
/// #     }
/// # }
/// # // SAFETY: no pointers.
/// # assert_eq!(unsafe { aclrtSetDevice(0) }, 0);
/// let x = upload(&[1.0, 2.0, 3.0, 4.0]);
/// launch(SCALE_F32, 2, ScaleArgs { x, n: 4, alpha: 0.5, reserved: 0 });
/// assert_eq!(download(x, 4), [0.5, 1.0, 1.5, 2.0]);
/// ```
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
pub struct ScaleArgs {
    /// Address of the data (`n` f32), scaled in place.
    pub x: u64,
    /// Element count.
    pub n: u64,
    /// The factor.
    pub alpha: f32,
    /// Padding; zero.
    pub reserved: u32,
}

/// Arguments of [`REDUCE_SUM_F32`]: `partials[block] = sum of the block's share of x[..n]`
/// (C: `npusimReduceSumArgs`). A full sum is two launches: B blocks into B partials, then one
/// block over the partials.
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use std::ptr;
/// use npu_sim::abi::*;
/// use npu_sim::kernel::{REDUCE_SUM_F32, ReduceSumArgs};
///
/// # /// Copies `data` into new device memory and returns its address.
/// # fn upload(data: &[f32]) -> u64 {
/// #     let (mut dev, bytes) = (ptr::null_mut(), size_of_val(data).max(4));
/// #     // SAFETY: `dev` is a valid out pointer and `data` holds `bytes` readable bytes.
/// #     unsafe {
/// #         assert_eq!(aclrtMalloc(&mut dev, bytes, 0), 0);
/// #         if !data.is_empty() {
/// #             assert_eq!(aclrtMemcpy(dev, bytes, data.as_ptr().cast(), bytes, 1), 0);
/// #         }
/// #     }
/// #     dev as u64
/// # }
/// # /// Reads `n` f32 back from device address `addr`.
/// # fn download(addr: u64, n: usize) -> Vec<f32> {
/// #     let mut out = vec![0f32; n];
/// #     // SAFETY: `addr` holds `n` f32 and `out` has room for them.
/// #     unsafe { assert_eq!(aclrtMemcpy(out.as_mut_ptr().cast(), n * 4, addr as _, n * 4, 2), 0) };
/// #     out
/// # }
/// # /// Launches the kernel `name` with `blocks` blocks and the arguments `args` on the
/// # /// default stream, and waits for it.
/// # fn launch<T: bytemuck::Pod>(name: &str, blocks: u32, args: T) {
/// #     let image = npu_sim::kernel::registry_image(&[name]);
/// #     let name = std::ffi::CString::new(name).unwrap();
/// #     let mut bytes = bytemuck::bytes_of(&args).to_vec();
/// #     let (mut bin, mut function, null) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
/// #     // SAFETY: every pointer passed is valid for the call's contract.
/// #     unsafe {
/// #         assert_eq!(aclrtBinaryLoadFromData(image.as_ptr().cast(), image.len(), ptr::null(), &mut bin), 0);
/// #         assert_eq!(aclrtBinaryGetFunction(bin, name.as_ptr(), &mut function), 0);
/// #         let (args, size) = (bytes.as_mut_ptr().cast(), bytes.len());
/// #         assert_eq!(aclrtLaunchKernelWithHostArgs(function, blocks, null, ptr::null_mut(), args, size, ptr::null_mut(), 0), 0);
/// #         assert_eq!(aclrtSynchronizeStream(null), 0);
/// #     }
/// # }
/// # // SAFETY: no pointers.
/// # assert_eq!(unsafe { aclrtSetDevice(0) }, 0);
/// // A full sum in two launches: 4 blocks into 4 partial sums, then 1 block over those.
/// let (x, partials, total) = (upload(&[1.0; 100]), upload(&[0.0; 4]), upload(&[0.0]));
/// launch(REDUCE_SUM_F32, 4, ReduceSumArgs { x, partials, n: 100 });
/// assert_eq!(download(partials, 4), [25.0; 4]);
/// launch(REDUCE_SUM_F32, 1, ReduceSumArgs { x: partials, partials: total, n: 4 });
/// assert_eq!(download(total, 1), [100.0]);
/// ```
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Pod, Zeroable)]
pub struct ReduceSumArgs {
    /// Address of the input (`n` f32).
    pub x: u64,
    /// Address of the output: one f32 per block.
    pub partials: u64,
    /// Element count.
    pub n: u64,
}

/// Reads a kernel's argument struct.
///
/// # Safety
/// `args` must be NULL or point at a readable `T` (alignment not required).
unsafe fn read_args<T: Pod>(args: *mut c_void) -> Option<T> {
    // SAFETY: the caller guarantees a non-NULL `args` points at a readable T.
    (!args.is_null()).then(|| unsafe { args.cast::<T>().read_unaligned() })
}

/// # Safety
/// Kernel ABI: `args` points at a [`VectorAddArgs`] whose addresses hold `n` f32 each.
pub(crate) unsafe extern "C" fn vector_add_f32(block: u32, blocks: u32, args: *mut c_void) -> i32 {
    // SAFETY: the kernel ABI (see above).
    let Some(p) = (unsafe { read_args::<VectorAddArgs>(args) }) else {
        return 1;
    };
    let (a, b, c) = (p.a as *const f32, p.b as *const f32, p.c as *mut f32);
    for i in block_range(block, blocks, p.n) {
        // SAFETY: i < n, and each array holds n f32 (kernel ABI); blocks write disjoint shares.
        unsafe { *c.add(i) = *a.add(i) + *b.add(i) };
    }
    0
}

/// # Safety
/// Kernel ABI: `args` points at a [`ScaleArgs`] whose `x` holds `n` f32.
pub(crate) unsafe extern "C" fn scale_f32(block: u32, blocks: u32, args: *mut c_void) -> i32 {
    // SAFETY: the kernel ABI (see above).
    let Some(p) = (unsafe { read_args::<ScaleArgs>(args) }) else {
        return 1;
    };
    let x = p.x as *mut f32;
    for i in block_range(block, blocks, p.n) {
        // SAFETY: i < n and x holds n f32 (kernel ABI); blocks write disjoint shares.
        unsafe { *x.add(i) *= p.alpha };
    }
    0
}

/// # Safety
/// Kernel ABI: `args` points at a [`ReduceSumArgs`]; `x` holds `n` f32 and `partials` one f32
/// per block.
pub(crate) unsafe extern "C" fn reduce_sum_f32(block: u32, blocks: u32, args: *mut c_void) -> i32 {
    // SAFETY: the kernel ABI (see above).
    let Some(p) = (unsafe { read_args::<ReduceSumArgs>(args) }) else {
        return 1;
    };
    let x = p.x as *const f32;
    let sum: f32 = block_range(block, blocks, p.n)
        // SAFETY: i < n and x holds n f32 (kernel ABI).
        .map(|i| unsafe { *x.add(i) })
        .sum();
    // SAFETY: partials holds one f32 per block and block < blocks.
    unsafe { *(p.partials as *mut f32).add(block as usize) = sum };
    0
}

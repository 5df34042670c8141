//! The kernels the simulator ships, in Rust (registered in-process at start-up). The same
//! kernels are compiled from `kernels/npusim_kernels.c` into [`super::LIBRARY_PATH`].

use std::ffi::c_void;

use bytemuck::{Pod, Zeroable};

use super::block_range;

/// Name of the f32 vector add kernel (args: [`VectorAddArgs`]).
pub const VECTOR_ADD_F32: &str = "vector_add_f32";
/// Name of the in-place f32 scale kernel (args: [`ScaleArgs`]).
pub const SCALE_F32: &str = "scale_f32";
/// Name of the f32 partial-sum kernel (args: [`ReduceSumArgs`]).
pub const REDUCE_SUM_F32: &str = "reduce_sum_f32";

/// Arguments of [`VECTOR_ADD_F32`]: `c[i] = a[i] + b[i]` for `i < n`. Pointers are device
/// addresses as integers, so the struct is plain bytes (C: `npusimVectorAddArgs`).
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

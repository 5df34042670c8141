//! Fixed facts of the simulated Atlas A2 (Ascend910B-class) device, shared by the queries that
//! report them (aclrtGetDeviceInfo, aclGetDeviceCapability, the resource limits).

/// AI (cube) cores.
pub(crate) const CUBE_CORES: u32 = 20;
/// Vector cores.
pub(crate) const VECTOR_CORES: u32 = 40;
/// The L2 cache in bytes.
pub(crate) const L2_CACHE_BYTES: i64 = 192 << 20;

/// What an Atlas A2 kernel's atomic operation can work on (aclrtAtomicOperationCapability
/// bits), the same on host memory and on another device's: `None` for a value that is no
/// aclrtAtomicOperation.
///
/// The SIMT operations (0-12) report nothing: an Atlas A2 runs no SIMT kernels. The DMA
/// atomics (Ascend C's SetAtomicAdd/Min/Max, applied by the transfer to global memory) reduce
/// signed 8-, 16- and 32-bit data (int8, int16, int32, half, bfloat16, float); the SIMD scalar
/// atomics work on signed and unsigned 32- and 64-bit scalars.
pub(crate) fn atomic_capability(operation: u32) -> Option<u32> {
    use npu_sys::*;
    let dma = ACL_RT_ATOMIC_CAPABILITY_SIGNED
        | ACL_RT_ATOMIC_CAPABILITY_REDUCTION
        | ACL_RT_ATOMIC_CAPABILITY_SCALAR8
        | ACL_RT_ATOMIC_CAPABILITY_SCALAR16
        | ACL_RT_ATOMIC_CAPABILITY_SCALAR32;
    let scalar = ACL_RT_ATOMIC_CAPABILITY_SIGNED
        | ACL_RT_ATOMIC_CAPABILITY_UNSIGNED
        | ACL_RT_ATOMIC_CAPABILITY_SCALAR32
        | ACL_RT_ATOMIC_CAPABILITY_SCALAR64;
    match operation {
        ACL_RT_ATOMIC_OPERATION_INTEGER_ADD..=ACL_RT_ATOMIC_OPERATION_FLOAT_MAX => Some(0),
        ACL_RT_ATOMIC_OPERATION_DMA_ADD..=ACL_RT_ATOMIC_OPERATION_DMA_MAX => Some(dma),
        ACL_RT_ATOMIC_OPERATION_SIMD_SCALAR_ADD..=ACL_RT_ATOMIC_OPERATION_SIMD_SCALAR_EXCH => {
            Some(scalar)
        }
        _ => None,
    }
}

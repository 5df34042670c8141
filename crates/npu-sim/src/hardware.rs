//! Fixed facts of the simulated Atlas A2 (Ascend910B-class) device, shared by the queries that
//! report them (aclrtGetDeviceInfo, aclGetDeviceCapability, the resource limits).

/// AI (cube) cores.
pub(crate) const CUBE_CORES: u32 = 20;
/// Vector cores.
pub(crate) const VECTOR_CORES: u32 = 40;
/// The L2 cache in bytes.
pub(crate) const L2_CACHE_BYTES: i64 = 192 << 20;

/// The buffers of one AI core in bytes (aclplatformGetDeviceInfo): the Unified Buffer, the
/// cube unit's L0 A/B (inputs) and C (output) buffers, L1, and the BT size (ACL_PLATFORM_BT_SIZE,
/// which the reference calls the base tile).
pub(crate) const UB_BYTES: u32 = 192 << 10;
pub(crate) const L0_A_BYTES: u32 = 64 << 10;
pub(crate) const L0_B_BYTES: u32 = 64 << 10;
pub(crate) const L0_C_BYTES: u32 = 128 << 10;
pub(crate) const L1_BYTES: u32 = 512 << 10;
pub(crate) const BT_BYTES: u32 = 1 << 10;
/// The cube and vector cores' clock in MHz.
pub(crate) const CORE_MHZ: u32 = 1800;
/// The AI core version's name, and the NPU architecture (aclplatformNpuArch's DAV_2201, the
/// reference's number for an Atlas A2).
pub(crate) const AIC_VERSION: &str = "AIC-C-220";
pub(crate) const NPU_ARCH: u32 = 2201;

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

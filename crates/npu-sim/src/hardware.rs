//! Fixed facts of the simulated Atlas A2 (Ascend910B-class) device, shared by the queries that
//! report them (aclrtGetDeviceInfo, aclGetDeviceCapability, the resource limits).

/// AI (cube) cores.
pub(crate) const CUBE_CORES: u32 = 20;
/// Vector cores.
pub(crate) const VECTOR_CORES: u32 = 40;
/// The L2 cache in bytes.
pub(crate) const L2_CACHE_BYTES: i64 = 192 << 20;

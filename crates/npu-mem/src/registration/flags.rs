//! Typed registration flags, and which engines can reach registered host memory.

use std::ops::BitOr;

use npu_core::ffi;
use npu_core::{Device, Result, acl_call_opt};

/// How [`HostRegistration`](crate::HostRegistration) registers memory
/// (`aclrtHostRegisterV2` flags). Combine with `|`; there is no empty set.
///
/// ```
/// use npu_mem::RegisterFlags;
///
/// let both = RegisterFlags::PINNED | RegisterFlags::MAPPED;
/// assert!(both.is_pinned() && both.is_mapped());
/// assert!(!RegisterFlags::PINNED.is_mapped());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RegisterFlags(u32);

impl RegisterFlags {
    /// Page-lock the memory, so async copies from and to it are real stream tasks
    /// (`ACL_HOST_REG_PINNED`).
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{HostRegistration, PageAlignedBuffer, RegisterFlags};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let buffer = PageAlignedBuffer::<u8>::new(4096)?;
    /// let pinned = HostRegistration::new(&ctx, buffer, RegisterFlags::PINNED)?;
    /// assert!(pinned.device_ptr().is_none(), "pinned, but not mapped for kernels");
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub const PINNED: RegisterFlags = RegisterFlags(ffi::ACL_HOST_REG_PINNED);
    /// Map the memory into the device's address space, for kernels to access through
    /// [`HostRegistration::device_ptr`](crate::HostRegistration::device_ptr)
    /// (`ACL_HOST_REG_MAPPED`).
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{HostRegistration, PageAlignedBuffer, RegisterFlags};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let buffer = PageAlignedBuffer::<u8>::new(4096)?;
    /// let mapped = HostRegistration::new(&ctx, buffer, RegisterFlags::MAPPED)?;
    /// assert!(mapped.device_ptr().is_some(), "kernels may reach it");
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub const MAPPED: RegisterFlags = RegisterFlags(ffi::ACL_HOST_REG_MAPPED);

    /// Whether `PINNED` is set.
    ///
    /// ```
    /// assert!(npu_mem::RegisterFlags::PINNED.is_pinned());
    /// ```
    pub fn is_pinned(self) -> bool {
        self.0 & ffi::ACL_HOST_REG_PINNED != 0
    }

    /// Whether `MAPPED` is set.
    ///
    /// ```
    /// assert!(npu_mem::RegisterFlags::MAPPED.is_mapped());
    /// ```
    pub fn is_mapped(self) -> bool {
        self.0 & ffi::ACL_HOST_REG_MAPPED != 0
    }

    /// The raw `aclrtHostRegisterV2` flag word.
    ///
    /// ```
    /// assert_eq!(npu_mem::RegisterFlags::MAPPED.raw(), 0x2);
    /// ```
    pub fn raw(self) -> u32 {
        self.0
    }
}

impl BitOr for RegisterFlags {
    type Output = RegisterFlags;

    fn bitor(self, other: RegisterFlags) -> RegisterFlags {
        RegisterFlags(self.0 | other.0)
    }
}

/// An accelerator engine, as `aclrtHostMemMapCapabilities` names it (`aclrtHacType`).
///
/// ```
/// use npu_mem::HacType;
///
/// assert_eq!(HacType::PcieDma.raw(), npu_core::ffi::ACL_RT_HAC_TYPE_PCIEDMA);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HacType {
    /// The task scheduler.
    Stars,
    /// The AI CPU.
    AiCpu,
    /// AI cores (cube units).
    AiCore,
    /// AI vector cores.
    AiVector,
    /// PCIe DMA.
    PcieDma,
    /// RDMA.
    Rdma,
    /// System DMA.
    Sdma,
    /// The digital vision pre-processing unit.
    Dvpp,
    /// Unified-bus DMA.
    Udma,
    /// The collective communication unit.
    Ccu,
}

impl HacType {
    /// The raw `aclrtHacType` value.
    ///
    /// ```
    /// assert_eq!(npu_mem::HacType::Sdma.raw(), 6);
    /// ```
    pub fn raw(self) -> ffi::aclrtHacType {
        match self {
            HacType::Stars => ffi::ACL_RT_HAC_TYPE_STARS,
            HacType::AiCpu => ffi::ACL_RT_HAC_TYPE_AICPU,
            HacType::AiCore => ffi::ACL_RT_HAC_TYPE_AIC,
            HacType::AiVector => ffi::ACL_RT_HAC_TYPE_AIV,
            HacType::PcieDma => ffi::ACL_RT_HAC_TYPE_PCIEDMA,
            HacType::Rdma => ffi::ACL_RT_HAC_TYPE_RDMA,
            HacType::Sdma => ffi::ACL_RT_HAC_TYPE_SDMA,
            HacType::Dvpp => ffi::ACL_RT_HAC_TYPE_DVPP,
            HacType::Udma => ffi::ACL_RT_HAC_TYPE_UDMA,
            HacType::Ccu => ffi::ACL_RT_HAC_TYPE_CCU,
        }
    }
}

/// Whether `engine` on `device` can access registered host memory
/// (`aclrtHostMemMapCapabilities`). Platforms without the feature fail with
/// `ACL_ERROR_RT_FEATURE_NOT_SUPPORT`; runtimes without the function with
/// [`npu_core::Error::Unsupported`].
///
/// ```
/// use npu_core::Device;
/// use npu_mem::{HacType, host_mem_map_capability};
///
/// let device = Device::open(0)?;
/// // What the simulator reports: DMA engines and cores yes, RDMA no.
/// assert!(host_mem_map_capability(&device, HacType::Sdma)?);
/// assert!(!host_mem_map_capability(&device, HacType::Rdma)?);
/// # Ok::<(), npu_core::Error>(())
/// ```
pub fn host_mem_map_capability(device: &Device, engine: HacType) -> Result<bool> {
    let mut capability = ffi::ACL_RT_HOST_MEM_MAP_NOT_SUPPORTED;
    let (id, hac) = (device.id(), engine.raw());
    // SAFETY: `capability` is a valid out-pointer for the duration of the call.
    unsafe {
        acl_call_opt!(
            device.runtime(),
            aclrtHostMemMapCapabilities(id, hac, &mut capability)
        )
    }?;
    Ok(capability == ffi::ACL_RT_HOST_MEM_MAP_SUPPORTED)
}

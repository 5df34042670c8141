//! Devices: opening, properties, memory information and peer access.

use std::fmt;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::ffi;
use crate::runtime::{Runtime, SharedState};

/// One NPU, opened through a [`Runtime`].
///
/// A `Device` holds the device's primary context (one `aclrtSetDevice` reference, shared by
/// every handle) and is `Send + Sync` and cheap to clone. The device is reset
/// (`aclrtResetDevice`) when the last handle and everything created on it are gone; opening it
/// again after that sets it again.
///
/// Equality and hashing are by identity: two `Device`s are equal when they share the primary
/// context, that is, they are handles of one device opened through one runtime.
///
/// ```
/// use npu_core::{Device, MemAttr};
///
/// let device = Device::open(0)?;
/// let memory = device.memory_info(MemAttr::Normal)?;
/// assert!(memory.free <= memory.total);
/// let range = device.stream_priority_range()?;
/// assert!(range.greatest <= range.least);
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Clone)]
pub struct Device {
    primary: Context,
}

/// A device attribute for [`Device::attribute`] (`aclrtDevAttr`).
///
/// ```
/// use npu_core::{Device, DeviceAttr};
///
/// let device = Device::open(0)?;
/// assert!(device.attribute(DeviceAttr::AicoreCoreNum)? > 0);
/// let memory = device.attribute(DeviceAttr::TotalGlobalMemSize)?;
/// assert_eq!(memory, device.memory_info(npu_core::MemAttr::Normal)?.total as i64);
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DeviceAttr {
    /// Number of AI CPU cores.
    AicpuCoreNum,
    /// Number of AI Cores.
    AicoreCoreNum,
    /// Number of Cube cores.
    CubeCoreNum,
    /// Number of Vector cores.
    VectorCoreNum,
    /// SIMT warp size (0 on parts without SIMT).
    WarpSize,
    /// Total global memory, in bytes.
    TotalGlobalMemSize,
    /// L2 cache size, in bytes.
    L2CacheSize,
    /// Physical chip id.
    PhyChipId,
    /// Whether the device is virtual.
    IsVirtual,
    /// NPU architecture number (e.g. 2201 for Atlas A2/A3).
    NpuArch,
    /// Any other `aclrtDevAttr` value.
    Raw(ffi::aclrtDevAttr),
}

impl DeviceAttr {
    /// The `aclrtDevAttr` value.
    ///
    /// ```
    /// use npu_core::{DeviceAttr, ffi};
    ///
    /// assert_eq!(DeviceAttr::NpuArch.raw(), ffi::ACL_DEV_ATTR_NPU_ARCH);
    /// // An attribute without a variant of its own passes through unchanged.
    /// assert_eq!(DeviceAttr::Raw(ffi::ACL_DEV_ATTR_SMP_ID).raw(), ffi::ACL_DEV_ATTR_SMP_ID);
    /// ```
    pub fn raw(self) -> ffi::aclrtDevAttr {
        match self {
            DeviceAttr::AicpuCoreNum => ffi::ACL_DEV_ATTR_AICPU_CORE_NUM,
            DeviceAttr::AicoreCoreNum => ffi::ACL_DEV_ATTR_AICORE_CORE_NUM,
            DeviceAttr::CubeCoreNum => ffi::ACL_DEV_ATTR_CUBE_CORE_NUM,
            DeviceAttr::VectorCoreNum => ffi::ACL_DEV_ATTR_VECTOR_CORE_NUM,
            DeviceAttr::WarpSize => ffi::ACL_DEV_ATTR_WARP_SIZE,
            DeviceAttr::TotalGlobalMemSize => ffi::ACL_DEV_ATTR_TOTAL_GLOBAL_MEM_SIZE,
            DeviceAttr::L2CacheSize => ffi::ACL_DEV_ATTR_L2_CACHE_SIZE,
            DeviceAttr::PhyChipId => ffi::ACL_DEV_ATTR_PHY_CHIP_ID,
            DeviceAttr::IsVirtual => ffi::ACL_DEV_ATTR_IS_VIRTUAL,
            DeviceAttr::NpuArch => ffi::ACL_DEV_ATTR_NPU_ARCH,
            DeviceAttr::Raw(raw) => raw,
        }
    }
}

/// Which memory [`Device::memory_info`] reports on (`aclrtMemAttr`).
///
/// ```
/// use npu_core::{Device, MemAttr};
///
/// let device = Device::open(0)?;
/// let normal = device.memory_info(MemAttr::Normal)?;
/// let huge = device.memory_info(MemAttr::Huge)?;
/// assert!(normal.total > 0 && huge.free <= huge.total);
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MemAttr {
    /// Normal pages of whatever memory the device has (`ACL_MEM_NORMAL`).
    Normal,
    /// 2 MiB huge pages (`ACL_MEM_HUGE`).
    Huge,
    /// DDR (`ACL_DDR_MEM`).
    Ddr,
    /// HBM (`ACL_HBM_MEM`).
    Hbm,
    /// Any other `aclrtMemAttr` value.
    Raw(ffi::aclrtMemAttr),
}

impl MemAttr {
    /// The `aclrtMemAttr` value.
    ///
    /// ```
    /// use npu_core::{MemAttr, ffi};
    ///
    /// assert_eq!(MemAttr::Hbm.raw(), ffi::ACL_HBM_MEM);
    /// assert_eq!(MemAttr::Raw(ffi::ACL_MEM_P2P_HUGE1G).raw(), ffi::ACL_MEM_P2P_HUGE1G);
    /// ```
    pub fn raw(self) -> ffi::aclrtMemAttr {
        match self {
            MemAttr::Normal => ffi::ACL_MEM_NORMAL,
            MemAttr::Huge => ffi::ACL_MEM_HUGE,
            MemAttr::Ddr => ffi::ACL_DDR_MEM,
            MemAttr::Hbm => ffi::ACL_HBM_MEM,
            MemAttr::Raw(raw) => raw,
        }
    }
}

/// Free and total bytes of one kind of device memory.
///
/// ```
/// use npu_core::{Device, MemAttr};
///
/// let info = Device::open(0)?.memory_info(MemAttr::Normal)?;
/// assert!(info.free <= info.total);
/// let capacity = npu_sim::SimConfig::current().unwrap().memory_per_device;
/// assert_eq!(info.total as u64, capacity); // npu-sim reports its configured capacity
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemInfo {
    /// Bytes not allocated.
    pub free: usize,
    /// Bytes in total.
    pub total: usize,
}

/// Stream priorities the device accepts; numerically smaller is more urgent.
///
/// ```
/// use npu_core::Device;
///
/// let range = Device::open(0)?.stream_priority_range()?;
/// assert_eq!((range.greatest, range.least), (0, 7)); // npu-sim's range
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PriorityRange {
    /// The least urgent priority (the largest number).
    pub least: i32,
    /// The most urgent priority (the smallest number).
    pub greatest: i32,
}

/// Device health (`aclrtQueryDeviceStatus`).
///
/// ```
/// use npu_core::{Device, DeviceStatus};
///
/// assert_eq!(Device::open(0)?.status()?, DeviceStatus::Normal);
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeviceStatus {
    /// Working normally.
    Normal,
    /// Faulted or lost.
    Abnormal,
}

impl Device {
    /// Opens device `id` on the [global runtime](Runtime::global). Where `Runtime::global`
    /// refuses to make it (argument `thread`: a tracing subscriber called back while it is
    /// made), the refusal names `Device::open`.
    ///
    /// ```
    /// use npu_core::Device;
    ///
    /// let device = Device::open(0)?;
    /// assert_eq!(device.id(), 0);
    /// let missing = Device::open(64).unwrap_err();
    /// assert!(missing.to_string().contains("device 64 does not exist"), "{missing}");
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn open(id: u32) -> Result<Device> {
        const API: &str = "Device::open";
        Device::open_on(&Runtime::global_for(API)?, id, API)
    }

    /// The number of devices visible to the [global runtime](Runtime::global). When the global
    /// runtime is refused to this thread (called back while it is being made or while ACL is
    /// initialised) or in a forked child, the error names `Device::count`, as
    /// [`open`](Device::open)'s names `Device::open`; a runtime that could not be made gives
    /// its own error, and a failure of the runtime's count names `aclrtGetDeviceCount`.
    ///
    /// ```
    /// use npu_core::Device;
    ///
    /// let count = Device::count()?;
    /// for id in 0..count {
    ///     Device::open(id)?;
    /// }
    /// assert!(Device::open(count).is_err());
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn count() -> Result<u32> {
        Runtime::global_for("Device::count")?.device_count()
    }

    /// Opens device `id` on `runtime`, errors naming `api` (the call the caller made).
    pub(crate) fn open_on(runtime: &Runtime, id: u32, api: &'static str) -> Result<Device> {
        let count = runtime.device_count()?;
        if id >= count {
            return Err(Error::invalid(
                api,
                "id",
                format!("device {id} does not exist: {count} device(s) are visible"),
            ));
        }
        Ok(Device {
            primary: Context::retain_primary(runtime, id as i32, api)?,
        })
    }

    pub(crate) fn from_primary(primary: Context) -> Device {
        Device { primary }
    }

    /// The device id (a logical index after `ASCEND_RT_VISIBLE_DEVICES` filtering).
    ///
    /// ```
    /// use npu_core::Device;
    ///
    /// assert_eq!(Device::open(1)?.id(), 1);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn id(&self) -> u32 {
        self.primary.device_id()
    }

    /// The runtime this device belongs to.
    ///
    /// ```
    /// use npu_core::{Device, Runtime};
    ///
    /// let device = Device::open(0)?;
    /// assert!(device.runtime().same_library(&Runtime::global()?));
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn runtime(&self) -> &Runtime {
        self.primary.runtime()
    }

    /// The device's primary context, shared by every handle of this device.
    ///
    /// ```
    /// use npu_core::Device;
    ///
    /// let (a, b) = (Device::open(0)?, Device::open(0)?);
    /// assert!(a.primary_context().is_primary());
    /// assert!(a.primary_context().same(b.primary_context()), "one primary context per device");
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn primary_context(&self) -> &Context {
        &self.primary
    }

    /// Creates an explicit context on this device.
    ///
    /// ```
    /// use npu_core::Device;
    ///
    /// let device = Device::open(0)?;
    /// let ctx = device.create_context()?;
    /// assert!(!ctx.is_primary());
    /// assert_eq!(ctx.device(), device);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn create_context(&self) -> Result<Context> {
        Context::create(self)
    }

    /// One device attribute (`aclrtGetDeviceInfo`).
    ///
    /// ```
    /// use npu_core::{Device, DeviceAttr};
    ///
    /// let device = Device::open(0)?;
    /// assert_eq!(device.attribute(DeviceAttr::NpuArch)?, 2201); // Atlas A2, as npu-sim reports
    /// assert_eq!(device.attribute(DeviceAttr::IsVirtual)?, 0);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn attribute(&self, attr: DeviceAttr) -> Result<i64> {
        let mut value = 0i64;
        let (id, raw) = (self.id(), attr.raw());
        // SAFETY: `value` is a valid out-pointer for the duration of the call.
        unsafe { crate::acl_call_opt!(self.runtime(), aclrtGetDeviceInfo(id, raw, &mut value)) }?;
        Ok(value)
    }

    /// The SoC name of the devices in this process (`aclrtGetSocName`).
    ///
    /// ```
    /// use npu_core::Device;
    ///
    /// let name = Device::open(0)?.soc_name();
    /// assert_eq!(name, Some(npu_sim::SimConfig::current().unwrap().soc_name));
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn soc_name(&self) -> Option<String> {
        self.runtime().soc_name()
    }

    /// Free and total memory of one kind (`aclrtGetMemInfo`, on this device's context).
    ///
    /// ```
    /// use npu_core::{Device, MemAttr};
    ///
    /// let device = Device::open(1)?;
    /// let before = device.memory_info(MemAttr::Normal)?;
    /// let (rt, mut ptr) = (device.runtime(), std::ptr::null_mut());
    /// device.primary_context().bind()?;
    /// // SAFETY: `ptr` is a valid out-pointer; the device's context is current.
    /// rt.check("aclrtMalloc", unsafe { (rt.api().aclrtMalloc)(&mut ptr, 1 << 20, 0) })?;
    /// assert!(device.memory_info(MemAttr::Normal)?.free <= before.free - (1 << 20));
    /// # unsafe { (rt.api().aclrtFree)(ptr) };
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn memory_info(&self, attr: MemAttr) -> Result<MemInfo> {
        self.primary.bind()?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: both out-pointers are valid; the device's context is bound on this thread.
        unsafe {
            crate::acl_call!(
                self.runtime(),
                aclrtGetMemInfo(attr.raw(), &mut free, &mut total)
            )
        }?;
        Ok(MemInfo { free, total })
    }

    /// The stream priorities this device accepts.
    ///
    /// ```
    /// use npu_core::Device;
    ///
    /// let range = Device::open(0)?.stream_priority_range()?;
    /// let urgent = range.greatest; // the most urgent priority, for a latency-critical stream
    /// assert!(urgent <= range.least);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn stream_priority_range(&self) -> Result<PriorityRange> {
        self.primary.bind()?;
        let (mut least, mut greatest) = (0i32, 0i32);
        // SAFETY: both out-pointers are valid for the duration of the call.
        unsafe {
            crate::acl_call!(
                self.runtime(),
                aclrtDeviceGetStreamPriorityRange(&mut least, &mut greatest)
            )
        }?;
        Ok(PriorityRange { least, greatest })
    }

    /// Health of the device (`aclrtQueryDeviceStatus`): [`DeviceStatus::Abnormal`] once it is
    /// lost.
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`] on a runtime without `aclrtQueryDeviceStatus` (a health check
    /// then falls back on the errors of the device's work, [`Error::is_device_lost`]), or the
    /// runtime's error for the query.
    ///
    /// ```standalone_crate
    /// use npu_core::{Device, DeviceStatus};
    ///
    /// let device = Device::open(1)?;
    /// assert_eq!(device.status()?, DeviceStatus::Normal);
    /// npu_sim::control::lose_device(1).unwrap(); // irreversible: this example runs alone
    /// assert_eq!(device.status()?, DeviceStatus::Abnormal);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn status(&self) -> Result<DeviceStatus> {
        let mut status: ffi::aclrtDeviceStatus = ffi::ACL_RT_DEVICE_STATUS_NORMAL;
        let id = self.id() as i32;
        // SAFETY: `status` is a valid out-pointer for the duration of the call.
        unsafe { crate::acl_call_opt!(self.runtime(), aclrtQueryDeviceStatus(id, &mut status)) }?;
        Ok(if status == ffi::ACL_RT_DEVICE_STATUS_NORMAL {
            DeviceStatus::Normal
        } else {
            DeviceStatus::Abnormal
        })
    }

    fn check_peer(&self, api: &'static str, peer: &Device) -> Result<()> {
        if !self.runtime().same_library(peer.runtime()) {
            return Err(Error::invalid(api, "peer", "belongs to another runtime"));
        }
        if self.id() == peer.id() {
            return Err(Error::invalid(
                api,
                "peer",
                "a device cannot be its own peer",
            ));
        }
        Ok(())
    }

    /// Whether this device can access `peer`'s memory (`aclrtDeviceCanAccessPeer`).
    ///
    /// The runtime's answer is the devices' topology, which does not change when a device
    /// fails. So the two devices' health is asked first (`aclrtQueryDeviceStatus`): an
    /// abnormal one (lost or faulted) can exchange no data, and the answer is the error
    /// [`enable_peer_access`](Device::enable_peer_access) and copies towards a lost device
    /// give, `ACL_ERROR_RT_LOST_HEARTBEAT` ([`Error::is_device_lost`]), naming this method and
    /// the device (or the query's own error, if it reports the loss). Where the health cannot
    /// be asked (a runtime without the query, or whose product does not support it), the
    /// topology answers alone.
    ///
    /// ```
    /// use npu_core::Device;
    ///
    /// let (a, b) = (Device::open(0)?, Device::open(1)?);
    /// assert!(a.can_access_peer(&b)?); // every pair of simulated devices can
    /// assert!(a.can_access_peer(&a).is_err(), "a device is not its own peer");
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn can_access_peer(&self, peer: &Device) -> Result<bool> {
        const API: &str = "Device::can_access_peer";
        self.check_peer(API, peer)?;
        for device in [self, peer] {
            match device.status() {
                Ok(DeviceStatus::Abnormal) => {
                    let id = device.id();
                    let why = format!(
                        "device {id} is abnormal (aclrtQueryDeviceStatus): it exchanges no data"
                    );
                    let lost = crate::AclError::new(API, crate::AclCode::DEVICE_LOST, Some(why));
                    return Err(Error::Acl(lost));
                }
                Err(lost) if lost.is_device_lost() => return Err(lost),
                // Health unknown (a runtime or product without the query): the topology
                // answers alone, as it did before the health was asked.
                Ok(DeviceStatus::Normal) | Err(_) => {}
            }
        }
        let mut can = 0i32;
        let (id, peer_id) = (self.id() as i32, peer.id() as i32);
        // SAFETY: `can` is a valid out-pointer for the duration of the call.
        unsafe {
            crate::acl_call!(
                self.runtime(),
                aclrtDeviceCanAccessPeer(&mut can, id, peer_id)
            )
        }?;
        Ok(can == 1)
    }

    /// Lets this device access `peer`'s memory until the returned guard is dropped.
    ///
    /// Access is directional, as in ACL: enable it on both devices for copies both ways.
    /// Guards nest: access stays enabled while any guard for the direction is alive. In a
    /// process forked from one that used npu-rs it is [`Error::Forked`], and a guard the child
    /// inherited disables nothing when dropped there (the access is the parent's).
    ///
    /// ```
    /// use npu_core::Device;
    ///
    /// let (a, b) = (Device::open(0)?, Device::open(1)?);
    /// if a.can_access_peer(&b)? {
    ///     let a_to_b = a.enable_peer_access(&b)?;
    ///     let b_to_a = b.enable_peer_access(&a)?;
    ///     drop((a_to_b, b_to_a)); // both directions disabled again
    /// }
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn enable_peer_access(&self, peer: &Device) -> Result<PeerAccess> {
        // Before the runtime's lock, which in a forked child may belong to a thread of the
        // parent that held it across an ACL call at the fork (and never lets it go there).
        crate::fork::refuse(crate::SEAL, "aclrtDeviceEnablePeerAccess")?;
        self.check_peer("Device::enable_peer_access", peer)?;
        let key = (self.id() as i32, peer.id() as i32);
        let enabled = self.runtime().with_shared(|shared| {
            // Counted only once enabled: a failed enable must leave no entry that
            // `peer_access_to` would take for enabled access.
            if !shared.peer_access.contains_key(&key) {
                self.primary.bind()?;
                // SAFETY: plain integer arguments; this device's context is bound.
                unsafe { crate::acl_call!(self.runtime(), aclrtDeviceEnablePeerAccess(key.1, 0)) }?;
            }
            *shared.peer_access.entry(key).or_insert(0) += 1;
            Ok(PeerAccess {
                from: self.clone(),
                peer: peer.clone(),
            })
        });
        enabled.unwrap_or_else(|| Err(Runtime::reentered("Device::enable_peer_access")))
    }

    /// Another guard on this device's access to `peer`'s memory, if a [`PeerAccess`] keeps it
    /// enabled right now; `None` otherwise (nothing is enabled by asking), and in a forked
    /// child.
    ///
    /// A cross-device copy holds one until it completes, so dropping the caller's guard while
    /// the copy is queued does not disable the access the device is about to use.
    ///
    /// ```
    /// use npu_core::Device;
    ///
    /// let (a, b) = (Device::open(0)?, Device::open(1)?);
    /// assert!(a.peer_access_to(&b).is_none(), "not enabled");
    /// let guard = a.enable_peer_access(&b)?;
    /// let held = a.peer_access_to(&b).expect("enabled by `guard`");
    /// drop(guard);
    /// assert!(a.peer_access_to(&b).is_some(), "`held` keeps it enabled");
    /// drop(held);
    /// assert!(a.peer_access_to(&b).is_none());
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn peer_access_to(&self, peer: &Device) -> Option<PeerAccess> {
        // No access is the child's to use in a forked child, whose runtime's lock may belong to
        // a thread of the parent (see `enable_peer_access`).
        if crate::fork::forked() || self.check_peer("Device::peer_access_to", peer).is_err() {
            return None;
        }
        self.runtime()
            .with_shared(|shared| self.hold_peer_access(shared, peer))
            .flatten()
    }

    /// Runs `submit` (the ACL call of an operation that reaches `peer`'s memory) and returns
    /// with its result a guard on this device's access to `peer` if the access is enabled when
    /// `submit` returns. The submission is counted while it runs, and access whose last guard
    /// is dropped meanwhile stays enabled until the count falls to zero: looking the access up
    /// before submitting would leave a window in which another thread enables it (so ACL
    /// accepts the operation) and disables it again while the operation is queued. No lock is
    /// held across `submit`, which may block (the runtime's queue is full): the lock guards
    /// host bookkeeping that the reaper and other threads take.
    ///
    /// Fails without calling `submit` on a thread that holds the runtime's lock already (a
    /// tracing subscriber called from an ACL call made under it), with an error of `api`: the
    /// operation the caller called (npu-stream's `Stream::copy_d2d`, say).
    #[doc(hidden)]
    pub fn with_steady_peer_access<R>(
        &self,
        _: crate::seal::Seal,
        api: &'static str,
        peer: &Device,
        submit: impl FnOnce() -> R,
    ) -> Result<(R, Option<PeerAccess>)> {
        if self.check_peer("Device::peer_access_to", peer).is_err() {
            return Ok((submit(), None));
        }
        let key = (self.id() as i32, peer.id() as i32);
        self.runtime()
            .with_shared(|shared| *shared.peer_submitting.entry(key).or_insert(0) += 1)
            .ok_or_else(|| Runtime::reentered(api))?;
        // Uncounts the submission even if `submit` unwinds.
        let submitting = Submitting {
            from: self,
            key,
            finished: false,
        };
        let result = submit();
        Ok((result, submitting.finish(peer)))
    }

    /// Another guard on this device's access to `peer`, if it is enabled; under the shared
    /// state's lock.
    fn hold_peer_access(&self, shared: &mut SharedState, peer: &Device) -> Option<PeerAccess> {
        let key = (self.id() as i32, peer.id() as i32);
        let users = shared.peer_access.get_mut(&key)?;
        *users += 1;
        Some(PeerAccess {
            from: self.clone(),
            peer: peer.clone(),
        })
    }
}

/// Keeps peer access from one device to another enabled; see [`Device::enable_peer_access`].
///
/// ```
/// use npu_core::Device;
///
/// let (a, b) = (Device::open(0)?, Device::open(1)?);
/// let first = a.enable_peer_access(&b)?;
/// let second = a.enable_peer_access(&b)?; // nests: ACL is not asked twice
/// drop(first); // access stays enabled while `second` lives
/// assert_eq!(second.peer(), &b);
/// # Ok::<(), npu_core::Error>(())
/// ```
#[must_use = "peer access is disabled again when the guard is dropped"]
pub struct PeerAccess {
    from: Device,
    peer: Device,
}

impl PeerAccess {
    /// The device that gained access: the one whose
    /// [`enable_peer_access`](Device::enable_peer_access) made this guard.
    ///
    /// ```
    /// use npu_core::Device;
    ///
    /// let (a, b) = (Device::open(0)?, Device::open(1)?);
    /// assert_eq!(a.enable_peer_access(&b)?.device(), &a);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn device(&self) -> &Device {
        &self.from
    }

    /// The earlier name of [`device`](PeerAccess::device), kept so that code written against
    /// it compiles: `PeerAccess::from` read like a conversion (`From::from`), which it is not.
    ///
    /// ```
    /// use npu_core::Device;
    ///
    /// let (a, b) = (Device::open(0)?, Device::open(1)?);
    /// let access = a.enable_peer_access(&b)?;
    /// #[allow(deprecated)]
    /// let from = access.from();
    /// assert_eq!(from, access.device());
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    #[deprecated(note = "renamed to `PeerAccess::device`")]
    pub fn from(&self) -> &Device {
        self.device()
    }

    /// The device whose memory became accessible.
    ///
    /// ```
    /// use npu_core::Device;
    ///
    /// let (a, b) = (Device::open(0)?, Device::open(1)?);
    /// assert_eq!(a.enable_peer_access(&b)?.peer().id(), 1);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn peer(&self) -> &Device {
        &self.peer
    }
}

impl Drop for PeerAccess {
    fn drop(&mut self) {
        if crate::fork::forked() {
            // The access is the parent's, and so is the runtime's lock, which a thread of the
            // parent may have held at the fork (it never lets it go here): nothing to disable.
            return;
        }
        let key = (self.from.id() as i32, self.peer.id() as i32);
        let result = self.from.runtime().with_shared(|shared| {
            if let Some(users) = shared.peer_access.get_mut(&key) {
                *users = users.saturating_sub(1);
            }
            disable_if_unused(&self.from, key, shared)
        });
        match result {
            Some(result) => log_disable_failure(result, key),
            // This thread holds the lock (a tracing subscriber dropping a guard from inside an
            // ACL call made under it): the reaper drops it once the lock is free.
            None => {
                let access = PeerAccess {
                    from: self.from.clone(),
                    peer: self.peer.clone(),
                };
                // SAFETY: dropping a guard takes the runtime's lock, which is never held
                // across a wait, and disables access, which does not wait for the device.
                unsafe { crate::reaper::release_later(move || drop(access)) };
            }
        }
    }
}

/// A cross-device submission in progress, counted in `peer_submitting` until finished or
/// dropped.
struct Submitting<'a> {
    from: &'a Device,
    key: (i32, i32),
    finished: bool,
}

impl Submitting<'_> {
    /// Uncounts the submission and takes a guard on the access if it is enabled, under one
    /// lock, so that the access cannot be disabled between the two.
    fn finish(mut self, peer: &Device) -> Option<PeerAccess> {
        self.finished = true;
        let finished = self.from.runtime().with_shared(|shared| {
            let access = self.from.hold_peer_access(shared, peer);
            (access, uncount(self.from, self.key, shared))
        });
        match finished {
            Some((access, result)) => {
                log_disable_failure(result, self.key);
                access
            }
            None => {
                uncount_later(self.from, self.key);
                None
            }
        }
    }
}

/// Uncounts a submission in progress on the access `key`.
fn uncount(from: &Device, key: (i32, i32), shared: &mut SharedState) -> Result<()> {
    if let Some(submitting) = shared.peer_submitting.get_mut(&key) {
        *submitting -= 1;
        if *submitting == 0 {
            shared.peer_submitting.remove(&key);
        }
    }
    disable_if_unused(from, key, shared)
}

/// Uncounts a submission on the reaper, for a thread that holds the runtime's lock already:
/// a submission counted on a thread that did not hold it ends on that same thread, so this is
/// only a fallback that never leaves the count behind.
fn uncount_later(from: &Device, key: (i32, i32)) {
    let from = from.clone();
    // SAFETY: uncounting takes the runtime's lock, which is never held across a wait, and
    // disabling access does not wait for the device.
    unsafe {
        crate::reaper::release_later(move || {
            if let Some(result) = from
                .runtime()
                .with_shared(|shared| uncount(&from, key, shared))
            {
                log_disable_failure(result, key);
            }
        });
    }
}

impl Drop for Submitting<'_> {
    /// A submission that unwound: uncounted, and the access disabled if it was what kept it.
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let result = self
            .from
            .runtime()
            .with_shared(|shared| uncount(self.from, self.key, shared));
        match result {
            Some(result) => log_disable_failure(result, self.key),
            None => uncount_later(self.from, self.key),
        }
    }
}

/// Disables the access `key` if it is enabled with no guard and no submission in progress.
/// Under the shared state's lock: `aclrtDeviceDisablePeerAccess` does not wait for the device.
fn disable_if_unused(from: &Device, key: (i32, i32), shared: &mut SharedState) -> Result<()> {
    if shared.peer_access.get(&key) != Some(&0) || shared.peer_submitting.contains_key(&key) {
        return Ok(());
    }
    shared.peer_access.remove(&key);
    from.primary.bind()?;
    // SAFETY: plain integer argument; the accessing device's context is bound.
    unsafe { crate::acl_call!(from.runtime(), aclrtDeviceDisablePeerAccess(key.1)) }
}

fn log_disable_failure(result: Result<()>, (from, peer): (i32, i32)) {
    if let Err(err) = result {
        crate::log!(warn, %err, from, peer, "disabling peer access failed");
    }
}

impl fmt::Debug for PeerAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerAccess")
            .field("from", &self.from.id())
            .field("peer", &self.peer.id())
            .finish()
    }
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device")
            .field("id", &self.id())
            .field("backend", self.runtime().backend())
            .finish()
    }
}

impl PartialEq for Device {
    fn eq(&self, other: &Device) -> bool {
        self.primary.same(&other.primary)
    }
}

impl Eq for Device {}

impl std::hash::Hash for Device {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.primary.hash(state)
    }
}

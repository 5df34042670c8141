//! Device queries: capabilities, identity (UUID, PCI bus ID), utilization, links between
//! devices and operator compatibility.

use std::ffi::{CStr, c_char};

use npu_sys::*;

use super::check::c_str;
use crate::error::{Res, ensure, fail, guard, non_null, write_out};
use crate::hardware::{CUBE_CORES, L2_CACHE_BYTES, VECTOR_CORES};
use crate::sim::{Sim, sim};

/// Bytes of "dddd:bb:dd.f" with its NUL.
const PCI_BUS_ID_LEN: i32 = 13;

/// The simulated devices sit on PCI domain 0, device 0, function 0 of bus `id + 1`.
fn pci_bus_id(device: i32) -> String {
    format!("0000:{:02x}:00.0", device + 1)
}

/// Queries the simulated device's utilization. The simulator keeps no utilization counters:
/// cube, vector and AI CPU report 0 (idle); memory reports -1, as the reference documents for
/// every device. `utilizationExtend` is reserved and must be NULL (107000).
///
/// # Safety
/// `utilizationInfo` must be NULL or valid for reads and writes of the struct.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetDeviceUtilizationRate(
    deviceId: i32,
    utilizationInfo: *mut aclrtUtilizationInfo,
) -> aclError {
    guard("aclrtGetDeviceUtilizationRate", || {
        non_null(utilizationInfo, "utilizationInfo")?;
        sim()?.device(deviceId.into())?.check_alive()?;
        // SAFETY: non-NULL, and the caller's struct is valid for reads by the API contract.
        let extend =
            unsafe { std::ptr::addr_of!((*utilizationInfo).utilizationExtend).read_unaligned() };
        ensure!(
            extend.is_null(),
            ACL_ERROR_RT_PARAM_INVALID,
            "utilizationExtend is reserved and must be NULL"
        );
        let info = aclrtUtilizationInfo {
            cubeUtilization: 0,
            vectorUtilization: 0,
            aicpuUtilization: 0,
            memoryUtilization: -1,
            utilizationExtend: std::ptr::null_mut(),
        };
        write_out(utilizationInfo, "utilizationInfo", info)
    })
}

/// Whether the device supports a feature: runtime task updates of AI Core work do
/// (ACL_DEV_FEATURE_SUPPORT), cross-device queue events do not (there are no queues). Unknown
/// feature → 107000, before an unknown device's 107001.
///
/// # Safety
/// `value` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetDeviceCapability(
    deviceId: i32,
    devFeatureType: aclrtDevFeatureType,
    value: *mut i32,
) -> aclError {
    guard("aclrtGetDeviceCapability", || {
        non_null(value, "value")?;
        // The feature is a value no lookup decides: refused before the device is looked up.
        let supported = match devFeatureType {
            // The simulator patches AI Core tasks of a model instance (aclrtTaskUpdateAsync
            // with ACL_RT_UPDATE_AIC_AIV_TASK), as the Atlas A2 it models does.
            ACL_FEATURE_TSCPU_TASK_UPDATE_SUPPORT_AIC_AIV => ACL_DEV_FEATURE_SUPPORT,
            // It has no queues.
            ACL_FEATURE_SYSTEM_MEMQ_EVENT_CROSS_DEV => ACL_DEV_FEATURE_NOT_SUPPORT,
            other => fail!(ACL_ERROR_RT_PARAM_INVALID, "unknown device feature {other}"),
        };
        sim()?.device(deviceId.into())?;
        write_out(value, "value", supported as i32)
    })
}

/// The device's core counts and L2 size (the older query of acl_base_rt.h). NULL `value`, then
/// an undefined or unknown item → 100000, both before an unknown device's 107001: the item is
/// a value, checked before the lookup as aclrtGetDeviceInfo checks its attribute.
///
/// # Safety
/// `value` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclGetDeviceCapability(
    deviceId: u32,
    deviceInfo: aclDeviceInfo,
    value: *mut i64,
) -> aclError {
    guard("aclGetDeviceCapability", || {
        non_null(value, "value")?;
        let answer = match deviceInfo {
            ACL_DEVICE_INFO_AI_CORE_NUM => CUBE_CORES.into(),
            ACL_DEVICE_INFO_VECTOR_CORE_NUM => VECTOR_CORES.into(),
            ACL_DEVICE_INFO_L2_SIZE => L2_CACHE_BYTES,
            other => fail!(
                ACL_ERROR_INVALID_PARAM,
                "unknown device information item {other}"
            ),
        };
        sim()?.device(deviceId.into())?;
        write_out(value, "value", answer)
    })
}

/// A stable UUID per simulated device: "npu-sim" in the first bytes, the device ID in the last
/// four (big-endian), with the RFC 4122 version (8, vendor-defined) and variant bits set.
///
/// # Safety
/// `uuid` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDeviceGetUuid(deviceId: i32, uuid: *mut aclrtUuid) -> aclError {
    guard("aclrtDeviceGetUuid", || {
        non_null(uuid, "uuid")?;
        let device = sim()?.device(deviceId.into())?;
        let mut bytes = [0u8; 16];
        bytes[..7].copy_from_slice(b"npu-sim");
        bytes[6] = 0x80 | (bytes[6] & 0x0F);
        bytes[8] = 0x80;
        bytes[12..].copy_from_slice(&device.id.to_be_bytes());
        let out = aclrtUuid {
            bytes: bytes.map(|b| b as c_char),
        };
        write_out(uuid, "uuid", out)
    })
}

/// Writes the device's PCI bus ID ("0000:bb:00.0", bus = device ID + 1). `len` below 13 →
/// 107000.
///
/// # Safety
/// `pciBusId` must be NULL or valid for `len` bytes of writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDeviceGetPCIBusId(
    deviceId: i32,
    pciBusId: *mut c_char,
    len: i32,
) -> aclError {
    guard("aclrtDeviceGetPCIBusId", || {
        non_null(pciBusId, "pciBusId")?;
        ensure!(
            len >= PCI_BUS_ID_LEN,
            ACL_ERROR_RT_PARAM_INVALID,
            "len {len} is below the {PCI_BUS_ID_LEN} bytes of a PCI bus ID with its NUL"
        );
        let device = sim()?.device(deviceId.into())?;
        let text = pci_bus_id(device.id);
        let bytes = text.as_bytes();
        // SAFETY: the caller provides `len` ≥ 13 writable bytes; the ID is 12 bytes plus NUL.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), pciBusId.cast::<u8>(), bytes.len());
            pciBusId.add(bytes.len()).write(0);
        }
        Ok(())
    })
}

/// The device whose PCI bus ID is `pciBusId` ("domain:bus:device.function", or
/// "bus:device.function" with domain 0; hexadecimal, either case). Not an ID → 107000; no
/// device at that ID → 107001.
///
/// # Safety
/// `pciBusId` must be NULL or NUL-terminated; `deviceId` NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDeviceGetByPCIBusId(
    pciBusId: *const c_char,
    deviceId: *mut i32,
) -> aclError {
    guard("aclrtDeviceGetByPCIBusId", || {
        non_null(pciBusId, "pciBusId")?;
        non_null(deviceId, "deviceId")?;
        let text = c_str(pciBusId, "pciBusId")?;
        let Some(normalised) = parse_pci_bus_id(text) else {
            fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "{text:?} is not a PCI bus ID (domain:bus:device.function)"
            );
        };
        let sim = sim()?;
        match (0..sim.devices.len() as i32).find(|&d| pci_bus_id(d) == normalised) {
            Some(found) => write_out(deviceId, "deviceId", found),
            None => fail!(
                ACL_ERROR_RT_INVALID_DEVICEID,
                "no device is at PCI bus ID {text:?}"
            ),
        }
    })
}

/// `text` as "dddd:bb:dd.f" in lower case, or `None` if it is not a PCI bus ID.
fn parse_pci_bus_id(text: &str) -> Option<String> {
    let (location, function) = text.rsplit_once('.')?;
    let mut parts: Vec<&str> = location.split(':').collect();
    if parts.len() == 2 {
        parts.insert(0, "0");
    }
    let [domain, bus, device] = parts[..] else {
        return None;
    };
    let field = |text: &str, max: u32| {
        (!text.is_empty() && text.len() <= 8)
            .then(|| u32::from_str_radix(text, 16).ok())
            .flatten()
            .filter(|&v| v <= max)
    };
    Some(format!(
        "{:04x}:{:02x}:{:02x}.{:x}",
        field(domain, 0xFFFF)?,
        field(bus, 0xFF)?,
        field(device, 0x1F)?,
        field(function, 0x7)?
    ))
}

/// Both device IDs in range: the reference gives 107000 (not the invalid-device code) for an
/// ID outside [0, count - 1] in the peer-status query.
fn peer_pair(sim: &Sim, device: i32, peer: i32) -> Res<()> {
    for id in [device, peer] {
        ensure!(
            usize::try_from(id).is_ok_and(|i| i < sim.devices.len()),
            ACL_ERROR_RT_PARAM_INVALID,
            "device {id} is outside 0 to {}",
            sim.devices.len() - 1
        );
    }
    Ok(())
}

/// Whether `deviceId` has enabled access to `peerDeviceId`'s memory (aclrtDeviceEnablePeerAccess
/// on a thread bound to `deviceId`): 1, else 0 (always 0 for a device and itself).
///
/// # Safety
/// `status` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDevicePeerAccessStatus(
    deviceId: i32,
    peerDeviceId: i32,
    status: *mut i32,
) -> aclError {
    guard("aclrtDevicePeerAccessStatus", || {
        non_null(status, "status")?;
        let sim = sim()?;
        peer_pair(sim, deviceId, peerDeviceId)?;
        let device = sim.device(deviceId.into())?;
        let enabled = deviceId != peerDeviceId && device.peer_enabled(peerDeviceId);
        write_out(status, "status", i32::from(enabled))
    })
}

/// How two devices are linked: every pair of simulated devices is connected through HCCS, as
/// in an Atlas A2 server. A device and itself → 107000 (there is no link to describe), a
/// relation of the arguments checked before the devices are looked up (107001).
///
/// # Safety
/// `value` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetDevicesTopo(
    deviceId: u32,
    otherDeviceId: u32,
    value: *mut u64,
) -> aclError {
    guard("aclrtGetDevicesTopo", || {
        non_null(value, "value")?;
        ensure!(
            deviceId != otherDeviceId,
            ACL_ERROR_RT_PARAM_INVALID,
            "deviceId and otherDeviceId are both {deviceId}"
        );
        let sim = sim()?;
        sim.device(deviceId.into())?;
        sim.device(otherDeviceId.into())?;
        write_out(value, "value", u64::from(ACL_RT_DEVS_TOPOLOGY_HCCS))
    })
}

/// Whether operator code built for `socVersion` runs on the simulated device: yes (1) for the
/// configured SoC's family (its name without the trailing digits, "Ascend910B" for
/// "Ascend910B3"), no (0) otherwise.
///
/// # Safety
/// `socVersion` must be NULL or NUL-terminated; `canCompatible` NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCheckArchCompatibility(
    socVersion: *const c_char,
    canCompatible: *mut i32,
) -> aclError {
    guard("aclrtCheckArchCompatibility", || {
        non_null(socVersion, "socVersion")?;
        non_null(canCompatible, "canCompatible")?;
        // SAFETY: non-NULL and NUL-terminated by the API contract; any bytes are accepted.
        let requested = unsafe { CStr::from_ptr(socVersion) }.to_bytes();
        let family = |name: &[u8]| -> Vec<u8> {
            let end = name
                .iter()
                .rposition(|b| !b.is_ascii_digit())
                .map_or(0, |i| i + 1);
            name[..end].to_vec()
        };
        let own = sim()?.config.soc_name.as_bytes();
        let compatible = !requested.is_empty() && family(requested) == family(own);
        write_out(canCompatible, "canCompatible", i32::from(compatible))
    })
}

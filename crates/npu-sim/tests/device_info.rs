//! The "Devices and information" group through the exported C ABI: resource limits (of devices,
//! streams and the calling thread), device
//! queries (utilization, capabilities, UUID, PCI bus IDs, peer status, topology, architecture
//! compatibility), CANN attributes and the numeric helpers, with every error path.
//!
//! Devices (this process has 4): 0 and 1 for queries, 2 has its limits changed, 3 is lost.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::{CStr, c_char};
use std::ptr;

use common::*;
use npu_sim::abi::*;
use npu_sys::*;

fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        npu_sim::SimConfig::default().devices(4).install().unwrap();
        npu_sim::control::lose_device(3).unwrap();
    });
}

fn limit(device: i32, kind: aclrtDevResLimitType) -> u32 {
    let mut value = 0;
    acl!(aclrtGetDeviceResLimit(device, kind, &mut value));
    value
}

#[test]
fn resource_limits_default_to_the_hardware_and_reset() {
    install();
    assert_eq!(limit(2, ACL_RT_DEV_RES_CUBE_CORE), 20);
    assert_eq!(limit(2, ACL_RT_DEV_RES_VECTOR_CORE), 40);
    acl!(aclrtSetDeviceResLimit(2, ACL_RT_DEV_RES_CUBE_CORE, 8));
    acl!(aclrtSetDeviceResLimit(2, ACL_RT_DEV_RES_CUBE_CORE, 12));
    assert_eq!(
        limit(2, ACL_RT_DEV_RES_CUBE_CORE),
        12,
        "the last setting wins"
    );
    assert_eq!(limit(2, ACL_RT_DEV_RES_VECTOR_CORE), 40);
    std::thread::spawn(|| {
        set_device(2);
        let mut value = 0;
        acl!(aclrtGetResInCurrentThread(
            ACL_RT_DEV_RES_CUBE_CORE,
            &mut value
        ));
        assert_eq!(value, 12, "the thread's device limit");
        acl!(aclrtResetDevice(2));
    })
    .join()
    .unwrap();
    acl!(aclrtResetDeviceResLimit(2));
    assert_eq!(limit(2, ACL_RT_DEV_RES_CUBE_CORE), 20);
}

fn stream_limit(stream: aclrtStream, kind: aclrtDevResLimitType) -> u32 {
    let mut value = 0;
    acl!(aclrtGetStreamResLimit(stream, kind, &mut value));
    value
}

fn thread_limit(kind: aclrtDevResLimitType) -> u32 {
    let mut value = 0;
    acl!(aclrtGetResInCurrentThread(kind, &mut value));
    value
}

#[test]
fn stream_limits_come_before_the_devices_for_the_threads_that_use_them() {
    install();
    std::thread::spawn(|| {
        set_device(0);
        let (cube, vector) = (ACL_RT_DEV_RES_CUBE_CORE, ACL_RT_DEV_RES_VECTOR_CORE);
        let stream = create_stream();
        assert_eq!(stream_limit(stream, cube), 20, "unset: the device's");
        acl!(aclrtSetStreamResLimit(stream, cube, 4));
        acl!(aclrtSetStreamResLimit(stream, cube, 6));
        assert_eq!(stream_limit(stream, cube), 6, "the last setting wins");
        assert_eq!(
            stream_limit(stream, vector),
            40,
            "other types stay the device's"
        );
        assert_eq!(
            stream_limit(ptr::null_mut(), cube),
            20,
            "the default stream has none"
        );
        assert_eq!(thread_limit(cube), 20, "not used by the thread yet");
        acl!(aclrtUseStreamResInCurrentThread(stream));
        assert_eq!((thread_limit(cube), thread_limit(vector)), (6, 40));
        std::thread::spawn(|| {
            set_device(0);
            assert_eq!(thread_limit(ACL_RT_DEV_RES_CUBE_CORE), 20, "per thread");
            acl!(aclrtResetDevice(0));
        })
        .join()
        .unwrap();
        acl!(aclrtUnuseStreamResInCurrentThread(stream));
        assert_eq!(thread_limit(cube), 20);
        let api = "aclrtUnuseStreamResInCurrentThread";
        fails(
            code!(aclrtUnuseStreamResInCurrentThread(stream)),
            ACL_ERROR_RT_PARAM_INVALID,
            api,
        );
        acl!(aclrtUseStreamResInCurrentThread(stream));
        acl!(aclrtResetStreamResLimit(stream));
        assert_eq!(stream_limit(stream, cube), 20, "reset: the device's again");
        assert_eq!(thread_limit(cube), 20);
        let api = "aclrtUseStreamResInCurrentThread";
        fails(
            code!(aclrtUseStreamResInCurrentThread(stream)),
            ACL_ERROR_RT_PARAM_INVALID,
            api,
        );
        acl!(aclrtSetStreamResLimit(stream, vector, 10));
        acl!(aclrtUseStreamResInCurrentThread(stream));
        acl!(aclrtDestroyStream(stream));
        assert_eq!(
            thread_limit(vector),
            40,
            "a destroyed stream no longer counts"
        );

        let stream = create_stream();
        let api = "aclrtSetStreamResLimit";
        fails(
            code!(aclrtSetStreamResLimit(stream, cube, 0)),
            ACL_ERROR_RT_PARAM_INVALID,
            api,
        );
        fails(
            code!(aclrtSetStreamResLimit(stream, vector, 41)),
            ACL_ERROR_RT_PARAM_INVALID,
            api,
        );
        fails(
            code!(aclrtSetStreamResLimit(stream, 7, 1)),
            ACL_ERROR_RT_PARAM_INVALID,
            api,
        );
        let foreign = std::thread::spawn(|| {
            set_device(1);
            create_stream() as usize
        })
        .join()
        .unwrap() as aclrtStream;
        fails(
            code!(aclrtSetStreamResLimit(foreign, cube, 1)),
            ACL_ERROR_RT_STREAM_CONTEXT,
            api,
        );
        // A limit out of range needs no lookup: it is refused before the stream is looked up.
        fails(
            code!(aclrtSetStreamResLimit(foreign, vector, 41)),
            ACL_ERROR_RT_PARAM_INVALID,
            api,
        );
        let api = "aclrtGetStreamResLimit";
        fails(
            code!(aclrtGetStreamResLimit(stream, cube, ptr::null_mut())),
            ACL_ERROR_INVALID_PARAM,
            api,
        );
        fails(
            code!(aclrtGetStreamResLimit(stream, 7, &mut 0)),
            ACL_ERROR_RT_PARAM_INVALID,
            api,
        );
        acl!(aclrtDestroyStream(stream));
        fails(
            code!(aclrtGetStreamResLimit(stream, cube, &mut 0)),
            ACL_ERROR_RT_INVALID_HANDLE,
            api,
        );
        // The type and the value before the destroyed stream.
        fails(
            code!(aclrtGetStreamResLimit(stream, 7, &mut 0)),
            ACL_ERROR_RT_PARAM_INVALID,
            api,
        );
        for (kind, cores) in [(7, 1), (cube, 0)] {
            fails(
                code!(aclrtSetStreamResLimit(stream, kind, cores)),
                ACL_ERROR_RT_PARAM_INVALID,
                "aclrtSetStreamResLimit",
            );
        }
        fails(
            code!(aclrtResetStreamResLimit(stream)),
            ACL_ERROR_RT_INVALID_HANDLE,
            "aclrtResetStreamResLimit",
        );
        acl!(aclrtResetDevice(0));
    })
    .join()
    .unwrap();
}

#[test]
fn resource_limit_errors() {
    install();
    let mut value = 0;
    let api = "aclrtSetDeviceResLimit";
    fails(
        code!(aclrtSetDeviceResLimit(9, ACL_RT_DEV_RES_CUBE_CORE, 1)),
        ACL_ERROR_RT_INVALID_DEVICEID,
        api,
    );
    fails(
        code!(aclrtSetDeviceResLimit(0, 7, 1)),
        ACL_ERROR_RT_PARAM_INVALID,
        api,
    );
    fails(
        code!(aclrtSetDeviceResLimit(0, ACL_RT_DEV_RES_CUBE_CORE, 0)),
        ACL_ERROR_RT_PARAM_INVALID,
        api,
    );
    fails(
        code!(aclrtSetDeviceResLimit(0, ACL_RT_DEV_RES_VECTOR_CORE, 41)),
        ACL_ERROR_RT_PARAM_INVALID,
        api,
    );
    // The type and the value need no lookup: they are refused before the unknown device.
    for (kind, cores) in [(7, 1), (ACL_RT_DEV_RES_CUBE_CORE, 0)] {
        fails(
            code!(aclrtSetDeviceResLimit(9, kind, cores)),
            ACL_ERROR_RT_PARAM_INVALID,
            api,
        );
    }
    let api = "aclrtGetDeviceResLimit";
    fails(
        code!(aclrtGetDeviceResLimit(
            0,
            ACL_RT_DEV_RES_CUBE_CORE,
            ptr::null_mut()
        )),
        ACL_ERROR_INVALID_PARAM,
        api,
    );
    fails(
        code!(aclrtGetDeviceResLimit(
            -1,
            ACL_RT_DEV_RES_CUBE_CORE,
            &mut value
        )),
        ACL_ERROR_RT_INVALID_DEVICEID,
        api,
    );
    fails(
        code!(aclrtGetDeviceResLimit(0, 7, &mut value)),
        ACL_ERROR_RT_PARAM_INVALID,
        api,
    );
    fails(
        code!(aclrtGetDeviceResLimit(-1, 7, &mut value)),
        ACL_ERROR_RT_PARAM_INVALID,
        api,
    );
    fails(
        code!(aclrtResetDeviceResLimit(4)),
        ACL_ERROR_RT_INVALID_DEVICEID,
        "aclrtResetDeviceResLimit",
    );
    std::thread::spawn(|| {
        let api = "aclrtGetResInCurrentThread";
        let mut value = 0;
        fails(
            code!(aclrtGetResInCurrentThread(
                ACL_RT_DEV_RES_CUBE_CORE,
                ptr::null_mut()
            )),
            ACL_ERROR_INVALID_PARAM,
            api,
        );
        fails(
            code!(aclrtGetResInCurrentThread(
                ACL_RT_DEV_RES_CUBE_CORE,
                &mut value
            )),
            ACL_ERROR_RT_CONTEXT_NULL,
            api,
        );
        // The type is an argument: it is checked before the (missing) context is looked up.
        fails(
            code!(aclrtGetResInCurrentThread(7, &mut value)),
            ACL_ERROR_RT_PARAM_INVALID,
            api,
        );
        set_device(0);
        fails(
            code!(aclrtGetResInCurrentThread(7, &mut value)),
            ACL_ERROR_RT_PARAM_INVALID,
            api,
        );
        acl!(aclrtResetDevice(0));
    })
    .join()
    .unwrap();
}

#[test]
fn utilization_and_capabilities() {
    install();
    let mut info = aclrtUtilizationInfo {
        cubeUtilization: 7,
        vectorUtilization: 7,
        aicpuUtilization: 7,
        memoryUtilization: 7,
        utilizationExtend: ptr::null_mut(),
    };
    acl!(aclrtGetDeviceUtilizationRate(0, &mut info));
    assert_eq!(
        (
            info.cubeUtilization,
            info.vectorUtilization,
            info.aicpuUtilization,
            info.memoryUtilization
        ),
        (0, 0, 0, -1)
    );
    let api = "aclrtGetDeviceUtilizationRate";
    fails(
        code!(aclrtGetDeviceUtilizationRate(0, ptr::null_mut())),
        ACL_ERROR_INVALID_PARAM,
        api,
    );
    fails(
        code!(aclrtGetDeviceUtilizationRate(4, &mut info)),
        ACL_ERROR_RT_INVALID_DEVICEID,
        api,
    );
    fails(
        code!(aclrtGetDeviceUtilizationRate(3, &mut info)),
        ACL_ERROR_RT_LOST_HEARTBEAT,
        api,
    );
    info.utilizationExtend = ptr::NonNull::dangling().as_ptr();
    fails(
        code!(aclrtGetDeviceUtilizationRate(0, &mut info)),
        ACL_ERROR_RT_PARAM_INVALID,
        api,
    );

    let mut supported = 9;
    for (feature, answer) in [
        // aclrtTaskUpdateAsync patches AI Core tasks on the simulator.
        (
            ACL_FEATURE_TSCPU_TASK_UPDATE_SUPPORT_AIC_AIV,
            ACL_DEV_FEATURE_SUPPORT,
        ),
        (
            ACL_FEATURE_SYSTEM_MEMQ_EVENT_CROSS_DEV,
            ACL_DEV_FEATURE_NOT_SUPPORT,
        ),
    ] {
        acl!(aclrtGetDeviceCapability(1, feature, &mut supported));
        assert_eq!(supported, answer as i32);
    }
    let api = "aclrtGetDeviceCapability";
    fails(
        code!(aclrtGetDeviceCapability(
            0,
            ACL_FEATURE_SYSTEM_MEMQ_EVENT_CROSS_DEV,
            ptr::null_mut()
        )),
        ACL_ERROR_INVALID_PARAM,
        api,
    );
    fails(
        code!(aclrtGetDeviceCapability(
            4,
            ACL_FEATURE_SYSTEM_MEMQ_EVENT_CROSS_DEV,
            &mut supported
        )),
        ACL_ERROR_RT_INVALID_DEVICEID,
        api,
    );
    fails(
        code!(aclrtGetDeviceCapability(0, 2, &mut supported)),
        ACL_ERROR_RT_PARAM_INVALID,
        api,
    );

    let mut value = 0;
    acl!(aclGetDeviceCapability(
        0,
        ACL_DEVICE_INFO_AI_CORE_NUM,
        &mut value
    ));
    assert_eq!(value, 20);
    acl!(aclGetDeviceCapability(
        0,
        ACL_DEVICE_INFO_VECTOR_CORE_NUM,
        &mut value
    ));
    assert_eq!(value, 40);
    acl!(aclGetDeviceCapability(
        0,
        ACL_DEVICE_INFO_L2_SIZE,
        &mut value
    ));
    assert_eq!(value, 192 << 20);
    let api = "aclGetDeviceCapability";
    fails(
        code!(aclGetDeviceCapability(
            0,
            ACL_DEVICE_INFO_L2_SIZE,
            ptr::null_mut()
        )),
        ACL_ERROR_INVALID_PARAM,
        api,
    );
    fails(
        code!(aclGetDeviceCapability(
            4,
            ACL_DEVICE_INFO_L2_SIZE,
            &mut value
        )),
        ACL_ERROR_RT_INVALID_DEVICEID,
        api,
    );
    fails(
        code!(aclGetDeviceCapability(
            0,
            ACL_DEVICE_INFO_UNDEFINED,
            &mut value
        )),
        ACL_ERROR_INVALID_PARAM,
        api,
    );
}

/// aclplatformGetDeviceInfo's text for `item`, in a buffer of `len` bytes.
fn platform_info(item: aclplatformDevInfo, len: u32) -> Result<String, aclError> {
    let mut text = vec![b'x' as c_char; len as usize];
    let ptr = text.as_mut_ptr();
    match code!(aclplatformGetDeviceInfo(item, ptr, len)) {
        // SAFETY: on success the text is NUL-terminated inside the buffer.
        0 => Ok(unsafe { CStr::from_ptr(ptr) }.to_str().unwrap().to_owned()),
        error => {
            assert!(text.iter().all(|&c| c == b'x' as c_char), "nothing written");
            Err(error)
        }
    }
}

/// The platform queries of CANN's acl_platform.h answer for an Atlas A2 (the simulator did
/// not export them: a program calling them did not link).
#[test]
fn platform_queries_describe_an_atlas_a2() {
    install();
    let expected = [
        (ACL_PLATFORM_AICORE_CNT, "20".to_owned()),
        (ACL_PLATFORM_AICORE_UB_SIZE, "196608".to_owned()),
        (ACL_PLATFORM_CUBE_CORE_CNT, "20".to_owned()),
        (ACL_PLATFORM_VECTOR_CORE_CNT, "40".to_owned()),
        (ACL_PLATFORM_L2_SIZE, (192u64 << 20).to_string()),
        (ACL_PLATFORM_MEMORY_SIZE, (16u64 << 30).to_string()),
        (ACL_PLATFORM_CUBE_FREQ, "1800".to_owned()),
        (ACL_PLATFORM_VEC_FREQ, "1800".to_owned()),
        (ACL_PLATFORM_BT_SIZE, "1024".to_owned()),
        (ACL_PLATFORM_L0_A_SIZE, "65536".to_owned()),
        (ACL_PLATFORM_L0_B_SIZE, "65536".to_owned()),
        (ACL_PLATFORM_L0_C_SIZE, "131072".to_owned()),
        (ACL_PLATFORM_L1_SIZE, "524288".to_owned()),
        (ACL_PLATFORM_SOC_VERSION, "Ascend910B3".to_owned()),
        (ACL_PLATFORM_AIC_VERSION, "AIC-C-220".to_owned()),
        (ACL_PLATFORM_NPU_ARCH, DAV_2201.to_string()),
        (ACL_PLATFORM_MEMORY_TYPE, HBM.to_string()),
    ];
    for (item, text) in expected {
        assert_eq!(platform_info(item, 64), Ok(text), "item {item}");
    }
    // The text and its NUL must fit: "20" needs 3 bytes.
    assert_eq!(
        platform_info(ACL_PLATFORM_AICORE_CNT, 3),
        Ok("20".to_owned())
    );
    let api = "aclplatformGetDeviceInfo";
    fails(
        platform_info(ACL_PLATFORM_AICORE_CNT, 2).unwrap_err(),
        ACL_ERROR_INVALID_PARAM,
        api,
    );
    fails(
        platform_info(17, 64).unwrap_err(),
        ACL_ERROR_INVALID_PARAM,
        api,
    );
    fails(
        code!(aclplatformGetDeviceInfo(
            ACL_PLATFORM_L1_SIZE,
            ptr::null_mut(),
            64
        )),
        ACL_ERROR_INVALID_PARAM,
        api,
    );

    // No instruction table: every argument checked, every instruction unknown. A name that is
    // not UTF-8 gets the ACL layer's code too, not the runtime's.
    let mut value = [0 as c_char; 64];
    let api = "aclplatformGetInstructionInfo";
    let not_utf8 = [0xff_u8 as c_char, 0];
    for (kind, name) in [
        (ACL_PLATFORM_CORE_TYPE_AI_CORE, not_utf8.as_ptr()),
        (ACL_PLATFORM_CORE_TYPE_AI_CORE, c"Intrinsic_vexp".as_ptr()),
        (
            ACL_PLATFORM_CORE_TYPE_VECTOR_CORE,
            c"Intrinsic_vln".as_ptr(),
        ),
        (2, c"Intrinsic_vexp".as_ptr()),
        (ACL_PLATFORM_CORE_TYPE_AI_CORE, ptr::null()),
    ] {
        fails(
            code!(aclplatformGetInstructionInfo(
                kind,
                name,
                value.as_mut_ptr(),
                64
            )),
            ACL_ERROR_INVALID_PARAM,
            api,
        );
    }
    fails(
        code!(aclplatformGetInstructionInfo(
            ACL_PLATFORM_CORE_TYPE_AI_CORE,
            c"Intrinsic_vexp".as_ptr(),
            ptr::null_mut(),
            64
        )),
        ACL_ERROR_INVALID_PARAM,
        api,
    );
}

fn uuid(device: i32) -> [c_char; 16] {
    let mut out = aclrtUuid { bytes: [0; 16] };
    acl!(aclrtDeviceGetUuid(device, &mut out));
    out.bytes
}

fn bus_id(device: i32) -> String {
    let mut text = [0 as c_char; 16];
    acl!(aclrtDeviceGetPCIBusId(device, text.as_mut_ptr(), 13));
    // SAFETY: the call NUL-terminated the buffer.
    unsafe { CStr::from_ptr(text.as_ptr()) }
        .to_str()
        .unwrap()
        .to_owned()
}

fn device_at(id: &str) -> Result<i32, aclError> {
    let text = c_string(id);
    let mut device = -1;
    match code!(aclrtDeviceGetByPCIBusId(text.as_ptr(), &mut device)) {
        0 => Ok(device),
        code => Err(code),
    }
}

#[test]
fn uuids_and_pci_bus_ids_identify_devices() {
    install();
    assert_eq!(uuid(0), uuid(0), "stable");
    assert_ne!(uuid(0), uuid(1), "unique");
    assert_eq!(bus_id(0), "0000:01:00.0");
    assert_eq!(bus_id(1), "0000:02:00.0");
    assert_eq!(device_at("0000:02:00.0"), Ok(1));
    assert_eq!(device_at("02:00.0"), Ok(1), "the domain may be left out");
    assert_eq!(device_at(&bus_id(3).to_uppercase()), Ok(3));

    fails(
        code!(aclrtDeviceGetUuid(0, ptr::null_mut())),
        ACL_ERROR_INVALID_PARAM,
        "aclrtDeviceGetUuid",
    );
    let mut out = aclrtUuid { bytes: [0; 16] };
    fails(
        code!(aclrtDeviceGetUuid(4, &mut out)),
        ACL_ERROR_RT_INVALID_DEVICEID,
        "aclrtDeviceGetUuid",
    );
    let api = "aclrtDeviceGetPCIBusId";
    let mut text = [0 as c_char; 16];
    fails(
        code!(aclrtDeviceGetPCIBusId(0, ptr::null_mut(), 13)),
        ACL_ERROR_INVALID_PARAM,
        api,
    );
    fails(
        code!(aclrtDeviceGetPCIBusId(0, text.as_mut_ptr(), 12)),
        ACL_ERROR_RT_PARAM_INVALID,
        api,
    );
    fails(
        code!(aclrtDeviceGetPCIBusId(4, text.as_mut_ptr(), 13)),
        ACL_ERROR_RT_INVALID_DEVICEID,
        api,
    );
    let api = "aclrtDeviceGetByPCIBusId";
    let mut device = 0;
    let id = c_string("0000:01:00.0");
    fails(
        code!(aclrtDeviceGetByPCIBusId(ptr::null(), &mut device)),
        ACL_ERROR_INVALID_PARAM,
        api,
    );
    fails(
        code!(aclrtDeviceGetByPCIBusId(id.as_ptr(), ptr::null_mut())),
        ACL_ERROR_INVALID_PARAM,
        api,
    );
    for malformed in [
        "",
        "0000:01:00",
        "0000:01:00.8",
        "0000:100:00.0",
        "x:01:00.0",
        "1:2:3:4.0",
    ] {
        fails(
            device_at(malformed).unwrap_err(),
            ACL_ERROR_RT_PARAM_INVALID,
            api,
        );
    }
    fails(
        device_at("0000:05:00.0").unwrap_err(),
        ACL_ERROR_RT_INVALID_DEVICEID,
        api,
    );
}

fn peer_status(device: i32, peer: i32) -> i32 {
    let mut status = -1;
    acl!(aclrtDevicePeerAccessStatus(device, peer, &mut status));
    status
}

#[test]
fn peer_status_follows_enable_and_disable() {
    install();
    std::thread::spawn(|| {
        set_device(1);
        assert_eq!(peer_status(1, 0), 0);
        acl!(aclrtDeviceEnablePeerAccess(0, 0));
        assert_eq!(peer_status(1, 0), 1);
        assert_eq!(peer_status(0, 1), 0, "access is directional");
        acl!(aclrtDeviceDisablePeerAccess(0));
        assert_eq!(peer_status(1, 0), 0);
        assert_eq!(peer_status(1, 1), 0, "a device and itself");
        acl!(aclrtResetDevice(1));
    })
    .join()
    .unwrap();
    let api = "aclrtDevicePeerAccessStatus";
    let mut status = 0;
    fails(
        code!(aclrtDevicePeerAccessStatus(0, 1, ptr::null_mut())),
        ACL_ERROR_INVALID_PARAM,
        api,
    );
    fails(
        code!(aclrtDevicePeerAccessStatus(0, 4, &mut status)),
        ACL_ERROR_RT_PARAM_INVALID,
        api,
    );
    fails(
        code!(aclrtDevicePeerAccessStatus(-1, 0, &mut status)),
        ACL_ERROR_RT_PARAM_INVALID,
        api,
    );
}

#[test]
fn topology_and_architecture() {
    install();
    let mut link = 0;
    acl!(aclrtGetDevicesTopo(0, 1, &mut link));
    assert_eq!(link, u64::from(ACL_RT_DEVS_TOPOLOGY_HCCS));
    let api = "aclrtGetDevicesTopo";
    fails(
        code!(aclrtGetDevicesTopo(0, 1, ptr::null_mut())),
        ACL_ERROR_INVALID_PARAM,
        api,
    );
    fails(
        code!(aclrtGetDevicesTopo(0, 4, &mut link)),
        ACL_ERROR_RT_INVALID_DEVICEID,
        api,
    );
    fails(
        code!(aclrtGetDevicesTopo(1, 1, &mut link)),
        ACL_ERROR_RT_PARAM_INVALID,
        api,
    );

    let compatible = |soc: &str| {
        let soc = c_string(soc);
        let mut answer = -1;
        acl!(aclrtCheckArchCompatibility(soc.as_ptr(), &mut answer));
        answer
    };
    assert_eq!(compatible("Ascend910B3"), 1);
    assert_eq!(compatible("Ascend910B1"), 1, "the same family");
    assert_eq!(compatible("Ascend310P3"), 0);
    assert_eq!(compatible(""), 0);
    let api = "aclrtCheckArchCompatibility";
    let soc = c_string("Ascend910B3");
    let mut answer = 0;
    fails(
        code!(aclrtCheckArchCompatibility(ptr::null(), &mut answer)),
        ACL_ERROR_INVALID_PARAM,
        api,
    );
    fails(
        code!(aclrtCheckArchCompatibility(soc.as_ptr(), ptr::null_mut())),
        ACL_ERROR_INVALID_PARAM,
        api,
    );
}

#[test]
fn cann_attributes() {
    install();
    let (mut list, mut num) = (ptr::null(), 0);
    acl!(aclGetCannAttributeList(&mut list, &mut num));
    // SAFETY: the library owns `num` entries at `list` for the whole process.
    let attrs = unsafe { std::slice::from_raw_parts(list, num) };
    assert_eq!(attrs, [ACL_CANN_ATTR_INF_NAN, ACL_CANN_ATTR_BF16]);
    let attribute = |attr| {
        let mut value = -1;
        acl!(aclGetCannAttribute(attr, &mut value));
        value
    };
    assert_eq!(attribute(ACL_CANN_ATTR_BF16), 1);
    assert_eq!(attribute(ACL_CANN_ATTR_JIT_COMPILE), 0);
    let api = "aclGetCannAttributeList";
    fails(
        code!(aclGetCannAttributeList(ptr::null_mut(), &mut num)),
        ACL_ERROR_INVALID_PARAM,
        api,
    );
    fails(
        code!(aclGetCannAttributeList(&mut list, ptr::null_mut())),
        ACL_ERROR_INVALID_PARAM,
        api,
    );
    let api = "aclGetCannAttribute";
    let mut value = 0;
    fails(
        code!(aclGetCannAttribute(ACL_CANN_ATTR_BF16, ptr::null_mut())),
        ACL_ERROR_INVALID_PARAM,
        api,
    );
    fails(
        code!(aclGetCannAttribute(ACL_CANN_ATTR_UNDEFINED, &mut value)),
        ACL_ERROR_INVALID_PARAM,
        api,
    );
    fails(
        code!(aclGetCannAttribute(3, &mut value)),
        ACL_ERROR_INVALID_PARAM,
        api,
    );
}

#[test]
fn half_precision_and_element_sizes() {
    assert_eq!(code!(aclFloatToFloat16(-2.5)), 0xC100);
    assert_eq!(code!(aclFloatToFloat16(f32::INFINITY)), 0x7BFF);
    assert_eq!(code!(aclFloat16ToFloat(0xC100)), -2.5);
    assert_eq!(code!(aclFloat16ToFloat(0x7E00)), 98304.0);
    assert_eq!(code!(aclDataTypeSize(ACL_INT64)), 8);
    assert_eq!(code!(aclDataTypeSize(ACL_INT4)), 1);
    assert_eq!(code!(aclDataTypeSize(ACL_STRING)), 0);
    assert_eq!(code!(aclDataTypeSize(99)), 0);
}

/// The atomic operations of an Atlas A2's kernels on host memory and on a peer's: no SIMT
/// ones; the DMA atomics reduce signed 8- to 32-bit data; the SIMD scalar ones take 32- and
/// 64-bit integers of either sign. Every error path leaves the answers untouched.
#[test]
fn atomic_capabilities_answer_as_an_atlas_a2() {
    install();
    let operations = [
        ACL_RT_ATOMIC_OPERATION_INTEGER_ADD,
        ACL_RT_ATOMIC_OPERATION_FLOAT_MAX,
        ACL_RT_ATOMIC_OPERATION_DMA_ADD,
        ACL_RT_ATOMIC_OPERATION_DMA_MAX,
        ACL_RT_ATOMIC_OPERATION_SIMD_SCALAR_CAS,
    ];
    let dma = ACL_RT_ATOMIC_CAPABILITY_SIGNED
        | ACL_RT_ATOMIC_CAPABILITY_REDUCTION
        | ACL_RT_ATOMIC_CAPABILITY_SCALAR8
        | ACL_RT_ATOMIC_CAPABILITY_SCALAR16
        | ACL_RT_ATOMIC_CAPABILITY_SCALAR32;
    let scalar = ACL_RT_ATOMIC_CAPABILITY_SIGNED
        | ACL_RT_ATOMIC_CAPABILITY_UNSIGNED
        | ACL_RT_ATOMIC_CAPABILITY_SCALAR32
        | ACL_RT_ATOMIC_CAPABILITY_SCALAR64;
    let expected = [0, 0, dma, dma, scalar];
    let mut host = [u32::MAX; 5];
    acl!(aclrtDeviceGetHostAtomicCapabilities(
        host.as_mut_ptr(),
        operations.as_ptr(),
        5,
        0
    ));
    assert_eq!(host, expected);
    let mut peer = [u32::MAX; 5];
    acl!(aclrtDeviceGetP2PAtomicCapabilities(
        peer.as_mut_ptr(),
        operations.as_ptr(),
        5,
        0,
        1
    ));
    assert_eq!(peer, expected, "peer access need not be enabled");

    let mut out = [u32::MAX; 2];
    let unknown = [ACL_RT_ATOMIC_OPERATION_DMA_ADD, 13];
    let host_cases: [(aclError, &dyn Fn(*mut u32) -> aclError); 7] = [
        (ACL_ERROR_INVALID_PARAM, &|_| {
            code!(aclrtDeviceGetHostAtomicCapabilities(
                ptr::null_mut(),
                operations.as_ptr(),
                1,
                0
            ))
        }),
        (ACL_ERROR_INVALID_PARAM, &|out| {
            code!(aclrtDeviceGetHostAtomicCapabilities(out, ptr::null(), 1, 0))
        }),
        (ACL_ERROR_INVALID_PARAM, &|out| {
            code!(aclrtDeviceGetHostAtomicCapabilities(
                out,
                operations.as_ptr(),
                0,
                0
            ))
        }),
        (ACL_ERROR_RT_INVALID_DEVICEID, &|out| {
            code!(aclrtDeviceGetHostAtomicCapabilities(
                out,
                operations.as_ptr(),
                1,
                99
            ))
        }),
        // capabilities not aligned for uint32_t, of an unknown device: the array comes first.
        (ACL_ERROR_INVALID_PARAM, &|out| {
            code!(aclrtDeviceGetHostAtomicCapabilities(
                out.cast::<u8>().wrapping_add(1).cast(),
                operations.as_ptr(),
                1,
                99
            ))
        }),
        (ACL_ERROR_RT_PARAM_INVALID, &|out| {
            code!(aclrtDeviceGetHostAtomicCapabilities(
                out,
                unknown.as_ptr(),
                2,
                0
            ))
        }),
        // The operations are values no lookup decides: checked before the device.
        (ACL_ERROR_RT_PARAM_INVALID, &|out| {
            code!(aclrtDeviceGetHostAtomicCapabilities(
                out,
                unknown.as_ptr(),
                2,
                99
            ))
        }),
    ];
    for (expected, call) in host_cases {
        fails(
            call(out.as_mut_ptr()),
            expected,
            "aclrtDeviceGetHostAtomicCapabilities",
        );
        assert_eq!(out, [u32::MAX; 2], "nothing written");
    }
    let p2p_cases: [(aclError, &dyn Fn(*mut u32) -> aclError); 9] = [
        (ACL_ERROR_INVALID_PARAM, &|_| {
            code!(aclrtDeviceGetP2PAtomicCapabilities(
                ptr::null_mut(),
                operations.as_ptr(),
                1,
                0,
                1
            ))
        }),
        (ACL_ERROR_INVALID_PARAM, &|out| {
            code!(aclrtDeviceGetP2PAtomicCapabilities(
                out,
                ptr::null(),
                1,
                0,
                1
            ))
        }),
        (ACL_ERROR_INVALID_PARAM, &|out| {
            code!(aclrtDeviceGetP2PAtomicCapabilities(
                out,
                operations.as_ptr(),
                0,
                0,
                1
            ))
        }),
        (ACL_ERROR_INVALID_PARAM, &|out| {
            code!(aclrtDeviceGetP2PAtomicCapabilities(
                out,
                operations.as_ptr(),
                1,
                1,
                1
            ))
        }),
        (ACL_ERROR_RT_INVALID_DEVICEID, &|out| {
            code!(aclrtDeviceGetP2PAtomicCapabilities(
                out,
                operations.as_ptr(),
                1,
                0,
                99
            ))
        }),
        (ACL_ERROR_RT_PARAM_INVALID, &|out| {
            code!(aclrtDeviceGetP2PAtomicCapabilities(
                out,
                unknown.as_ptr(),
                2,
                0,
                1
            ))
        }),
        // The operations before either device is looked up; the ACL layer's same-device
        // check (100000) before the operations; the source device before the destination.
        (ACL_ERROR_RT_PARAM_INVALID, &|out| {
            code!(aclrtDeviceGetP2PAtomicCapabilities(
                out,
                unknown.as_ptr(),
                2,
                99,
                98
            ))
        }),
        (ACL_ERROR_INVALID_PARAM, &|out| {
            code!(aclrtDeviceGetP2PAtomicCapabilities(
                out,
                unknown.as_ptr(),
                2,
                99,
                99
            ))
        }),
        (ACL_ERROR_RT_INVALID_DEVICEID, &|out| {
            code!(aclrtDeviceGetP2PAtomicCapabilities(
                out,
                operations.as_ptr(),
                1,
                99,
                0
            ))
        }),
    ];
    for (expected, call) in p2p_cases {
        fails(
            call(out.as_mut_ptr()),
            expected,
            "aclrtDeviceGetP2PAtomicCapabilities",
        );
        assert_eq!(out, [u32::MAX; 2], "nothing written");
    }
}

/// An Atlas A2 has one Task Schedule: both choices are accepted and change nothing (work
/// still runs); the reserved id and other values are refused.
#[test]
fn the_task_schedule_choice_is_accepted_and_checked() {
    install();
    std::thread::spawn(|| {
        set_device(0);
        acl!(aclrtSetTsDevice(ACL_TS_ID_AIVECTOR));
        let dev = malloc(16);
        acl!(aclrtMemset(dev, 16, 1, 16));
        assert_eq!(download::<u8>(dev, 16), [1; 16]);
        acl!(aclrtSetTsDevice(ACL_TS_ID_AICORE));
        acl!(aclrtFree(dev));
        for bad in [ACL_TS_ID_RESERVED, 7] {
            fails(
                code!(aclrtSetTsDevice(bad)),
                ACL_ERROR_INVALID_PARAM,
                "aclrtSetTsDevice",
            );
        }
    })
    .join()
    .unwrap();
}

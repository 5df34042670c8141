//! aclsysGetVersionStr / aclsysGetVersionNum: the configured package versions and their
//! weighted numbers; the deprecated aclsysGetCANNVersion (the same versions in parts) and
//! aclrtGetVersion (the interface version); every error path, through the exported C ABI. This process configures
//! its own versions, so it is a test binary of its own.

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
        npu_sim::SimConfig::default()
            .package_version("runtime", "9.0.0-rc.2")
            .package_version("mytool", "1.2.3")
            .install()
            .unwrap();
    });
}

fn version_str(package: &str) -> Result<String, aclError> {
    let name = c_string(package);
    let mut text = [0 as c_char; ACL_PKG_VERSION_MAX_SIZE as usize];
    match code!(aclsysGetVersionStr(
        name.as_ptr().cast_mut(),
        text.as_mut_ptr()
    )) {
        // SAFETY: the call NUL-terminated the buffer.
        0 => Ok(unsafe { CStr::from_ptr(text.as_ptr()) }
            .to_str()
            .unwrap()
            .to_owned()),
        code => Err(code),
    }
}

fn version_num(package: &str) -> Result<i32, aclError> {
    let name = c_string(package);
    let mut number = -1;
    match code!(aclsysGetVersionNum(name.as_ptr().cast_mut(), &mut number)) {
        0 => Ok(number),
        code => Err(code),
    }
}

#[test]
fn configured_and_default_packages_report_their_versions() {
    install();
    assert_eq!(version_str("runtime").as_deref(), Ok("9.0.0-rc.2"));
    assert_eq!(version_num("runtime"), Ok(90_000_602));
    assert_eq!(version_str("mytool").as_deref(), Ok("1.2.3"));
    assert_eq!(version_num("mytool"), Ok(10_203_999));
    let cann = npu_sim::config::DEFAULT_CANN_VERSION;
    assert_eq!(version_str("compiler").as_deref(), Ok(cann));
    assert_eq!(
        version_num("compiler"),
        Ok(npu_sim::version::package_version_number(cann).unwrap())
    );
    assert!(version_num("driver").unwrap() > 0);
}

#[test]
fn a_release_candidate_numbers_below_its_release() {
    install();
    let rc = version_num("runtime").unwrap();
    let release = npu_sim::version::package_version_number("9.0.0").unwrap();
    assert!(rc < release, "{rc} vs {release}");
}

#[test]
fn bad_arguments_are_parameter_errors() {
    install();
    let name = c_string("runtime");
    let mut text = [0 as c_char; ACL_PKG_VERSION_MAX_SIZE as usize];
    let mut number = 0;
    let cases = [
        (
            "aclsysGetVersionStr",
            code!(aclsysGetVersionStr(ptr::null_mut(), text.as_mut_ptr())),
        ),
        (
            "aclsysGetVersionStr",
            code!(aclsysGetVersionStr(
                name.as_ptr().cast_mut(),
                ptr::null_mut()
            )),
        ),
        (
            "aclsysGetVersionStr",
            version_str("nosuchpackage").unwrap_err(),
        ),
        (
            "aclsysGetVersionNum",
            code!(aclsysGetVersionNum(ptr::null_mut(), &mut number)),
        ),
        (
            "aclsysGetVersionNum",
            code!(aclsysGetVersionNum(
                name.as_ptr().cast_mut(),
                ptr::null_mut()
            )),
        ),
        (
            "aclsysGetVersionNum",
            version_num("nosuchpackage").unwrap_err(),
        ),
        // A name that is not UTF-8 names no package either.
        (
            "aclsysGetVersionStr",
            code!(aclsysGetVersionStr(
                c"\xff".as_ptr().cast_mut(),
                text.as_mut_ptr()
            )),
        ),
        (
            "aclsysGetVersionNum",
            code!(aclsysGetVersionNum(
                c"\xfe".as_ptr().cast_mut(),
                &mut number
            )),
        ),
    ];
    for (api, code) in cases {
        assert_eq!(code, ACL_ERROR_INVALID_PARAM, "{api}");
    }
    assert_eq!(version_num("nosuchpackage"), Err(ACL_ERROR_INVALID_PARAM));
    let message = recent_message();
    assert!(message.contains("nosuchpackage"), "{message}");
}

/// A C character field as text (up to its NUL).
fn text(field: &[c_char]) -> String {
    let bytes: Vec<u8> = field
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8(bytes).unwrap()
}

fn cann_version(name: aclCANNPackageName) -> Result<[String; 5], aclError> {
    // SAFETY: the struct is plain C characters, for which all zeroes is valid.
    let mut version: aclCANNPackageVersion = unsafe { std::mem::zeroed() };
    let code = code!(aclsysGetCANNVersion(name, &mut version));
    match code {
        0 => Ok([
            text(&version.version),
            text(&version.majorVersion),
            text(&version.minorVersion),
            text(&version.releaseVersion),
            text(&version.patchVersion),
        ]),
        code => Err(code),
    }
}

#[test]
fn the_deprecated_query_reports_the_same_versions_in_parts() {
    install();
    assert_eq!(
        cann_version(ACL_PKG_NAME_RUNTIME).unwrap(),
        ["9.0.0-rc.2", "9", "0", "0", "rc.2"].map(String::from)
    );
    let cann = npu_sim::config::DEFAULT_CANN_VERSION;
    for name in [
        ACL_PKG_NAME_CANN,
        ACL_PKG_NAME_COMPILER,
        ACL_PKG_NAME_TOOLKIT,
        ACL_PKG_NAME_OPP,
    ] {
        let parts = cann_version(name).unwrap();
        assert_eq!(parts[0], cann, "package {name}");
        assert_eq!(parts[4], "0", "a release has no patch part");
        let joined = format!("{}.{}.{}", parts[1], parts[2], parts[3]);
        assert_eq!(joined, cann, "package {name}");
    }
    assert_eq!(
        cann_version(ACL_PKG_NAME_DRIVER).unwrap()[0],
        version_str("driver").unwrap()
    );
}

#[test]
fn the_interface_version_is_the_headers() {
    let (mut major, mut minor, mut patch) = (-1, -1, -1);
    let code = code!(aclrtGetVersion(&mut major, &mut minor, &mut patch));
    assert_eq!(code, 0);
    assert_eq!(
        (major, minor, patch),
        (
            ACL_MAJOR_VERSION as i32,
            ACL_MINOR_VERSION as i32,
            ACL_PATCH_VERSION as i32
        )
    );
}

#[test]
fn deprecated_queries_reject_bad_arguments() {
    install();
    // Installed by neither the defaults nor this process's configuration.
    for name in [ACL_PKG_NAME_HCCL, ACL_PKG_NAME_OPP_KERNEL, 8, u32::MAX] {
        assert_eq!(
            cann_version(name),
            Err(ACL_ERROR_INVALID_PARAM),
            "package {name}"
        );
        assert!(recent_message().contains("aclsysGetCANNVersion"));
    }
    assert_eq!(
        code!(aclsysGetCANNVersion(ACL_PKG_NAME_CANN, ptr::null_mut())),
        ACL_ERROR_INVALID_PARAM
    );
    let mut part = 0;
    let cases = [
        code!(aclrtGetVersion(ptr::null_mut(), &mut part, &mut part)),
        code!(aclrtGetVersion(&mut part, ptr::null_mut(), &mut part)),
        code!(aclrtGetVersion(&mut part, &mut part, ptr::null_mut())),
    ];
    assert_eq!(cases, [ACL_ERROR_INVALID_PARAM; 3]);
    assert!(recent_message().contains("aclrtGetVersion"));
}

/// What needs a newer driver than the simulated one is refused as on such a host: with the
/// default driver (25.5.0), aclrtMemRetainAllocationHandle, which needs 26.0.RC1, fails with
/// 207000 after its NULL checks (tests/vmm.rs configures 26.0.RC1 and uses it).
#[test]
fn a_feature_of_a_newer_driver_is_not_supported() {
    install();
    assert_eq!(version_str("driver").unwrap(), "25.5.0");
    let mut handle = ptr::null_mut();
    assert_eq!(
        code!(aclrtMemRetainAllocationHandle(ptr::null_mut(), &mut handle)),
        ACL_ERROR_INVALID_PARAM
    );
    let somewhere = 0x1000 as *mut std::ffi::c_void;
    assert_eq!(
        code!(aclrtMemRetainAllocationHandle(somewhere, &mut handle)),
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT
    );
    let message = recent_message();
    assert!(
        message.contains("26.0.0-rc.1") && message.contains("25.5.0"),
        "{message}"
    );
    assert!(handle.is_null());
}

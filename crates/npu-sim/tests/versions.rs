//! aclsysGetVersionStr / aclsysGetVersionNum: the configured package versions and their
//! weighted numbers, and every error path, through the exported C ABI. This process configures
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
    ];
    for (api, code) in cases {
        assert_eq!(code, ACL_ERROR_INVALID_PARAM, "{api}");
    }
    assert_eq!(version_num("nosuchpackage"), Err(ACL_ERROR_INVALID_PARAM));
    let message = recent_message();
    assert!(message.contains("nosuchpackage"), "{message}");
}

//! Version queries: the ACL interface's version and the installed packages' versions.

use std::ffi::{CString, c_char};

use npu_sys::*;

use super::check::c_str_or;
use crate::error::{Res, fail, guard, non_null, write_out};
use crate::sim::sim;
use crate::version::package_version_parts;

/// The configured version of a package (see [`crate::SimConfig::packages`]) and its weighted
/// number; an unknown package is a parameter error.
fn package_version(name: &str) -> Res<(String, i32)> {
    let sim = sim()?;
    match sim.config.packages.get(name) {
        Some(version) => match crate::version::package_version_number(version) {
            Some(number) => Ok((version.clone(), number)),
            None => fail!(
                ACL_ERROR_INTERNAL_ERROR,
                "the configured version {version:?} of {name:?} has no number"
            ),
        },
        None => fail!(
            ACL_ERROR_INVALID_PARAM,
            "no package {name:?} is installed (the simulator knows {:?})",
            sim.config.packages.keys().collect::<Vec<_>>()
        ),
    }
}

/// Writes the version string of a package (as configured; CANN's packages default to
/// [`crate::config::DEFAULT_CANN_VERSION`]) into `versionStr` (at least
/// ACL_PKG_VERSION_MAX_SIZE bytes).
///
/// # Safety
/// `pkgName` must be NULL or NUL-terminated; `versionStr` NULL or writable for
/// ACL_PKG_VERSION_MAX_SIZE bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclsysGetVersionStr(
    pkgName: *mut c_char,
    versionStr: *mut c_char,
) -> aclError {
    guard("aclsysGetVersionStr", || {
        let name = c_str_or(pkgName, "pkgName", ACL_ERROR_INVALID_PARAM)?;
        non_null(versionStr, "versionStr")?;
        let (version, _) = package_version(name)?;
        let bytes = CString::new(version).unwrap_or_default();
        let bytes = bytes.as_bytes_with_nul();
        // SAFETY: the caller provides ACL_PKG_VERSION_MAX_SIZE (128) writable bytes, more than
        // the version string with its NUL (SimConfig::validate only admits short versions).
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), versionStr.cast::<u8>(), bytes.len())
        };
        Ok(())
    })
}

/// Writes the version of a package as its weighted number ([`crate::version`]), which orders
/// as the versions do.
///
/// # Safety
/// `pkgName` must be NULL or NUL-terminated; `versionNum` NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclsysGetVersionNum(
    pkgName: *mut c_char,
    versionNum: *mut i32,
) -> aclError {
    guard("aclsysGetVersionNum", || {
        let name = c_str_or(pkgName, "pkgName", ACL_ERROR_INVALID_PARAM)?;
        non_null(versionNum, "versionNum")?;
        let (_, number) = package_version(name)?;
        write_out(versionNum, "versionNum", number)
    })
}

/// The package an `aclCANNPackageName` names: the directory of a CANN installation's
/// `share/info` (as aclsysGetVersionStr takes it), or `None` for a value outside the enum.
fn package_name(name: aclCANNPackageName) -> Option<&'static str> {
    Some(match name {
        ACL_PKG_NAME_CANN => "cann",
        ACL_PKG_NAME_RUNTIME => "runtime",
        ACL_PKG_NAME_COMPILER => "compiler",
        ACL_PKG_NAME_HCCL => "hccl",
        ACL_PKG_NAME_TOOLKIT => "toolkit",
        ACL_PKG_NAME_OPP => "opp",
        ACL_PKG_NAME_OPP_KERNEL => "opp_kernel",
        ACL_PKG_NAME_DRIVER => "driver",
        _ => return None,
    })
}

/// Copies `text` and its NUL into a fixed C character array (the versions the configuration
/// admits are short enough for every field).
fn fill<const N: usize>(field: &mut [c_char; N], text: &str) {
    for (slot, byte) in field.iter_mut().zip(text.bytes().take(N - 1)) {
        *slot = byte as c_char;
    }
}

/// The version of a package named by the deprecated enum, whole and in parts: major, minor,
/// release (the third number) and patch (a pre-release stage such as `rc.1`, else "0"). A
/// package that is not installed (by default HCCL and OPP_KERNEL) or a value outside the enum
/// → 100000, as aclsysGetVersionStr reports an unknown package.
///
/// # Safety
/// `version` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclsysGetCANNVersion(
    name: aclCANNPackageName,
    version: *mut aclCANNPackageVersion,
) -> aclError {
    guard("aclsysGetCANNVersion", || {
        non_null(version, "version")?;
        let Some(package) = package_name(name) else {
            fail!(
                ACL_ERROR_INVALID_PARAM,
                "name {name} is not an aclCANNPackageName"
            );
        };
        let (text, _) = package_version(package)?;
        let Some([major, minor, release, patch]) = package_version_parts(&text) else {
            fail!(
                ACL_ERROR_INTERNAL_ERROR,
                "the configured version {text:?} of {package:?} has no parts"
            );
        };
        let mut out = aclCANNPackageVersion {
            version: [0; ACL_PKG_VERSION_MAX_SIZE as usize],
            majorVersion: [0; ACL_PKG_VERSION_PARTS_MAX_SIZE as usize],
            minorVersion: [0; ACL_PKG_VERSION_PARTS_MAX_SIZE as usize],
            releaseVersion: [0; ACL_PKG_VERSION_PARTS_MAX_SIZE as usize],
            patchVersion: [0; ACL_PKG_VERSION_PARTS_MAX_SIZE as usize],
            reserved: [0; ACL_PKG_VERSION_MAX_SIZE as usize],
        };
        fill(&mut out.version, &text);
        fill(&mut out.majorVersion, major);
        fill(&mut out.minorVersion, minor);
        fill(&mut out.releaseVersion, release);
        fill(&mut out.patchVersion, patch);
        write_out(version, "version", out)
    })
}

/// The ACL interface version the header declares (ACL_MAJOR_VERSION, ACL_MINOR_VERSION,
/// ACL_PATCH_VERSION). Each pointer is required (NULL → 100000, checked in parameter order).
///
/// # Safety
/// Each pointer must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetVersion(
    majorVersion: *mut i32,
    minorVersion: *mut i32,
    patchVersion: *mut i32,
) -> aclError {
    guard("aclrtGetVersion", || {
        non_null(majorVersion, "majorVersion")?;
        non_null(minorVersion, "minorVersion")?;
        non_null(patchVersion, "patchVersion")?;
        write_out(majorVersion, "majorVersion", ACL_MAJOR_VERSION as i32)?;
        write_out(minorVersion, "minorVersion", ACL_MINOR_VERSION as i32)?;
        write_out(patchVersion, "patchVersion", ACL_PATCH_VERSION as i32)
    })
}

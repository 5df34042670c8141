//! CANN package versions, as `aclsysGetVersionStr` / `aclsysGetVersionNum` report them.
//!
//! A package version reads `MAJOR.MINOR.PATCH`, optionally followed by a pre-release stage
//! `-alpha.N`, `-beta.N` or `-rc.N` (CANN's published order is alpha < beta < rc < release for
//! the same base version). Its number weighs the parts so that numbers order as versions do:
//!
//! `MAJOR·10⁷ + MINOR·10⁵ + PATCH·10³ + stage`, with stage = N for alpha, 300 + N for beta,
//! 600 + N for rc and 999 for a release. Hence MINOR ≤ 99, PATCH ≤ 99, N is 1 to 299 and MAJOR
//! ≤ 213 (the number is an `int32_t`).
//!
//! ```
//! # extern crate ascendcl as npu_sim;
//! use npu_sim::version::package_version_number;
//!
//! assert_eq!(package_version_number("8.5.0"), Some(80_500_999));
//! let order = ["9.0.0-alpha.1", "9.0.0-alpha.2", "9.0.0-beta.1", "9.0.0-rc.1", "9.0.0", "9.0.1"];
//! let numbers: Vec<i32> = order.iter().map(|v| package_version_number(v).unwrap()).collect();
//! assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{numbers:?}");
//! assert_eq!(package_version_number("9.0"), None);
//! assert_eq!(package_version_number("9.0.0-gamma.1"), None);
//! ```

/// The weighted number of a package version, or `None` if the text is not a version of the
/// form above (or its parts are out of range).
pub fn package_version_number(version: &str) -> Option<i32> {
    let (base, stage) = match version.split_once('-') {
        Some((base, stage)) => (base, Some(stage)),
        None => (version, None),
    };
    let mut parts = base.split('.').map(part);
    let (Some(Some(major)), Some(Some(minor)), Some(Some(patch)), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    let stage = match stage {
        None => 999,
        Some(stage) => {
            let (name, n) = stage.split_once('.')?;
            let n = part(n).filter(|n| (1..=299).contains(n))?;
            let offset = match name {
                "alpha" => 0,
                "beta" => 300,
                "rc" => 600,
                _ => return None,
            };
            offset + n
        }
    };
    if major > 213 || minor > 99 || patch > 99 {
        return None;
    }
    let number = i64::from(major) * 10_000_000
        + i64::from(minor) * 100_000
        + i64::from(patch) * 1_000
        + i64::from(stage);
    i32::try_from(number).ok()
}

/// The parts of a package version as the deprecated `aclCANNPackageVersion` reports them:
/// major, minor, release (the third number) and patch (the pre-release stage, `"0"` for a
/// release, as the struct fills a part the version lacks); `None` if the text is not a
/// version [`package_version_number`] accepts.
///
/// ```
/// # extern crate ascendcl as npu_sim;
/// use npu_sim::version::package_version_parts;
///
/// assert_eq!(package_version_parts("8.5.0"), Some(["8", "5", "0", "0"]));
/// assert_eq!(package_version_parts("9.0.1-rc.2"), Some(["9", "0", "1", "rc.2"]));
/// assert_eq!(package_version_parts("9.0"), None);
/// ```
pub fn package_version_parts(version: &str) -> Option<[&str; 4]> {
    package_version_number(version)?;
    let (base, stage) = version.split_once('-').unwrap_or((version, "0"));
    let mut parts = base.split('.');
    Some([parts.next()?, parts.next()?, parts.next()?, stage])
}

/// One decimal part: digits only (no sign, no spaces).
fn part(text: &str) -> Option<u32> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::package_version_number;

    #[test]
    fn the_largest_major_fits_an_int32() {
        assert_eq!(package_version_number("213.99.99"), Some(2_139_999_999));
        assert_eq!(package_version_number("214.0.0"), None);
    }

    #[test]
    fn malformed_versions_have_no_number() {
        for text in [
            "",
            "1",
            "1.2.3.4",
            "1.x.3",
            "1.2.3-rc",
            "1.2.3-rc.0",
            "1.2.3-rc.300",
            "+1.2.3",
        ] {
            assert_eq!(package_version_number(text), None, "{text}");
        }
    }
}

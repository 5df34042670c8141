//! Where CANN's runtime library may be, in the order the loader tries the places.
//!
//! The order is a pure function of an [`SearchEnv`] snapshot and the root of the built-in
//! prefixes, so it can be checked without a CANN install or writing to `/usr/local`.

use std::path::{Path, PathBuf};

/// The names CANN ships the runtime API under, preferred first: `libacl_rt.so` is the current
/// one; `libascendcl.so` is kept for compatibility with older toolkits and programs.
pub(crate) const LIBRARY_NAMES: [&str; 2] = ["libacl_rt.so", "libascendcl.so"];

/// Set to `1` to accept npu-sim's build of the runtime wherever the search finds it (tests
/// that lay out fake install trees use it); otherwise only `NPU_ACL_LIB` may name it.
pub(crate) const ALLOW_SIMULATOR_ENV: &str = "NPU_ACL_ALLOW_SIMULATOR";

/// The root of the built-in install prefixes on a real host.
pub(crate) const SYSTEM_ROOT: &str = "/usr/local";

/// What the search reads from the process environment, captured once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SearchEnv {
    /// `NPU_ACL_LIB`: the library itself, or a directory holding it.
    pub(crate) acl_lib: Option<PathBuf>,
    /// Whether `acl_lib` is a directory (then both names are tried in it).
    pub(crate) acl_lib_is_dir: bool,
    /// `ASCEND_TOOLKIT_HOME`, set by CANN's `set_env.sh`.
    pub(crate) toolkit_home: Option<PathBuf>,
    /// `ASCEND_HOME_PATH`, set by CANN's `set_env.sh`.
    pub(crate) home_path: Option<PathBuf>,
    /// `HOME`: a non-root install goes to `$HOME/Ascend/cann`.
    pub(crate) home: Option<PathBuf>,
    /// `NPU_ACL_ALLOW_SIMULATOR=1`.
    pub(crate) allow_simulator: bool,
}

impl SearchEnv {
    /// Reads the variables of this process (an empty value counts as unset).
    pub(crate) fn from_process() -> SearchEnv {
        let var = |name: &str| -> Option<PathBuf> {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let acl_lib = var("NPU_ACL_LIB");
        SearchEnv {
            acl_lib_is_dir: acl_lib.as_deref().is_some_and(Path::is_dir),
            acl_lib,
            toolkit_home: var("ASCEND_TOOLKIT_HOME"),
            home_path: var("ASCEND_HOME_PATH"),
            home: var("HOME"),
            allow_simulator: std::env::var_os(ALLOW_SIMULATOR_ENV).is_some_and(|v| v == "1"),
        }
    }
}

/// One path to hand to the dynamic loader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Candidate {
    pub(crate) path: PathBuf,
    /// Whether npu-sim's build is acceptable here: named by the user in `NPU_ACL_LIB`, or
    /// anywhere with `NPU_ACL_ALLOW_SIMULATOR=1`.
    pub(crate) accepts_simulator: bool,
}

/// Every candidate, in order. `NPU_ACL_LIB`, when set, is the only place: an override names
/// the library to use, and one that cannot be loaded must say so rather than give way to
/// another install. Otherwise `lib64` of `$ASCEND_TOOLKIT_HOME`, `$ASCEND_HOME_PATH`,
/// `<root>/Ascend/cann`, `$HOME/Ascend/cann`, `<root>/Ascend/ascend-toolkit/latest` and
/// `$HOME/Ascend/ascend-toolkit/latest`; then the bare names for the system loader. Each
/// directory is tried with `libacl_rt.so` before `libascendcl.so`; a path already listed is
/// not repeated (after `set_env.sh` both variables usually name one directory).
pub(crate) fn candidates(env: &SearchEnv, root: &Path) -> Vec<Candidate> {
    let in_dir = |dir: &Path| LIBRARY_NAMES.map(|name| dir.join(name));
    if let Some(lib) = &env.acl_lib {
        let paths = match env.acl_lib_is_dir {
            true => in_dir(lib).to_vec(),
            false => vec![lib.clone()],
        };
        return paths
            .into_iter()
            .map(|path| Candidate {
                path,
                accepts_simulator: true,
            })
            .collect();
    }
    let mut paths: Vec<PathBuf> = Vec::new();
    let prefixes = [
        env.toolkit_home.clone(),
        env.home_path.clone(),
        Some(root.join("Ascend/cann")),
        env.home.as_ref().map(|home| home.join("Ascend/cann")),
        Some(root.join("Ascend/ascend-toolkit/latest")),
        // An older toolkit installed by a non-root user.
        env.home
            .as_ref()
            .map(|home| home.join("Ascend/ascend-toolkit/latest")),
    ];
    for prefix in prefixes.into_iter().flatten() {
        paths.extend(in_dir(&prefix.join("lib64")));
    }
    // A bare name makes the dynamic loader search LD_LIBRARY_PATH and its cache.
    paths.extend(LIBRARY_NAMES.map(PathBuf::from));

    let mut candidates: Vec<Candidate> = Vec::with_capacity(paths.len());
    for path in paths {
        if candidates.iter().all(|c| c.path != path) {
            candidates.push(Candidate {
                path,
                accepts_simulator: env.allow_simulator,
            });
        }
    }
    candidates
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(env: &SearchEnv) -> Vec<String> {
        candidates(env, Path::new("/root-of"))
            .into_iter()
            .map(|c| c.path.display().to_string())
            .collect()
    }

    #[test]
    fn every_location_is_tried_in_the_documented_order() {
        let mut env = SearchEnv {
            toolkit_home: Some("/toolkit".into()),
            home_path: Some("/home-path".into()),
            home: Some("/home/me".into()),
            ..SearchEnv::default()
        };
        assert_eq!(
            paths(&env),
            [
                "/toolkit/lib64/libacl_rt.so",
                "/toolkit/lib64/libascendcl.so",
                "/home-path/lib64/libacl_rt.so",
                "/home-path/lib64/libascendcl.so",
                "/root-of/Ascend/cann/lib64/libacl_rt.so",
                "/root-of/Ascend/cann/lib64/libascendcl.so",
                "/home/me/Ascend/cann/lib64/libacl_rt.so",
                "/home/me/Ascend/cann/lib64/libascendcl.so",
                "/root-of/Ascend/ascend-toolkit/latest/lib64/libacl_rt.so",
                "/root-of/Ascend/ascend-toolkit/latest/lib64/libascendcl.so",
                "/home/me/Ascend/ascend-toolkit/latest/lib64/libacl_rt.so",
                "/home/me/Ascend/ascend-toolkit/latest/lib64/libascendcl.so",
                "libacl_rt.so",
                "libascendcl.so",
            ]
        );
        // An override is the only place.
        env.acl_lib = Some("/explicit/libmyacl.so".into());
        assert_eq!(paths(&env), ["/explicit/libmyacl.so"]);
    }

    #[test]
    fn an_empty_environment_leaves_the_built_in_prefixes_and_the_system_loader() {
        assert_eq!(
            paths(&SearchEnv::default()),
            [
                "/root-of/Ascend/cann/lib64/libacl_rt.so",
                "/root-of/Ascend/cann/lib64/libascendcl.so",
                "/root-of/Ascend/ascend-toolkit/latest/lib64/libacl_rt.so",
                "/root-of/Ascend/ascend-toolkit/latest/lib64/libascendcl.so",
                "libacl_rt.so",
                "libascendcl.so",
            ]
        );
    }

    #[test]
    fn a_directory_in_npu_acl_lib_is_tried_with_both_names() {
        let env = SearchEnv {
            acl_lib: Some("/opt/acl".into()),
            acl_lib_is_dir: true,
            ..SearchEnv::default()
        };
        let found = candidates(&env, Path::new(SYSTEM_ROOT));
        assert_eq!(found[0].path, Path::new("/opt/acl/libacl_rt.so"));
        assert_eq!(found[1].path, Path::new("/opt/acl/libascendcl.so"));
        assert_eq!(found.len(), 2, "the override is the only place");
        assert!(found.iter().all(|c| c.accepts_simulator));
    }

    #[test]
    fn one_directory_named_twice_is_tried_once() {
        let env = SearchEnv {
            toolkit_home: Some("/t".into()),
            home_path: Some("/t".into()),
            ..SearchEnv::default()
        };
        let listed = paths(&env);
        assert_eq!(
            listed[..2],
            ["/t/lib64/libacl_rt.so", "/t/lib64/libascendcl.so"]
        );
        assert_eq!(listed.iter().filter(|p| p.starts_with("/t/")).count(), 2);
    }

    #[test]
    fn the_opt_in_accepts_the_simulator_everywhere() {
        let env = SearchEnv {
            allow_simulator: true,
            ..SearchEnv::default()
        };
        assert!(
            candidates(&env, Path::new(SYSTEM_ROOT))
                .iter()
                .all(|c| c.accepts_simulator)
        );
    }
}

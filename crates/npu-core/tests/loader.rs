//! Finding and loading CANN's runtime, on fake install trees built in temporary folders from
//! npu-sim's cdylib.
//!
//! The environment and the process's loaded libraries are global, so every scenario that sets
//! variables runs in a child process: the test re-executes this binary for itself alone with
//! `SCENARIO` set and the loader's variables replaced, and the child runs the test's body.

mod common;
#[path = "../../npu/tests/common/every_callsite.rs"]
mod every_callsite;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use npu_core::{
    AclCode, Backend, BackendChoice, BackendReason, Error, Fallback, LoadError, LoadFailure,
    Runtime,
};

/// Names the test a child process runs.
const SCENARIO: &str = "NPU_LOADER_TEST_SCENARIO";
/// The library a child expects the loader to choose.
const EXPECT: &str = "NPU_LOADER_TEST_EXPECT";
/// Every variable the loader or the simulator reads: cleared in children, then set as the test
/// asks. (`LD_LIBRARY_PATH` is kept: cargo puts npu-sim's cdylib on it, as on a developer's
/// machine.)
const LOADER_VARS: &[&str] = &[
    "NPU_BACKEND",
    "NPU_ACL_LIB",
    "NPU_ACL_ALLOW_SIMULATOR",
    "ASCEND_TOOLKIT_HOME",
    "ASCEND_HOME_PATH",
    "ASCEND_RT_VISIBLE_DEVICES",
    "HOME",
    "NPU_SIM_CONFIG",
];

/// The variables a test sets in its child.
type Env = Vec<(&'static str, OsString)>;

/// Whether this process is the child running `test`.
fn is_child(test: &str) -> bool {
    std::env::var_os(SCENARIO).is_some_and(|s| s == test)
}

/// Runs `test` alone in a child process of this test binary, with the loader's variables
/// replaced by `env`, and fails if it fails.
fn spawn_child(test: &str, env: &Env) {
    let mut child = Command::new(std::env::current_exe().expect("test binary"));
    child.args([test, "--exact", "--nocapture", "--test-threads=1"]);
    for var in LOADER_VARS {
        child.env_remove(var);
    }
    child
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env(SCENARIO, test);
    let out = child.output().expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("test result: ok. 1 passed"),
        "the child running {test} failed:\n{stdout}\n{stderr}"
    );
}

/// One scenario: in the test's own process, `setup` lays out a tree and returns the child's
/// environment; the child runs `body`.
fn scenario(test: &str, setup: impl FnOnce(&Tree) -> Env, body: impl FnOnce()) {
    if is_child(test) {
        return body();
    }
    let tree = Tree::new(test);
    let env = setup(&tree);
    spawn_child(test, &env);
}

/// A variable of the child's environment, which `setup` put there.
fn var(name: &str) -> PathBuf {
    PathBuf::from(std::env::var_os(name).unwrap_or_else(|| panic!("{name} is set")))
}

/// A temporary folder for one test's install trees, removed when the test ends.
struct Tree(PathBuf);

impl Tree {
    fn new(test: &str) -> Tree {
        let dir = std::env::temp_dir().join(format!("npu-loader-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the tree");
        Tree(dir.canonicalize().expect("canonical temp dir"))
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.0.join(relative)
    }

    /// A copy of npu-sim's cdylib at `relative`: a file of its own, so the loader maps it
    /// separately and reports its path.
    fn copy_simulator(&self, relative: &str) -> PathBuf {
        let path = self.path(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::copy(common::simulator_library(), &path).expect("copy the simulator");
        path
    }

    /// A symlink to npu-sim's cdylib at `relative`.
    fn link_simulator(&self, relative: &str) -> PathBuf {
        let path = self.path(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(common::simulator_library(), &path).expect("symlink");
        path
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A builder for the runtime library at `path`.
fn runtime_library(path: impl Into<PathBuf>) -> npu_core::RuntimeBuilder {
    // SAFETY: every library these tests name is npu-sim's build (copied or linked into a fake
    // install tree), a C stand-in for CANN's runtime exporting ACL's functions
    // (`stub_runtime`), or a file that fails to load as a runtime before any of its
    // functions is called.
    unsafe { Runtime::builder().library(path) }
}

fn acl() -> Result<Runtime, Error> {
    Runtime::builder().backend(BackendChoice::Acl).build()
}

fn auto() -> Runtime {
    Runtime::builder()
        .backend(BackendChoice::Auto)
        .build()
        .expect("auto always has the simulator to fall back to")
}

fn library_path(runtime: &Runtime) -> &Path {
    match runtime.backend() {
        Backend::Library { path, .. } => path,
        other => panic!("expected a loaded library, got {other}"),
    }
}

/// Whether two paths name one file (hard links included).
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let id = |p: &Path| std::fs::metadata(p).map(|m| (m.dev(), m.ino())).ok();
    id(a).is_some() && id(a) == id(b)
}

fn not_found(result: Result<Runtime, Error>) -> Vec<npu_core::LoadAttempt> {
    match result {
        Err(Error::Load(LoadError::NotFound { tried })) => tried,
        other => panic!("expected LoadError::NotFound, got {other:?}"),
    }
}

#[test]
fn each_location_is_tried_in_the_documented_order() {
    const TEST: &str = "each_location_is_tried_in_the_documented_order";
    if is_child(TEST) {
        let runtime = acl().expect("a library is in the tree");
        let (chosen, expected) = (library_path(&runtime), var(EXPECT));
        assert!(
            same_file(chosen, &expected),
            "{chosen:?} is not {expected:?}"
        );
        assert!(matches!(
            runtime.backend_reason(),
            BackendReason::Requested(BackendChoice::Acl)
        ));
        return;
    }
    let tree = Tree::new(TEST);
    let explicit = tree.copy_simulator("explicit/libmine.so");
    let toolkit_new = tree.copy_simulator("toolkit/lib64/libacl_rt.so");
    let toolkit_old = tree.copy_simulator("toolkit/lib64/libascendcl.so");
    let home_path = tree.copy_simulator("home-path/lib64/libacl_rt.so");
    let user = tree.copy_simulator("home/Ascend/cann/lib64/libascendcl.so");
    let base: Env = vec![
        ("NPU_ACL_ALLOW_SIMULATOR", "1".into()),
        ("ASCEND_TOOLKIT_HOME", tree.path("toolkit").into()),
        ("ASCEND_HOME_PATH", tree.path("home-path").into()),
        ("HOME", tree.path("home").into()),
    ];
    let step = |expect: &Path, extra: Env| {
        let mut env = base.clone();
        env.extend(extra);
        env.push((EXPECT, expect.into()));
        spawn_child(TEST, &env);
    };
    // 1. NPU_ACL_LIB wins over everything.
    step(&explicit, vec![("NPU_ACL_LIB", explicit.clone().into())]);
    // 2. $ASCEND_TOOLKIT_HOME/lib64: libacl_rt.so before libascendcl.so.
    step(&toolkit_new, vec![]);
    std::fs::remove_file(&toolkit_new).unwrap();
    step(&toolkit_old, vec![]);
    std::fs::remove_file(&toolkit_old).unwrap();
    // 3. $ASCEND_HOME_PATH/lib64.
    step(&home_path, vec![]);
    std::fs::remove_file(&home_path).unwrap();
    // 4. /usr/local/Ascend/cann is not on this machine (the unit tests check its place);
    // 5. $HOME/Ascend/cann/lib64, here with the compatibility name only.
    step(&user, vec![]);
    std::fs::remove_file(&user).unwrap();
    // 6. /usr/local/Ascend/ascend-toolkit/latest: as 4.
    // 7. $HOME/Ascend/ascend-toolkit/latest/lib64: an older toolkit, installed as non-root.
    let user_old = tree.copy_simulator("home/Ascend/ascend-toolkit/latest/lib64/libacl_rt.so");
    step(&user_old, vec![]);
    std::fs::remove_file(&user_old).unwrap();
    // 8. The system loader, with the bare names: LD_LIBRARY_PATH here names a directory of the
    // tree (cargo's own holds npu-sim's libascendcl.so, which the other tests meet).
    let system = tree.copy_simulator("system/libacl_rt.so");
    step(
        &system,
        vec![("LD_LIBRARY_PATH", tree.path("system").into())],
    );
}

#[test]
fn the_simulator_in_an_install_tree_is_refused_without_the_opt_in() {
    scenario(
        "the_simulator_in_an_install_tree_is_refused_without_the_opt_in",
        |tree| {
            tree.link_simulator("toolkit/lib64/libacl_rt.so");
            vec![("ASCEND_TOOLKIT_HOME", tree.path("toolkit").into())]
        },
        || {
            let tried = not_found(acl());
            let toolkit = var("ASCEND_TOOLKIT_HOME");
            assert_eq!(tried[0].path, toolkit.join("lib64/libacl_rt.so"));
            assert_eq!(tried[0].reason, LoadFailure::Simulator);
            assert_eq!(tried[1].reason, LoadFailure::NoSuchFile, "{tried:?}");
            let last = tried.last().unwrap();
            assert_eq!(last.path, Path::new("libascendcl.so"));
            assert_eq!(
                last.reason,
                LoadFailure::Simulator,
                "cargo's deps directory"
            );
            // Named explicitly, the same file is accepted.
            let explicit = runtime_library(&tried[0].path).build().unwrap();
            assert!(is_the_simulator_library(explicit.backend()));
        },
    );
}

#[test]
fn an_override_that_cannot_be_loaded_fails_instead_of_giving_way() {
    scenario(
        "an_override_that_cannot_be_loaded_fails_instead_of_giving_way",
        |tree| {
            tree.copy_simulator("toolkit/lib64/libacl_rt.so");
            vec![
                ("NPU_ACL_ALLOW_SIMULATOR", "1".into()),
                ("ASCEND_TOOLKIT_HOME", tree.path("toolkit").into()),
                // A typo: the toolkit above would load, but the override names another file.
                (
                    "NPU_ACL_LIB",
                    tree.path("toolkit/lib64/libacl_rt.so.typo").into(),
                ),
            ]
        },
        || {
            let tried = not_found(acl());
            assert_eq!(tried.len(), 1, "only the override is tried: {tried:?}");
            assert_eq!(tried[0].path, var("NPU_ACL_LIB"));
            assert_eq!(tried[0].reason, LoadFailure::NoSuchFile);
        },
    );
}

#[test]
fn a_symlink_and_the_real_path_are_one_runtime() {
    let tree = Tree::new("symlink");
    let link = tree.link_simulator("lib64/libacl_rt.so");
    let real = common::simulator_library();
    let via_link = runtime_library(&link).build().unwrap();
    let via_real = runtime_library(&real).build().unwrap();
    let dotted = real.parent().unwrap().join("../deps/libascendcl.so");
    let via_dots = runtime_library(&dotted).build().unwrap();
    assert!(via_link.same_library(&via_real) && via_real.same_library(&via_dots));
    assert_eq!(via_link.backend(), via_real.backend());
    assert_eq!(library_path(&via_link), real.canonicalize().unwrap());

    // One runtime, so one primary context per device and one bound-context cache: binding
    // device 1 through one spelling and device 0 through the other really switches devices.
    let one = via_link.device(1).unwrap();
    let zero = via_real.device(0).unwrap();
    assert_eq!(
        one.primary_context().id(),
        via_real.device(1).unwrap().primary_context().id()
    );
    one.primary_context().bind().unwrap();
    zero.primary_context().bind().unwrap();
    let mut ptr = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; the memory is freed below.
    unsafe { npu_core::acl_call!(&via_link, aclrtMalloc(&mut ptr, 4096, 0)) }.unwrap();
    let mut attributes = npu_core::ffi::aclrtPtrAttributes::default();
    // SAFETY: `ptr` is a live allocation and `attributes` a valid out-pointer.
    unsafe { npu_core::acl_call_opt!(&via_real, aclrtPointerGetAttributes(ptr, &mut attributes)) }
        .unwrap();
    assert_eq!(
        attributes.location.id, 0,
        "allocated on the device bound last"
    );
    // SAFETY: allocated above with aclrtMalloc and not used since.
    unsafe { npu_core::acl_call!(&via_real, aclrtFree(ptr)) }.unwrap();
}

/// Builds `toolkit/lib64/libacl_rt.so` linked against a `libascend_hal.so` that is then
/// deleted: a toolkit whose driver libraries are not on the loader path, as before sourcing
/// `set_env.sh`.
fn library_with_a_missing_dependency(tree: &Tree) -> PathBuf {
    let lib64 = tree.path("toolkit/lib64");
    std::fs::create_dir_all(&lib64).unwrap();
    let source = tree.path("stub.c");
    std::fs::write(&source, "int stub(void) { return 0; }\n").unwrap();
    let compile = |output: &Path, extra: &[OsString]| {
        let status = Command::new("cc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(output)
            .arg(&source)
            .args(extra)
            .status()
            .expect("a C compiler (cc)");
        assert!(status.success(), "cc failed for {}", output.display());
    };
    let hal = lib64.join("libascend_hal.so");
    compile(&hal, &[]);
    let runtime = lib64.join("libacl_rt.so");
    compile(
        &runtime,
        &[
            format!("-L{}", lib64.display()).into(),
            // Keep the dependency although the stub uses none of its symbols.
            "-Wl,--no-as-needed".into(),
            "-lascend_hal".into(),
        ],
    );
    std::fs::remove_file(&hal).unwrap();
    runtime
}

#[test]
fn a_missing_dependency_says_to_source_set_env() {
    scenario(
        "a_missing_dependency_says_to_source_set_env",
        |tree| {
            let runtime = library_with_a_missing_dependency(tree);
            let tried = not_found(runtime_library(&runtime).build());
            assert_eq!(
                tried[0].reason,
                LoadFailure::MissingDependency {
                    library: "libascend_hal.so".into()
                }
            );
            vec![("ASCEND_TOOLKIT_HOME", tree.path("toolkit").into())]
        },
        || {
            let err = acl().unwrap_err();
            let text = err.to_string();
            let runtime = var("ASCEND_TOOLKIT_HOME").join("lib64/libacl_rt.so");
            assert!(
                text.contains(&format!(
                    "{}: needs libascend_hal.so, which the dynamic loader cannot find: source \
                     the set_env.sh",
                    runtime.display()
                )),
                "{text}"
            );
            // One error, listing every place tried.
            let tried = not_found(Err(err));
            assert!(tried.len() >= 8, "{tried:?}");
            for attempt in &tried {
                let line = format!("\n  {}: {}", attempt.path.display(), attempt.reason);
                assert!(text.contains(&line), "{text}");
            }
        },
    );
}

/// A toolkit in the tree, found through `home_var`, whose `lib64/<name>` is a copy of npu-sim's
/// library (accepted with the opt-in) running with `sim_config`.
fn simulated_toolkit(tree: &Tree, name: &str, home_var: &'static str, sim_config: &str) -> Env {
    tree.copy_simulator(&format!("toolkit/lib64/{name}"));
    vec![
        (home_var, tree.path("toolkit").into()),
        ("NPU_ACL_ALLOW_SIMULATOR", "1".into()),
        ("NPU_SIM_CONFIG", sim_config.into()),
    ]
}

/// Collects what a `tracing` subscriber writes.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Log {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Builds an `auto` runtime expected to fall back, checks that it warned why, and returns the
/// reason. The in-process simulator is configured first, so that `NPU_SIM_CONFIG` (meant for
/// the simulator loaded from the fake tree, read when its aclInit runs) does not reach it.
fn fallback_of_auto() -> (Runtime, Fallback) {
    npu_sim::SimConfig::default()
        .install()
        .expect("the in-process simulator starts with defaults");
    let log = Log::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    every_callsite::see_every_callsite();
    let runtime = tracing::subscriber::with_default(subscriber, auto);
    assert_eq!(runtime.backend(), &Backend::Simulator);
    let BackendReason::Fallback(why) = runtime.backend_reason() else {
        panic!("unexpected reason: {}", runtime.backend_reason())
    };
    let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    assert!(
        text.contains("WARN") && text.contains("NPU_BACKEND=auto is using the simulator"),
        "{text}"
    );
    assert!(text.contains(&format!("reason={why}")), "{text}");
    (runtime.clone(), why.clone())
}

fn is_the_simulator_library(backend: &Backend) -> bool {
    matches!(
        backend,
        Backend::Library {
            simulated: true,
            ..
        }
    )
}

#[test]
fn auto_falls_back_when_acl_init_fails() {
    scenario(
        "auto_falls_back_when_acl_init_fails",
        |tree| {
            let toolkit = "ASCEND_TOOLKIT_HOME";
            simulated_toolkit(tree, "libacl_rt.so", toolkit, "not a configuration")
        },
        || {
            let (runtime, why) = fallback_of_auto();
            let Fallback::InitFailed { library, error } = why else {
                panic!("unexpected fallback: {why}")
            };
            assert!(is_the_simulator_library(&library));
            assert_eq!(error.acl_code(), Some(AclCode(100000)), "{error}");
            let text = runtime.backend_reason().to_string();
            assert!(
                text.starts_with("auto fell back to the simulator: npu-sim ("),
                "{text}"
            );
            assert!(text.contains("aclInit failed"), "{text}");
            assert!(runtime.device_count().unwrap() >= 1, "the simulator works");
            // `acl` insists on the library and reports aclInit's failure.
            let err = acl().unwrap_err();
            assert_eq!(err.acl_code(), Some(AclCode(100000)), "{err}");
        },
    );
}

#[test]
fn auto_falls_back_when_no_device_is_visible() {
    scenario(
        "auto_falls_back_when_no_device_is_visible",
        |tree| {
            let toolkit = "ASCEND_TOOLKIT_HOME";
            let mut env = simulated_toolkit(tree, "libascendcl.so", toolkit, r#"{"devices": 0}"#);
            env.push(("ASCEND_RT_VISIBLE_DEVICES", "4,5".into()));
            env
        },
        || {
            let (runtime, why) = fallback_of_auto();
            let Fallback::NoDevice {
                library,
                visible_devices,
            } = why
            else {
                panic!("unexpected fallback: {why}")
            };
            assert!(is_the_simulator_library(&library));
            assert_eq!(visible_devices.as_deref(), Some("4,5"));
            let text = runtime.backend_reason().to_string();
            assert!(
                text.ends_with(
                    "aclInit succeeded but no device is visible \
                     (ASCEND_RT_VISIBLE_DEVICES=\"4,5\")"
                ),
                "{text}"
            );
            // `acl` takes it anyway: that is the library in the tree, seeing no device.
            let cann = acl().unwrap();
            assert_eq!(cann.device_count().unwrap(), 0);
            assert!(cann.device(0).is_err());
        },
    );
}

#[test]
fn auto_uses_a_runtime_that_initialises_and_sees_devices() {
    scenario(
        "auto_uses_a_runtime_that_initialises_and_sees_devices",
        |tree| {
            simulated_toolkit(
                tree,
                "libacl_rt.so",
                "ASCEND_HOME_PATH",
                r#"{"devices": 3}"#,
            )
        },
        || {
            let runtime = auto();
            let expected = var("ASCEND_HOME_PATH").join("lib64/libacl_rt.so");
            assert_eq!(library_path(&runtime), expected);
            assert!(matches!(
                runtime.backend_reason(),
                BackendReason::Detected { devices: 3 }
            ));
            assert_eq!(
                runtime.backend_reason().to_string(),
                "auto: aclInit succeeded and 3 device(s) are visible"
            );
            assert_eq!(runtime.device(2).unwrap().id(), 2);
        },
    );
}

/// Compiles `lib64/<name>` in the tree: a stand-in for CANN's runtime that is not npu-sim. It
/// exports every required ACL function (each fails with 507899 unless listed below), its
/// `aclInit` returns `init_code`, `aclFinalizeReference` is exported when `finalize_reference`
/// says so, and every `aclInit`, `aclFinalize` and `aclFinalizeReference` call appends the
/// function's name to the returned log file. The functions in `omit` are not exported; `link`
/// is passed on to the compiler (the libraries it links against).
fn stub_runtime(
    tree: &Tree,
    name: &str,
    init_code: i32,
    finalize_reference: bool,
    omit: &[&str],
    link: &[String],
) -> StubRuntime {
    stub_runtime_defining(tree, name, init_code, finalize_reference, omit, link, &[])
}

/// [`stub_runtime`] with some functions defined by the caller: each `(function, definition)`
/// replaces the stub's own definition of `function` with the C `definition` (which may call
/// `note("...")` to append to the log).
fn stub_runtime_defining(
    tree: &Tree,
    name: &str,
    init_code: i32,
    finalize_reference: bool,
    omit: &[&str],
    link: &[String],
    defined: &[(&str, &str)],
) -> StubRuntime {
    use std::fmt::Write as _;
    let own = |function: &str| !defined.iter().any(|(f, _)| *f == function);
    let log = tree.path(&format!("{name}.calls"));
    let mut source = format!(
        "#include <stdio.h>\n#include <stdint.h>\n\
         static int note(const char *f) {{ FILE *l = fopen(\"{}\", \"a\"); \
         if (l) {{ fprintf(l, \"%s\\n\", f); fclose(l); }} return 0; }}\n\
         int aclFinalize(void) {{ return note(\"aclFinalize\"); }}\n\
         const char *aclGetRecentErrMsg(void) {{ return 0; }}\n\
         const char *aclrtGetSocName(void) {{ return 0; }}\n",
        log.display()
    );
    if own("aclInit") {
        writeln!(
            source,
            "int aclInit(const char *c) {{ (void)c; note(\"aclInit\"); return {init_code}; }}"
        )
        .unwrap();
    }
    if finalize_reference {
        source.push_str(
            "int aclFinalizeReference(uint64_t *r) { if (r) *r = 0; \
             return note(\"aclFinalizeReference\"); }\n",
        );
    }
    let written = [
        "aclInit",
        "aclFinalize",
        "aclGetRecentErrMsg",
        "aclrtGetSocName",
    ];
    for function in npu_core::ffi::AclApi::REQUIRED {
        if !written.contains(function) && !omit.contains(function) && own(function) {
            writeln!(source, "int {function}(void) {{ return 507899; }}").unwrap();
        }
    }
    for (_, definition) in defined {
        writeln!(source, "{definition}").unwrap();
    }
    let lib64 = tree.path("lib64");
    std::fs::create_dir_all(&lib64).unwrap();
    let c_file = tree.path(&format!("{name}.c"));
    std::fs::write(&c_file, source).unwrap();
    let library = lib64.join(name);
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&library)
        .arg(&c_file)
        .args(link)
        .status()
        .expect("a C compiler (cc)");
    assert!(status.success(), "cc failed for {}", library.display());
    StubRuntime { library, log }
}

struct StubRuntime {
    library: PathBuf,
    log: PathBuf,
}

impl StubRuntime {
    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

#[test]
fn acl_initialised_by_another_component_is_not_finalised_under_it() {
    let tree = Tree::new("repeat_init");
    // Another component of the process initialised ACL first, on a runtime without
    // aclFinalizeReference: aclInit says so with ACL_ERROR_REPEAT_INITIALIZE and counts
    // nothing, and aclFinalize would finalise ACL for that component too.
    let older = stub_runtime(&tree, "libacl_rt_older.so", 100002, false, &[], &[]);
    let runtime = runtime_library(&older.library).build();
    let runtime = runtime.expect("a repeated aclInit is success");
    assert!(matches!(
        runtime.backend(),
        Backend::Library {
            simulated: false,
            ..
        }
    ));
    drop(runtime);
    assert_eq!(
        older.calls(),
        ["aclInit"],
        "npu-rs finalised ACL it did not initialise"
    );

    // The same runtime with aclFinalizeReference counts the repeated aclInit: ours is released.
    let newer = stub_runtime(&tree, "libacl_rt_newer.so", 100002, true, &[], &[]);
    drop(runtime_library(&newer.library).build().unwrap());
    assert_eq!(newer.calls(), ["aclInit", "aclFinalizeReference"]);

    // ACL that npu-rs initialised itself is finalised when its last runtime goes.
    let own = stub_runtime(&tree, "libacl_rt_own.so", 0, false, &[], &[]);
    let first = runtime_library(&own.library).build().unwrap();
    let second = runtime_library(&own.library).build().unwrap();
    drop(first);
    assert_eq!(own.calls(), ["aclInit"]);
    drop(second);
    assert_eq!(own.calls(), ["aclInit", "aclFinalize"]);
}

#[test]
fn a_runtime_without_deprecated_or_dump_functions_loads() {
    // CANN deprecates the first two and says a later release removes them; npu-rs has their
    // replacements (aclGetDataBufferSizeV2, aclrtQueryEventStatus) or does not use them. The
    // model dump functions belong with the acldump* ones (libascend_dump.so), and npu-rs does
    // not call them either.
    const ABSENT: [&str; 5] = [
        "aclGetDataBufferSize",
        "aclrtQueryEvent",
        "aclmdlInitDump",
        "aclmdlSetDump",
        "aclmdlFinalizeDump",
    ];
    let tree = Tree::new("optional");
    let stub = stub_runtime(&tree, "libacl_rt.so", 0, false, &ABSENT, &[]);
    let runtime = runtime_library(&stub.library).build();
    let runtime = runtime.expect("a runtime without them loads");
    let unsupported = runtime.unsupported_functions();
    for function in ABSENT {
        assert!(unsupported.contains(&function), "{unsupported:?}");
    }
    assert!(runtime.api().aclrtQueryEvent.is_none());
    assert!(runtime.api().aclGetDataBufferSize.is_none());
}

#[test]
fn a_runtime_without_functions_npu_rs_never_calls_loads() {
    // npu-rs's own crates never call these, so a runtime without them must not be refused.
    // Four of them are marked experimental in CANN's reference (their definition may change,
    // and a runtime need not export them): aclmdlRICondHandleCreate, aclmdlRICondHandleGetCondPtr,
    // aclmdlRIAddCondTask and aclmdlRICaptureToModelRIBegin.
    const UNUSED: [&str; 27] = [
        "aclFloat16ToFloat",
        "aclFloatToFloat16",
        "aclCreateDataBuffer",
        "aclDestroyDataBuffer",
        "aclGetDataBufferAddr",
        "aclDataTypeSize",
        "aclrtGetRunMode",
        "aclrtGetDevice",
        "aclrtCreateEvent",
        "aclrtMemset",
        "aclrtSetTsDevice",
        "aclrtMallocCached",
        "aclrtMemFlush",
        "aclrtMemInvalidate",
        "aclrtMemcpy2d",
        "aclrtResetEvent",
        "aclrtSwitchStream",
        "aclrtCreateLabel",
        "aclrtSetLabel",
        "aclrtDestroyLabel",
        "aclrtCreateLabelList",
        "aclrtDestroyLabelList",
        "aclrtSwitchLabelByIndex",
        "aclmdlRICondHandleCreate",
        "aclmdlRICondHandleGetCondPtr",
        "aclmdlRIAddCondTask",
        "aclmdlRICaptureToModelRIBegin",
    ];
    let tree = Tree::new("unused");
    let stub = stub_runtime(&tree, "libacl_rt.so", 0, false, &UNUSED, &[]);
    let runtime = runtime_library(&stub.library).build();
    let runtime = runtime.expect("a runtime without them loads");
    let unsupported = runtime.unsupported_functions();
    for function in UNUSED {
        assert!(
            unsupported.contains(&function),
            "{function}: {unsupported:?}"
        );
    }
}

#[test]
fn a_runtime_too_old_for_npu_rs_is_named_so() {
    // An AscendCL runtime (it has aclInit) lacking a function npu-rs calls unconditionally is an
    // older CANN, not "not an AscendCL runtime".
    let tree = Tree::new("too_old");
    let stub = stub_runtime(&tree, "libacl_rt.so", 0, false, &["aclrtMemsetAsync"], &[]);
    let tried = not_found(runtime_library(&stub.library).build());
    assert_eq!(
        tried[0].reason,
        LoadFailure::TooOld {
            missing: vec!["aclrtMemsetAsync"]
        }
    );
    let text = tried[0].reason.to_string();
    assert!(
        text.starts_with("an AscendCL runtime too old for npu-rs: it lacks aclrtMemsetAsync"),
        "{text}"
    );
    assert!(
        stub.calls().is_empty(),
        "a refused runtime is never initialised"
    );
}

/// The ELF `e_machine` of a shared object built for another architecture than this host's.
fn foreign_machine() -> (u16, &'static str) {
    if cfg!(target_arch = "aarch64") {
        (62, "x86-64")
    } else {
        (183, "AArch64")
    }
}

#[test]
fn a_library_for_another_architecture_is_named_so() {
    // An x86-64 toolkit on an Arm server (or the reverse): the dynamic loader says "cannot open
    // shared object file: No such file or directory" about a file that is there.
    let tree = Tree::new("architecture");
    let stub = stub_runtime(&tree, "libacl_rt.so", 0, false, &[], &[]);
    let mut bytes = std::fs::read(&stub.library).unwrap();
    let (machine, name) = foreign_machine();
    bytes[18..20].copy_from_slice(&machine.to_le_bytes());
    std::fs::write(&stub.library, bytes).unwrap();
    let tried = not_found(runtime_library(&stub.library).build());
    let LoadFailure::WrongArchitecture { found, expected } = &tried[0].reason else {
        panic!("expected WrongArchitecture, got {:?}", tried[0].reason)
    };
    assert_eq!(found, name);
    assert_ne!(found, expected);
    let text = tried[0].reason.to_string();
    assert!(
        text.starts_with(&format!(
            "built for {name}, but this program runs on {expected}"
        )),
        "{text}"
    );
}

#[test]
fn a_damaged_elf_header_is_not_taken_for_another_architecture() {
    // The class byte is neither ELFCLASS32 nor ELFCLASS64: the file is damaged, whatever its
    // machine says, and the loader's own message is the one to show.
    let tree = Tree::new("damaged");
    let stub = stub_runtime(&tree, "libacl_rt.so", 0, false, &[], &[]);
    let mut bytes = std::fs::read(&stub.library).unwrap();
    bytes[4] = 0;
    std::fs::write(&stub.library, bytes).unwrap();
    let tried = not_found(runtime_library(&stub.library).build());
    assert!(
        !matches!(tried[0].reason, LoadFailure::WrongArchitecture { .. }),
        "{:?}",
        tried[0].reason
    );
}

#[test]
fn an_older_non_root_toolkit_is_found_under_home() {
    scenario(
        "an_older_non_root_toolkit_is_found_under_home",
        |tree| {
            tree.copy_simulator("home/Ascend/ascend-toolkit/latest/lib64/libascendcl.so");
            vec![
                ("NPU_ACL_ALLOW_SIMULATOR", "1".into()),
                ("HOME", tree.path("home").into()),
            ]
        },
        || {
            let runtime = acl().expect("the toolkit under $HOME loads");
            let expected = var("HOME").join("Ascend/ascend-toolkit/latest/lib64/libascendcl.so");
            assert_eq!(library_path(&runtime), expected);
        },
    );
}

#[test]
fn a_cann_library_linking_npu_sims_build_is_refused_with_the_reason() {
    // On a CANN host, `cargo run` and `cargo test` put target/<profile>/deps, where npu-sim's
    // libascendcl.so lies, ahead of set_env.sh's directories on LD_LIBRARY_PATH: a CANN library
    // that links against libascendcl.so then gets the simulator, which a symbol lookup through
    // its handle finds. The stand-in links against it by name, as such a library would.
    let tree = Tree::new("simulator_dependency");
    let deps = common::simulator_library().parent().unwrap().to_path_buf();
    let link = [
        format!("-L{}", deps.display()),
        // Keep the dependency although the stand-in uses none of its symbols.
        "-Wl,--no-as-needed".to_owned(),
        "-lascendcl".to_owned(),
    ];
    let stub = stub_runtime(&tree, "libacl_rt.so", 0, false, &[], &link);
    let tried = not_found(runtime_library(&stub.library).build());
    assert_eq!(tried.len(), 1, "{tried:?}");
    match &tried[0].reason {
        LoadFailure::SimulatorDependency { simulator } => {
            // Whichever of cargo's directories the dynamic loader took it from (target/debug
            // or its deps), it is a build of npu-sim's, not the library asked for.
            assert_eq!(simulator.file_name().unwrap(), "libascendcl.so");
            assert!(!same_file(simulator, &stub.library), "{simulator:?}");
        }
        other => panic!("expected SimulatorDependency, got {other:?}"),
    }
    let text = tried[0].reason.to_string();
    assert!(text.contains("run the built program directly"), "{text}");
    assert!(
        stub.calls().is_empty(),
        "a refused runtime is never initialised"
    );
}

/// The directory a child makes its current one, for the tests of relative paths.
const CWD: &str = "NPU_LOADER_TEST_CWD";

#[test]
fn places_that_lead_nowhere_are_listed_as_given_and_passed_over() {
    scenario(
        "places_that_lead_nowhere_are_listed_as_given_and_passed_over",
        |tree| {
            tree.copy_simulator("cann/lib64/libacl_rt.so");
            // `latest` naming a version that was uninstalled since.
            let toolkit = tree.path("home/Ascend/ascend-toolkit");
            std::fs::create_dir_all(&toolkit).unwrap();
            std::os::unix::fs::symlink(toolkit.join("7.0.RC1"), toolkit.join("latest")).unwrap();
            std::fs::create_dir_all(tree.path("empty")).unwrap();
            vec![
                ("NPU_ACL_ALLOW_SIMULATOR", "1".into()),
                // A toolkit that is not there (any more).
                ("ASCEND_TOOLKIT_HOME", tree.path("removed").into()),
                // A relative path: taken from the current directory.
                ("ASCEND_HOME_PATH", "cann".into()),
                ("HOME", tree.path("home").into()),
                // Not cargo's directories, where npu-sim's build lies.
                ("LD_LIBRARY_PATH", tree.path("empty").into()),
                (CWD, tree.0.clone().into()),
            ]
        },
        || {
            // From the test's own directory the relative place names no file either: one
            // error, every place as it was tried.
            let err = acl().unwrap_err();
            let text = err.to_string();
            let tried = not_found(Err(err));
            let removed = var("ASCEND_TOOLKIT_HOME");
            let reason_of = |path: &Path| {
                let attempt = tried.iter().find(|t| t.path == path);
                attempt
                    .unwrap_or_else(|| panic!("{path:?} not tried: {tried:?}"))
                    .reason
                    .clone()
            };
            assert_eq!(tried[0].path, removed.join("lib64/libacl_rt.so"));
            assert_eq!(tried[1].path, removed.join("lib64/libascendcl.so"));
            assert_eq!(tried[2].path, Path::new("cann/lib64/libacl_rt.so"));
            assert_eq!(tried[3].path, Path::new("cann/lib64/libascendcl.so"));
            for attempt in &tried[..4] {
                assert_eq!(attempt.reason, LoadFailure::NoSuchFile, "{tried:?}");
            }
            let dangling = var("HOME").join("Ascend/ascend-toolkit/latest/lib64/libacl_rt.so");
            assert_eq!(reason_of(&dangling), LoadFailure::NoSuchFile);
            for bare in ["libacl_rt.so", "libascendcl.so"] {
                assert_eq!(reason_of(Path::new(bare)), LoadFailure::NotInLoaderPath);
            }
            assert!(
                text.contains("\n  cann/lib64/libacl_rt.so: no such file"),
                "{text}"
            );
            // From the directory it is relative to, the same variable finds the library, and the
            // runtime reports its absolute path.
            let cwd = var(CWD);
            std::env::set_current_dir(&cwd).unwrap();
            let runtime = acl().expect("the relative place holds a library");
            assert_eq!(library_path(&runtime), cwd.join("cann/lib64/libacl_rt.so"));
        },
    );
}

#[test]
fn a_cann_runtime_s_calls_to_its_own_functions_stay_in_it() {
    // This test binary links npu-sim in-process (the `sim` feature, as programs built with npu's
    // default features do), and npu-sim defines every ACL function under CANN's names. CANN's
    // runtime calls functions it exports itself; were the program to export the simulator's,
    // the dynamic loader would bind those calls to the simulator (symbol interposition) and a
    // real host would run on a mix of the two. The stand-in's aclInit calls its own
    // aclrtGetDeviceCount and fails unless it gets that function's answer.
    let in_process = Runtime::builder().backend(BackendChoice::Sim).build();
    assert!(in_process.unwrap().device_count().unwrap() >= 1);
    let tree = Tree::new("interposition");
    let count = "int aclrtGetDeviceCount(uint32_t *n) { *n = 77; return 0; }";
    let init = "int aclrtGetDeviceCount(uint32_t *n);\n\
                int aclInit(const char *c) { uint32_t n = 0; (void)c; note(\"aclInit\"); \
                return aclrtGetDeviceCount(&n) == 0 && n == 77 ? 0 : 100000; }";
    let defined = [("aclrtGetDeviceCount", count), ("aclInit", init)];
    let stub = stub_runtime_defining(&tree, "libacl_rt.so", 0, false, &[], &[], &defined);
    let runtime = runtime_library(&stub.library).build();
    let runtime = runtime.expect("the stand-in's aclInit reached its own aclrtGetDeviceCount");
    assert_eq!(runtime.device_count().unwrap(), 77);
    assert_eq!(stub.calls(), ["aclInit"]);
}

#[test]
fn acl_is_initialised_once_per_library_and_again_only_after_it_was_finalised() {
    let tree = Tree::new("init_contract");
    // Runtimes built on four threads at once share one aclInit.
    let stub = stub_runtime(&tree, "libacl_rt.so", 0, false, &[], &[]);
    let start = std::sync::Barrier::new(4);
    let runtimes: Vec<Runtime> = std::thread::scope(|s| {
        let build = || {
            start.wait();
            runtime_library(&stub.library).build().unwrap()
        };
        let threads: Vec<_> = (0..4).map(|_| s.spawn(build)).collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    assert!(runtimes.iter().all(|r| r.same_library(&runtimes[0])));
    assert_eq!(stub.calls(), ["aclInit"]);
    drop(runtimes);
    assert_eq!(stub.calls(), ["aclInit", "aclFinalize"]);
    // aclInit, work, aclFinalize, aclInit again: the sequence CANN supports.
    let again = runtime_library(&stub.library).build().unwrap();
    assert_eq!(stub.calls(), ["aclInit", "aclFinalize", "aclInit"]);
    drop(again);
    assert_eq!(
        stub.calls(),
        ["aclInit", "aclFinalize", "aclInit", "aclFinalize"]
    );

    // With aclFinalizeReference, npu-rs releases its reference with it even when it initialised
    // ACL itself: aclFinalize would clear references other components took since.
    let counted = stub_runtime(&tree, "libacl_rt_counted.so", 0, true, &[], &[]);
    let first = runtime_library(&counted.library).build().unwrap();
    let second = runtime_library(&counted.library).build().unwrap();
    drop(first);
    assert_eq!(counted.calls(), ["aclInit"]);
    drop(second);
    assert_eq!(counted.calls(), ["aclInit", "aclFinalizeReference"]);

    // A failed aclInit is an error naming it; nothing is finalised, and the next runtime built
    // tries again.
    let failing = stub_runtime(&tree, "libacl_rt_failing.so", 100000, true, &[], &[]);
    for _ in 0..2 {
        let err = runtime_library(&failing.library).build().unwrap_err();
        assert_eq!(err.acl_code(), Some(AclCode(100000)), "{err}");
        assert!(err.to_string().starts_with("aclInit failed"), "{err}");
    }
    assert_eq!(failing.calls(), ["aclInit", "aclInit"]);
}

/// What a stand-in made by [`stub_runtime`] at the root of the tree named by `variable` logged.
fn calls_of_stub_under(variable: &str, name: &str) -> Vec<String> {
    let log = var(variable).join(format!("{name}.calls"));
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines().map(str::to_owned).collect()
}

#[test]
fn auto_releases_the_reference_it_took_on_a_runtime_it_does_not_use() {
    scenario(
        "auto_releases_the_reference_it_took_on_a_runtime_it_does_not_use",
        |tree| {
            // Its aclrtGetDeviceCount fails (507899), as every function the stand-in does not
            // define.
            stub_runtime(tree, "libacl_rt.so", 0, false, &[], &[]);
            vec![("ASCEND_TOOLKIT_HOME", tree.0.clone().into())]
        },
        || {
            let (runtime, why) = fallback_of_auto();
            let Fallback::DeviceCountFailed { library, error } = why else {
                panic!("unexpected fallback: {why}")
            };
            let expected = var("ASCEND_TOOLKIT_HOME").join("lib64/libacl_rt.so");
            assert_eq!(
                library,
                Backend::Library {
                    path: expected,
                    simulated: false
                }
            );
            assert_eq!(error.acl_code(), Some(AclCode(507899)), "{error}");
            // ACL was initialised for the probe and finalised before falling back.
            let calls = calls_of_stub_under("ASCEND_TOOLKIT_HOME", "libacl_rt.so");
            assert_eq!(calls, ["aclInit", "aclFinalize"]);
            drop(runtime);
        },
    );
}

#[test]
fn auto_keeps_the_one_acl_init_of_a_runtime_it_uses() {
    scenario(
        "auto_keeps_the_one_acl_init_of_a_runtime_it_uses",
        |tree| {
            let count = "int aclrtGetDeviceCount(uint32_t *n) { *n = 2; return 0; }";
            let defined = [("aclrtGetDeviceCount", count)];
            stub_runtime_defining(tree, "libacl_rt.so", 0, false, &[], &[], &defined);
            vec![("ASCEND_HOME_PATH", tree.0.clone().into())]
        },
        || {
            let runtime = auto();
            assert!(matches!(
                runtime.backend_reason(),
                BackendReason::Detected { devices: 2 }
            ));
            // The probe's runtime and the one returned share one aclInit, not finalised between.
            let calls = || calls_of_stub_under("ASCEND_HOME_PATH", "libacl_rt.so");
            assert_eq!(calls(), ["aclInit"]);
            drop(runtime);
            assert_eq!(calls(), ["aclInit", "aclFinalize"]);
        },
    );
}

#[test]
fn a_cann_runtime_is_refused_while_the_process_exports_the_simulator() {
    // A shared library built with npu's `sim` feature exports the simulator's ACL functions
    // (a Rust cdylib exports every #[no_mangle] function of its dependencies); a program linked
    // against it has them in its global symbol scope, where the dynamic loader binds a CANN
    // runtime's calls to its own exported functions first. LD_PRELOAD of npu-sim's build puts
    // them there the same way.
    scenario(
        "a_cann_runtime_is_refused_while_the_process_exports_the_simulator",
        |tree| {
            stub_runtime(tree, "libacl_rt.so", 0, false, &[], &[]);
            vec![
                ("LD_PRELOAD", common::simulator_library().into()),
                ("ASCEND_TOOLKIT_HOME", tree.0.clone().into()),
            ]
        },
        || {
            let stub = var("ASCEND_TOOLKIT_HOME").join("lib64/libacl_rt.so");
            let tried = not_found(runtime_library(&stub).build());
            let LoadFailure::SimulatorInProcess { simulator } = &tried[0].reason else {
                panic!("expected SimulatorInProcess, got {:?}", tried[0].reason)
            };
            assert!(same_file(simulator, &common::simulator_library()));
            let text = tried[0].reason.to_string();
            assert!(text.contains("default-features = false"), "{text}");
            let calls = calls_of_stub_under("ASCEND_TOOLKIT_HOME", "libacl_rt.so");
            assert!(calls.is_empty(), "a refused runtime is never initialised");
            // `auto` says why it does not use the runtime it found.
            let (_runtime, why) = fallback_of_auto();
            let Fallback::NotInstalled { tried } = why else {
                panic!("unexpected fallback: {why}")
            };
            assert_eq!(tried[0].path, stub);
            assert!(matches!(
                tried[0].reason,
                LoadFailure::SimulatorInProcess { .. }
            ));
        },
    );
}

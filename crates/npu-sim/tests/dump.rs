//! Dump configuration (aclmdlInitDump, aclmdlSetDump, aclmdlFinalizeDump and aclInit's `"dump"`
//! section): the order rules, the configuration file's checks and every documented code. The
//! state is process-wide and tied to aclInit, so it is tested in a process of its own, in one
//! test.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::CString;
use std::ptr;

use common::*;
use npu_sim::abi::*;
use npu_sim::dump::{self, DumpSettings, ExceptionDump};
use npu_sys::*;

fn set_dump(path: &CString) -> aclError {
    code!(aclmdlSetDump(path.as_ptr()))
}

#[track_caller]
fn set_ok(path: &CString) {
    let code = set_dump(path);
    assert_eq!(code, ACL_SUCCESS, "aclmdlSetDump: {}", recent_message());
}

/// The configuration of the last aclmdlSetDump in force.
fn set() -> Option<DumpSettings> {
    dump::status().set
}

const MODEL: &str = r#"{"dump": {"dump_list": [{"model_name": "ResNet-50", "layer": ["conv1"]}],
    "dump_path": "/home/output", "dump_mode": "output", "dump_op_switch": "off",
    "dump_data": "tensor"}}"#;
const OVERFLOW: &str = r#"{"dump": {"dump_path": "output", "dump_debug": "on"}}"#;
const DETAIL: &str = r#"{"dump": {"dump_scene": "aic_err_detail_dump"}}"#;

/// `"dump"` sections CANN refuses, each → ACL_ERROR_INVALID_DUMP_CONFIG.
const INVALID: &[(&str, &str)] = &[
    ("not an object", r#"{"dump": []}"#),
    (
        "dump_path not a string",
        r#"{"dump": {"dump_path": 1, "dump_debug": "on"}}"#,
    ),
    (
        "empty dump_path",
        r#"{"dump": {"dump_path": "", "dump_debug": "on"}}"#,
    ),
    (
        "dump_mode",
        r#"{"dump": {"dump_path": "o", "dump_mode": "weights"}}"#,
    ),
    (
        "dump_data",
        r#"{"dump": {"dump_path": "o", "dump_data": "bytes"}}"#,
    ),
    (
        "dump_level",
        r#"{"dump": {"dump_path": "o", "dump_level": "layer"}}"#,
    ),
    (
        "dump_op_switch",
        r#"{"dump": {"dump_path": "o", "dump_op_switch": "yes"}}"#,
    ),
    (
        "dump_debug",
        r#"{"dump": {"dump_path": "o", "dump_debug": true}}"#,
    ),
    ("dump_scene", r#"{"dump": {"dump_scene": "everything"}}"#),
    (
        "dump_list not an array",
        r#"{"dump": {"dump_path": "o", "dump_list": {}}}"#,
    ),
    (
        "dump_list entry",
        r#"{"dump": {"dump_path": "o", "dump_list": ["m"]}}"#,
    ),
    (
        "empty model_name",
        r#"{"dump": {"dump_path": "o", "dump_list": [{"model_name": ""}]}}"#,
    ),
    (
        "layer not names",
        r#"{"dump": {"dump_path": "o", "dump_list": [{"layer": [1]}]}}"#,
    ),
    (
        "model dump without a path",
        r#"{"dump": {"dump_list": [{"model_name": "m"}]}}"#,
    ),
    (
        "op dump without a path",
        r#"{"dump": {"dump_list": [{}], "dump_op_switch": "on"}}"#,
    ),
    (
        "exception and model dumps",
        r#"{"dump": {"dump_path": "o", "dump_scene": "aic_err_norm_dump",
            "dump_list": [{"model_name": "m"}]}}"#,
    ),
    (
        "overflow without a path",
        r#"{"dump": {"dump_debug": "on"}}"#,
    ),
    (
        "overflow and single-operator dumps",
        r#"{"dump": {"dump_path": "o", "dump_debug": "on", "dump_op_switch": "on"}}"#,
    ),
    (
        "watcher without a path",
        r#"{"dump": {"dump_scene": "watcher", "dump_list": [{"watcher_nodes": ["C"]}]}}"#,
    ),
    (
        "watcher and overflow",
        r#"{"dump": {"dump_path": "o", "dump_scene": "watcher", "dump_debug": "on",
            "dump_list": [{"watcher_nodes": ["C"]}]}}"#,
    ),
    (
        "watcher naming a model",
        r#"{"dump": {"dump_path": "o", "dump_scene": "watcher",
            "dump_list": [{"model_name": "m", "watcher_nodes": ["C"]}]}}"#,
    ),
    (
        "watcher dumping inputs",
        r#"{"dump": {"dump_path": "o", "dump_scene": "watcher", "dump_mode": "input",
            "dump_list": [{"watcher_nodes": ["C"]}]}}"#,
    ),
    (
        "watcher without nodes",
        r#"{"dump": {"dump_path": "o", "dump_scene": "watcher", "dump_list": [{"layer": ["A"]}]}}"#,
    ),
    (
        "kernel data type",
        r#"{"dump": {"dump_path": "o", "dump_kernel_data": "printf,foo"}}"#,
    ),
    (
        "kernel data without a path",
        r#"{"dump": {"dump_kernel_data": "all"}}"#,
    ),
];

#[test]
fn the_dump_configuration_follows_the_documented_order_and_checks() {
    let model = config_file("dump-model.json", MODEL);
    let overflow = config_file("dump-overflow.json", OVERFLOW);

    // Before aclInit: the parameter check first, then 100001 from all three.
    fails(
        code!(aclmdlSetDump(ptr::null())),
        ACL_ERROR_INVALID_PARAM,
        "aclmdlSetDump",
    );
    fails(
        code!(aclmdlInitDump()),
        ACL_ERROR_UNINITIALIZE,
        "aclmdlInitDump",
    );
    fails(set_dump(&model), ACL_ERROR_UNINITIALIZE, "aclmdlSetDump");
    fails(
        code!(aclmdlFinalizeDump()),
        ACL_ERROR_UNINITIALIZE,
        "aclmdlFinalizeDump",
    );

    acl!(aclInit(ptr::null()));
    // No session yet.
    fails(set_dump(&model), ACL_ERROR_DUMP_NOT_RUN, "aclmdlSetDump");
    fails(
        code!(aclmdlFinalizeDump()),
        ACL_ERROR_DUMP_NOT_RUN,
        "aclmdlFinalizeDump",
    );
    acl!(aclmdlInitDump());
    fails(
        code!(aclmdlInitDump()),
        ACL_ERROR_REPEAT_INITIALIZE,
        "aclmdlInitDump",
    );
    assert!(dump::status().session);

    set_ok(&model);
    let models = set().unwrap();
    assert_eq!(models.models, ["ResNet-50"]);
    assert_eq!(models.path.as_deref(), Some("/home/output"));
    // A file whose name is not UTF-8 (a Linux path is bytes) is read as any other.
    let odd = {
        use std::os::unix::ffi::OsStrExt;
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
        let mut bytes = dir.as_os_str().as_bytes().to_vec();
        bytes.extend_from_slice(b"/dump_\xfe.json");
        std::fs::write(std::ffi::OsStr::from_bytes(&bytes), OVERFLOW).unwrap();
        CString::new(bytes).unwrap()
    };
    set_ok(&odd);
    assert!(
        set().unwrap().overflow,
        "the odd file's configuration is in force"
    );
    set_ok(&model);

    // The file's checks; a refused file leaves the configuration as it was.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let missing = c_string(dir.join("no-such-dump.json").to_str().unwrap());
    fails(set_dump(&missing), ACL_ERROR_INVALID_FILE, "aclmdlSetDump");
    fails(
        set_dump(&c_string(dir.to_str().unwrap())),
        ACL_ERROR_INVALID_FILE,
        "aclmdlSetDump",
    );
    let huge = dir.join("dump-huge.json");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len((10 << 20) + 1)
        .unwrap();
    fails(
        set_dump(&c_string(huge.to_str().unwrap())),
        ACL_ERROR_INVALID_FILE_SIZE,
        "aclmdlSetDump",
    );
    let not_json = config_file("dump-not-json.json", r#"{"dump": {"#);
    fails(set_dump(&not_json), ACL_ERROR_PARSE_FILE, "aclmdlSetDump");
    // JSON text is UTF-8: a file that is not is no JSON, not an unreadable file.
    let not_utf8 = config_file("dump-not-utf8.json", b"{\"dump\": {\"x\": \"\xff\"}}");
    fails(set_dump(&not_utf8), ACL_ERROR_PARSE_FILE, "aclmdlSetDump");
    let deep = format!("{}{}", "[".repeat(11), "]".repeat(11));
    let deep = config_file(
        "dump-deep.json",
        format!(r#"{{"dump": {{}}, "x": {deep}}}"#),
    );
    fails(set_dump(&deep), ACL_ERROR_PARSE_FILE, "aclmdlSetDump");
    let ten = format!("{}{}", "[".repeat(10), "]".repeat(10));
    set_ok(&config_file(
        "dump-ten.json",
        format!(r#"{{"x": {ten}, "dump": {{}}}}"#),
    ));
    assert_eq!(
        set(),
        Some(DumpSettings::default()),
        "ten levels are allowed; no dump on"
    );
    set_ok(&model);
    for (name, text) in INVALID {
        let file = config_file("dump-invalid.json", text);
        assert_eq!(set_dump(&file), ACL_ERROR_INVALID_DUMP_CONFIG, "{name}");
        assert!(
            recent_message().contains("aclmdlSetDump failed with 100009"),
            "{name}"
        );
        assert_eq!(set(), Some(models.clone()), "{name}: nothing changed");
    }

    // A second aclmdlSetDump replaces the first's configuration.
    set_ok(&overflow);
    let settings = set().unwrap();
    assert!(settings.overflow && settings.models.is_empty());
    let watcher = config_file(
        "dump-watcher.json",
        r#"{"dump": {"dump_path": "/home/", "dump_mode": "output", "dump_scene": "watcher",
            "dump_list": [{"layer": ["A", "B"], "watcher_nodes": ["C", "D"]}]}}"#,
    );
    set_ok(&watcher);
    assert_eq!(set().unwrap().watched, ["C", "D"]);
    let kernel = config_file(
        "dump-kernel.json",
        r#"{"dump": {"dump_kernel_data": "printf, assert", "dump_path": "/home/"}}"#,
    );
    set_ok(&kernel);
    assert_eq!(set().unwrap().kernel_data, ["printf", "assert"]);
    let single_op = config_file(
        "dump-op.json",
        r#"{"dump": {"dump_path": "/home/output", "dump_list": [{}], "dump_op_switch": "on",
            "dump_data": "tensor"}}"#,
    );
    set_ok(&single_op);
    let settings = set().unwrap();
    assert!(settings.single_op);
    // No dump_kernel_data: a single-operator dump exports every kernel debug type.
    assert_eq!(settings.kernel_data, ["all"]);
    let lite = config_file(
        "dump-lite.json",
        r#"{"dump": {"dump_scene": "lite_exception"}}"#,
    );
    set_ok(&lite);
    assert_eq!(set().unwrap().exception, Some(ExceptionDump::Brief));

    // aclmdlFinalizeDump ends the session and its configuration; another can follow.
    acl!(aclmdlFinalizeDump());
    assert_eq!(dump::status(), dump::DumpStatus::default());
    fails(
        code!(aclmdlFinalizeDump()),
        ACL_ERROR_DUMP_NOT_RUN,
        "aclmdlFinalizeDump",
    );
    fails(set_dump(&overflow), ACL_ERROR_DUMP_NOT_RUN, "aclmdlSetDump");

    // A detail exception dump, asked for before any device is set, survives
    // aclmdlFinalizeDump; asked for later, it is a brief one, which does not.
    let detail = config_file("dump-detail.json", DETAIL);
    acl!(aclmdlInitDump());
    set_ok(&detail);
    acl!(aclmdlFinalizeDump());
    assert_eq!(set().unwrap().exception, Some(ExceptionDump::Detail));
    assert!(!dump::status().session);
    set_device(0);
    acl!(aclmdlInitDump());
    set_ok(&detail);
    assert_eq!(set().unwrap().exception, Some(ExceptionDump::Brief));
    acl!(aclmdlFinalizeDump());
    assert_eq!(set(), None);

    // aclFinalize ends everything; aclInit's own dump section is checked the same way, and
    // while it turns a dump on, aclmdlInitDump is refused.
    acl!(aclmdlInitDump());
    acl!(aclFinalize());
    assert_eq!(dump::status(), dump::DumpStatus::default());
    fails(
        code!(aclmdlInitDump()),
        ACL_ERROR_UNINITIALIZE,
        "aclmdlInitDump",
    );
    let bad = config_file("dump-init-bad.json", r#"{"dump": {"dump_debug": "on"}}"#);
    fails(
        code!(aclInit(bad.as_ptr())),
        ACL_ERROR_INVALID_DUMP_CONFIG,
        "aclInit",
    );
    fails(
        code!(aclInit(deep.as_ptr())),
        ACL_ERROR_PARSE_FILE,
        "aclInit",
    );
    acl!(aclInit(overflow.as_ptr()));
    assert!(dump::status().from_init.unwrap().overflow);
    fails(
        code!(aclmdlInitDump()),
        ACL_ERROR_DUMP_ALREADY_RUN,
        "aclmdlInitDump",
    );
    acl!(aclFinalize());
    acl!(aclInit(ptr::null()));
    acl!(aclmdlInitDump());
    acl!(aclmdlFinalizeDump());
    acl!(aclFinalize());
    acl!(aclrtResetDeviceForce(0));
}

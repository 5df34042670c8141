//! Dump configuration: the `"dump"` section of aclInit's file, and the session aclmdlInitDump
//! opens, aclmdlSetDump configures and aclmdlFinalizeDump closes.
//!
//! A configuration is validated as CANN documents it (the kinds of dump, what each requires,
//! which exclude each other) and kept for the process. The simulator runs no models or
//! operators, so nothing is ever dumped: what is kept is the state the rules are checked
//! against (a session, or aclInit's dump, in force), which [`status`] reports.
//!
//! ```
//! # extern crate ascendcl as npu_sim;
//! use npu_sim::{abi::*, dump};
//!
//! let path = std::env::temp_dir().join(format!("npu-sim-dump-doc-{}.json", std::process::id()));
//! std::fs::write(&path, r#"{"dump": {"dump_path": "out", "dump_debug": "on"}}"#).unwrap();
//! let path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
//! // SAFETY: NULL configuration; a NUL-terminated path.
//! unsafe {
//!     assert_eq!(aclInit(std::ptr::null()), 0);
//!     assert_eq!(aclmdlInitDump(), 0);
//!     assert_eq!(aclmdlSetDump(path.as_ptr()), 0);
//!     assert!(dump::status().set.unwrap().overflow);
//!     assert_eq!(aclmdlFinalizeDump(), 0);
//!     assert_eq!(dump::status().set, None);
//!     assert_eq!(aclFinalize(), 0);
//! }
//! ```

use std::sync::Mutex;

use npu_sys::*;
use serde_json::{Map, Value};

use crate::error::{Res, SimError, ensure, fail};
use crate::sync::lock;

/// The deepest nesting of `{` and of `[` a configuration file may have (aclInit's documented
/// limit, applied to every configuration file).
pub(crate) const MAX_NESTING: usize = 10;

/// The largest configuration file read, in bytes (larger → ACL_ERROR_INVALID_FILE_SIZE): a
/// configuration is a few lines; a huge file is a mistake, not something to parse.
pub(crate) const MAX_FILE_BYTES: u64 = 10 << 20;

/// An exception dump (`dump_scene`): what is exported of an operator that fails on an AI core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExceptionDump {
    /// `aic_err_brief_dump` (or its old name `lite_exception`): inputs, outputs, workspace.
    Brief,
    /// `aic_err_norm_dump`: also shapes, data types, formats and attributes.
    Normal,
    /// `aic_err_detail_dump`: also the AI core's memory, registers and call stack.
    Detail,
}

/// A validated dump configuration: what it turns on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DumpSettings {
    /// `dump_path`, when given.
    pub path: Option<String>,
    /// A model dump: the models `dump_list` names.
    pub models: Vec<String>,
    /// A single-operator dump (`dump_op_switch` "on").
    pub single_op: bool,
    /// An exception dump, as it takes effect: a detail dump asked for after a device was set
    /// falls back to a brief one.
    pub exception: Option<ExceptionDump>,
    /// An overflow dump (`dump_debug` "on").
    pub overflow: bool,
    /// The watch mode (`dump_scene` "watcher"): the operators whose outputs are watched.
    pub watched: Vec<String>,
    /// Kernel debug data (`dump_kernel_data`): the types asked for; "all" when the field is
    /// absent and a model or single-operator dump is on, as the reference says.
    pub kernel_data: Vec<String>,
}

impl DumpSettings {
    /// A detail exception dump must be asked for before any device is set; asked for later
    /// (`device_set`), it falls back to a brief one, as CANN's does when it cannot turn the
    /// detail dump on.
    pub(crate) fn settle(mut self, device_set: bool) -> Self {
        if device_set && self.exception == Some(ExceptionDump::Detail) {
            self.exception = Some(ExceptionDump::Brief);
        }
        self
    }

    /// Whether it turns on one of the dumps the reference names as excluding aclmdlInitDump
    /// once aclInit configured them: a model, single-operator or overflow dump.
    pub fn excludes_init_dump(&self) -> bool {
        !self.models.is_empty() || self.single_op || self.overflow
    }

    /// Whether the configuration turns any dump on.
    pub fn enables_any(&self) -> bool {
        !self.models.is_empty()
            || self.single_op
            || self.exception.is_some()
            || self.overflow
            || !self.watched.is_empty()
            || !self.kernel_data.is_empty()
    }
}

/// The dump configuration of the process ([`status`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DumpStatus {
    /// The dump aclInit's file turned on (until aclFinalize).
    pub from_init: Option<DumpSettings>,
    /// An aclmdlInitDump session is open.
    pub session: bool,
    /// The configuration of the last aclmdlSetDump. aclmdlFinalizeDump drops it, except a
    /// detail exception dump, which CANN cannot undo before aclFinalize.
    pub set: Option<DumpSettings>,
}

static STATE: Mutex<DumpStatus> = Mutex::new(DumpStatus {
    from_init: None,
    session: false,
    set: None,
});

/// The process's dump configuration.
pub fn status() -> DumpStatus {
    lock(&STATE).clone()
}

/// aclInit: keeps the dump its file turned on (a section turning nothing on is no dump).
pub(crate) fn configure_from_init(settings: DumpSettings) {
    lock(&STATE).from_init = Some(settings).filter(DumpSettings::enables_any);
}

/// aclFinalize (or a failed aclInit): every dump configuration ends with AscendCL.
pub(crate) fn reset() {
    *lock(&STATE) = DumpStatus::default();
}

/// aclmdlInitDump: opens a session. aclInit's file configured a model, single-operator or
/// overflow dump already → ACL_ERROR_DUMP_ALREADY_RUN (those are configured one way at a
/// time; an exception, watch or kernel-data dump from aclInit does not count); a session open
/// → ACL_ERROR_REPEAT_INITIALIZE.
pub(crate) fn begin() -> Res<()> {
    let mut state = lock(&STATE);
    ensure!(
        !state
            .from_init
            .as_ref()
            .is_some_and(DumpSettings::excludes_init_dump),
        ACL_ERROR_DUMP_ALREADY_RUN,
        "aclInit's configuration file turned a model, single-operator or overflow dump on \
         already; configure those one way only"
    );
    ensure!(
        !state.session,
        ACL_ERROR_REPEAT_INITIALIZE,
        "a dump session is open already (call aclmdlFinalizeDump first)"
    );
    state.session = true;
    Ok(())
}

/// aclmdlSetDump: replaces the session's configuration (no session → ACL_ERROR_DUMP_NOT_RUN).
pub(crate) fn set(settings: DumpSettings) -> Res<()> {
    let mut state = lock(&STATE);
    ensure_session(&state)?;
    state.set = Some(settings);
    Ok(())
}

/// Fails with ACL_ERROR_DUMP_NOT_RUN unless a session is open.
pub(crate) fn check_session() -> Res<()> {
    ensure_session(&lock(&STATE))
}

fn ensure_session(state: &DumpStatus) -> Res<()> {
    ensure!(
        state.session,
        ACL_ERROR_DUMP_NOT_RUN,
        "no dump session is open (call aclmdlInitDump first)"
    );
    Ok(())
}

/// aclmdlFinalizeDump: closes the session (none open → ACL_ERROR_DUMP_NOT_RUN) and drops its
/// configuration, unless that is a detail exception dump.
pub(crate) fn end() -> Res<()> {
    let mut state = lock(&STATE);
    ensure_session(&state)?;
    state.session = false;
    let detail = state
        .set
        .as_ref()
        .is_some_and(|set| set.exception == Some(ExceptionDump::Detail));
    if !detail {
        state.set = None;
    }
    Ok(())
}

/// Reads a configuration file: one that cannot be read → ACL_ERROR_INVALID_FILE; larger than
/// [`MAX_FILE_BYTES`] → ACL_ERROR_INVALID_FILE_SIZE; not JSON (not UTF-8 text included), or
/// nested deeper than [`MAX_NESTING`] → ACL_ERROR_PARSE_FILE.
pub(crate) fn read_config_file(path: &std::path::Path) -> Res<Value> {
    let size = match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => meta.len(),
        Ok(_) => fail!(ACL_ERROR_INVALID_FILE, "{path:?} is not a file"),
        Err(e) => fail!(ACL_ERROR_INVALID_FILE, "cannot read {path:?}: {e}"),
    };
    ensure!(
        size <= MAX_FILE_BYTES,
        ACL_ERROR_INVALID_FILE_SIZE,
        "{path:?} has {size} bytes; a configuration file may have at most {MAX_FILE_BYTES}"
    );
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) => fail!(ACL_ERROR_INVALID_FILE, "cannot read {path:?}: {e}"),
    };
    parse_json(&json_text(bytes, path)?)
}

/// A configuration file's bytes as text: JSON text is UTF-8, so bytes that are not are a file
/// that is no JSON (ACL_ERROR_PARSE_FILE), not one that cannot be read.
pub(crate) fn json_text(bytes: Vec<u8>, path: &std::path::Path) -> Res<String> {
    String::from_utf8(bytes).map_err(|e| {
        SimError::new(
            ACL_ERROR_PARSE_FILE,
            format!("{path:?} is not JSON: it is not UTF-8 text ({e})"),
        )
    })
}

/// Parses a configuration's text (not JSON, or too deeply nested → ACL_ERROR_PARSE_FILE).
pub(crate) fn parse_json(text: &str) -> Res<Value> {
    let json: Value = match serde_json::from_str(text) {
        Ok(json) => json,
        Err(e) => fail!(
            ACL_ERROR_PARSE_FILE,
            "the configuration file is not valid JSON: {e}"
        ),
    };
    let (objects, arrays) = nesting(&json);
    ensure!(
        objects <= MAX_NESTING && arrays <= MAX_NESTING,
        ACL_ERROR_PARSE_FILE,
        "the configuration file nests {objects} levels of {{ and {arrays} of [; at most \
         {MAX_NESTING} of each are allowed"
    );
    Ok(json)
}

/// The deepest nesting of objects and of arrays in `json`, counted separately.
fn nesting(json: &Value) -> (usize, usize) {
    let deepest = |children: &mut dyn Iterator<Item = &Value>| {
        children
            .map(nesting)
            .fold((0, 0), |(o, a), (co, ca)| (o.max(co), a.max(ca)))
    };
    match json {
        Value::Object(map) => {
            let (o, a) = deepest(&mut map.values());
            (o + 1, a)
        }
        Value::Array(items) => {
            let (o, a) = deepest(&mut items.iter());
            (o, a + 1)
        }
        _ => (0, 0),
    }
}

/// Returns early with ACL_ERROR_INVALID_DUMP_CONFIG.
macro_rules! invalid {
    ($($arg:tt)+) => {
        fail!(ACL_ERROR_INVALID_DUMP_CONFIG, $($arg)+)
    };
}

/// Validates a configuration's `"dump"` section (none: a configuration that turns nothing on).
/// Every problem with its content → ACL_ERROR_INVALID_DUMP_CONFIG.
pub(crate) fn parse_section(json: &Value) -> Res<DumpSettings> {
    let Some(section) = json.get("dump") else {
        return Ok(DumpSettings::default());
    };
    let Some(section) = section.as_object() else {
        invalid!("\"dump\" is {section}, not an object");
    };
    let path = text(section, "dump_path")?;
    if path.as_deref() == Some("") {
        invalid!("\"dump_path\" is empty");
    }
    let list = dump_list(section)?;
    let mode = choice(section, "dump_mode", &["input", "output", "all"])?;
    choice(section, "dump_data", &["tensor", "stats"])?;
    choice(section, "dump_level", &["op", "kernel", "all"])?;
    let single_op = choice(section, "dump_op_switch", &["on", "off"])? == Some("on");
    let overflow = choice(section, "dump_debug", &["on", "off"])? == Some("on");
    let scene = choice(
        section,
        "dump_scene",
        &[
            "aic_err_brief_dump",
            "aic_err_norm_dump",
            "aic_err_detail_dump",
            "lite_exception",
            "watcher",
        ],
    )?;
    let asked_kernel_data = kernel_data(section)?;
    let watcher = scene == Some("watcher");
    let exception = match scene {
        Some("aic_err_brief_dump" | "lite_exception") => Some(ExceptionDump::Brief),
        Some("aic_err_norm_dump") => Some(ExceptionDump::Normal),
        Some("aic_err_detail_dump") => Some(ExceptionDump::Detail),
        _ => None,
    };
    let models: Vec<String> = match watcher {
        true => Vec::new(),
        false => list.iter().filter_map(|e| e.model.clone()).collect(),
    };
    let model_or_op = !models.is_empty() || single_op;
    // Without `dump_kernel_data`, a model or single-operator dump exports every type.
    let kernel_data = match asked_kernel_data {
        Some(types) => types,
        None if model_or_op => vec!["all".to_owned()],
        None => Vec::new(),
    };
    let needs_path = |what: &str| -> Res<()> {
        ensure!(
            path.is_some(),
            ACL_ERROR_INVALID_DUMP_CONFIG,
            "{what} needs \"dump_path\", where the dump files go"
        );
        Ok(())
    };
    if model_or_op {
        needs_path("a model or single-operator dump")?;
    }
    if exception.is_some() && model_or_op {
        invalid!("an exception dump cannot be combined with a model or single-operator dump");
    }
    if overflow {
        needs_path("an overflow dump (\"dump_debug\": \"on\")")?;
        if model_or_op {
            invalid!("an overflow dump cannot be combined with a model or single-operator dump");
        }
    }
    let mut watched = Vec::new();
    if watcher {
        needs_path("the watch mode")?;
        if overflow || single_op {
            invalid!(
                "the watch mode cannot be combined with an overflow dump (\"dump_debug\") or a \
                 single-operator dump (\"dump_op_switch\")"
            );
        }
        if list.iter().any(|e| e.model.is_some()) {
            invalid!("the watch mode's \"dump_list\" cannot name a \"model_name\"");
        }
        if mode.is_some_and(|mode| mode != "output") {
            invalid!("the watch mode dumps outputs only: \"dump_mode\" must be \"output\"");
        }
        watched = list.into_iter().flat_map(|e| e.watcher_nodes).collect();
        ensure!(
            !watched.is_empty(),
            ACL_ERROR_INVALID_DUMP_CONFIG,
            "the watch mode needs \"watcher_nodes\" in \"dump_list\": the operators to watch"
        );
    }
    if !kernel_data.is_empty() {
        needs_path("kernel debug data (\"dump_kernel_data\")")?;
    }
    Ok(DumpSettings {
        path,
        models,
        single_op,
        exception,
        overflow,
        watched,
        kernel_data,
    })
}

/// An entry of `dump_list`.
struct ListEntry {
    model: Option<String>,
    watcher_nodes: Vec<String>,
}

fn dump_list(section: &Map<String, Value>) -> Res<Vec<ListEntry>> {
    let Some(list) = section.get("dump_list") else {
        return Ok(Vec::new());
    };
    let Some(list) = list.as_array() else {
        invalid!("\"dump_list\" is {list}, not an array");
    };
    let mut entries = Vec::with_capacity(list.len());
    for entry in list {
        let Some(entry) = entry.as_object() else {
            invalid!("a \"dump_list\" entry is {entry}, not an object");
        };
        let model = text(entry, "model_name")?;
        if model.as_deref() == Some("") {
            invalid!("a \"dump_list\" entry's \"model_name\" is empty");
        }
        names(entry, "layer")?;
        entries.push(ListEntry {
            model,
            watcher_nodes: names(entry, "watcher_nodes")?,
        });
    }
    Ok(entries)
}

/// A string field (absent: `None`; another type → invalid).
fn text(object: &Map<String, Value>, key: &str) -> Res<Option<String>> {
    match object.get(key) {
        None => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(other) => invalid!("\"{key}\" is {other}, not a string"),
    }
}

/// A string field that must be one of `allowed`.
fn choice<'a>(object: &Map<String, Value>, key: &str, allowed: &[&'a str]) -> Res<Option<&'a str>> {
    let Some(value) = text(object, key)? else {
        return Ok(None);
    };
    match allowed.iter().find(|&&a| a == value) {
        Some(&found) => Ok(Some(found)),
        None => invalid!("\"{key}\" is {value:?}, not one of {allowed:?}"),
    }
}

/// An array of operator names.
fn names(object: &Map<String, Value>, key: &str) -> Res<Vec<String>> {
    let Some(value) = object.get(key) else {
        return Ok(Vec::new());
    };
    let items = match value.as_array() {
        Some(items) => items,
        None => invalid!("\"{key}\" is {value}, not an array of names"),
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        match item.as_str() {
            Some(name) if !name.is_empty() => out.push(name.to_owned()),
            _ => invalid!("\"{key}\" holds {item}, not an operator name"),
        }
    }
    Ok(out)
}

/// `dump_kernel_data`: comma-separated types, each one of those Ascend C kernels can print
/// (absent: `None`).
fn kernel_data(section: &Map<String, Value>) -> Res<Option<Vec<String>>> {
    const TYPES: [&str; 5] = ["all", "printf", "tensor", "assert", "timestamp"];
    let Some(list) = text(section, "dump_kernel_data")? else {
        return Ok(None);
    };
    let mut types = Vec::new();
    for item in list.split(',').map(str::trim) {
        ensure!(
            TYPES.contains(&item),
            ACL_ERROR_INVALID_DUMP_CONFIG,
            "\"dump_kernel_data\" names {item:?}, not one of {TYPES:?}"
        );
        types.push(item.to_owned());
    }
    Ok(Some(types))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Res<DumpSettings> {
        parse_section(&parse_json(text)?)
    }

    /// Of what aclInit's file may turn on, only a model, single-operator or overflow dump
    /// keeps aclmdlInitDump from opening a session (`begin`).
    #[test]
    fn only_model_single_operator_and_overflow_dumps_exclude_aclmdl_init_dump() {
        for (text, excludes) in [
            (
                r#"{"dump": {"dump_list": [{"model_name": "m"}], "dump_path": "o"}}"#,
                true,
            ),
            (
                r#"{"dump": {"dump_path": "o", "dump_list": [{}], "dump_op_switch": "on"}}"#,
                true,
            ),
            (r#"{"dump": {"dump_path": "o", "dump_debug": "on"}}"#, true),
            (r#"{"dump": {"dump_scene": "aic_err_brief_dump"}}"#, false),
            (r#"{"dump": {"dump_scene": "lite_exception"}}"#, false),
            (
                r#"{"dump": {"dump_kernel_data": "printf", "dump_path": "o"}}"#,
                false,
            ),
        ] {
            let settings = parse(text).unwrap();
            assert!(settings.enables_any(), "{text}");
            assert_eq!(settings.excludes_init_dump(), excludes, "{text}");
        }
    }

    #[test]
    fn nesting_counts_objects_and_arrays_apart() {
        let json: Value = serde_json::from_str(r#"{"a": [[{"b": [1]}]]}"#).unwrap();
        assert_eq!(nesting(&json), (2, 3));
    }

    #[test]
    fn a_model_dump_names_its_models() {
        let settings = parse(
            r#"{"dump": {"dump_list": [{"model_name": "a"}, {"model_name": "b", "layer": ["x"]}],
                "dump_path": "out", "dump_mode": "output"}}"#,
        )
        .unwrap();
        assert_eq!(settings.models, ["a", "b"]);
        assert_eq!(settings.path.as_deref(), Some("out"));
    }

    /// Without `dump_kernel_data`, a model or single-operator dump exports every kernel debug
    /// type; other dumps export none, and a field given is taken as it is.
    #[test]
    fn kernel_debug_data_defaults_to_all_with_a_model_or_single_operator_dump() {
        for (text, types) in [
            (
                r#"{"dump": {"dump_list": [{"model_name": "m"}], "dump_path": "o"}}"#,
                &["all"][..],
            ),
            (
                r#"{"dump": {"dump_path": "o", "dump_list": [{}], "dump_op_switch": "on"}}"#,
                &["all"],
            ),
            (
                r#"{"dump": {"dump_path": "o", "dump_op_switch": "on", "dump_kernel_data": "printf"}}"#,
                &["printf"],
            ),
            (r#"{"dump": {"dump_path": "o", "dump_debug": "on"}}"#, &[]),
            (r#"{"dump": {"dump_scene": "aic_err_brief_dump"}}"#, &[]),
            (
                r#"{"dump": {"dump_path": "o", "dump_op_switch": "off"}}"#,
                &[],
            ),
        ] {
            assert_eq!(parse(text).unwrap().kernel_data, types, "{text}");
        }
    }

    #[test]
    fn a_detail_dump_after_a_device_was_set_is_a_brief_one() {
        let asked = parse(r#"{"dump": {"dump_scene": "aic_err_detail_dump"}}"#).unwrap();
        let early = asked.clone().settle(false);
        let late = asked.settle(true);
        assert_eq!(early.exception, Some(ExceptionDump::Detail));
        assert_eq!(late.exception, Some(ExceptionDump::Brief));
    }
}

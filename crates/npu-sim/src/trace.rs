//! Timeline trace of device tasks, written as Chrome / Perfetto trace-event JSON.
//!
//! Recording starts when `NPU_TRACE=path.json` is set at start-up, with [`enable`] (C:
//! `npusimTraceEnable`) or with a [`Guard`]. Every task a stream runs becomes a complete event
//! ("ph": "X") on the track of its stream (pid = device, tid = the ACL stream id that
//! `aclrtStreamGetId` returns; synchronous copies use tid 0), with its name, bytes and
//! start/duration on the simulated device clock (µs). Event records, waits and resets have no
//! duration: they are instant events ("ph": "i"), and a flow arrow ("ph": "s" to "ph": "f", one
//! id per record) leads from each record to every wait on it.
//!
//! The file is written when the program ends normally (an exit hook registered when recording
//! starts), when a [`Guard`] is dropped, by [`flush`] and by `aclFinalize`; each write holds
//! everything recorded so far. While disabled, recording costs one relaxed atomic load.
//!
//! ```
//! # extern crate ascendcl as npu_sim;
//! let path = std::env::temp_dir().join(format!("npu-sim-doc-{}.json", std::process::id()));
//! npu_sim::trace::enable(&path);
//! assert!(npu_sim::trace::is_enabled());
//! // ... run work ...
//! let written = npu_sim::trace::flush().unwrap();
//! assert_eq!(written.as_deref(), Some(path.as_path()));
//! let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
//! assert!(json["traceEvents"].is_array());
//! # std::fs::remove_file(&path).ok();
//! ```

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};

use crate::event::Record;
use crate::sync::lock;
use crate::task::{Op, Task};

/// The environment variable naming the trace file.
///
/// ```standalone_crate
/// # extern crate ascendcl as npu_sim;
/// # /// Runs one 64-byte memset on a new stream of device 0 and waits for it.
/// # fn memset() {
/// #     // SAFETY: every pointer passed is valid for the call's contract.
/// #     unsafe {
/// #         let (mut stream, mut dev) = (std::ptr::null_mut(), std::ptr::null_mut());
/// #         assert_eq!(npu_sim::abi::aclrtSetDevice(0), 0);
/// #         assert_eq!(npu_sim::abi::aclrtCreateStream(&mut stream), 0);
/// #         assert_eq!(npu_sim::abi::aclrtMalloc(&mut dev, 64, 0), 0);
/// #         assert_eq!(npu_sim::abi::aclrtMemsetAsync(dev, 64, 0, 64, stream), 0);
/// #         assert_eq!(npu_sim::abi::aclrtSynchronizeStream(stream), 0);
/// #     }
/// # }
/// # /// The complete events ("ph": "X") of the trace file at `path`.
/// # fn spans(path: &std::path::Path) -> Vec<serde_json::Value> {
/// #     let json: serde_json::Value =
/// #         serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
/// #     let events = json["traceEvents"].as_array().unwrap();
/// #     events.iter().filter(|e| e["ph"] == "X").cloned().collect()
/// # }
/// # let path = std::env::temp_dir().join(format!("npu-sim-doc-{}.json", std::process::id()));
///
/// use npu_sim::trace::{self, TRACE_ENV};
///
/// // As a test runner would set it, before the simulator starts:
/// // SAFETY: no other thread of this program reads or writes the environment.
/// unsafe { std::env::set_var(TRACE_ENV, &path) };
/// memset(); // starts the simulator, which starts recording
/// assert!(trace::is_enabled());
/// assert_eq!(trace::flush().unwrap().as_deref(), Some(path.as_path()));
/// assert_eq!(spans(&path)[0]["cat"], "memset");
/// # std::fs::remove_file(&path).ok();
/// ```
pub const TRACE_ENV: &str = "NPU_TRACE";
/// Most spans kept in memory; later ones are counted but dropped.
const MAX_SPANS: usize = 1 << 20;

#[derive(Clone)]
struct Span {
    device: i32,
    stream: i32,
    category: &'static str,
    name: String,
    bytes: u64,
    start_ns: u64,
    end_ns: u64,
    shape: Shape,
}

/// How a span is drawn: a slice with a duration, or an instant that starts or ends a flow.
#[derive(Clone)]
enum Shape {
    Slice,
    /// An event record, the source of a flow arrow to every wait on it.
    Record(String),
    /// A wait on a record, the end of that record's flow arrow.
    Wait(String),
    /// Any other zero-length marker (an event reset).
    Instant,
}

#[derive(Default)]
struct Trace {
    path: Option<PathBuf>,
    spans: Vec<Span>,
    dropped: u64,
    /// Whether the file holds everything recorded (to this path): the exit hook then has
    /// nothing to add, and does not bring back a file the program already wrote and removed.
    written: bool,
}

static ENABLED: AtomicBool = AtomicBool::new(false);
static TRACE: Mutex<Trace> = Mutex::new(Trace {
    path: None,
    spans: Vec::new(),
    dropped: 0,
    written: false,
});

/// Starts recording; [`flush`] writes to `path`. Spans recorded so far are kept.
///
/// ```
/// # extern crate ascendcl as npu_sim;
/// # /// Runs one 64-byte memset on a new stream of device 0 and waits for it.
/// # fn memset() {
/// #     // SAFETY: every pointer passed is valid for the call's contract.
/// #     unsafe {
/// #         let (mut stream, mut dev) = (std::ptr::null_mut(), std::ptr::null_mut());
/// #         assert_eq!(npu_sim::abi::aclrtSetDevice(0), 0);
/// #         assert_eq!(npu_sim::abi::aclrtCreateStream(&mut stream), 0);
/// #         assert_eq!(npu_sim::abi::aclrtMalloc(&mut dev, 64, 0), 0);
/// #         assert_eq!(npu_sim::abi::aclrtMemsetAsync(dev, 64, 0, 64, stream), 0);
/// #         assert_eq!(npu_sim::abi::aclrtSynchronizeStream(stream), 0);
/// #     }
/// # }
/// # /// The complete events ("ph": "X") of the trace file at `path`.
/// # fn spans(path: &std::path::Path) -> Vec<serde_json::Value> {
/// #     let json: serde_json::Value =
/// #         serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
/// #     let events = json["traceEvents"].as_array().unwrap();
/// #     events.iter().filter(|e| e["ph"] == "X").cloned().collect()
/// # }
/// # let path = std::env::temp_dir().join(format!("npu-sim-doc-{}.json", std::process::id()));
///
/// use npu_sim::trace;
///
/// trace::enable(&path);
/// memset();
/// trace::flush().unwrap();
/// let spans = spans(&path);
/// assert_eq!(spans[0]["cat"], "memset");
/// assert_eq!(spans[0]["pid"], 0, "one track group per device");
/// # std::fs::remove_file(&path).ok();
/// ```
pub fn enable(path: impl AsRef<Path>) {
    let mut trace = lock(&TRACE);
    trace.path = Some(path.as_ref().to_owned());
    trace.written = false;
    drop(trace);
    ENABLED.store(true, Ordering::Release);
    write_at_exit();
}

/// Registers (once) a hook that writes the trace when the program ends normally: returning
/// from `main` or calling `std::process::exit`, unless the file already holds everything
/// recorded. A crash or a signal skips it; [`Guard`] and [`flush`] give programs that need the
/// file earlier their own point to write it.
fn write_at_exit() {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    extern "C" fn at_exit() {
        if lock(&TRACE).written {
            return;
        }
        if let Err(err) = flush() {
            eprintln!("npu-sim: writing the trace at exit failed: {err}");
        }
    }
    REGISTERED.call_once(|| {
        // SAFETY: `at_exit` is a plain `extern "C" fn()` that never unwinds (flush returns
        // its errors) and touches only statics, which Rust never destroys.
        if unsafe { libc::atexit(at_exit) } != 0 {
            crate::error::log!(warn, target: "npu_sim", "cannot register the trace's exit hook");
        }
    });
}

/// Records the timeline while alive and writes it when dropped.
///
/// For programs and tests that want the file at a point of their choosing rather than at exit.
/// Dropping it writes what was recorded (errors are logged; [`Guard::finish`] returns them)
/// and stops recording.
///
/// ```
/// # extern crate ascendcl as npu_sim;
/// let path = std::env::temp_dir().join(format!("npu-sim-guard-{}.json", std::process::id()));
/// let guard = npu_sim::trace::Guard::start(&path);
/// assert!(npu_sim::trace::is_enabled());
/// drop(guard); // writes the file
/// assert!(!npu_sim::trace::is_enabled());
/// let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
/// assert!(json["traceEvents"].is_array());
/// # std::fs::remove_file(&path).ok();
/// ```
#[must_use = "the trace is written when the guard is dropped"]
#[derive(Debug)]
pub struct Guard {
    /// Cleared by `finish`, which writes itself.
    armed: bool,
}

impl Guard {
    /// Starts recording to `path` (as [`enable`]).
    ///
    /// ```
    /// # extern crate ascendcl as npu_sim;
    /// let path = std::env::temp_dir().join(format!("npu-sim-guard-start-{}.json", std::process::id()));
    /// let guard = npu_sim::trace::Guard::start(&path);
    /// assert!(npu_sim::trace::is_enabled());
    /// # guard.finish().unwrap();
    /// # std::fs::remove_file(&path).ok();
    /// ```
    pub fn start(path: impl AsRef<Path>) -> Guard {
        enable(path);
        Guard { armed: true }
    }

    /// Stops recording and writes the file now, returning where (or why not).
    ///
    /// ```
    /// # extern crate ascendcl as npu_sim;
    /// let path = std::env::temp_dir().join(format!("npu-sim-guard-finish-{}.json", std::process::id()));
    /// let written = npu_sim::trace::Guard::start(&path).finish().unwrap();
    /// assert_eq!(written.as_deref(), Some(path.as_path()));
    /// # std::fs::remove_file(&path).ok();
    /// ```
    pub fn finish(mut self) -> std::io::Result<Option<PathBuf>> {
        self.armed = false;
        disable();
        flush()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.armed {
            disable();
            if let Err(err) = flush() {
                crate::error::log!(warn, target: "npu_sim", "writing the trace failed: {err}");
            }
        }
    }
}

/// Stops recording (what was recorded is kept for [`flush`]).
///
/// ```
/// # extern crate ascendcl as npu_sim;
/// # /// Runs one 64-byte memset on a new stream of device 0 and waits for it.
/// # fn memset() {
/// #     // SAFETY: every pointer passed is valid for the call's contract.
/// #     unsafe {
/// #         let (mut stream, mut dev) = (std::ptr::null_mut(), std::ptr::null_mut());
/// #         assert_eq!(npu_sim::abi::aclrtSetDevice(0), 0);
/// #         assert_eq!(npu_sim::abi::aclrtCreateStream(&mut stream), 0);
/// #         assert_eq!(npu_sim::abi::aclrtMalloc(&mut dev, 64, 0), 0);
/// #         assert_eq!(npu_sim::abi::aclrtMemsetAsync(dev, 64, 0, 64, stream), 0);
/// #         assert_eq!(npu_sim::abi::aclrtSynchronizeStream(stream), 0);
/// #     }
/// # }
/// # /// The complete events ("ph": "X") of the trace file at `path`.
/// # fn spans(path: &std::path::Path) -> Vec<serde_json::Value> {
/// #     let json: serde_json::Value =
/// #         serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
/// #     let events = json["traceEvents"].as_array().unwrap();
/// #     events.iter().filter(|e| e["ph"] == "X").cloned().collect()
/// # }
/// # let path = std::env::temp_dir().join(format!("npu-sim-doc-{}.json", std::process::id()));
///
/// use npu_sim::trace;
///
/// trace::enable(&path);
/// memset();
/// trace::disable();
/// memset(); // not recorded
/// trace::flush().unwrap(); // still writes what was recorded
/// assert_eq!(spans(&path).len(), 1);
/// # std::fs::remove_file(&path).ok();
/// ```
pub fn disable() {
    ENABLED.store(false, Ordering::Release);
}

/// Whether tasks are being recorded.
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use npu_sim::trace;
///
/// let path = std::env::temp_dir().join(format!("npu-sim-doc-{}.json", std::process::id()));
/// trace::enable(&path);
/// assert!(trace::is_enabled());
/// trace::disable();
/// assert!(!trace::is_enabled());
/// # trace::flush().unwrap(); // written now, so the exit hook has nothing to write
/// # std::fs::remove_file(&path).ok();
/// ```
pub fn is_enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Writes every span recorded so far to the trace file; returns its path (`None` if tracing
/// was never enabled).
///
/// ```
/// # extern crate ascendcl as npu_sim;
/// # /// Runs one 64-byte memset on a new stream of device 0 and waits for it.
/// # fn memset() {
/// #     // SAFETY: every pointer passed is valid for the call's contract.
/// #     unsafe {
/// #         let (mut stream, mut dev) = (std::ptr::null_mut(), std::ptr::null_mut());
/// #         assert_eq!(npu_sim::abi::aclrtSetDevice(0), 0);
/// #         assert_eq!(npu_sim::abi::aclrtCreateStream(&mut stream), 0);
/// #         assert_eq!(npu_sim::abi::aclrtMalloc(&mut dev, 64, 0), 0);
/// #         assert_eq!(npu_sim::abi::aclrtMemsetAsync(dev, 64, 0, 64, stream), 0);
/// #         assert_eq!(npu_sim::abi::aclrtSynchronizeStream(stream), 0);
/// #     }
/// # }
/// # /// The complete events ("ph": "X") of the trace file at `path`.
/// # fn spans(path: &std::path::Path) -> Vec<serde_json::Value> {
/// #     let json: serde_json::Value =
/// #         serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
/// #     let events = json["traceEvents"].as_array().unwrap();
/// #     events.iter().filter(|e| e["ph"] == "X").cloned().collect()
/// # }
/// # let path = std::env::temp_dir().join(format!("npu-sim-doc-{}.json", std::process::id()));
///
/// use npu_sim::trace;
///
/// trace::enable(&path);
/// memset();
/// assert_eq!(trace::flush().unwrap(), Some(path.clone()));
/// let span = &spans(&path)[0];
/// assert_eq!(span["args"]["bytes"], 64);
/// assert_ne!(span["tid"], 0, "on the track of the stream that ran it");
/// # std::fs::remove_file(&path).ok();
/// ```
pub fn flush() -> std::io::Result<Option<PathBuf>> {
    // Rendering and writing up to MAX_SPANS spans takes a while: a copy is rendered outside the
    // lock, so the stream workers recording tasks meanwhile do not wait for it.
    let (path, spans, dropped) = {
        let mut trace = lock(&TRACE);
        let Some(path) = trace.path.clone() else {
            return Ok(None);
        };
        // A span recorded from here on clears it again.
        trace.written = true;
        (path, trace.spans.clone(), trace.dropped)
    };
    let written = std::fs::write(&path, render(&spans, dropped).to_string());
    if written.is_err() {
        lock(&TRACE).written = false;
    }
    written?;
    Ok(Some(path))
}

/// Starts recording if `NPU_TRACE` names a file (called once at simulator start-up).
pub(crate) fn enable_from_env() {
    if let Some(path) = std::env::var_os(TRACE_ENV).filter(|p| !p.is_empty()) {
        enable(PathBuf::from(path));
    }
}

/// Records a task a stream ran, or a synchronous copy or memset with `stream` 0 (the device's
/// "synchronous ops" track; stream ids start at 1). `failed`: the task ended with an error.
pub(crate) fn record_task(
    device: i32,
    stream: i32,
    task: &Task,
    start_ns: u64,
    end_ns: u64,
    failed: bool,
) {
    if !is_enabled() {
        return;
    }
    let (category, mut name) = task.label();
    if stream == 0 {
        name.push_str(" (sync)");
    }
    let shape = match &task.op {
        Op::Record(record) => Shape::Record(flow_id(record)),
        // A wait that failed was not released by its record (it timed out, possibly before the
        // record ran, or the record was discarded): an arrow to it would say it was.
        Op::Wait { record, .. } if !failed => Shape::Wait(flow_id(record)),
        Op::Wait { .. } | Op::Reset { .. } | Op::ProfMarker(_) => Shape::Instant,
        _ => Shape::Slice,
    };
    record(Span {
        device,
        stream,
        category,
        name,
        bytes: task.bytes(),
        start_ns,
        end_ns,
        shape,
    });
}

/// Names a record uniquely in the process: its stream's device and id, and its serial number.
fn flow_id(record: &Record) -> String {
    let (device, stream, serial) = record.trace_name();
    format!("d{device}s{stream}r{serial}")
}

fn record(span: Span) {
    let mut trace = lock(&TRACE);
    trace.written = false;
    if trace.spans.len() < MAX_SPANS {
        trace.spans.push(span);
    } else {
        trace.dropped += 1;
    }
}

fn micros(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// The trace events of one span: a complete event for a task with a duration; an instant
/// (thread-scoped) for a marker, plus the flow start or end that links a record to its waits,
/// when the trace holds both ends (`waited`: records a wait in it ended on; `recorded`:
/// records it holds). The flow events are bound to the enclosing marker ("bp": "e"), so
/// viewers draw the arrow between the two instants.
fn render_span(span: &Span, waited: &HashSet<&str>, recorded: &HashSet<&str>) -> Vec<Value> {
    let (pid, tid) = (span.device, span.stream);
    let slice = |ph: &str| {
        json!({
            "name": span.name,
            "cat": span.category,
            "ph": ph,
            "pid": pid,
            "tid": tid,
            "ts": micros(span.start_ns),
            "args": { "bytes": span.bytes },
        })
    };
    let at = |ns: u64, ph: &str, id: &str| {
        json!({
            "name": "event", "cat": "event", "ph": ph, "id": id, "bp": "e",
            "pid": pid, "tid": tid, "ts": micros(ns),
        })
    };
    let instant = |ns: u64| {
        let mut event = slice("i");
        event["s"] = json!("t");
        event["ts"] = json!(micros(ns));
        event
    };
    match &span.shape {
        Shape::Slice => {
            let mut event = slice("X");
            event["dur"] = json!(micros(span.end_ns.saturating_sub(span.start_ns)));
            vec![event]
        }
        // A record is reached, and a wait satisfied, when the task ends: the arrow joins those
        // two moments.
        Shape::Record(id) if waited.contains(id.as_str()) => {
            vec![instant(span.end_ns), at(span.end_ns, "s", id)]
        }
        // A wait on a record made before the trace began (or past its span limit) ends no
        // arrow: nothing in the file starts it.
        Shape::Wait(id) if recorded.contains(id.as_str()) => {
            vec![instant(span.end_ns), at(span.end_ns, "f", id)]
        }
        Shape::Record(_) | Shape::Wait(_) | Shape::Instant => vec![instant(span.end_ns)],
    }
}

fn render(spans: &[Span], dropped: u64) -> Value {
    let mut tracks = std::collections::BTreeSet::new();
    // Only a record that something waited on starts an arrow, and only a wait whose record
    // is in the trace ends one.
    let ids = |wanted: fn(&Shape) -> Option<&str>| -> HashSet<&str> {
        spans
            .iter()
            .filter_map(|span| wanted(&span.shape))
            .collect()
    };
    let waited = ids(|shape| match shape {
        Shape::Wait(id) => Some(id.as_str()),
        _ => None,
    });
    let recorded = ids(|shape| match shape {
        Shape::Record(id) => Some(id.as_str()),
        _ => None,
    });
    let mut events = Vec::with_capacity(spans.len());
    for span in spans {
        tracks.insert((span.device, span.stream));
        events.extend(render_span(span, &waited, &recorded));
    }
    let devices: std::collections::BTreeSet<i32> = tracks.iter().map(|&(d, _)| d).collect();
    for device in devices {
        events.push(json!({
            "name": "process_name", "ph": "M", "pid": device,
            "args": { "name": format!("npu-sim device {device}") },
        }));
    }
    for (device, stream) in tracks {
        let name = if stream == 0 {
            "synchronous ops".to_owned()
        } else {
            format!("stream {stream}")
        };
        events.push(json!({
            "name": "thread_name", "ph": "M", "pid": device, "tid": stream,
            "args": { "name": name },
        }));
    }
    json!({
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": { "producer": "npu-sim", "droppedSpans": dropped },
    })
}

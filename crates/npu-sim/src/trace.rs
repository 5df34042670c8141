//! Timeline trace of device tasks, written as Chrome / Perfetto trace-event JSON.
//!
//! Recording starts when `NPU_TRACE=path.json` is set at start-up, or with [`enable`] (C:
//! `npusimTraceEnable`). Every task a stream runs becomes a complete event ("ph": "X") on the
//! track of its stream (pid = device, tid = stream id; synchronous copies use tid 0), with its
//! name, bytes and start/duration on the simulated device clock (µs). The file is (re)written by
//! [`flush`] and by `aclFinalize`. While disabled, recording costs one relaxed atomic load.
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

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};

use crate::sync::lock;
use crate::task::Task;

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
}

#[derive(Default)]
struct Trace {
    path: Option<PathBuf>,
    spans: Vec<Span>,
    dropped: u64,
}

static ENABLED: AtomicBool = AtomicBool::new(false);
static TRACE: Mutex<Trace> = Mutex::new(Trace {
    path: None,
    spans: Vec::new(),
    dropped: 0,
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
    lock(&TRACE).path = Some(path.as_ref().to_owned());
    ENABLED.store(true, Ordering::Release);
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
        let trace = lock(&TRACE);
        let Some(path) = trace.path.clone() else {
            return Ok(None);
        };
        (path, trace.spans.clone(), trace.dropped)
    };
    std::fs::write(&path, render(&spans, dropped).to_string())?;
    Ok(Some(path))
}

/// Starts recording if `NPU_TRACE` names a file (called once at simulator start-up).
pub(crate) fn enable_from_env() {
    if let Some(path) = std::env::var_os(TRACE_ENV).filter(|p| !p.is_empty()) {
        enable(PathBuf::from(path));
    }
}

/// Records a task a stream ran, or a synchronous copy or memset with `stream` 0 (the device's
/// "synchronous ops" track; stream ids start at 1).
pub(crate) fn record_task(device: i32, stream: i32, task: &Task, start_ns: u64, end_ns: u64) {
    if !is_enabled() {
        return;
    }
    let (category, mut name) = task.label();
    if stream == 0 {
        name.push_str(" (sync)");
    }
    record(Span {
        device,
        stream,
        category,
        name,
        bytes: task.bytes(),
        start_ns,
        end_ns,
    });
}

fn record(span: Span) {
    let mut trace = lock(&TRACE);
    if trace.spans.len() < MAX_SPANS {
        trace.spans.push(span);
    } else {
        trace.dropped += 1;
    }
}

fn micros(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

fn render(spans: &[Span], dropped: u64) -> Value {
    let mut tracks = std::collections::BTreeSet::new();
    let mut events: Vec<Value> = spans
        .iter()
        .map(|span| {
            tracks.insert((span.device, span.stream));
            json!({
                "name": span.name,
                "cat": span.category,
                "ph": "X",
                "pid": span.device,
                "tid": span.stream,
                "ts": micros(span.start_ns),
                "dur": micros(span.end_ns.saturating_sub(span.start_ns)),
                "args": { "bytes": span.bytes },
            })
        })
        .collect();
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

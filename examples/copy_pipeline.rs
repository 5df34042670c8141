//! A double-buffered copy pipeline: host → device, a kernel, device → host, over many chunks,
//! pipelined on three streams ordered with events, against the same work done serially.
//!
//! On the simulator a timing model makes a chunk's copy in, its kernel and its copy out take
//! the same simulated time, so the pipelined run can approach 3x the serial one (the target
//! is at least 1.8x). Both runs are recorded as a Chrome/Perfetto timeline: open the file it
//! names in chrome://tracing or https://ui.perfetto.dev to see the stages overlap (one track
//! per stream; docs/timeline.png and docs/timeline-detail.png are screenshots).
//!
//! ```sh
//! cargo run --example copy_pipeline                  # timeline in $NPU_TRACE or the temp dir
//! cargo run --example copy_pipeline -- 8             # 8 chunks instead of 32
//! cargo build --release --example copy_pipeline      # on CANN, started directly, not by cargo run (docs/ascend.md)
//! NPU_BACKEND=acl NPU_EXAMPLE_KERNELS=/path/kernels.o target/release/examples/copy_pipeline
//! ```
//!
//! On CANN the hardware sets the speeds, and the timeline is built from the device timestamps
//! of events recorded around every operation (`support/event_timeline.rs`) instead of the
//! simulator's trace. `support/pipeline.rs` explains how the stages are ordered.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use npu::prelude::*;
use npu::runtime::Backend;
use npu::sim::{self, trace};

#[path = "support/event_timeline.rs"]
mod event_timeline;
#[path = "support/kernels.rs"]
mod kernels;
#[path = "support/pipeline.rs"]
mod pipeline;

/// Chunks in the default run.
const CHUNKS: usize = 32;
/// Elements per chunk (1 MiB of f32).
const CHUNK_LEN: usize = 256 << 10;
/// Simulated time of each stage of a chunk: copy in, kernel, copy out.
const STAGE: Duration = Duration::from_millis(2);

/// What one run did and found.
struct Report {
    backend: String,
    chunk_bytes: usize,
    chunks: usize,
    serial: pipeline::Outcome,
    pipelined: pipeline::Outcome,
    /// Where the timeline came from.
    timeline: Timeline,
    /// The timeline file.
    trace: PathBuf,
}

/// Where the timeline comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Timeline {
    /// The simulator records every device task (its `NPU_TRACE` trace).
    SimulatorTrace,
    /// Events recorded around each operation, read back with their device timestamps: what
    /// works on CANN.
    EventTimestamps,
}

impl Report {
    fn speedup(&self) -> f64 {
        self.serial.wall.as_secs_f64() / self.pipelined.wall.as_secs_f64()
    }

    fn correct(&self) -> bool {
        self.serial.wrong_chunks == 0 && self.pipelined.wrong_chunks == 0
    }
}

/// Runs both versions on device 0, writing the timeline to `trace_path`. On the simulator,
/// with a timing model of `stage` per stage.
async fn run(
    chunks: usize,
    chunk_len: usize,
    stage: Duration,
    timeline: Timeline,
    trace_path: &Path,
) -> npu::Result<Report> {
    let device = Device::open(0)?;
    let ctx = device.primary_context();
    let add = kernels::load(ctx)?.function(pipeline::KERNEL)?;
    let simulated = matches!(device.runtime().backend(), Backend::Simulator);
    if timeline == Timeline::SimulatorTrace && !simulated {
        let rule = "the simulator's trace needs the in-process simulator (NPU_BACKEND=sim)";
        return Err(npu::Error::invalid("copy_pipeline", "timeline", rule));
    }
    let chunk_bytes = chunk_len * size_of::<f32>();
    if simulated {
        let model = pipeline::equal_stages(chunk_bytes, stage);
        sim::set_timing(&device, Some(model))?;
    }
    if timeline == Timeline::SimulatorTrace {
        trace::enable(trace_path);
    }
    let outcome: npu::Result<_> = async {
        let work = pipeline::Work::new(ctx, add, chunks, chunk_len).await?;
        match timeline {
            Timeline::SimulatorTrace => Ok((work.serial(&()).await?, work.pipelined(&()).await?)),
            Timeline::EventTimestamps => {
                let marks = event_timeline::EventTimeline::default();
                let runs = (work.serial(&marks).await?, work.pipelined(&marks).await?);
                marks.write(trace_path).await?;
                Ok(runs)
            }
        }
    }
    .await;
    // Undo the process-wide settings whatever happened.
    if timeline == Timeline::SimulatorTrace {
        trace::disable();
        trace::flush().map_err(|err| {
            npu::Error::invalid("copy_pipeline", "trace", format!("cannot write it: {err}"))
        })?;
    }
    if simulated {
        sim::set_timing(&device, None)?;
    }
    let (serial, pipelined) = outcome?;
    Ok(Report {
        backend: device.runtime().backend().to_string(),
        chunk_bytes,
        chunks,
        serial,
        pipelined,
        timeline,
        trace: trace_path.to_owned(),
    })
}

/// `NPU_TRACE` if set, else a file in the temporary directory.
fn trace_path() -> PathBuf {
    std::env::var_os(trace::TRACE_ENV)
        .filter(|path| !path.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("copy_pipeline.trace.json"))
}

#[tokio::main]
async fn main() -> ExitCode {
    let chunks = match std::env::args().nth(1).map(|arg| arg.parse::<usize>()) {
        None => CHUNKS,
        Some(Ok(chunks)) if chunks > 0 => chunks,
        Some(_) => {
            eprintln!("usage: copy_pipeline [chunks], with chunks a positive number");
            return ExitCode::FAILURE;
        }
    };
    // The simulator's trace where there is one, event timestamps elsewhere.
    let timeline = match Device::open(0).map(|d| d.runtime().backend().clone()) {
        Ok(Backend::Simulator) => Timeline::SimulatorTrace,
        _ => Timeline::EventTimestamps,
    };
    let report = match run(chunks, CHUNK_LEN, STAGE, timeline, &trace_path()).await {
        Ok(report) => report,
        Err(err) => {
            eprintln!("copy_pipeline failed: {err}");
            return ExitCode::FAILURE;
        }
    };
    println!("backend: {}", report.backend);
    println!(
        "{} chunks of {} KiB: copy in -> vector_add_f32 -> copy out",
        report.chunks,
        report.chunk_bytes >> 10
    );
    if report.timeline == Timeline::SimulatorTrace {
        println!(
            "timing model: each stage takes {} ms of simulated time",
            STAGE.as_millis()
        );
    }
    for (name, outcome) in [
        ("serial, every stage awaited", &report.serial),
        ("pipelined, ordered with events", &report.pipelined),
    ] {
        println!(
            "{name:<31} {} stream(s): {:>7.1} ms",
            outcome.streams.len(),
            outcome.wall.as_secs_f64() * 1e3
        );
    }
    println!("speedup: {:.2}x (target >= 1.8x)", report.speedup());
    let source = match report.timeline {
        Timeline::SimulatorTrace => "the simulator's trace",
        Timeline::EventTimestamps => "event timestamps",
    };
    println!(
        "timeline from {source}: {} (open it in ui.perfetto.dev; docs/simulator.md shows it)",
        report.trace.display()
    );
    if report.correct() {
        println!("verified: every chunk of both runs is correct");
        ExitCode::SUCCESS
    } else {
        println!(
            "FAILED: {} serial and {} pipelined chunks are wrong",
            report.serial.wrong_chunks, report.pipelined.wrong_chunks
        );
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::Value;

    use super::*;

    /// Runs the example small, with `timeline`, and checks the results and the timeline file:
    /// it parses, and has exactly one (named) track per stream the runs used.
    async fn check(timeline: Timeline) {
        // The runs set device 0's timing model: one at a time.
        static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
        let _turn = TURN.lock().await;
        let path = std::env::temp_dir().join(format!(
            "copy_pipeline-{timeline:?}-{}.json",
            std::process::id()
        ));
        let report = run(6, 4096, Duration::from_micros(100), timeline, &path)
            .await
            .unwrap();
        assert!(report.correct(), "wrong chunks");
        println!(
            "{timeline:?}: speedup with small chunks {:.2}x",
            report.speedup()
        );

        let text = std::fs::read_to_string(&report.trace).unwrap();
        std::fs::remove_file(&path).ok();
        let json: Value = serde_json::from_str(&text).unwrap();
        let events = json["traceEvents"].as_array().unwrap();
        let on_device_0 = |e: &&Value| e["pid"] == 0;
        let spans: Vec<&Value> = events
            .iter()
            .filter(on_device_0)
            .filter(|e| e["ph"] == "X")
            .collect();
        let tracks: BTreeSet<i64> = spans.iter().map(|e| e["tid"].as_i64().unwrap()).collect();
        let streams: BTreeSet<i64> = report
            .serial
            .streams
            .iter()
            .chain(&report.pipelined.streams)
            .map(|&id| id as i64)
            .collect();
        assert_eq!(
            streams.len(),
            4,
            "the serial stream and three pipeline streams"
        );
        assert_eq!(tracks, streams, "one track per stream, and no other");

        let named: BTreeSet<i64> = events
            .iter()
            .filter(on_device_0)
            .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
            .map(|e| e["tid"].as_i64().unwrap())
            .collect();
        assert_eq!(named, streams, "every track is named after its stream");

        let chunk_bytes = 4096 * 4;
        for name in ["H2D", "D2H", pipeline::KERNEL] {
            let count = spans.iter().filter(|e| e["name"] == name).count();
            assert!(count >= 12, "{count} {name} spans");
        }
        for copy in spans.iter().filter(|e| e["cat"] == "copy") {
            assert!(copy["args"]["bytes"].as_u64().unwrap() <= chunk_bytes);
            assert!(copy["dur"].as_f64().unwrap() > 0.0, "{copy}");
        }

        // The pipeline's records and waits are instants, each wait the end of a flow arrow
        // from a record on another stream, never earlier than it.
        let phase = |ph: &'static str| {
            let matches = move |e: &&Value| e["pid"] == 0 && e["ph"] == ph;
            events.iter().filter(matches).collect::<Vec<_>>()
        };
        assert!(
            spans
                .iter()
                .all(|e| e["name"] != "record" && e["name"] != "wait")
        );
        let instants = phase("i");
        assert!(instants.iter().any(|e| e["name"] == "record"));
        assert!(instants.iter().any(|e| e["name"] == "wait"));
        let starts: std::collections::HashMap<&str, &Value> = phase("s")
            .into_iter()
            .map(|e| (e["id"].as_str().unwrap(), e))
            .collect();
        let ends = phase("f");
        assert!(ends.len() >= 6, "{} flows", ends.len());
        for end in ends {
            let start = starts[end["id"].as_str().unwrap()];
            assert_ne!(start["tid"], end["tid"], "an arrow joins two streams");
            assert!(
                start["ts"].as_f64() <= end["ts"].as_f64(),
                "{start} -> {end}"
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn results_check_out_and_the_simulator_trace_has_a_track_per_stream() {
        check(Timeline::SimulatorTrace).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_timeline_from_event_timestamps_has_a_track_per_stream() {
        check(Timeline::EventTimestamps).await;
    }
}

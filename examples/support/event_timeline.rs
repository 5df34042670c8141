//! A timeline from event timestamps, for devices without the simulator's trace (CANN).
//!
//! Every operation is bracketed by two events recorded on its stream; once the work is done,
//! their device timestamps (`aclrtEventGetTimestamp`) give the operation's start and end. Every
//! event record and event wait the run makes between streams gets a marker event right after
//! it on the same stream, whose timestamp says when the record was reached or the wait was
//! satisfied. The file has the simulator trace's format (Chrome/Perfetto trace-event JSON, one
//! track per stream named by `Stream::id`, records and waits as instant events with a flow
//! arrow from each record to the waits on it), so the same viewers and checks read it. The
//! start event is recorded after any event wait the stream was given, so a span starts when
//! the operation could start, as in the trace.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::Mutex;

use npu::Stream;
use npu::prelude::*;
use serde_json::{Value, json};

use crate::pipeline::Marks;

/// What a span shows: an operation, or a record or wait and the flow it belongs to.
enum Kind {
    Operation { bytes: usize, start: Event },
    Record { flow: u64 },
    Wait { flow: u64 },
}

/// One marked moment or operation: `end` is recorded right after it on its stream.
struct Span {
    device: u32,
    stream: u64,
    name: &'static str,
    kind: Kind,
    end: Event,
}

#[derive(Default)]
struct Recorded {
    spans: Vec<Span>,
    /// The flow of each event's latest record, keyed by the event's handle: a wait joins the
    /// record it waits for, which is the latest one submitted before it.
    latest_record: HashMap<usize, u64>,
    flows: u64,
}

/// Records the operations of a run with events; [`EventTimeline::write`] writes the timeline.
#[derive(Default)]
pub(crate) struct EventTimeline {
    recorded: Mutex<Recorded>,
}

impl EventTimeline {
    fn push(&self, stream: &Stream, name: &'static str, kind: Kind, end: Event) {
        let span = Span {
            device: stream.context().device_id(),
            stream: stream.id(),
            name,
            kind,
            end,
        };
        self.recorded().spans.push(span);
    }

    fn recorded(&self) -> std::sync::MutexGuard<'_, Recorded> {
        self.recorded.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Marks for EventTimeline {
    fn mark<T: Send + 'static>(
        &self,
        stream: &Stream,
        name: &'static str,
        bytes: usize,
        op: impl FnOnce() -> npu::Op<T>,
    ) -> npu::Result<npu::Op<T>> {
        let ctx = stream.context();
        let (start, end) = (Event::new(ctx)?, Event::new(ctx)?);
        start.record(stream)?;
        let op = op();
        end.record(stream)?;
        self.push(stream, name, Kind::Operation { bytes, start }, end);
        Ok(op)
    }

    fn record(&self, event: &Event, stream: &Stream) -> npu::Result<()> {
        let marker = Event::new(stream.context())?;
        event.record(stream)?;
        marker.record(stream)?;
        let flow = {
            let mut recorded = self.recorded();
            recorded.flows += 1;
            let flow = recorded.flows;
            recorded.latest_record.insert(event.as_raw() as usize, flow);
            flow
        };
        self.push(stream, "record", Kind::Record { flow }, marker);
        Ok(())
    }

    fn wait(&self, stream: &Stream, event: &Event) -> npu::Result<()> {
        let marker = Event::new(stream.context())?;
        stream.wait_event(event)?;
        marker.record(stream)?;
        let flow = self
            .recorded()
            .latest_record
            .get(&(event.as_raw() as usize))
            .copied();
        // A wait for an event never recorded is satisfied at once: no arrow leads to it.
        if let Some(flow) = flow {
            self.push(stream, "wait", Kind::Wait { flow }, marker);
        }
        Ok(())
    }
}

impl EventTimeline {
    /// Waits for every recorded operation, then writes the timeline to `path`.
    pub(crate) async fn write(&self, path: &Path) -> npu::Result<()> {
        let spans = std::mem::take(&mut self.recorded().spans);
        let mut events = Vec::with_capacity(spans.len());
        let mut tracks = BTreeSet::new();
        for span in &spans {
            span.end.wait().await?;
            let end = span.end.timestamp_us()?;
            tracks.insert((span.device, span.stream));
            let (pid, tid) = (span.device, span.stream);
            let instant = |cat: &str| {
                json!({
                    "name": span.name, "cat": cat, "ph": "i", "s": "t",
                    "pid": pid, "tid": tid, "ts": end, "args": { "bytes": 0 },
                })
            };
            let flow = |ph: &str, id: u64| {
                json!({
                    "name": "event", "cat": "event", "ph": ph, "id": id.to_string(), "bp": "e",
                    "pid": pid, "tid": tid, "ts": end,
                })
            };
            match &span.kind {
                Kind::Operation { bytes, start } => {
                    let start = start.timestamp_us()?;
                    events.push(json!({
                        "name": span.name,
                        "cat": if *bytes > 0 { "copy" } else { "kernel" },
                        "ph": "X",
                        "pid": pid,
                        "tid": tid,
                        "ts": start,
                        "dur": end.saturating_sub(start),
                        "args": { "bytes": bytes },
                    }));
                }
                Kind::Record { flow: id } => events.extend([instant("event"), flow("s", *id)]),
                Kind::Wait { flow: id } => events.extend([instant("event"), flow("f", *id)]),
            }
        }
        for &(device, stream) in &tracks {
            events.push(json!({
                "name": "thread_name", "ph": "M", "pid": device, "tid": stream,
                "args": { "name": format!("stream {stream}") },
            }));
        }
        let devices: BTreeSet<u32> = tracks.iter().map(|&(d, _)| d).collect();
        for device in devices {
            events.push(json!({
                "name": "process_name", "ph": "M", "pid": device,
                "args": { "name": format!("dev {device} (events)") },
            }));
        }
        let trace: Value = json!({ "traceEvents": events, "displayTimeUnit": "ns" });
        std::fs::write(path, trace.to_string()).map_err(|err| {
            npu::Error::invalid(
                "EventTimeline::write",
                "path",
                format!("cannot write: {err}"),
            )
        })
    }
}

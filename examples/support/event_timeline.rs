//! A timeline from event timestamps, for devices without the simulator's trace (CANN).
//!
//! Every operation is bracketed by two events recorded on its stream; once the work is done,
//! their device timestamps (`aclrtEventGetTimestamp`) give the operation's start and end. The
//! file has the simulator trace's format (Chrome/Perfetto trace-event JSON, one track per
//! stream), so the same viewers read it. The start event is recorded after any event wait the
//! stream was given, so a span starts when the operation could start, as in the trace.

use std::path::Path;
use std::sync::Mutex;

use npu::Stream;
use npu::prelude::*;
use serde_json::{Value, json};

use crate::pipeline::Marks;

/// One bracketed operation.
struct Span {
    device: u32,
    stream: i32,
    name: &'static str,
    bytes: usize,
    start: Event,
    end: Event,
}

/// Records the operations of a run with events; [`EventTimeline::write`] writes the timeline.
#[derive(Default)]
pub(crate) struct EventTimeline {
    spans: Mutex<Vec<Span>>,
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
        let span = Span {
            device: ctx.device_id(),
            stream: stream.acl_id()?,
            name,
            bytes,
            start,
            end,
        };
        self.spans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(span);
        Ok(op)
    }
}

impl EventTimeline {
    /// Waits for every recorded operation, then writes the timeline to `path`.
    pub(crate) async fn write(&self, path: &Path) -> npu::Result<()> {
        let spans = std::mem::take(&mut *self.spans.lock().unwrap_or_else(|e| e.into_inner()));
        let mut events = Vec::with_capacity(spans.len());
        let mut tracks = std::collections::BTreeSet::new();
        for span in &spans {
            span.end.wait().await?;
            let (start, end) = (span.start.timestamp_us()?, span.end.timestamp_us()?);
            tracks.insert((span.device, span.stream));
            events.push(json!({
                "name": span.name,
                "cat": if span.bytes > 0 { "copy" } else { "kernel" },
                "ph": "X",
                "pid": span.device,
                "tid": span.stream,
                "ts": start,
                "dur": end.saturating_sub(start),
                "args": { "bytes": span.bytes },
            }));
        }
        for &(device, stream) in &tracks {
            events.push(json!({
                "name": "thread_name", "ph": "M", "pid": device, "tid": stream,
                "args": { "name": format!("stream {stream}") },
            }));
        }
        let devices: std::collections::BTreeSet<u32> = tracks.iter().map(|&(d, _)| d).collect();
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

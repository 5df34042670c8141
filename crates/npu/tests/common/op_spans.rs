//! What a process-wide subscriber saw of the `npu_op` spans (docs/observability.md): each
//! span's level, target and fields (at creation and recorded later), the events logged inside
//! it, whether it closed, and every event logged at WARN or ERROR on any thread.
//!
//! Process-wide because a subscriber scoped to one test can miss callsites another thread
//! registered first (tracing caches a callsite's interest). The record only grows, so a test
//! reads what came after a [`Mark`] it took, and the tests of one binary take turns.

use std::sync::{Mutex, MutexGuard, OnceLock};

use tracing::Level;
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context as LayerContext, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

#[path = "../../../npu-stream/tests/common/field_text.rs"]
mod field_text;

use field_text::FieldText;
pub(crate) use field_text::Fields;

/// One `npu_op` span.
#[derive(Debug, Clone)]
pub(crate) struct OpSpan {
    pub(crate) level: Level,
    pub(crate) target: String,
    pub(crate) fields: Fields,
    /// Every event logged inside the span (or a span within it): level, target, fields.
    pub(crate) events: Vec<(Level, String, Fields)>,
    pub(crate) closed: bool,
}

impl OpSpan {
    /// The `message` of each event logged inside the span, in order (`completed`, `failed`).
    pub(crate) fn messages(&self) -> Vec<String> {
        let message = |(.., fields): &(Level, String, Fields)| fields.get("message").cloned();
        self.events
            .iter()
            .map(|e| message(e).unwrap_or_default())
            .collect()
    }
}

/// An event logged at WARN or ERROR, on whichever thread (its fields are read in failures).
#[derive(Debug, Clone)]
#[allow(dead_code, reason = "read through Debug")]
pub(crate) struct Loud {
    pub(crate) level: Level,
    pub(crate) target: String,
    pub(crate) fields: Fields,
    pub(crate) thread: Option<String>,
}

/// Everything recorded, in the order the spans were made and the loud events logged.
#[derive(Default, Clone)]
pub(crate) struct OpSpans {
    pub(crate) spans: Vec<OpSpan>,
    pub(crate) loud: Vec<Loud>,
}

/// A place in the record: what was recorded up to it.
#[derive(Clone, Copy)]
pub(crate) struct Mark {
    spans: usize,
    loud: usize,
}

impl Mark {
    /// The record's start.
    pub(crate) const ZERO: Mark = Mark { spans: 0, loud: 0 };
}

/// Installs the recording subscriber as the process's global default (once; before any test
/// touches a device, so that it sees every callsite).
pub(crate) fn record_op_spans() {
    drop(op_spans());
}

/// The record, its subscriber installed on first use.
fn op_spans() -> MutexGuard<'static, OpSpans> {
    static SEEN: OnceLock<Mutex<OpSpans>> = OnceLock::new();
    SEEN.get_or_init(|| {
        let subscriber = tracing_subscriber::registry().with(Recorder);
        tracing::subscriber::set_global_default(subscriber).unwrap();
        Mutex::default()
    })
    .lock()
    .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Where the record ends now.
pub(crate) fn mark() -> Mark {
    let seen = op_spans();
    Mark {
        spans: seen.spans.len(),
        loud: seen.loud.len(),
    }
}

/// The spans made and the loud events logged after `mark`.
pub(crate) fn since(mark: Mark) -> OpSpans {
    let seen = op_spans();
    OpSpans {
        spans: seen.spans[mark.spans..].to_vec(),
        loud: seen.loud[mark.loud..].to_vec(),
    }
}

/// A span's index in the record, kept in its extensions.
struct Index(usize);

struct Recorder;

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Recorder {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: LayerContext<'_, S>) {
        let span = ctx.span(id).unwrap();
        if span.name() != "npu_op" {
            return;
        }
        let mut fields = Fields::new();
        attrs.record(&mut FieldText(&mut fields));
        let meta = span.metadata();
        let mut seen = op_spans();
        seen.spans.push(OpSpan {
            level: *meta.level(),
            target: meta.target().to_owned(),
            fields,
            events: Vec::new(),
            closed: false,
        });
        span.extensions_mut().insert(Index(seen.spans.len() - 1));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: LayerContext<'_, S>) {
        let span = ctx.span(id).unwrap();
        if let Some(&Index(index)) = span.extensions().get::<Index>() {
            values.record(&mut FieldText(&mut op_spans().spans[index].fields));
        }
    }

    fn on_event(&self, event: &tracing::Event<'_>, ctx: LayerContext<'_, S>) {
        let mut fields = Fields::new();
        event.record(&mut FieldText(&mut fields));
        let meta = event.metadata();
        if *meta.level() <= Level::WARN {
            op_spans().loud.push(Loud {
                level: *meta.level(),
                target: meta.target().to_owned(),
                fields: fields.clone(),
                thread: std::thread::current().name().map(str::to_owned),
            });
        }
        let op = ctx
            .event_span(event)
            .and_then(|span| span.scope().find(|s| s.name() == "npu_op"));
        if let Some(op) = op
            && let Some(&Index(index)) = op.extensions().get::<Index>()
        {
            let logged = (*meta.level(), meta.target().to_owned(), fields);
            op_spans().spans[index].events.push(logged);
        }
    }

    fn on_close(&self, id: Id, ctx: LayerContext<'_, S>) {
        let span = ctx.span(&id).unwrap();
        if let Some(&Index(index)) = span.extensions().get::<Index>() {
            op_spans().spans[index].closed = true;
        }
    }
}

//! What tracing shows of an operation: one span per operation with its stream (the ACL id, as
//! in the simulator's trace and `Debug`), device, bytes, direction or kernel name and, on
//! failure, the error; an event when it completes or fails.
//!
//! A file of its own: it installs a process-wide subscriber and injects faults.

mod common;
#[path = "common/field_text.rs"]
mod field_text;

use std::sync::{Arc, Mutex, OnceLock};

use common::*;
use field_text::{FieldText, Fields};
use npu_core::Module;
use npu_mem::{DeviceBuffer, PinnedBuffer};
use npu_sim::control;
use npu_stream::{Strategy, Stream};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context as LayerContext, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// An event as seen: its message and fields, and the fields of its `npu_op` span.
#[derive(Debug, Clone)]
struct Seen {
    fields: Fields,
    span: Fields,
}

/// Keeps each span's fields and every event inside an `npu_op` span.
struct Recorder(Arc<Mutex<Vec<Seen>>>);

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Recorder {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: LayerContext<'_, S>) {
        let mut fields = Fields::new();
        attrs.record(&mut FieldText(&mut fields));
        ctx.span(id).unwrap().extensions_mut().insert(fields);
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: LayerContext<'_, S>) {
        let span = ctx.span(id).unwrap();
        let mut ext = span.extensions_mut();
        values.record(&mut FieldText(ext.get_mut::<Fields>().unwrap()));
    }
    fn on_event(&self, event: &tracing::Event<'_>, ctx: LayerContext<'_, S>) {
        let Some(span) = ctx.event_span(event).filter(|s| s.name() == "npu_op") else {
            let mut fields = Fields::new();
            event.record(&mut FieldText(&mut fields));
            background().lock().unwrap().push(fields);
            return;
        };
        let mut fields = Fields::new();
        event.record(&mut FieldText(&mut fields));
        let span = span.extensions().get::<Fields>().unwrap().clone();
        self.0.lock().unwrap().push(Seen { fields, span });
    }
}

/// The events seen so far (the subscriber is installed on first use).
fn seen() -> Arc<Mutex<Vec<Seen>>> {
    static SEEN: OnceLock<Arc<Mutex<Vec<Seen>>>> = OnceLock::new();
    SEEN.get_or_init(|| {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let subscriber = tracing_subscriber::registry().with(Recorder(seen.clone()));
        tracing::subscriber::set_global_default(subscriber).unwrap();
        seen
    })
    .clone()
}

/// The fields of the events logged outside an operation's span (the background threads').
fn background() -> &'static Mutex<Vec<Fields>> {
    static BACKGROUND: Mutex<Vec<Fields>> = Mutex::new(Vec::new());
    &BACKGROUND
}

/// The events of operations on `stream` whose message is `message`.
fn events_of(stream: &Stream, message: &str) -> Vec<Seen> {
    let id = stream.id().to_string();
    let all = seen();
    let all = all.lock().unwrap();
    let matches = |s: &&Seen| s.span["stream"] == id && s.fields["message"] == message;
    all.iter().filter(matches).cloned().collect()
}

#[test]
fn the_stream_id_is_the_acl_id_in_spans_and_debug() {
    seen();
    let (_device, ctx) = exclusive_device0();
    let stream = stream(&ctx, Strategy::EventPoll);
    let mut acl_id = 0;
    // SAFETY: the stream is alive and `acl_id` a valid out-pointer.
    let code =
        unsafe { (ctx.runtime().api().aclrtStreamGetId.unwrap())(stream.as_raw(), &mut acl_id) };
    ctx.runtime().check("aclrtStreamGetId", code).unwrap();
    assert_eq!(stream.id(), acl_id as u64);
    assert!(format!("{stream:?}").contains(&format!("id: {acl_id}")));
    run(stream.synchronize()).unwrap();
    let done = events_of(&stream, "completed");
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(done[0].span["device"], "0");
}

#[test]
fn copies_show_direction_and_bytes_and_complete() {
    seen();
    let (_device, ctx) = exclusive_device0();
    let stream = stream(&ctx, Strategy::EventPoll);
    let host = PinnedBuffer::from_slice(&ctx, &[7u32; 256]).unwrap();
    let (host, device) = run(stream.copy_h2d(host, DeviceBuffer::new(&ctx, 256).unwrap())).unwrap();
    run(stream.copy_d2h(device, host)).unwrap();
    let done = events_of(&stream, "completed");
    let directions: Vec<&str> = done.iter().map(|s| s.span["direction"].as_str()).collect();
    assert_eq!(directions, ["h2d", "d2h"]);
    assert!(done.iter().all(|s| s.span["bytes"] == "1024"), "{done:?}");
    assert!(done.iter().all(|s| s.span["op"] == "aclrtMemcpyAsync"));
}

/// An operation polled again after it resolved (a misuse a hand-written future can make)
/// says so and logs nothing: "completed" and "failed" are each logged once, when it resolves.
#[test]
fn an_operation_polled_after_it_resolved_logs_nothing_more() {
    seen();
    let (_device, ctx) = exclusive_device0();
    let (fine, failing) = (
        stream(&ctx, Strategy::EventPoll),
        stream(&ctx, Strategy::EventPoll),
    );
    control::fail_task(failing.as_raw(), 1, 507015).unwrap();
    for s in [&fine, &failing] {
        let buffer = DeviceBuffer::<u8>::new(&ctx, 64).unwrap();
        let mut op = tokio_test::task::spawn(s.memset(buffer, 1));
        let _ = op.completion().clone().wait_blocking();
        assert!(op.poll().is_ready());
        let again = match op.poll() {
            std::task::Poll::Ready(Err(again)) => again,
            other => panic!("{other:?}"),
        };
        assert!(again.value.is_none());
        assert!(
            again.to_string().contains("polled after it resolved"),
            "{again}"
        );
    }
    assert_eq!(events_of(&fine, "completed").len(), 1);
    assert_eq!(events_of(&failing, "failed").len(), 1);
}

#[test]
fn a_failed_kernel_shows_its_name_and_the_error() {
    seen();
    let (_device, ctx) = exclusive_device0();
    let stream = stream(&ctx, Strategy::EventPoll);
    // SAFETY: npu-sim's own kernel library, built for its kernel ABI.
    let module = unsafe { Module::from_file(&ctx, npu_sim::kernel::LIBRARY_PATH) }.unwrap();
    let scale = module.function("scale_f32").unwrap();
    let x = DeviceBuffer::<f32>::new(&ctx, 64).unwrap();
    control::fail_task(stream.as_raw(), 1, 507015).unwrap();
    // SAFETY: scale_f32(float *x, uint64_t n, float alpha); x holds 64 elements.
    let launch = unsafe { stream.launch(&scale, 1, (x, 64u64, 2.0f32)) };
    let err = run(launch).unwrap_err();
    let failed = events_of(&stream, "failed");
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].span["kernel"], "scale_f32");
    assert_eq!(failed[0].span["error"], err.to_string());
    assert_eq!(failed[0].fields["error"], err.to_string());
    assert!(events_of(&stream, "completed").is_empty());
}

/// Promise (docs/observability.md): a stream the background thread completing its operations
/// finds dead is logged as `stream failed`, with its id and how many operations failed, by
/// the callback thread as by the reactor.
#[test]
fn a_dead_stream_is_logged_by_the_thread_that_fails_its_operations() {
    seen();
    let (_device, ctx) = exclusive_device0();
    for strategy in [Strategy::EventPoll, Strategy::CallbackThread] {
        let stream = stream(&ctx, strategy);
        control::hold(0).unwrap();
        let queued = stream.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
        stream.stop().unwrap();
        control::release(0).unwrap();
        assert!(
            run(queued).is_err(),
            "{strategy:?}: a stopped stream's work never runs"
        );
        let id = stream.id().to_string();
        let logged: Vec<Fields> = background()
            .lock()
            .unwrap()
            .iter()
            .filter(|fields| fields["message"] == "stream failed" && fields["stream"] == id)
            .cloned()
            .collect();
        assert_eq!(logged.len(), 1, "{strategy:?}: {logged:?}");
        assert_eq!(logged[0]["failed"], "1", "{strategy:?}");
        run(stream.abort()).unwrap();
    }
}

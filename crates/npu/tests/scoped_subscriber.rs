//! What a subscriber scoped to one thread (`tracing::subscriber::set_default`) sees of
//! npu-rs's spans and events when other threads use npu-rs too (docs/observability.md,
//! "Checking them in your tests"): tracing's interest cache, not npu-rs, decides it, and the
//! doc's recipes are checked here.
//!
//! The interest cache is process-wide, so this file holds one test, which is the first to
//! touch a device or a tracing callsite in its process: each step depends on which callsites
//! were hit before it, and in which order.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use npu::prelude::*;
use npu::stream::Strategy;
use tracing::span::{Attributes, Id};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context as LayerContext, SubscriberExt};

/// What the scoped subscriber saw: `npu_op` spans made, `failed` events, and the test's own
/// `note` events.
#[derive(Default)]
struct Seen {
    spans: AtomicUsize,
    failed: AtomicUsize,
    notes: AtomicUsize,
}

impl Seen {
    fn counts(&self) -> (usize, usize, usize) {
        (
            self.spans.load(Ordering::SeqCst),
            self.failed.load(Ordering::SeqCst),
            self.notes.load(Ordering::SeqCst),
        )
    }
}

struct Counting(Arc<Seen>);

impl<S: tracing::Subscriber> Layer<S> for Counting {
    fn on_new_span(&self, attrs: &Attributes<'_>, _: &Id, _: LayerContext<'_, S>) {
        if attrs.metadata().name() == "npu_op" {
            self.0.spans.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn on_event(&self, event: &tracing::Event<'_>, _: LayerContext<'_, S>) {
        let mut message = String::new();
        event.record(
            &mut |field: &tracing::field::Field, value: &dyn std::fmt::Debug| {
                if field.name() == "message" {
                    message = format!("{value:?}");
                }
            },
        );
        match message.as_str() {
            "failed" => self.0.failed.fetch_add(1, Ordering::SeqCst),
            "note" => self.0.notes.fetch_add(1, Ordering::SeqCst),
            _ => 0,
        };
    }
}

/// A memset awaited on a stream of `ctx`: one `npu_op` span, on the calling thread.
fn memset(ctx: &Context) {
    let s = stream(ctx, Strategy::EventPoll);
    run(s.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), 1)).unwrap();
}

/// A copy refused before submission (the lengths differ): its future logs `failed` on the
/// thread that polls it.
fn refused_copy(ctx: &Context) {
    let s = stream(ctx, Strategy::EventPoll);
    let src = PinnedBuffer::<u8>::new(ctx, 16).unwrap();
    let dst = DeviceBuffer::<u8>::new(ctx, 32).unwrap();
    assert!(run(s.copy_h2d(src, dst)).is_err(), "the lengths differ");
}

/// An event of a callsite of the test's own.
fn note() {
    tracing::debug!("note");
}

/// Runs `f` on a thread of its own, which has no subscriber.
fn elsewhere(f: impl FnOnce() + Send) {
    std::thread::scope(|scope| scope.spawn(f).join().unwrap());
}

/// While a scoped subscriber is the process's only dispatcher, a callsite first hit on
/// another thread caches "never" (tracing asks that thread's default, which is none), and
/// the scoped subscriber misses it on its own thread too. `rebuild_interest_cache` mends the
/// callsites registered so far, not one first hit on another thread afterwards; a second
/// dispatcher kept alive for as long as the scoped one (or a global default) makes tracing
/// ask every dispatcher, for the callsites registered so far and every later one.
#[test]
fn a_scoped_subscriber_sees_what_the_interest_cache_lets_it() {
    let ctx = Device::open(0).unwrap().primary_context().clone();
    let seen = Arc::new(Seen::default());
    let scoped = tracing_subscriber::registry().with(Counting(seen.clone()));
    let _scope = tracing::subscriber::set_default(scoped);

    // The span's callsite first hit on another thread: missed here.
    elsewhere(|| memset(&ctx));
    memset(&ctx);
    assert_eq!(
        seen.counts(),
        (0, 0, 0),
        "cached never, from the other thread"
    );

    // Rebuilt on this thread: the span's callsite now asks the scoped subscriber.
    tracing::callsite::rebuild_interest_cache();
    memset(&ctx);
    assert_eq!(seen.counts(), (1, 0, 0), "seen once rebuilt");

    // A callsite first hit on another thread after the rebuild: missed again.
    elsewhere(note);
    note();
    assert_eq!(
        seen.counts(),
        (1, 0, 0),
        "a later callsite is cached never again"
    );

    // A second dispatcher: registering it rebuilds every callsite's interest from both, and
    // later callsites ask both too, whichever thread hits them first.
    let _second = tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default());
    note();
    assert_eq!(seen.counts(), (1, 0, 1), "mended by the second dispatcher");
    elsewhere(|| refused_copy(&ctx));
    refused_copy(&ctx);
    assert_eq!(
        seen.counts(),
        (2, 1, 1),
        "npu-rs's `failed`, first hit elsewhere"
    );
}

//! Attacks by the tracing subscriber: a layer is user code, and npu-rs logs from the threads
//! it shares (the reactor, the reaper, the sentinel, the callback workers). A layer that
//! panics there must lose only its own event: before every log npu-rs emits was contained
//! (`npu_core::log!`), one panic on the reactor ended it, stranding the operations of every
//! other task, and a layer that panicked again while the reactor unwound aborted the process.
//!
//! This file is its own process because it installs the global subscriber.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context as TaskContext, Wake, Waker};

use common::{in_process, run, stream};
use npu_mem::DeviceBuffer;
use npu_stream::Strategy;
use tracing_subscriber::layer::SubscriberExt;

/// Panics on every event it sees on one of npu-rs's shared threads, and counts them.
struct PanicsOnSharedThreads;

static LAYER_PANICS: AtomicUsize = AtomicUsize::new(0);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for PanicsOnSharedThreads {
    fn on_event(&self, _: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let thread = std::thread::current();
        if thread.name().is_some_and(|name| name.starts_with("npu-")) {
            LAYER_PANICS.fetch_add(1, Ordering::SeqCst);
            panic!("a tracing layer that panics on {:?}", thread.name());
        }
    }
}

/// A panic payload whose own drop panics: whoever contains the panic must contain its payload.
struct PanicsWhenDropped;

impl Drop for PanicsWhenDropped {
    fn drop(&mut self) {
        panic!("a panic payload that panics when dropped");
    }
}

/// A waker whose wake panics with a payload that panics when dropped: the completer contains
/// it and then logs it, on the reactor thread, to the layer above.
struct HostileWaker;

impl Wake for HostileWaker {
    fn wake(self: Arc<Self>) {
        std::panic::panic_any(PanicsWhenDropped);
    }
}

#[test]
fn a_subscriber_that_panics_on_the_shared_threads_harms_no_operation() {
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry().with(PanicsOnSharedThreads),
    )
    .unwrap();
    let rt = in_process();
    let (victim_ctx, ctx) = (
        rt.device(0).unwrap().primary_context().clone(),
        rt.device(1).unwrap().primary_context().clone(),
    );

    // Another task's operation, queued behind a held device, watched by the same reactor.
    npu_sim::control::hold(0).unwrap();
    let victim_stream = stream(&victim_ctx, Strategy::EventPoll);
    let victim = victim_stream.memset(DeviceBuffer::<u8>::new(&victim_ctx, 64).unwrap(), 7);

    // An operation whose waker panics: the reactor contains the panic and logs it.
    npu_sim::control::hold(1).unwrap();
    let hostile_stream = stream(&ctx, Strategy::EventPoll);
    let mut hostile = hostile_stream.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
    let waker = Waker::from(Arc::new(HostileWaker));
    let polled = std::future::Future::poll(
        std::pin::Pin::new(&mut hostile),
        &mut TaskContext::from_waker(&waker),
    );
    assert!(polled.is_pending());
    npu_sim::control::release(1).unwrap();
    hostile.completion().wait_blocking().unwrap();

    // The victim's device runs only now, so the reactor completes it after it logged the
    // hostile waker's panic (and the layer panicked on that event).
    npu_sim::control::release(0).unwrap();
    let buffer = run(victim).expect("the victim's memset");
    assert_eq!(buffer.to_vec_blocking().unwrap(), [7; 64]);
    assert!(
        LAYER_PANICS.load(Ordering::SeqCst) >= 1,
        "the layer never panicked on the reactor: the attack did not run"
    );

    // The reactor still takes new work.
    let later = run(hostile_stream.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 9));
    assert_eq!(later.unwrap().to_vec_blocking().unwrap(), [9; 64]);

    // The reaper too: a release that panics is logged there, to the same layer, and the
    // releases after it still run.
    let before = LAYER_PANICS.load(Ordering::SeqCst);
    // SAFETY: neither release blocks (a panic unwinds at once; the channel is unbounded).
    unsafe { npu_core::reaper::release_later(|| panic!("a release that panics")) };
    let (tx, rx) = std::sync::mpsc::channel();
    // SAFETY: as above.
    unsafe { npu_core::reaper::release_later(move || tx.send("ran").unwrap()) };
    npu_core::reaper::flush();
    assert_eq!(rx.try_recv(), Ok("ran"));
    assert!(LAYER_PANICS.load(Ordering::SeqCst) > before);

    // The simulator logs each call that fails, and the shared threads make calls that fail by
    // design (the reactor settling an event that captured a task's failure): a layer panicking
    // on that event is inside the simulator's exported C function, where an unwind aborts the
    // process. (Found by the eighth review.)
    let before = LAYER_PANICS.load(Ordering::SeqCst);
    npu_sim::control::fail_task(hostile_stream.as_raw(), 1, 507015).unwrap();
    let failed = run(hostile_stream.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 3));
    assert_eq!(
        failed.unwrap_err().acl_code().map(|code| code.0),
        Some(507015)
    );
    assert!(
        LAYER_PANICS.load(Ordering::SeqCst) > before,
        "the layer never saw the simulator's failure on a shared thread: the attack did not run"
    );
    drop(hostile);
}

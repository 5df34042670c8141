//! Helpers shared by npu-stream's integration tests.
//!
//! Each test file is its own process, so it has its own in-process simulator; files that change
//! device-global simulator state (timing model, hold gate, lost device) keep it to themselves.

// Every test file uses a different subset of these helpers.
#![allow(dead_code, unused_imports, unreachable_pub)]

use std::future::Future;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use npu_core::{AclCode, BackendChoice, Context, Error, Runtime, ffi};
use npu_mem::DeviceBuffer;
use npu_stream::{DevicePoolBackend, Op, Strategy, Stream};

// The runtime helpers (and the path of npu-sim's cdylib) are npu-core's, reused as they are.
#[path = "../../../npu-core/tests/common/mod.rs"]
mod core_common;

pub(crate) use core_common::{runtimes, simulator_library};

// Shared with the facade's attack tests, which name the same types through `npu`.
#[path = "until.rs"]
mod until;

pub(crate) use until::{until, until_the_runtime_aborts};

/// Every completion strategy, so each behaviour is checked under all three.
pub const STRATEGIES: [Strategy; 3] = [
    Strategy::EventPoll,
    Strategy::CallbackThread,
    Strategy::BlockingSync,
];

/// Both device-pool backends.
const BACKENDS: [DevicePoolBackend; 2] =
    [DevicePoolBackend::RuntimePool, DevicePoolBackend::Caching];

/// Every device-pool backend under every strategy.
pub fn cases() -> impl Iterator<Item = (DevicePoolBackend, Strategy)> {
    BACKENDS
        .into_iter()
        .flat_map(|backend| STRATEGIES.map(|strategy| (backend, strategy)))
}

/// The in-process simulator, which `npu_sim::control` steers.
pub fn in_process() -> Runtime {
    Runtime::builder()
        .backend(BackendChoice::Sim)
        .build()
        .expect("in-process sim")
}

/// Device 0's primary context on the in-process simulator, with exclusive use of the device
/// for as long as the guard lives: for tests that close its hold gate or change its timing.
pub fn exclusive_device0() -> (MutexGuard<'static, ()>, Context) {
    static DEVICE: Mutex<()> = Mutex::new(());
    let guard = DEVICE.lock().unwrap_or_else(|e| e.into_inner());
    let device = in_process().device(0).expect("device 0");
    (guard, device.primary_context().clone())
}

/// A stream of `context` using `strategy`.
pub fn stream(context: &Context, strategy: Strategy) -> Stream {
    Stream::builder(context)
        .strategy(strategy)
        .build()
        .expect("stream")
}

/// A hang detector, not a synchronisation: every awaited operation must finish long before.
pub const HANG: Duration = Duration::from_secs(60);

/// Runs `future` to completion on a current-thread Tokio runtime, failing the test if it has
/// not finished after [`HANG`].
pub fn run<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("tokio runtime")
        .block_on(async {
            tokio::time::timeout(HANG, future)
                .await
                .expect("the test hung")
        })
}

/// Deterministic, seed-dependent bytes (SplitMix64), so every copy moves distinctive data.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = Rng(seed);
    (0..len).map(|_| rng.next() as u8).collect()
}

/// SplitMix64: a tiny seeded generator for reproducible random choices in tests.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The ACL code of an error, failing the test if it is not an ACL error.
pub fn code(err: &Error) -> i32 {
    match err.acl_code() {
        Some(AclCode(code)) => code,
        None => panic!("expected an ACL error, got {err:?}"),
    }
}

/// The `(api, argument)` of an `InvalidArgument` error, failing the test for anything else.
pub fn invalid(err: &Error) -> (&'static str, &'static str) {
    match err {
        Error::InvalidArgument { api, argument, .. } => (api, argument),
        other => panic!("expected an invalid-argument error, got {other:?}"),
    }
}

/// Submits 64-byte memsets of `value` to `stream` until one is refused at once (an abort has
/// begun: it refuses submissions until it ends); returns that one and the ones queued before
/// it, which the abort discards with the rest.
pub fn memsets_until_refused(
    stream: &Stream,
    value: u8,
) -> (Op<DeviceBuffer<u8>>, Vec<Op<DeviceBuffer<u8>>>) {
    let mut behind = Vec::new();
    loop {
        let buffer = DeviceBuffer::<u8>::new(stream.context(), 64).unwrap();
        let memset = stream.memset(buffer, value);
        if memset.is_complete() {
            return (memset, behind);
        }
        behind.push(memset);
        std::thread::yield_now();
    }
}

/// A Tokio runtime with one worker and a blocking pool of `threads` threads.
pub fn blocking_pool(threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(threads)
        .enable_time()
        .build()
        .expect("tokio runtime")
}

/// Wakes a task by holding the waking thread until the test lets it go.
struct HoldsItsWaker {
    entered: Mutex<std::sync::mpsc::Sender<()>>,
    go: Mutex<std::sync::mpsc::Receiver<()>>,
}

impl std::task::Wake for HoldsItsWaker {
    fn wake(self: std::sync::Arc<Self>) {
        let _ = self.entered.lock().unwrap().send(());
        let _ = self.go.lock().unwrap().recv_timeout(HANG);
    }
}

/// The reactor thread, held inside a waker of the test's own until this is dropped: while it
/// lives, nothing the reactor watches (or is handed) completes, and the reactor looks at
/// nothing. Its next pass starts after the drop.
pub struct ReactorHeld {
    go: std::sync::mpsc::Sender<()>,
}

impl Drop for ReactorHeld {
    fn drop(&mut self) {
        let _ = self.go.send(());
    }
}

/// Holds the reactor ([`ReactorHeld`]) with an `EventPoll` memset on `context`, whose device's
/// hold gate it closes briefly (so that the memset cannot complete before the waker is set):
/// the caller must have that device to itself.
pub fn hold_the_reactor(context: &Context) -> ReactorHeld {
    use std::sync::mpsc::channel;
    let (entered_tx, entered) = channel();
    let (go, go_rx) = channel();
    let waker = std::task::Waker::from(std::sync::Arc::new(HoldsItsWaker {
        entered: Mutex::new(entered_tx),
        go: Mutex::new(go_rx),
    }));
    let device = context.device().id() as i32;
    let s = stream(context, Strategy::EventPoll);
    npu_sim::control::hold(device).unwrap();
    let mut memset = Box::pin(s.memset(DeviceBuffer::<u8>::new(context, 64).unwrap(), 0));
    let polled = memset
        .as_mut()
        .poll(&mut std::task::Context::from_waker(&waker));
    assert!(polled.is_pending(), "the device is held");
    npu_sim::control::release(device).unwrap();
    entered
        .recv_timeout(HANG)
        .expect("the reactor completes the memset");
    ReactorHeld { go }
}

/// Checks that a memset on `healthy` completes under every strategy while something else
/// (another device's running kernel, say) is stuck: each is bounded by [`HANG`], and on a hang
/// `unstick` runs before the test fails with `stuck_on` (so the process can wind down).
pub fn every_strategy_completes_on(healthy: &Context, stuck_on: &str, unstick: impl Fn()) {
    for strategy in STRATEGIES {
        let s = stream(healthy, strategy);
        let (tx, rx) = std::sync::mpsc::channel();
        let healthy = healthy.clone();
        std::thread::spawn(move || {
            let done = run(s.memset(DeviceBuffer::<u8>::new(&healthy, 64).unwrap(), 7));
            let _ = tx.send(done.map(|buffer| buffer.to_vec_blocking().unwrap()));
        });
        let done = rx.recv_timeout(HANG);
        if done.is_err() {
            unstick();
        }
        let filled = done
            .unwrap_or_else(|_| panic!("{strategy:?}: the healthy device waited for {stuck_on}"))
            .unwrap_or_else(|err| panic!("{strategy:?}: {err}"));
        assert_eq!(filled, [7; 64], "{strategy:?}");
    }
}

//! What the attack tests share: the strategies they run under, the device lock, and the
//! bounds that turn a hang into a failed test.
#![allow(
    dead_code,
    unused_imports,
    reason = "each test binary uses its own part"
)]

use std::future::Future;
use std::io::Write;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once};
use std::task::Poll;
use std::time::Duration;

use npu::prelude::*;
use npu::sim;
use npu::stream::{Completion, Strategy};
use npu::{Error, Stream, ffi};

// Shared with npu-stream's abort tests, which name the same types through their crates.
#[path = "../../../npu-stream/tests/common/until.rs"]
mod until;

pub(crate) use until::{until, until_the_runtime_aborts};

// The gate npu-stream's kernel tests hold their running kernel at; the gated fill waits at it.
mod blocking_waits;
mod drained;
mod every_callsite;
#[path = "../../../npu-stream/tests/common/gate.rs"]
mod gate;
mod gated_fill;
mod kernels;
mod op_spans;
mod own_runtime;
mod pool_memory;
mod reaper_held;
mod serving_model;
mod turns;

pub(crate) use blocking_waits::{Heard, WaitsWhenWoken, blocking_waits, refused_not_waited};
pub(crate) use drained::{
    drain_a_failing_memset, drained_without_an_event, in_a_fresh_context, last_task_id,
    synchronize_reports_the_drained_fault,
};
pub(crate) use every_callsite::see_every_callsite;
pub(crate) use gate::{set_gate, wait_gate};
pub(crate) use gated_fill::{RETURNED, a_held_fill_and_behind_it, gated_fill};
pub(crate) use kernels::{fill_args, fill_kernel, in_process};
pub(crate) use op_spans::{Fields, Mark, OpSpan, OpSpans, mark, record_op_spans, since};
pub(crate) use own_runtime::{
    CdylibControls, CdylibDeviceStats, FinalisationHeld, OwnRuntime, hold_finalisation,
    let_finalisation_go, until_finalising,
};
pub(crate) use pool_memory::{
    device_pool, devices_of, fails_with_memory_error, fails_with_the_memory_error, fill_the_device,
    inject, pool_holding_the_device, settled, uce_ranges,
};
pub(crate) use reaper_held::{ReaperHeld, hold_the_reaper};
pub(crate) use serving_model::{BLOCK, Model, N};
pub(crate) use turns::Turns;

/// Every completion strategy: each attack involving a stream runs under all three.
pub(crate) const STRATEGIES: [Strategy; 3] = [
    Strategy::EventPoll,
    Strategy::CallbackThread,
    Strategy::BlockingSync,
];

/// A hang detector, not a synchronisation: everything awaited finishes long before.
pub(crate) const HANG: Duration = Duration::from_secs(30);

/// Devices 0 and 1 to this test alone: the hold gate, the stream limit and the live counters
/// are the simulator's, shared by every test of this process. `devices`, when given, is how
/// many devices the simulator is configured with (by the process's first call).
pub(crate) fn exclusive(devices: Option<u32>) -> (MutexGuard<'static, ()>, Context, Context) {
    static DEVICES: Mutex<()> = Mutex::new(());
    static CONFIG: Once = Once::new();
    let guard = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(devices) = devices {
        CONFIG.call_once(|| {
            sim::SimConfig::default()
                .devices(devices)
                .install()
                .unwrap()
        });
    }
    let d0 = Device::open(0).unwrap().primary_context().clone();
    let d1 = Device::open(1).unwrap().primary_context().clone();
    (guard, d0, d1)
}

pub(crate) fn stream(ctx: &Context, strategy: Strategy) -> Stream {
    Stream::builder(ctx).strategy(strategy).build().unwrap()
}

/// Every hardware event of `ctx`'s device taken by user events (kept by the caller), so that
/// the next completion event a context's pool must create is refused (207007).
pub(crate) fn take_every_event(ctx: &Context) -> Vec<Event> {
    let mut events = Vec::new();
    while let Ok(event) = Event::new(ctx) {
        events.push(event);
        assert!(
            events.len() <= 1 << 17,
            "the device never ran out of events"
        );
    }
    events
}

/// A memset of 64 bytes to `value` on `s` resolves with its own bytes (`what` names the case
/// in a failure).
pub(crate) fn a_memset_writes(ctx: &Context, s: &Stream, value: u8, what: &str) {
    let next = run(s.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), value));
    let next = next.unwrap_or_else(|err| panic!("{what}: {err}"));
    assert_eq!(next.to_vec_blocking().unwrap(), [value; 64], "{what}");
}

/// `aclrtDeviceTaskAbort(device, timeout_ms)` of `ctx`'s device through the raw API, as a
/// program calls it (npu-rs never does): its code.
pub(crate) fn device_task_abort(ctx: &Context, timeout_ms: u32) -> npu::error::AclCode {
    ctx.bind().unwrap();
    let abort = ctx.runtime().api().aclrtDeviceTaskAbort;
    let abort = abort.expect("npu-sim exports aclrtDeviceTaskAbort");
    // SAFETY: a plain call on a device this test opened, with a bounded timeout.
    npu::error::AclCode(unsafe { abort(ctx.device_id() as i32, timeout_ms) })
}

/// Registers (`Some`) or removes (`None`) a device task abort callback named `name` beside
/// npu-rs's own, through the raw API.
pub(crate) fn set_device_task_abort_callback(
    ctx: &Context,
    name: &std::ffi::CStr,
    callback: ffi::aclrtDeviceTaskAbortCallback,
) {
    let set = ctx.runtime().api().aclrtSetDeviceTaskAbortCallback;
    let set = set.expect("npu-sim exports aclrtSetDeviceTaskAbortCallback");
    // SAFETY: the name is NUL-terminated; the callback (a plain function) ignores `args`.
    let code = unsafe { set(name.as_ptr(), callback, std::ptr::null_mut()) };
    assert_eq!(code, 0, "{name:?}");
}

/// `aclrtDeviceTaskAbort` of `ctx`'s device while another registrant's PRE callback refuses
/// it (answers 1): its code, `ACL_ERROR_RT_TASK_ABORT_STOP` on npu-sim. npu-rs's own callback
/// has marked the streams' work at PRE by then, and no POST follows.
pub(crate) fn refused_device_task_abort(ctx: &Context, timeout_ms: u32) -> npu::error::AclCode {
    unsafe extern "C" fn refuse(
        _: i32,
        _: ffi::aclrtDeviceTaskAbortStage,
        _: u32,
        _: *mut std::ffi::c_void,
    ) -> i32 {
        1
    }
    set_device_task_abort_callback(ctx, c"refuses", Some(refuse));
    let refused = device_task_abort(ctx, timeout_ms);
    set_device_task_abort_callback(ctx, c"refuses", None);
    refused
}

/// Runs `future` on a current-thread Tokio runtime, failing the test if it hangs.
pub(crate) fn run<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(async {
            tokio::time::timeout(HANG, future)
                .await
                .expect("the attack hung")
        })
}

/// Waits (bounded, as [`run`]) until every one of `done` has completed successfully.
pub(crate) fn all_completed(done: &[Completion]) {
    run(async {
        for op in done {
            op.wait().await.unwrap();
        }
    });
}

/// Waits (bounded) until `done` holds, flushing the deferred releases between looks: releases
/// after held or faulted work run on the reaper once the device is done, which a test cannot
/// await outside a pool (a pool's blocks can be awaited with its `settled()`).
pub(crate) fn until_released(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + HANG;
    loop {
        sim::flush_releases();
        if done() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never settled: {what}"
        );
        std::thread::yield_now();
    }
}

/// Whether no count in `now` is above its `baseline`.
///
/// Tests that count the simulator's live objects compare this way, not for equality: what an
/// earlier test dropped may still be on its way out when a later test takes its baseline (a
/// stream is destroyed once its last completion has reached the reaper, which can be after
/// the test that dropped it ended), so the counts may fall below the baseline, while the
/// device lock keeps every other test from adding to them.
pub(crate) fn within<const N: usize>(now: [u64; N], baseline: [u64; N]) -> bool {
    now.iter()
        .zip(&baseline)
        .all(|(now, baseline)| now <= baseline)
}

thread_local! {
    /// What a thread keeps of npu-rs until it exits: a user's per-thread state.
    static KEPT: std::cell::RefCell<Vec<Box<dyn std::any::Any>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Touches this thread's keeping place, so that it is destroyed after every thread-local
/// npu-rs and its dependencies register later, at their first use.
pub(crate) fn touch_the_keeping_place() {
    KEPT.with(|kept| kept.borrow_mut().clear());
}

/// Keeps `values` in this thread's keeping place until the thread exits.
pub(crate) fn keep_until_the_thread_exits(values: Vec<Box<dyn std::any::Any>>) {
    KEPT.with(|kept| kept.borrow_mut().extend(values));
}

/// A thread that touches its keeping place first, runs `keep` and keeps what it returns
/// there until it exits.
pub(crate) fn keep_on_a_thread_until_it_exits(
    keep: impl FnOnce() -> Vec<Box<dyn std::any::Any>> + Send + 'static,
) {
    let thread = std::thread::spawn(move || {
        touch_the_keeping_place();
        keep_until_the_thread_exits(keep());
    });
    watchdog("the keeping thread exits", || thread.join().unwrap());
}

/// User state whose drop submits a memset to its stream and drops the operation.
pub(crate) struct SubmitsWhenDropped(pub(crate) Stream);

impl Drop for SubmitsWhenDropped {
    fn drop(&mut self) {
        let ctx = self.0.context().clone();
        drop(self.0.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 2));
    }
}

/// A small deterministic generator (xorshift), so that a run's random choices (and a failing
/// seed) can be replayed.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `0..n`.
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A current-thread runtime whose clock starts paused, as `#[tokio::test(start_paused = true)]`
/// builds it.
pub(crate) fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
}

/// npu-sim's cdylib, built beside the test binary: a second AscendCL runtime, a simulator loaded
/// as a library (which the in-process controls do not reach, and whose handles every check of
/// "the same runtime" must refuse).
pub(crate) fn dlopened_simulator() -> npu::Runtime {
    let exe = std::env::current_exe().unwrap();
    let library = exe.parent().unwrap().join("libascendcl.so");
    // SAFETY: npu-sim's build of libascendcl.so, an AscendCL runtime.
    unsafe { npu::Runtime::builder().library(library) }
        .build()
        .unwrap()
}

/// Aborts the process with `what` if `body` has not returned after [`HANG`]: for bodies that
/// block a thread (a blocking wait, a drop) and so cannot be bounded by a Tokio timeout.
pub(crate) fn watchdog<R>(what: &str, body: impl FnOnce() -> R) -> R {
    let done = Arc::new(AtomicBool::new(false));
    let flag = done.clone();
    let what = what.to_string();
    let dog = std::thread::spawn(move || {
        let deadline = std::time::Instant::now() + HANG;
        while !flag.load(Ordering::Acquire) {
            if std::time::Instant::now() > deadline {
                // Straight to the process's stderr: the harness's capture dies with us.
                let _ = writeln!(std::io::stderr(), "hung: {what}");
                std::process::abort();
            }
            std::thread::park_timeout(Duration::from_millis(10));
        }
    });
    let result = body();
    done.store(true, Ordering::Release);
    dog.thread().unpark();
    dog.join().unwrap();
    result
}

/// Polls `future` once with a waker that does nothing: enough to make it submit its work.
pub(crate) fn polled_once<F: Future>(future: Pin<&mut F>) -> Poll<F::Output> {
    future.poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
}

/// The `(api, argument)` of an invalid-argument error, whose `Display` must name the API.
pub(crate) fn invalid(err: &Error) -> (&'static str, &'static str) {
    match err {
        Error::InvalidArgument { api, argument, .. } => {
            let shown = err.to_string();
            assert!(shown.starts_with(api), "the message names {api}: {shown}");
            assert!(
                shown.contains(argument),
                "the message names `{argument}`: {shown}"
            );
            (api, argument)
        }
        other => panic!("expected an invalid-argument error, got {other:?}"),
    }
}

/// Live device allocations of `ctx`'s device once every deferred release has run.
pub(crate) fn live_allocations(ctx: &Context) -> u64 {
    sim::flush_releases();
    sim::device_stats(&ctx.device()).unwrap().live_allocations
}

/// The live device allocations of `ctx`'s device and the live pinned host allocations, after
/// the releases deferred so far; compare them with [`within`].
pub(crate) fn live_memory(ctx: &Context) -> [u64; 2] {
    let device = live_allocations(ctx);
    [device, sim::host_stats().unwrap().pinned_allocations]
}

/// The counts [`live_objects`] returns.
pub(crate) type LiveObjects = [u64; 6];

/// What the simulator holds for `ctx`'s device and the host, after the releases deferred so
/// far: live device allocations, pinned allocations, events, streams, host registrations and
/// contexts of the device (the primary one and the explicit ones), in that order (the first
/// two are [`live_memory`]'s); compare them with [`within`].
pub(crate) fn live_objects(ctx: &Context) -> LiveObjects {
    let [device_memory, pinned] = live_memory(ctx);
    let device = sim::device_stats(&ctx.device()).unwrap();
    let host = sim::host_stats().unwrap();
    [
        device_memory,
        pinned,
        device.live_events,
        device.live_streams,
        host.registrations,
        device.live_contexts,
    ]
}

/// Runs this test binary's test `test` alone in a child process, with the environment
/// variable `env` set to `case` (the child test reads it to pick its case, and does nothing
/// without it), and checks it printed `CHILD OK` and exited successfully within [`HANG`].
pub(crate) fn in_child_test(test: &str, env: &str, case: &str) -> String {
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(env, case)
        .stdout(std::process::Stdio::piped());
    child_succeeded(command.spawn().unwrap(), HANG, case)
}

/// Waits for `child` (a run of this file's child test) at most `bound`, kills it and fails
/// naming `what` past that, and returns its output once it has reported success.
pub(crate) fn child_succeeded(
    mut child: std::process::Child,
    bound: Duration,
    what: &str,
) -> String {
    // Read as it comes: a child that writes more than a pipe holds would otherwise block on
    // the write and be taken for hung.
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut out);
        out
    });
    let deadline = std::time::Instant::now() + bound;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            // Reaped, so that no zombie outlives the failure.
            let _ = child.wait();
            panic!("{what} hung in the child process");
        }
        std::thread::park_timeout(Duration::from_millis(20));
    };
    let out = reader.join().unwrap();
    assert!(
        status.success() && out.contains("CHILD OK"),
        "{status}: {out}"
    );
    out
}

/// Forks; the child runs `body` (bounded by an alarm) and `_exit`s with its outcome; the
/// parent waits for it and returns whether it succeeded, and its raw status.
pub(crate) fn fork_and_check(body: impl FnOnce()) -> (bool, i32) {
    // SAFETY: the child only runs npu-rs code, under an alarm, and ends with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: an alarm turns a hang of the child into its death by SIGALRM.
        unsafe { libc::alarm(10) };
        let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body));
        // SAFETY: ends the child at once, running no destructor of the parent's state.
        unsafe { libc::_exit(if checked.is_ok() { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: `pid` is our child; `status` a valid out-pointer.
    watchdog("the forked child", || unsafe {
        libc::waitpid(pid, &mut status, 0)
    });
    (
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        status,
    )
}

/// Checks that `err` is the refusal of a forked child.
pub(crate) fn assert_forked(err: &Error) {
    assert!(
        matches!(err, Error::Forked { .. }),
        "expected Forked: {err:?}"
    );
}

//! Systematic enumeration of fault points: one representative two-stream pipeline (a pinned
//! pool block, an upload, an event one stream records and the other waits on, the shipped
//! `scale_f32` and `vector_add_f32` kernels, a download, a `DevicePool` block of either
//! backend, a staged copy, `timed`, the conveniences `upload` / `download`, `synchronize`),
//! and a fault injected at every position of it in turn, under every strategy:
//!
//! - `sim::fail_task` at every task of each stream, with a kernel trap (507015) and a DMA fault
//!   (507013);
//! - `sim::fail_next_alloc` / `sim::fail_next_host_alloc` before every allocating call;
//! - `sim::lose` before every step, on a device of its own (loss is final).
//!
//! After each case: every future resolved (a watchdog turns a hang into a failure), the failed
//! operation reported the fault and handed its buffers back, the rest of the pipeline behaved as
//! the stream's `FailureMode::Continue` promises, `synchronize` reported the sticky failure
//! once, the next pipeline on the same streams produced the right data, and every device,
//! host and pool counter came back to its baseline.

mod common;
use common::*;

use std::sync::Arc;

use npu::error::AclCode;
use npu::memory::{DevicePoolBackend, PooledDeviceBuffer};
use npu::prelude::*;
use npu::sim;
use npu::stream::Strategy;
use npu::{Error, Stream};

/// Devices the simulator is configured with: 0 and 1 for the task and allocation faults,
/// the rest lost one per loss point.
const DEVICES: u32 = 64;
/// Elements of every buffer of the pipeline.
const N: usize = 256;
/// The codes injected: an AI Core trap and a DMA fault.
const CODES: [AclCode; 2] = [AclCode(507015), AclCode(507013)];
const BACKENDS: [DevicePoolBackend; 2] =
    [DevicePoolBackend::Caching, DevicePoolBackend::RuntimePool];

/// The steps of the pipeline, in order; the hook runs before each.
const STEPS: [&str; 15] = [
    "PinnedPool::alloc",
    "DeviceBuffer::new",
    "copy_h2d (a)",
    "Event::record (a)",
    "wait_event (b)",
    "launch scale_f32 (b)",
    "DevicePool::alloc (b)",
    "launch vector_add_f32 (b)",
    "copy_d2h (b)",
    "copy_to_vec_staged (b)",
    "timed memset (b)",
    "upload (a)",
    "download (a)",
    "synchronize (a)",
    "synchronize (b)",
];

fn input() -> Vec<f32> {
    (0..N).map(|i| i as f32).collect()
}

/// What one run of the pipeline saw.
#[derive(Debug, Default)]
struct Report {
    /// Steps that failed: (step, stream, error).
    failed: Vec<(usize, char, Error)>,
    /// Steps not run because an earlier allocation failed and left them nothing to work on.
    skipped: Vec<usize>,
    /// Steps whose result held the wrong data, checked only while no step has failed or been
    /// skipped (a failure upstream leaves the data undefined).
    wrong: Vec<usize>,
    /// The two streams' `synchronize` results, `a` then `b`.
    sync: Vec<Result<(), Error>>,
}

impl Report {
    fn fail(&mut self, step: usize, stream: char, error: Error) {
        self.failed.push((step, stream, error));
    }

    /// Steps skipped only for want of what a failed allocating step (which has no buffer to
    /// hand back) would have made.
    fn assert_skips_follow_failures(&self, what: &str) {
        let mut allowed = Vec::new();
        for (step, ..) in &self.failed {
            allowed.extend_from_slice(match step {
                0 => &[2, 3, 4, 8][..],
                1 => &[2, 3, 4, 5, 7, 9],
                6 => &[7, 8, 10],
                11 => &[12],
                _ => &[],
            });
        }
        for step in &self.skipped {
            assert!(
                allowed.contains(step),
                "{what}: {} skipped: {self:#?}",
                STEPS[*step]
            );
        }
    }

    fn wrong(&mut self, step: usize) {
        if self.failed.is_empty() && self.skipped.is_empty() {
            self.wrong.push(step);
        }
    }

    fn clean(&self) -> bool {
        self.failed.is_empty()
            && self.skipped.is_empty()
            && self.wrong.is_empty()
            && self.sync.iter().all(Result::is_ok)
    }
}

/// The streams, pools and kernels of one case.
struct Rig {
    ctx: Context,
    a: Stream,
    b: Stream,
    pinned: PinnedPool,
    pool: DevicePool,
    scale: Function,
    add: Function,
}

impl Rig {
    fn new(
        ctx: &Context,
        strategy: Strategy,
        backend: DevicePoolBackend,
        kernels: &Kernels,
    ) -> Rig {
        Rig {
            ctx: ctx.clone(),
            a: stream(ctx, strategy),
            b: stream(ctx, strategy),
            pinned: PinnedPool::new(ctx),
            pool: DevicePool::builder(ctx).backend(backend).build().unwrap(),
            scale: kernels.scale.clone(),
            add: kernels.add.clone(),
        }
    }

    fn stream(&self, which: char) -> &Stream {
        if which == 'a' { &self.a } else { &self.b }
    }

    /// The pools hold nothing in use, awaiting an operation, or waiting.
    fn assert_pools_idle(&self, what: &str) {
        until_released(what, || {
            let (pinned, device) = (self.pinned.stats(), self.pool.stats().cache);
            [pinned, device]
                .iter()
                .all(|s| s.allocated == 0 && s.awaiting_blocks == 0 && s.waiters == 0)
        });
    }
}

/// The shipped kernels, loaded once per context (before the baseline is taken).
struct Kernels {
    _module: Module,
    scale: Function,
    add: Function,
}

fn kernels(ctx: &Context) -> Kernels {
    // SAFETY: npu-sim's shipped kernel library, built for its kernel ABI.
    let module = unsafe { Module::from_file(ctx, sim::kernel::LIBRARY_PATH) }.unwrap();
    Kernels {
        scale: module.function(sim::kernel::SCALE_F32).unwrap(),
        add: module.function(sim::kernel::VECTOR_ADD_F32).unwrap(),
        _module: module,
    }
}

/// The live counters a case must give back.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
struct Counters {
    allocations: u64,
    events: u64,
    streams: u64,
    pinned: u64,
}

fn counters(ctx: &Context) -> Counters {
    let device = sim::device_stats(&ctx.device()).unwrap();
    Counters {
        allocations: device.live_allocations,
        events: device.live_events,
        streams: device.live_streams,
        pinned: sim::host_stats().unwrap().pinned_allocations,
    }
}

impl Counters {
    fn counts(self) -> [u64; 4] {
        [self.allocations, self.events, self.streams, self.pinned]
    }
}

fn assert_back_to(ctx: &Context, baseline: Counters, what: &str) {
    let mut last = baseline;
    let settled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        until_released(what, || {
            last = counters(ctx);
            within(last.counts(), baseline.counts())
        })
    }));
    assert!(
        settled.is_ok(),
        "{what}: {last:?}, not the baseline {baseline:?}"
    );
}

/// Runs the pipeline once on `rig`, calling `hook(step)` before each step; a failed step hands
/// its buffers back and the pipeline goes on with them.
async fn pipeline(rig: &Rig, hook: &mut dyn FnMut(usize)) -> Report {
    let mut r = Report::default();
    let data = input();
    let ctx = &rig.ctx;

    hook(0);
    let host = match rig.pinned.alloc::<f32>(N).await {
        Ok(mut host) => {
            host.copy_from_slice(&data);
            Some(host)
        }
        Err(e) => {
            r.fail(0, 'a', e);
            None
        }
    };
    hook(1);
    let x = match DeviceBuffer::<f32>::new(ctx, N) {
        Ok(x) => Some(x),
        Err(e) => {
            r.fail(1, 'a', e);
            None
        }
    };
    hook(2);
    let (host, x) = match (host, x) {
        (Some(host), Some(x)) => {
            let copy = rig.a.copy_h2d(host, x);
            // The record and the wait are queued behind the copy before it is awaited.
            hook(3);
            let event = Event::new(ctx).and_then(|event| event.record(&rig.a).map(|()| event));
            hook(4);
            match event {
                Ok(event) => {
                    if let Err(e) = rig.b.wait_event(&event) {
                        r.fail(4, 'b', e);
                    }
                }
                Err(e) => {
                    r.fail(3, 'a', e);
                    r.skipped.push(4);
                }
            }
            match copy.await {
                Ok((host, x)) => (Some(host), Some(x)),
                Err(e) => {
                    let (e, value) = e.into_parts();
                    r.fail(2, 'a', e);
                    let (host, x) = value.expect("a failed copy_h2d hands back its buffers");
                    (Some(host), Some(x))
                }
            }
        }
        (host, x) => {
            r.skipped.extend([2, 3, 4]);
            (host, x)
        }
    };

    hook(5);
    let x = match x {
        // SAFETY: scale_f32 takes {float *x, uint64_t n, float alpha}; x holds N f32.
        Some(x) => match unsafe { rig.b.launch(&rig.scale, 4, (x, N as u64, 2.0f32)) }.await {
            Ok((x, ..)) => Some(x),
            Err(e) => {
                let (e, value) = e.into_parts();
                r.fail(5, 'b', e);
                Some(value.expect("a failed launch hands back its arguments").0)
            }
        },
        None => {
            r.skipped.push(5);
            None
        }
    };

    hook(6);
    let y: Option<PooledDeviceBuffer<f32>> = match rig.pool.alloc::<f32>(&rig.b, N).await {
        Ok(y) => Some(y),
        Err(e) => {
            r.fail(6, 'b', e);
            None
        }
    };

    hook(7);
    let (x, y) = match (x, y) {
        (Some(x), Some(y)) => {
            let x = Arc::new(x);
            // SAFETY: vector_add_f32 takes {const float *a, const float *b, float *c,
            // uint64_t n}; all three hold N f32.
            let launch = unsafe {
                rig.b
                    .launch(&rig.add, 4, (x.clone(), x.clone(), y, N as u64))
            };
            let y = match launch.await {
                Ok((_, _, y, _)) => y,
                Err(e) => {
                    let (e, value) = e.into_parts();
                    r.fail(7, 'b', e);
                    value.expect("a failed launch hands back its arguments").2
                }
            };
            let x = Arc::try_unwrap(x).expect("a completed launch gives its Arc clones back");
            (Some(x), Some(y))
        }
        (x, y) => {
            r.skipped.push(7);
            (x, y)
        }
    };

    hook(8);
    let (y, host) = match (y, host) {
        (Some(y), Some(host)) => match rig.b.copy_d2h(y, host).await {
            Ok((y, host)) => {
                let expected: Vec<f32> = data.iter().map(|v| v * 4.0).collect();
                if host[..] != expected[..] {
                    r.wrong(8);
                }
                (Some(y), Some(host))
            }
            Err(e) => {
                let (e, value) = e.into_parts();
                r.fail(8, 'b', e);
                let (y, host) = value.expect("a failed copy_d2h hands back its buffers");
                (Some(y), Some(host))
            }
        },
        (y, host) => {
            r.skipped.push(8);
            (y, host)
        }
    };

    // `host` is kept to the end, so the staged copy's block is a new one of the pool.
    hook(9);
    let x = match x {
        Some(x) => match rig.b.copy_to_vec_staged(&rig.pinned, x).await {
            Ok((x, got)) => {
                let expected: Vec<f32> = data.iter().map(|v| v * 2.0).collect();
                if got != expected {
                    r.wrong(9);
                }
                Some(x)
            }
            Err(e) => {
                let (e, value) = e.into_parts();
                r.fail(9, 'b', e);
                value
            }
        },
        None => {
            r.skipped.push(9);
            None
        }
    };
    if x.is_none() {
        // Only an allocation failure may lose it, and then no staged copy ran.
        assert!(r.skipped.contains(&9) || r.failed.iter().any(|f| f.0 == 9));
    }

    hook(10);
    match y {
        Some(y) => match rig.b.timed(|s| s.memset(y, 0)).await {
            Ok((_y, _elapsed)) => {}
            Err(e) => {
                let (e, value) = e.into_parts();
                // Creating or recording the timing events fails before `submit` runs, and then
                // there is no value (as `Stream::timed` documents): only the loss does that here.
                assert!(
                    value.is_some() || e.is_device_lost(),
                    "a failed timed operation hands back its value: {e}"
                );
                r.fail(10, 'b', e);
            }
        },
        None => r.skipped.push(10),
    }

    hook(11);
    let up = match rig.a.upload(&data).await {
        Ok(up) => Some(up),
        Err(e) => {
            r.fail(11, 'a', e);
            None
        }
    };
    hook(12);
    match up {
        Some(up) => match rig.a.download(up).await {
            Ok(got) => {
                if got != data {
                    r.wrong(12);
                }
            }
            Err(e) => {
                let (e, value) = e.into_parts();
                r.fail(12, 'a', e);
                assert!(value.is_some(), "a failed download hands back its source");
            }
        },
        None => r.skipped.push(12),
    }
    drop((x, host));

    hook(13);
    r.sync
        .push(rig.a.synchronize().await.map_err(|e| e.into_error()));
    hook(14);
    r.sync
        .push(rig.b.synchronize().await.map_err(|e| e.into_error()));
    r
}

fn no_hook() -> impl FnMut(usize) {
    |_| {}
}

/// Runs a pipeline on `rig` that must see nothing wrong (the one after a fault case).
fn assert_clean_run(rig: &Rig, what: &str) {
    let report = run(pipeline(rig, &mut no_hook()));
    assert!(report.clean(), "{what}: the next pipeline: {report:#?}");
}

/// The promise attacked: a task fault at any position of either stream, under every strategy
/// and both pool backends, fails exactly the operation the task belongs to (which hands its
/// buffers back), leaves the rest of the pipeline running as
/// `FailureMode::Continue` promises, is reported once by that stream's `synchronize` and never
/// by the other's, lets the next pipeline on the same streams produce the right data, and
/// leaks nothing.
#[test]
fn a_task_fault_at_every_position_fails_its_operation_and_nothing_else() {
    let (_guard, ctx, _) = exclusive(Some(DEVICES));
    let kernels = kernels(&ctx);
    let mut points = 0;
    for strategy in STRATEGIES {
        for (round, backend) in BACKENDS.into_iter().enumerate() {
            for which in ['a', 'b'] {
                for nth in 1.. {
                    // Each code at every point would double the runtime; alternating them
                    // covers both at every point across the two backends.
                    let code = CODES[(nth as usize + round) % 2];
                    let what =
                        format!("{strategy:?} {backend:?} stream {which} task {nth} {code:?}");
                    let baseline = counters(&ctx);
                    let rig = Rig::new(&ctx, strategy, backend, &kernels);
                    sim::fail_task(rig.stream(which), nth, code).unwrap();
                    let report = run(pipeline(&rig, &mut no_hook()));
                    let other = if which == 'a' { 1 } else { 0 };
                    let own = 1 - other;
                    // The runtime's sticky error of the stream, which npu-rs's own
                    // synchronisations (event based) leave: whether the injection fired at all.
                    // SAFETY: the stream is alive; the call only waits for its work.
                    let sticky = unsafe {
                        npu_sim::abi::aclrtSynchronizeStream(rig.stream(which).as_raw().cast())
                    };
                    let fired =
                        !report.failed.is_empty() || report.sync[own].is_err() || sticky != 0;
                    if !fired {
                        // Past the stream's last task: the injection is still armed, so these
                        // streams are not reused.
                        assert!(report.clean(), "{what}: {report:#?}");
                        assert!(nth > 2, "{what}: every stream queues work");
                        drop(rig);
                        assert_back_to(&ctx, baseline, &what);
                        break;
                    }
                    points += 1;
                    assert_eq!(
                        report.failed.len(),
                        1,
                        "{what}: one operation failed: {report:#?}"
                    );
                    for (step, stream, error) in &report.failed {
                        assert_eq!(*stream, which, "{what}: step {}: {error}", STEPS[*step]);
                        assert_eq!(
                            error.acl_code(),
                            Some(code),
                            "{what}: {}: {error}",
                            STEPS[*step]
                        );
                    }
                    report.assert_skips_follow_failures(&what);
                    match &report.sync[own] {
                        Err(error) => assert_eq!(error.acl_code(), Some(code), "{what}: {error}"),
                        Ok(()) => panic!("{what}: synchronize reports the fault: {report:#?}"),
                    }
                    assert!(report.sync[other].is_ok(), "{what}: {report:#?}");
                    // Sticky once: the next synchronisation of the stream succeeds.
                    run(rig.stream(which).synchronize())
                        .unwrap_or_else(|e| panic!("{what}: {e}: {report:#?}"));
                    run(rig.stream(which).synchronize()).unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_clean_run(&rig, &what);
                    rig.assert_pools_idle(&what);
                    watchdog(&what, || drop(rig));
                    assert_back_to(&ctx, baseline, &what);
                }
            }
        }
    }
    println!("{points} task fault points");
}

/// Which allocator an injected allocation failure hits.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Alloc {
    Device,
    Host,
}

/// Every allocating call of the pipeline: the step and the allocator of its first allocation.
/// `download`'s staging block (step 12) is not here: the block `upload` returned to the
/// stream's staging pool serves it, so it allocates nothing.
const ALLOC_POINTS: [(usize, Alloc); 6] = [
    (0, Alloc::Host),
    (1, Alloc::Device),
    (6, Alloc::Device),
    (9, Alloc::Host),
    (11, Alloc::Device),
    (11, Alloc::Host),
];

/// The promise attacked: an allocation failing at any allocating call of the pipeline, under
/// every strategy and both pool backends, fails that call alone with a typed out-of-memory
/// error naming the runtime's allocation function, loses no buffer the pipeline still holds,
/// leaks nothing (no pool room, block, event or stream), and the next attempt works.
#[test]
fn an_allocation_failing_at_every_allocating_call_fails_that_call_alone() {
    let (_guard, ctx, _) = exclusive(Some(DEVICES));
    let kernels = kernels(&ctx);
    let mut points = 0;
    for strategy in STRATEGIES {
        for backend in BACKENDS {
            for (at, alloc) in ALLOC_POINTS {
                let what = format!("{strategy:?} {backend:?} {alloc:?} at {}", STEPS[at]);
                let baseline = counters(&ctx);
                let rig = Rig::new(&ctx, strategy, backend, &kernels);
                let mut hook = |step: usize| {
                    if step == at {
                        match alloc {
                            Alloc::Device => sim::fail_next_alloc(&ctx.device()).unwrap(),
                            Alloc::Host => sim::fail_next_host_alloc(AclCode(207001)).unwrap(),
                        }
                    }
                };
                let report = run(pipeline(&rig, &mut hook));
                points += 1;
                let [(step, _, error)] = &report.failed[..] else {
                    panic!("{what}: exactly the allocating call fails: {report:#?}");
                };
                assert_eq!(*step, at, "{what}: {report:#?}");
                assert!(error.is_out_of_memory(), "{what}: {error:?}");
                match error {
                    Error::Acl(acl) => assert!(
                        acl.api.starts_with("aclrt") && acl.api.contains("Malloc"),
                        "{what}: names the allocation: {error}"
                    ),
                    other => panic!("{what}: a typed ACL error: {other:?}"),
                }
                report.assert_skips_follow_failures(&what);
                assert!(report.wrong.is_empty(), "{what}: {report:#?}");
                assert!(report.sync.iter().all(Result::is_ok), "{what}: {report:#?}");
                assert_clean_run(&rig, &what);
                rig.assert_pools_idle(&what);
                watchdog(&what, || drop(rig));
                assert_back_to(&ctx, baseline, &what);
            }
        }
    }
    println!("{points} allocation fault points");
}

/// The promise attacked: a device lost before any step of the pipeline, under every strategy,
/// resolves every later operation with a device-lost error (nothing hangs), hands back what
/// the failed operations owned, drops without blocking, frees every allocation, and leaves the
/// other devices working. Loss is final, so each point has a device of its own (2 to 46 of
/// the 64 configured); the pool backend alternates with the step, so each backend meets every
/// strategy but not every step (90 points would need more devices than the simulator has).
#[test]
fn a_device_lost_before_every_step_fails_everything_after_it_and_nothing_hangs() {
    let (_guard, ctx0, _) = exclusive(Some(DEVICES));
    let kernels0 = kernels(&ctx0);
    let mut device = 2;
    for (round, strategy) in STRATEGIES.into_iter().enumerate() {
        for at in 0..STEPS.len() {
            let backend = BACKENDS[(at + round) % 2];
            let what = format!(
                "{strategy:?} {backend:?} device {device} lost before {}",
                STEPS[at]
            );
            let ctx = Device::open(device).unwrap().primary_context().clone();
            let kernels = kernels(&ctx);
            let baseline = counters(&ctx);
            let rig = Rig::new(&ctx, strategy, backend, &kernels);
            let mut hook = |step: usize| {
                if step == at {
                    sim::lose(&ctx.device()).unwrap();
                }
            };
            let report = run(pipeline(&rig, &mut hook));
            for (step, _, error) in &report.failed {
                assert!(*step >= at.min(2), "{what}: {}: {error}", STEPS[*step]);
                assert!(
                    error.is_device_lost(),
                    "{what}: {}: {error:?}",
                    STEPS[*step]
                );
            }
            // The copy of step 2 is awaited after the hooks of steps 3 and 4, so it may have
            // finished before the loss.
            for (step, name) in STEPS.iter().enumerate().take(13).skip(at.max(2)) {
                let failed = report.failed.iter().any(|f| f.0 == step);
                let skipped = report.skipped.contains(&step);
                assert!(
                    failed || skipped || (step == 2 && at > 2),
                    "{what}: {name} after the loss: {report:#?}"
                );
            }
            assert!(report.wrong.is_empty(), "{what}: {report:#?}");
            for (sync, step) in report.sync.iter().zip([13, 14]) {
                if step >= at {
                    let error = sync.as_ref().expect_err(&what);
                    assert!(error.is_device_lost(), "{what}: {error:?}");
                } else {
                    assert!(sync.is_ok(), "{what}: {sync:?}");
                }
            }
            watchdog(&what, || drop(rig));
            assert_back_to(&ctx, baseline, &what);
            watchdog(&what, || drop(kernels));
            // The other devices keep working.
            let healthy = Rig::new(&ctx0, strategy, backend, &kernels0);
            assert_clean_run(&healthy, &what);
            drop(healthy);
            device += 1;
        }
    }
}

/// The promise attacked (minimised from the loss points above, where it broke): a
/// `DevicePool` of the runtime's pool, dropped after its device was lost, leaks nothing. Before
/// the fix, destroying the pool stopped at its release stream's failed synchronisation, so the
/// pool, every block it held, and the release stream leaked for good.
#[test]
fn a_runtime_pool_dropped_after_its_device_is_lost_leaks_nothing() {
    let (_guard, _, _) = exclusive(Some(DEVICES));
    let ctx = Device::open(DEVICES - 1).unwrap().primary_context().clone();
    let baseline = counters(&ctx);
    let s = stream(&ctx, Strategy::EventPoll);
    let pool = DevicePool::builder(&ctx)
        .backend(DevicePoolBackend::RuntimePool)
        .build()
        .unwrap();
    drop(run(pool.alloc::<f32>(&s, N)).unwrap());
    sim::lose(&ctx.device()).unwrap();
    watchdog("dropping the pool and the stream", || drop((pool, s)));
    assert_back_to(&ctx, baseline, "the lost device's pool");
}

//! Attacks of the twenty-sixth session's third helper, through the `npu` facade: how Tokio users
//! drive futures (tasks awaiting one stream's work in reverse order on a runtime whose blocking
//! pool is full, futures moved off a dropped runtime onto a plain thread, spans entered across
//! awaits of aborted and timed-out tasks) and kernels at their limits.
//!
//! Each test names the promise it attacks. The simulator's hold gate is process-wide, so every
//! test takes the file's device lock; every wait is bounded (`run`, `watchdog`, timeouts), so a
//! hang fails its test.

mod common;

use std::collections::HashMap;
use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;

use common::*;
use npu::AclCode;
use npu::kernel::{ArgWriter, Engine, KernelArgs, LaunchConfig};
use npu::prelude::*;
use npu::sim;
use npu::stream::{Completion, ValueWord};

fn pinned(ctx: &Context, data: &[u8]) -> PinnedBuffer<u8> {
    PinnedBuffer::from_slice(ctx, data).unwrap()
}

type Awaited = Pin<Box<dyn Future<Output = bool> + Send>>;

/// One operation of the ordering attack: its name, its completion, and a future that awaits it
/// and says whether it succeeded.
struct Queued {
    name: &'static str,
    done: Completion,
    awaited: Awaited,
}

fn queued<T: Send + 'static>(name: &'static str, op: npu::Op<T>) -> Queued {
    Queued {
        name,
        done: op.completion().clone(),
        awaited: Box::pin(async move { op.await.is_ok() }),
    }
}

/// "No operation completes before an earlier one on its stream", for every kind of operation
/// (memset, copies, a launch, a wait on another stream's event, a value store, a task that
/// faults in `FailureMode::Continue`, a synchronisation), awaited by one task each, spawned in
/// reverse submission order on a multi-thread runtime, and once more with the runtime's one
/// blocking thread taken by a task of the user's (so `BlockingSync` waits are handed to the
/// reactor by the overseer). Each task, once its operation resolved, checks that every
/// operation submitted before it on the stream has completed.
#[test]
fn every_kind_of_operation_completes_in_submission_order_however_it_is_awaited() {
    let (_guard, ctx, _) = exclusive(None);
    let baseline = live_objects(&ctx);
    let scale = in_process(&ctx, "scale_f32");
    for strategy in STRATEGIES {
        for starved in [false, true] {
            let what = format!("{strategy:?}, blocking pool full: {starved}");
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .max_blocking_threads(1)
                .enable_all()
                .build()
                .unwrap();
            let (free_tx, free_rx) = std::sync::mpsc::channel::<()>();
            let (started_tx, started_rx) = std::sync::mpsc::channel::<()>();
            let occupant = starved.then(|| {
                rt.spawn_blocking(move || {
                    started_tx.send(()).unwrap();
                    let _ = free_rx.recv();
                })
            });
            if starved {
                started_rx.recv_timeout(HANG).expect("the occupant started");
            }
            let s = stream(&ctx, strategy);
            let other = stream(&ctx, strategy);
            let x = DeviceBuffer::from_host_blocking(&ctx, &[1.0f32; 64]).unwrap();
            let word = ValueWord::new(&ctx, 0).unwrap();
            let ready = Event::new(&ctx).unwrap();
            let held = sim::hold(&ctx.device()).unwrap();
            let violations = watchdog(&what, || {
                rt.block_on(async {
                    // Submitted inside the runtime, so that `BlockingSync` queues its waits on
                    // this runtime's (full) blocking pool.
                    let mut ops = vec![
                        queued(
                            "memset",
                            s.memset(DeviceBuffer::<u8>::new(&ctx, 4096).unwrap(), 1),
                        ),
                        queued(
                            "copy_h2d",
                            s.copy_h2d(
                                pinned(&ctx, &[2; 4096]),
                                DeviceBuffer::<u8>::new(&ctx, 4096).unwrap(),
                            ),
                        ),
                        // SAFETY: scale_f32 takes {float *x, uint64_t n, float alpha}; x holds
                        // 64.
                        queued("launch", unsafe { s.launch(&scale, 4, (x, 64u64, 2.0f32)) }),
                    ];
                    let _other_work = other.memset(DeviceBuffer::<u8>::new(&ctx, 4096).unwrap(), 3);
                    ready.record(&other).unwrap();
                    s.wait_event(&ready).unwrap();
                    ops.push(queued("write_value", s.write_value(word, 9)));
                    sim::fail_task(&s, 1, AclCode(507015)).unwrap();
                    ops.push(queued(
                        "faulted memset",
                        s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 4),
                    ));
                    ops.push(queued(
                        "memset after the fault",
                        s.memset(DeviceBuffer::<u8>::new(&ctx, 4096).unwrap(), 5),
                    ));
                    ops.push(queued("synchronize", s.synchronize()));
                    ops.push(queued(
                        "copy_d2h",
                        s.copy_d2h(
                            DeviceBuffer::<u8>::new(&ctx, 4096).unwrap(),
                            pinned(&ctx, &[0; 4096]),
                        ),
                    ));
                    let names: Vec<&'static str> = ops.iter().map(|q| q.name).collect();
                    let dones: Arc<Vec<Completion>> =
                        Arc::new(ops.iter().map(|q| q.done.clone()).collect());
                    let mut tasks = tokio::task::JoinSet::new();
                    let (polled_tx, mut polled_rx) = tokio::sync::mpsc::unbounded_channel();
                    for (i, q) in ops.into_iter().enumerate().rev() {
                        let (dones, polled) = (dones.clone(), polled_tx.clone());
                        let mut awaited = q.awaited;
                        tasks.spawn(async move {
                            let mut first = true;
                            let ok = std::future::poll_fn(|cx| {
                                let polled_now = awaited.as_mut().poll(cx);
                                if std::mem::take(&mut first) {
                                    let _ = polled.send(());
                                }
                                polled_now
                            })
                            .await;
                            let early: Vec<usize> =
                                (0..i).filter(|&j| !dones[j].is_complete()).collect();
                            (i, ok, early)
                        });
                    }
                    for _ in 0..names.len() {
                        polled_rx.recv().await.unwrap();
                    }
                    // Every task has polled its operation; the device may go on.
                    std::thread::spawn(move || held.release().unwrap())
                        .join()
                        .unwrap();
                    let mut violations = Vec::new();
                    let mut outcomes = vec![None; names.len()];
                    while let Some(joined) = tokio::time::timeout(HANG, tasks.join_next())
                        .await
                        .expect("the tasks hung")
                    {
                        let (i, ok, early) = joined.unwrap();
                        outcomes[i] = Some(ok);
                        for j in early {
                            violations.push(format!("{} completed before {}", names[i], names[j]));
                        }
                    }
                    let failed: Vec<&str> = outcomes
                        .iter()
                        .zip(&names)
                        .filter(|(ok, _)| **ok == Some(false))
                        .map(|(_, name)| *name)
                        .collect();
                    assert_eq!(
                        failed,
                        ["faulted memset", "synchronize"],
                        "{what}: only the faulted task and the synchronisation reporting it fail"
                    );
                    violations
                })
            });
            assert!(violations.is_empty(), "{what}: {violations:?}");
            drop(free_tx);
            if let Some(occupant) = occupant {
                rt.block_on(occupant).unwrap();
            }
            // The stream still runs in order afterwards.
            run(s.synchronize()).unwrap();
            drop(rt);
        }
    }
    until_released("everything of the ordering attack released", || {
        within(live_objects(&ctx), baseline)
    });
}

/// Rules 1, 3 and 7 for futures that leave their runtime: an abort, a staged copy, an upload, a
/// `timed` closure and a plain `Completion::wait`, each polled once on a current-thread runtime
/// with the device held, then the runtime dropped, and the futures finished by
/// `futures::executor::block_on` on a plain thread once the device is released. Each resolves
/// with its data (or, for the work the abort discarded, `Aborted`), and nothing is left.
#[test]
fn futures_polled_on_a_dropped_runtime_finish_on_a_plain_thread() {
    let (_guard, ctx, _) = exclusive(None);
    let baseline = live_objects(&ctx);
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let s = stream(&ctx, strategy);
        let doomed = stream(&ctx, strategy);
        let pool = PinnedPool::builder(&ctx).capacity(1 << 16).build().unwrap();
        let held = sim::hold(&ctx.device()).unwrap();
        // The first task of an idle stream may have been taken by the device when the abort
        // begins, and then runs to its end; the one behind it is discarded.
        let leader = doomed.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
        let discarded = doomed.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        type Moved = Pin<Box<dyn Future<Output = Result<Vec<u8>, String>> + Send>>;
        let moved: Vec<(&str, Moved)> = rt.block_on(async {
            let abort = doomed.abort();
            let (s1, s2, s3, c1, c2, p1) = (
                s.clone(),
                s.clone(),
                s.clone(),
                ctx.clone(),
                ctx.clone(),
                pool.clone(),
            );
            let memset = s.memset(DeviceBuffer::<u8>::new(&ctx, 32).unwrap(), 6);
            let memset_done = memset.completion().clone();
            let mut futures: Vec<(&str, Moved)> = vec![
                (
                    "abort",
                    Box::pin(
                        async move { abort.await.map(|()| vec![]).map_err(|e| e.to_string()) },
                    ),
                ),
                (
                    "discarded",
                    Box::pin(async move {
                        // Discarded, or run to its end if the device took it before the
                        // runtime's discard (the abort waits for the task taken first, which
                        // runs once the device is released): either way its buffer comes
                        // back, and one that ran holds what it wrote.
                        match discarded.await {
                            Err(e) if e.error.is_aborted() && e.value.is_some() => Ok(vec![]),
                            Ok(buffer) if buffer.to_vec_blocking().unwrap() == [1; 64] => {
                                Ok(vec![])
                            }
                            other => Err(format!("{:?}", other.map(|_| ()))),
                        }
                    }),
                ),
                (
                    "staged copy",
                    Box::pin(async move {
                        let dst = DeviceBuffer::<u8>::new(&c1, 100).unwrap();
                        let dst = s1
                            .copy_from_slice_staged(&p1, &[7u8; 100], dst)
                            .await
                            .map_err(|e| e.to_string())?;
                        s1.copy_to_vec_staged(&p1, dst)
                            .await
                            .map(|(_, v)| v)
                            .map_err(|e| e.to_string())
                    }),
                ),
                (
                    "upload",
                    Box::pin(async move {
                        let _ = &c2;
                        let dst = s2.upload(&[8u8; 50]).await.map_err(|e| e.to_string())?;
                        s2.download(dst).await.map_err(|e| e.to_string())
                    }),
                ),
                (
                    "timed",
                    Box::pin(async move {
                        let (buffer, _elapsed) = s3
                            .timed(|s| {
                                s.memset(DeviceBuffer::<u8>::new(s.context(), 16).unwrap(), 9)
                            })
                            .await
                            .map_err(|e| e.to_string())?;
                        Ok(buffer.to_vec_blocking().unwrap())
                    }),
                ),
                (
                    "completion",
                    Box::pin(async move {
                        memset_done.wait().await.map_err(|e| e.to_string())?;
                        Ok(vec![])
                    }),
                ),
                (
                    "memset",
                    Box::pin(async move {
                        memset
                            .await
                            .map(|b| b.to_vec_blocking().unwrap())
                            .map_err(|e| e.to_string())
                    }),
                ),
            ];
            for (name, future) in &mut futures {
                // Polled a few times: far enough into each chain to have device work in
                // flight (the first poll of an `async` block starts it).
                for _ in 0..3 {
                    let polled = future
                        .as_mut()
                        .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()));
                    // The abort may be confirmed with the device held (nothing it discards
                    // started), and then the discarded work fails at once.
                    if let Poll::Ready(out) = polled {
                        assert!(
                            ["abort", "discarded"].contains(name),
                            "{what}: {name} finished with the device held"
                        );
                        *future = Box::pin(async move { out });
                        break;
                    }
                    tokio::task::yield_now().await;
                }
            }
            futures
        });
        watchdog(&format!("{what}: dropping the runtime"), || drop(rt));
        let finisher = std::thread::spawn(move || {
            moved
                .into_iter()
                .map(|(name, future)| (name, futures::executor::block_on(future)))
                .collect::<Vec<_>>()
        });
        held.release().unwrap();
        let results = watchdog(&format!("{what}: finishing on a plain thread"), || {
            finisher.join().unwrap()
        });
        for (name, result) in results {
            let bytes = result.unwrap_or_else(|e| panic!("{what}: {name}: {e}"));
            let expected: Vec<u8> = match name {
                "staged copy" => vec![7; 100],
                "upload" => vec![8; 50],
                "timed" => vec![9; 16],
                "memset" => vec![6; 32],
                _ => vec![],
            };
            assert_eq!(bytes, expected, "{what}: {name}");
        }
        let _ = run(leader);
        run(doomed.synchronize()).unwrap();
        drop(pool);
    }
    until_released("everything moved off the dropped runtime released", || {
        within(live_objects(&ctx), baseline)
    });
}

/// Arguments that pack one value too many, for a custom `KernelArgs`.
#[derive(Debug)]
struct TooMany(DeviceBuffer<f32>);

// SAFETY: the only address packed is the buffer's, whose use is recorded.
unsafe impl KernelArgs for TooMany {
    fn pack(&self, args: &mut ArgWriter<'_>) -> npu::Result<()> {
        args.device(&self.0)?;
        for _ in 0..npu::kernel::ArgPacker::MAX_ARGS {
            args.value(&0u32)?;
        }
        Ok(())
    }

    fn record_uses(&self, completion: &Completion) {
        npu::memory::Memory::record_use(&self.0, completion)
    }
}

/// Bad input is a typed error naming the API, never a panic or a hang, for launches at their
/// limits, and a launch discarded before it runs never runs: one argument past
/// `ArgPacker::MAX_ARGS` (refused by `Stream::launch_with`, the buffer handed back); the
/// largest block count (`u32::MAX`, through `launch` and `launch_with` on both engines) queued
/// on a held device and discarded by an abort, or by a stop and an abort, which fails with
/// the buffer handed back and without four billion blocks run; and 65,536 blocks over 64
/// elements, which scale each element exactly once.
#[test]
fn launches_at_their_limits_are_refused_discarded_or_exact() {
    let (_guard, ctx, _) = exclusive(None);
    let baseline = live_objects(&ctx);
    let scale = in_process(&ctx, "scale_f32");
    for strategy in STRATEGIES {
        let what = format!("{strategy:?}");
        let s = stream(&ctx, strategy);
        let x = DeviceBuffer::from_host_blocking(&ctx, &[1.0f32; 64]).unwrap();
        let config = LaunchConfig::new(NonZeroU32::MIN);
        // SAFETY: refused before the kernel runs (too many arguments).
        let err = run(unsafe { s.launch_with(&scale, config, TooMany(x)) }).unwrap_err();
        assert_eq!(
            invalid(&err.error),
            ("Stream::launch_with", "args"),
            "{what}"
        );
        let x = err.value.expect("the arguments back").0;

        for (how, stop_first) in [("abort", false), ("stop and abort", true)] {
            let held = sim::hold(&ctx.device()).unwrap();
            // The task the device has taken when the abort begins runs to its end once the
            // device is released (the simulator cannot interrupt a kernel, and one of
            // u32::MAX blocks takes seconds): a memset, so that the launches queue behind it.
            let first = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 0);
            let mut launches = Vec::new();
            for engine in [None, Some(Engine::Aic), Some(Engine::Aiv)] {
                let buffer = DeviceBuffer::<f32>::new(&ctx, 64).unwrap();
                let launch = match engine {
                    // SAFETY: scale_f32 on x's 64 elements, never run (discarded below).
                    None => unsafe { s.launch(&scale, u32::MAX, (buffer, 64u64, 3.0f32)) },
                    // SAFETY: as above, on either engine.
                    Some(engine) => unsafe {
                        s.launch_with(
                            &scale,
                            LaunchConfig::new(NonZeroU32::MAX).engine(engine),
                            (buffer, 64u64, 3.0f32),
                        )
                    },
                };
                launches.push(launch);
            }
            if stop_first {
                s.stop().unwrap();
            }
            // Confirmed with the device still held: nothing of it has started.
            run(s.abort()).unwrap();
            held.release().unwrap();
            let _ = run(first);
            for launch in launches {
                let err = run(launch).expect_err("discarded before it ran");
                assert!(
                    err.value.is_some(),
                    "{what}, {how}: the arguments come back: {}",
                    err.error
                );
            }
            run(s.synchronize()).unwrap();
        }

        // SAFETY: scale_f32 takes {float *x, uint64_t n, float alpha}; x holds 64; blocks
        // beyond the 64th get no element.
        let (x, _, _) = run(unsafe { s.launch(&scale, 1 << 16, (x, 64u64, 2.0f32)) }).unwrap();
        assert_eq!(x.to_vec_blocking().unwrap(), [2.0f32; 64], "{what}");
    }
    until_released("the launches' buffers released", || {
        within(live_objects(&ctx), baseline)
    });
}

/// What the span-checking subscriber saw.
#[derive(Default)]
struct Spans {
    next: AtomicU64,
    /// Live spans and their reference counts.
    refs: Mutex<HashMap<u64, usize>>,
    /// Per thread, the spans entered and not yet left, innermost last.
    stacks: Mutex<HashMap<std::thread::ThreadId, Vec<u64>>>,
    violations: Mutex<Vec<String>>,
}

#[derive(Clone, Default)]
struct SpanChecker(Arc<Spans>);

impl tracing::Subscriber for SpanChecker {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let id = self.0.next.fetch_add(1, Ordering::Relaxed) + 1;
        self.0.refs.lock().unwrap().insert(id, 1);
        tracing::span::Id::from_u64(id)
    }

    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, _: &tracing::Event<'_>) {}

    fn enter(&self, span: &tracing::span::Id) {
        let id = span.into_u64();
        if !self.0.refs.lock().unwrap().contains_key(&id) {
            self.0
                .violations
                .lock()
                .unwrap()
                .push(format!("entered closed span {id}"));
        }
        let thread = std::thread::current().id();
        self.0
            .stacks
            .lock()
            .unwrap()
            .entry(thread)
            .or_default()
            .push(id);
    }

    fn exit(&self, span: &tracing::span::Id) {
        let id = span.into_u64();
        let thread = std::thread::current().id();
        let mut stacks = self.0.stacks.lock().unwrap();
        let stack = stacks.entry(thread).or_default();
        if stack.last() == Some(&id) {
            stack.pop();
        } else {
            let seen = stack.clone();
            drop(stacks);
            self.0
                .violations
                .lock()
                .unwrap()
                .push(format!("left span {id} while the innermost was {seen:?}"));
        }
    }

    fn clone_span(&self, span: &tracing::span::Id) -> tracing::span::Id {
        let id = span.into_u64();
        match self.0.refs.lock().unwrap().get_mut(&id) {
            Some(count) => *count += 1,
            None => self
                .0
                .violations
                .lock()
                .unwrap()
                .push(format!("cloned closed span {id}")),
        }
        span.clone()
    }

    fn try_close(&self, span: tracing::span::Id) -> bool {
        let id = span.into_u64();
        let mut refs = self.0.refs.lock().unwrap();
        match refs.get_mut(&id) {
            Some(1) => {
                refs.remove(&id);
                true
            }
            Some(count) => {
                *count -= 1;
                false
            }
            None => {
                drop(refs);
                self.0
                    .violations
                    .lock()
                    .unwrap()
                    .push(format!("closed span {id} twice"));
                false
            }
        }
    }
}

/// The tracing promises of docs/observability.md and rule 6 for spans held across awaits: a
/// task's own span (`Instrument`) and an explicit `span.enter()` around each poll, over
/// operations that a `JoinSet::abort_all`, a `JoinHandle::abort`, a `timeout` expiring after
/// each poll count and a lost `select!` branch drop mid-flight, on a held device. The
/// subscriber checks that every thread leaves spans innermost first, that no closed span is
/// entered, and that every span (the operations' own included) is closed once the futures
/// are gone and the device released.
#[test]
fn spans_held_across_awaits_of_cancelled_operations_nest_and_close() {
    use tracing::Instrument;
    let (_guard, ctx, _) = exclusive(None);
    let baseline = live_objects(&ctx);
    let checker = SpanChecker::default();
    let spans = checker.0.clone();
    {
        common::see_every_callsite();
        let _default = tracing::subscriber::set_default(checker);
        for strategy in STRATEGIES {
            let what = format!("{strategy:?}");
            let s = stream(&ctx, strategy);
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let held = sim::hold(&ctx.device()).unwrap();
                let mut set = tokio::task::JoinSet::new();
                for i in 0..4u8 {
                    let op = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), i);
                    set.spawn(
                        async move { op.await.map(drop).map_err(|e| e.error) }
                            .instrument(tracing::info_span!("request", i)),
                    );
                }
                let outer = tracing::info_span!("outer");
                let op = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 9);
                let handle = tokio::spawn(
                    async move {
                        let inner = tracing::info_span!("inner");
                        let mut op = op;
                        std::future::poll_fn(|cx| {
                            let _entered = inner.enter();
                            Pin::new(&mut op).poll(cx)
                        })
                        .await
                        .map(drop)
                        .map_err(|e| e.error)
                    }
                    .instrument(outer),
                );
                tokio::task::yield_now().await;
                set.abort_all();
                handle.abort();
                while set.join_next().await.is_some() {}
                let _ = handle.await;
                for polls in 0..4 {
                    let op = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 7);
                    let counted = CountPolls {
                        inner: op,
                        left: polls,
                    };
                    let span = tracing::info_span!("timed out", polls);
                    let timed_out = tokio::time::timeout(
                        std::time::Duration::from_millis(1),
                        counted.instrument(span),
                    )
                    .await;
                    assert!(timed_out.is_err(), "{what}: finished with the device held");
                }
                let span = tracing::info_span!("select");
                async {
                    let mut a = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
                    let b = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 2);
                    let released = async {
                        tokio::task::yield_now().await;
                        held.release().unwrap();
                    };
                    tokio::select! {
                        biased;
                        _ = &mut a => unreachable!("the device is held"),
                        () = released => {}
                    }
                    let ((), second) = tokio::join!(async { drop(a) }, b);
                    assert!(second.is_ok(), "{what}");
                }
                .instrument(span)
                .await;
            });
            run(s.synchronize()).unwrap();
            drop(rt);
        }
    }
    until_released("every operation's value released", || {
        within(live_objects(&ctx), baseline)
    });
    let violations = spans.violations.lock().unwrap().clone();
    assert!(violations.is_empty(), "{violations:?}");
    let stacks = spans.stacks.lock().unwrap();
    assert!(
        stacks.values().all(Vec::is_empty),
        "spans left entered: {stacks:?}"
    );
    let live: Vec<u64> = spans.refs.lock().unwrap().keys().copied().collect();
    assert!(live.is_empty(), "spans never closed: {live:?}");
}

/// A future that is pending for its first `left` polls (waking itself), then polls `inner`:
/// a timeout then expires after a chosen number of polls of the operation.
struct CountPolls<F> {
    inner: F,
    left: u32,
}

impl<F: Future + Unpin> Future for CountPolls<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<F::Output> {
        let polled = Pin::new(&mut self.inner).poll(cx);
        if self.left > 0 {
            self.left -= 1;
            cx.waker().wake_by_ref();
        }
        polled
    }
}

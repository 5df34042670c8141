//! Attacks of the twenty-seventh session's sixth helper, through the `npu` facade: processes
//! forked while npu-rs runs (every kind of object dropped in the child, a Tokio runtime whose
//! tasks await operations, a fork from another thread, a grandchild, a process whose runtime
//! never started), and the angles listed with each test.
//!
//! Every case runs in a child process of its own (`in_child_test`), which forks; each forked
//! process is bounded by `alarm`, so a hang fails its test.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll, Waker};

use common::*;
use npu::error::AclCode;
use npu::memory::{DevicePoolBackend, HostRegistration, PageAlignedBuffer, RegisterFlags};
use npu::prelude::*;
use npu::{Error, Op, sim};

const CHILD_ENV: &str = "NPU_ATTACK27F_CHILD";

fn in_child(case: &str) {
    in_child_test("child", CHILD_ENV, case);
}

#[test]
fn child() {
    let Ok(case) = std::env::var(CHILD_ENV) else {
        return;
    };
    match case.as_str() {
        "tasks" => tasks_pending_at_the_fork(),
        "runtime-dropped" => a_tokio_runtime_dropped_in_the_child(),
        "objects" => every_object_dropped_in_the_child(),
        "thread" => forked_from_another_thread(),
        "never" => a_process_that_never_started_a_runtime_forks(),
        "failed" => a_process_whose_runtime_failed_to_start_forks(),
        "lost" => a_stream_faulting_on_every_task_then_lost(),
        "pools" => pools_at_capacity_in_the_child(),
        "abort" => aborting_in_the_child(),
        other => panic!("no child case {other}"),
    }
    println!("CHILD OK");
}

/// A future that counts its polls and keeps its task's wakers: a task awaiting it has
/// registered its waker once the count is past zero, and can be woken with the kept one.
struct Counted<F> {
    inner: Pin<Box<F>>,
    polls: Arc<AtomicUsize>,
    wakers: Wakers,
}

/// The wakers of the tasks awaiting [`Counted`] futures.
type Wakers = Arc<Mutex<Vec<Waker>>>;

impl<F: Future> Future for Counted<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<F::Output> {
        let polled = self.inner.as_mut().poll(cx);
        self.wakers.lock().unwrap().push(cx.waker().clone());
        self.polls.fetch_add(1, Ordering::SeqCst);
        polled
    }
}

/// A task awaiting a memset.
type Task = tokio::task::JoinHandle<Result<DeviceBuffer<u8>, Error>>;

/// Memsets, each an `Op` not awaited yet.
type Memsets = Vec<Op<DeviceBuffer<u8>>>;

/// A current-thread Tokio runtime with one task per strategy awaiting a memset held on the
/// device, each polled (its waker registered) before the fork, and the tasks' wakers.
fn runtime_with_pending_tasks(
    ctx: &Context,
    streams: &[npu::Stream],
) -> (tokio::runtime::Runtime, Vec<Task>, Wakers) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let polls = Arc::new(AtomicUsize::new(0));
    let wakers = Wakers::default();
    let handles: Vec<_> = streams
        .iter()
        .map(|stream| {
            let op = stream.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), 7);
            let counted = Counted {
                inner: Box::pin(op),
                polls: polls.clone(),
                wakers: wakers.clone(),
            };
            rt.spawn(async move { counted.await.map_err(|e| e.into_parts().0) })
        })
        .collect();
    rt.block_on(async {
        while polls.load(Ordering::SeqCst) < streams.len() {
            tokio::task::yield_now().await;
        }
    });
    (rt, handles, wakers)
}

/// What a task parked at the fork sees in the child: Tokio tasks that awaited memsets held
/// on the device (every strategy), their wakers registered with npu-rs, whose completer
/// stayed in the parent. Nothing in the child wakes them: the child runs the runtime (every
/// task woken since would be polled) and finds each still parked. Woken by the program
/// itself (the runtime polls them again), each wait ends with `Error::Forked`.
///
/// npu-rs cannot wake them itself: the only code it runs at the fork is its `pthread_atfork`
/// child handler, where only async-signal-safe calls are sound (the other threads' locks may
/// be held for ever), and a waker is user code that takes locks (Tokio's run queue). Their
/// registrations are in the completions, with no registry to find them by, which would cost
/// a lock on every pending poll. So the program wakes them (or drops them, which returns).
fn tasks_pending_at_the_fork() {
    let (_guard, ctx, _d1) = exclusive(None);
    let streams: Vec<npu::Stream> = STRATEGIES.iter().map(|&s| stream(&ctx, s)).collect();
    let hold = sim::hold(&ctx.device()).unwrap();
    let (rt, handles, wakers) = runtime_with_pending_tasks(&ctx, &streams);
    sim::flush_releases();
    let (ok, status) = fork_and_check(|| {
        let unwoken = rt.block_on(async {
            // A round of the scheduler: a task woken since the fork would run in it.
            tokio::task::yield_now().await;
            handles
                .iter()
                .filter(|handle| !handle.is_finished())
                .count()
        });
        assert_eq!(unwoken, handles.len(), "nothing in the child wakes them");
        for waker in wakers.lock().unwrap().drain(..) {
            waker.wake();
        }
        for handle in handles {
            let result = rt.block_on(handle).unwrap();
            assert_forked(&result.unwrap_err());
        }
    });
    hold.release().unwrap();
    assert!(
        ok,
        "the child waking tasks parked at the fork failed or hung ({status:#x})"
    );
}

/// A Tokio runtime (current-thread) whose tasks await held memsets, dropped in the child with
/// its tasks: every task's `Op` is dropped there, nothing waits.
fn a_tokio_runtime_dropped_in_the_child() {
    let (_guard, ctx, _d1) = exclusive(None);
    let streams: Vec<npu::Stream> = STRATEGIES.iter().map(|&s| stream(&ctx, s)).collect();
    let hold = sim::hold(&ctx.device()).unwrap();
    let (rt, handles, _) = runtime_with_pending_tasks(&ctx, &streams);
    sim::flush_releases();
    let (ok, status) = fork_and_check(|| {
        drop(handles);
        drop(rt);
        drop(streams);
        sim::flush_releases();
    });
    hold.release().unwrap();
    assert!(
        ok,
        "the child dropping a runtime failed or hung ({status:#x})"
    );
}

/// Everything npu-rs makes, some of it with work held on the device, dropped in a forked
/// child, and again in a grandchild: buffers, pinned buffers and pool blocks, device pools of
/// both backends and their blocks, streams under every strategy, events, modules, host
/// registrations, operations never awaited. Each wait ends with `Error::Forked` and every drop
/// returns.
fn every_object_dropped_in_the_child() {
    let (_guard, ctx, _d1) = exclusive(None);
    let streams: Vec<npu::Stream> = STRATEGIES.iter().map(|&s| stream(&ctx, s)).collect();
    let pinned_pool = PinnedPool::builder(&ctx).capacity(1 << 16).build().unwrap();
    let pools: Vec<DevicePool> = [DevicePoolBackend::RuntimePool, DevicePoolBackend::Caching]
        .into_iter()
        .map(|b| DevicePool::builder(&ctx).backend(b).build().unwrap())
        .collect();
    let blocks: Vec<_> = pools
        .iter()
        .map(|pool| run(pool.alloc::<u8>(&streams[0], 4096)).unwrap())
        .collect();
    let pooled = run(pinned_pool.alloc::<u8>(4096)).unwrap();
    let image = sim::kernel::registry_image(&["scale_f32"]);
    // SAFETY: a registry image names in-process kernels; loading it runs no code.
    let module = unsafe { Module::from_data(&ctx, &image) }.unwrap();
    let function = module.function("scale_f32").unwrap();
    let registration = HostRegistration::new(
        &ctx,
        PageAlignedBuffer::<u8>::from_slice(&[1; 4096]).unwrap(),
        RegisterFlags::PINNED,
    )
    .unwrap();
    let hold = sim::hold(&ctx.device()).unwrap();
    // Work held on the device: memsets of pool blocks, an upload from pinned memory.
    let mut pending: Vec<Op<_>> = Vec::new();
    for (stream, block) in streams.iter().zip(blocks) {
        pending.push(stream.memset(block, 3));
    }
    let upload = streams[1].copy_h2d(pooled, DeviceBuffer::<u8>::new(&ctx, 4096).unwrap());
    let from_registration =
        streams[2].copy_h2d(registration, DeviceBuffer::<u8>::new(&ctx, 4096).unwrap());
    let event = npu::Event::new(&ctx).unwrap();
    event.record(&streams[2]).unwrap();
    let pinned = PinnedBuffer::<u8>::from_slice(&ctx, &[5; 64]).unwrap();
    let idle_block = run(pools[1].alloc::<u8>(&streams[0], 64));
    sim::flush_releases();
    let done = pending[0].completion().clone();
    let check = |generation: &str, event: &npu::Event| {
        assert!(npu::runtime::forked(), "{generation}");
        assert_forked(&done.wait_blocking().unwrap_err());
        assert_forked(&futures::executor::block_on(event.wait()).unwrap_err());
    };
    let (ok, status) = fork_and_check(move || {
        check("child", &event);
        // A grandchild finds the same.
        let (grandchild_ok, status) = fork_and_check(|| check("grandchild", &event));
        assert!(grandchild_ok, "the grandchild failed or hung ({status:#x})");
        for op in pending {
            let (err, back) = futures::executor::block_on(op).unwrap_err().into_parts();
            assert_forked(&err);
            drop(back.expect("the block comes back"));
        }
        drop(upload); // never awaited
        let (err, _) = futures::executor::block_on(from_registration)
            .unwrap_err()
            .into_parts();
        assert_forked(&err);
        drop((idle_block, pinned, function, module, event));
        drop(pools);
        drop(pinned_pool);
        drop(streams);
        sim::flush_releases();
        npu::reaper::flush();
        // A grandchild of a child that dropped everything.
        let (grandchild_ok, status) = fork_and_check(|| {
            assert!(npu::runtime::forked());
            assert_forked(&Device::open(0).unwrap_err());
        });
        assert!(
            grandchild_ok,
            "the second grandchild failed or hung ({status:#x})"
        );
    });
    hold.release().unwrap();
    assert!(
        ok,
        "the child dropping everything failed or hung ({status:#x})"
    );
}

/// A fork from a thread other than the one that started the runtime and made the work.
fn forked_from_another_thread() {
    let (_guard, ctx, _d1) = exclusive(None);
    let streams: Vec<npu::Stream> = STRATEGIES.iter().map(|&s| stream(&ctx, s)).collect();
    let hold = sim::hold(&ctx.device()).unwrap();
    let pending: Vec<Op<DeviceBuffer<u8>>> = streams
        .iter()
        .map(|s| s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 9))
        .collect();
    sim::flush_releases();
    let (ok, status) = std::thread::spawn(move || {
        fork_and_check(move || {
            assert!(npu::runtime::forked());
            for op in pending {
                let (err, _) = futures::executor::block_on(op).unwrap_err().into_parts();
                assert_forked(&err);
            }
            assert_forked(&Device::open(0).unwrap_err());
            drop(streams);
        })
    })
    .join()
    .unwrap();
    hold.release().unwrap();
    assert!(
        ok,
        "the child forked from another thread failed or hung ({status:#x})"
    );
}

/// A child's own round trip: a runtime, a stream, a memset and its bytes.
fn round_trip_in_the_child() {
    assert!(
        !npu::runtime::forked(),
        "no runtime started before the fork"
    );
    let ctx = Device::open(0).unwrap().primary_context().clone();
    let stream = stream(&ctx, npu::stream::Strategy::EventPoll);
    let buffer = run(stream.memset(DeviceBuffer::<u8>::new(&ctx, 16).unwrap(), 4)).unwrap();
    assert_eq!(buffer.to_vec_blocking().unwrap(), vec![4; 16]);
}

/// A process that never started a runtime forks: its child is no "child of npu-rs" and uses
/// the NPU as its own.
fn a_process_that_never_started_a_runtime_forks() {
    let (ok, status) = fork_and_check(|| {
        round_trip_in_the_child();
        // The child started a runtime of its own: its children are forked ones.
        let (ok, status) = fork_and_check(|| {
            assert!(npu::runtime::forked());
            assert_forked(&Device::open(0).unwrap_err());
        });
        assert!(ok, "the grandchild was not refused ({status:#x})");
    });
    assert!(
        ok,
        "the child of a process without a runtime failed ({status:#x})"
    );
}

/// A process whose one runtime failed to start (its ACL configuration file is no JSON, so
/// `aclInit` refused it) forks: nothing of npu-rs ran, and the child must be free to start a
/// runtime of its own, as the child of a process that never tried.
fn a_process_whose_runtime_failed_to_start_forks() {
    let config = std::env::temp_dir().join(format!("npu-attack27f-{}.json", std::process::id()));
    std::fs::write(&config, "this is no JSON").unwrap();
    let refused = npu::Runtime::builder()
        .backend(npu::runtime::BackendChoice::Sim)
        .acl_config(&config)
        .build()
        .unwrap_err();
    let _ = std::fs::remove_file(&config);
    assert!(!matches!(refused, Error::Forked { .. }), "{refused:?}");
    assert!(!npu::runtime::forked());
    let (ok, status) = fork_and_check(|| {
        round_trip_in_the_child();
        // The child started a runtime of its own: its children are forked ones.
        let (ok, status) = fork_and_check(|| {
            assert!(npu::runtime::forked());
            assert_forked(&Device::open(0).unwrap_err());
        });
        assert!(ok, "the grandchild was not refused ({status:#x})");
    });
    assert!(
        ok,
        "the child of a process whose runtime never started was refused ({status:#x})"
    );
}

#[test]
fn a_task_parked_at_the_fork_stays_parked_in_the_child_until_the_program_wakes_it() {
    in_child("tasks");
}

#[test]
fn a_tokio_runtime_with_tasks_awaiting_ops_drops_in_the_child() {
    in_child("runtime-dropped");
}

#[test]
fn every_kind_of_object_drops_in_a_forked_child_and_grandchild() {
    in_child("objects");
}

#[test]
fn a_fork_from_another_thread_refuses_and_never_hangs() {
    in_child("thread");
}

#[test]
fn the_child_of_a_process_that_never_started_a_runtime_uses_npu() {
    in_child("never");
}

#[test]
fn the_child_of_a_process_whose_runtime_failed_to_start_uses_npu() {
    in_child("failed");
}

/// Pools at their capacity at the fork, their one block in an operation held on the device:
/// a device pool of each backend (a memset) and a pinned pool (an upload). In the child each
/// operation ends with `Error::Forked` and hands its block back, which is dropped; an
/// allocation then, which would wait for that block to come back, must not wait for ever.
fn pools_at_capacity_in_the_child() {
    let (_guard, ctx, _d1) = exclusive(None);
    let s = stream(&ctx, npu::stream::Strategy::EventPoll);
    let pools: Vec<DevicePool> = [DevicePoolBackend::RuntimePool, DevicePoolBackend::Caching]
        .into_iter()
        .map(|b| {
            DevicePool::builder(&ctx)
                .backend(b)
                .capacity(4096)
                .build()
                .unwrap()
        })
        .collect();
    let pinned = PinnedPool::builder(&ctx).capacity(4096).build().unwrap();
    let blocks: Vec<_> = pools
        .iter()
        .map(|pool| run(pool.alloc::<u8>(&s, 4096)).unwrap())
        .collect();
    let host = run(pinned.alloc::<u8>(4096)).unwrap();
    let hold = sim::hold(&ctx.device()).unwrap();
    let memsets: Vec<_> = blocks.into_iter().map(|b| s.memset(b, 1)).collect();
    let upload = s.copy_h2d(host, DeviceBuffer::<u8>::new(&ctx, 4096).unwrap());
    sim::flush_releases();
    let (ok, status) = fork_and_check(move || {
        for op in memsets {
            let (err, back) = futures::executor::block_on(op).unwrap_err().into_parts();
            assert_forked(&err);
            drop(back.expect("the block comes back"));
        }
        let (err, back) = futures::executor::block_on(upload)
            .unwrap_err()
            .into_parts();
        assert_forked(&err);
        drop(back);
        for pool in &pools {
            let allocated = futures::executor::block_on(pool.alloc::<u8>(&s, 4096));
            assert_forked(&allocated.unwrap_err());
        }
        let allocated = futures::executor::block_on(pinned.alloc::<u8>(4096));
        assert_forked(&allocated.unwrap_err());
    });
    hold.release().unwrap();
    assert!(
        ok,
        "the child allocating from full pools failed or hung ({status:#x})"
    );
}

#[test]
fn pools_at_capacity_at_the_fork_never_make_the_child_wait() {
    in_child("pools");
}

/// The stream controls in a child, on streams with memsets held on the device at the fork,
/// every strategy: `synchronize`, `abort` (which runs on a thread of its own, started in the
/// child), `stop`, and the pending memsets afterwards; each returns, none waits for ever.
fn aborting_in_the_child() {
    let (_guard, ctx, _d1) = exclusive(None);
    let streams: Vec<npu::Stream> = STRATEGIES.iter().map(|&s| stream(&ctx, s)).collect();
    let hold = sim::hold(&ctx.device()).unwrap();
    let pending: Vec<Op<DeviceBuffer<u8>>> = streams
        .iter()
        .map(|s| s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 9))
        .collect();
    sim::flush_releases();
    let (ok, status) = fork_and_check(move || {
        for s in &streams {
            let synced = futures::executor::block_on(s.synchronize());
            assert_forked(&synced.unwrap_err().error);
            let aborted = futures::executor::block_on(s.abort());
            assert!(aborted.is_err(), "an abort in a forked child: {aborted:?}");
            let _ = s.stop();
        }
        for op in pending {
            let (err, back) = futures::executor::block_on(op).unwrap_err().into_parts();
            assert!(back.is_some(), "{err}");
        }
        drop(streams);
    });
    hold.release().unwrap();
    assert!(
        ok,
        "the child synchronizing and aborting failed or hung ({status:#x})"
    );
}

#[test]
fn stream_controls_in_a_forked_child_return() {
    in_child("abort");
}

// ---- A stream that faults on every task (the reactor's fault suspicion). ----

const FAULT: AclCode = AclCode(507015);

/// `n` memsets on `faulting`, each armed to fail, interleaved with memsets on `healthy`,
/// submitted while the device is held; the faulting stream's every notice renews the
/// reactor's suspicion of it.
fn faulting_and_healthy(
    ctx: &Context,
    faulting: &npu::Stream,
    healthy: &npu::Stream,
    n: u64,
) -> (Memsets, Memsets) {
    for nth in 1..=n {
        sim::fail_task(faulting, nth, FAULT).unwrap();
    }
    (0..n)
        .map(|i| {
            (
                faulting.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), i as u8),
                healthy.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), i as u8),
            )
        })
        .unzip()
}

/// The reactor's suspicion of a faulted stream is bounded (`SUSPECT_FOR`) and renewed by each
/// notice: a stream whose every task faults (two hundred in a row, submitted while the device
/// was held) beside a healthy one, under every strategy. Every faulted operation fails with
/// its code, every healthy one completes with its bytes, and the faulting stream works again
/// afterwards.
#[test]
fn a_stream_faulting_on_every_task_completes_everything() {
    let (_guard, ctx, _d1) = exclusive(None);
    for strategy in STRATEGIES {
        let (faulting, healthy) = (stream(&ctx, strategy), stream(&ctx, strategy));
        let hold = sim::hold(&ctx.device()).unwrap();
        let (faulted, fine) = faulting_and_healthy(&ctx, &faulting, &healthy, 200);
        hold.release().unwrap();
        run(async {
            for (i, (bad, good)) in faulted.into_iter().zip(fine).enumerate() {
                let err = bad.await.unwrap_err();
                assert_eq!(err.error.acl_code(), Some(FAULT), "{strategy:?} {i}");
                let good = good.await.unwrap();
                assert_eq!(good.to_vec_blocking().unwrap(), vec![i as u8; 64]);
            }
        });
        let again = run(faulting.memset(DeviceBuffer::<u8>::new(&ctx, 8).unwrap(), 9)).unwrap();
        assert_eq!(again.to_vec_blocking().unwrap(), vec![9; 8], "{strategy:?}");
    }
}

/// The same stream, its device lost while the faulted work is queued: the reactor must still
/// find the streams dead and complete everything (with an error), under every strategy.
fn a_stream_faulting_on_every_task_then_lost() {
    let device = Device::open(1).unwrap();
    let ctx = device.primary_context().clone();
    let mut all = Vec::new();
    let hold = sim::hold(&device).unwrap();
    for strategy in STRATEGIES {
        let (faulting, healthy) = (stream(&ctx, strategy), stream(&ctx, strategy));
        // A first fault, seen, so that the stream is suspect when the rest is queued.
        let (faulted, fine) = faulting_and_healthy(&ctx, &faulting, &healthy, 50);
        all.extend(faulted);
        all.extend(fine);
    }
    sim::lose(&device).unwrap();
    drop(hold);
    run(async {
        for op in all {
            assert!(op.await.is_err(), "work of a lost device fails");
        }
    });
}

#[test]
fn a_stream_faulting_on_every_task_whose_device_is_lost_completes_everything() {
    in_child("lost");
}

// ---- Op polled after it resolved, through combinators. ----

fn assert_resolved_already<T: std::fmt::Debug>(polled: Poll<Result<T, npu::error::OpError<T>>>) {
    let Poll::Ready(Err(err)) = polled else {
        panic!("a resolved Op polled again: {polled:?}")
    };
    assert!(err.value.is_none(), "{err:?}");
    assert!(
        err.error.to_string().contains("polled after it resolved"),
        "{err}"
    );
}

/// `Op` under combinators that poll it after it resolved, or leave it to be polled later:
/// `tokio::select!` in a loop on `&mut op` (the completed branch polled again on the next
/// round), `FuturesUnordered`, `futures::future::select` (the loser awaited afterwards, with
/// its value), an `Op` failed on the device polled again (its error told once), and an `Op`
/// dropped after it resolved. Every strategy.
#[test]
fn an_op_polled_again_by_combinators_tells_its_outcome_once() {
    use futures::StreamExt;
    let (_guard, ctx, _d1) = exclusive(None);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        run(async {
            // select! in a loop: the completed branch's future polled again next round.
            let mut op = s.memset(DeviceBuffer::<u8>::new(&ctx, 16).unwrap(), 1);
            let mut rounds = 0;
            let mut got = None;
            while rounds < 2 {
                rounds += 1;
                tokio::select! {
                    biased;
                    done = &mut op => {
                        if got.is_none() {
                            got = Some(done.unwrap());
                        } else {
                            let err = done.unwrap_err();
                            assert!(err.value.is_none());
                        }
                    }
                }
            }
            assert_eq!(got.unwrap().to_vec_blocking().unwrap(), vec![1; 16]);
            assert_resolved_already(polled_once(Pin::new(&mut op)));
            drop(op);

            // FuturesUnordered, then the same Ops polled again by hand.
            let mut set: futures::stream::FuturesUnordered<_> = (0..8u8)
                .map(|i| s.memset(DeviceBuffer::<u8>::new(&ctx, 8).unwrap(), i))
                .collect();
            let mut seen = 0;
            while let Some(done) = set.next().await {
                let bytes = done.unwrap().to_vec_blocking().unwrap();
                assert!(bytes.iter().all(|&b| b == bytes[0]));
                seen += 1;
            }
            assert_eq!(seen, 8);

            // select: the loser is awaited later and hands its value back.
            let hold = sim::hold(&ctx.device()).unwrap();
            let held = s.memset(DeviceBuffer::<u8>::new(&ctx, 8).unwrap(), 5);
            let ready = std::future::ready(());
            match futures::future::select(held, std::pin::pin!(ready)).await {
                futures::future::Either::Right(((), held)) => {
                    hold.release().unwrap();
                    let mut held = held;
                    let buffer = (&mut held).await.unwrap();
                    assert_eq!(buffer.to_vec_blocking().unwrap(), vec![5; 8]);
                    assert_resolved_already(polled_once(Pin::new(&mut held)));
                }
                futures::future::Either::Left(_) => panic!("a held memset won"),
            }

            // A failed Op polled again: its device error is told once.
            sim::fail_task(&s, 1, FAULT).unwrap();
            let mut failed = s.memset(DeviceBuffer::<u8>::new(&ctx, 8).unwrap(), 6);
            let err = (&mut failed).await.unwrap_err();
            assert_eq!(err.error.acl_code(), Some(FAULT));
            assert!(err.value.is_some());
            assert_resolved_already(polled_once(Pin::new(&mut failed)));
            assert_resolved_already(polled_once(Pin::new(&mut failed)));
            assert!(failed.is_complete());
            drop(failed);
        });
    }
}

// ---- Runtime messages across threads. ----

/// `AclError::message` is the runtime's account of that failure: operations failing on the
/// device with different codes on streams of every strategy (settled on the reactor, callback
/// workers and blocking threads, which settle other streams' failures too), interleaved with
/// failing calls on other threads (a module load, an allocation too large), each error only
/// carries its own message.
#[test]
fn errors_on_shared_threads_carry_only_their_own_messages() {
    let (_guard, ctx, _d1) = exclusive(None);
    let streams: Vec<npu::Stream> = STRATEGIES.iter().map(|&s| stream(&ctx, s)).collect();
    let codes = [AclCode(507015), AclCode(507011), AclCode(507035)];
    for round in 0..6 {
        let loader = {
            let ctx = ctx.clone();
            std::thread::spawn(move || {
                // SAFETY: nothing is loaded: the file does not exist.
                let err =
                    unsafe { Module::from_file(&ctx, "/nonexistent/attack27f.so") }.unwrap_err();
                let Error::Acl(acl) = &err else {
                    panic!("{err:?}")
                };
                let message = acl.detail().unwrap_or_default();
                assert!(!message.contains('\n'), "{err}");
                let huge = DeviceBuffer::<u8>::new(&ctx, 1 << 50).unwrap_err();
                assert!(!huge.to_string().contains("kernel binary"), "{huge}");
            })
        };
        let mut ops = Vec::new();
        for (i, s) in streams.iter().enumerate() {
            let code = codes[(i + round) % codes.len()];
            sim::fail_task(s, 1, code).unwrap();
            ops.push((code, s.memset(DeviceBuffer::<u8>::new(&ctx, 8).unwrap(), 1)));
        }
        run(async {
            for (code, op) in ops {
                let err = op.await.unwrap_err().error;
                assert_eq!(err.acl_code(), Some(code), "{err}");
                let Error::Acl(acl) = &err else {
                    panic!("{err:?}")
                };
                if let Some(message) = &acl.message {
                    for other in codes.iter().filter(|&&c| c != code) {
                        assert!(
                            !message.contains(&other.0.to_string()),
                            "{code:?}'s error carries another failure's message: {err}"
                        );
                    }
                    assert!(!message.contains("kernel binary"), "{err}");
                }
            }
        });
        loader.join().unwrap();
        let checked = ctx.runtime().check("aclrtProbe", 107000).unwrap_err();
        let Error::Acl(acl) = &checked else {
            panic!("{checked:?}")
        };
        assert_eq!(acl.message, None, "round {round}: {checked}");
    }
}

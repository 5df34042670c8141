//! Attacks of the nineteenth session's helper, through the `npu` facade: user code of the
//! public memory traits (`Memory::context`, `addr`, `len`, `MemoryMut::addr_mut`) panicking at
//! every call npu-rs makes into it during a submission, not only in `record_use`; the drain
//! such a submission now hands its operation to, behind held work, an abort and a stop; and a
//! value whose drop panics on the reaper.
//!
//! Each test names the promise it attacks. The simulator's hold gate and live counters are
//! process-wide, so every test takes the file's device lock; every wait is bounded, so a hang
//! fails its test instead of stalling the suite.

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use npu::prelude::*;
use npu::stream::{Completion, ValueCondition, ValueWord};
use npu::{Function, PinnedPool};

/// A countdown shared by the wrappers of one operation: the call that takes it to zero panics.
#[derive(Clone)]
struct Tripwire(Arc<AtomicUsize>);

impl Tripwire {
    fn new(calls: usize) -> Self {
        Tripwire(Arc::new(AtomicUsize::new(calls)))
    }

    fn step(&self, what: &str) {
        if self.0.fetch_sub(1, Ordering::AcqRel) == 1 {
            panic!("a user Memory panicked in {what}");
        }
    }

    /// Whether the wire went off (its count passed zero).
    fn tripped(&self) -> bool {
        self.0.load(Ordering::Acquire) > usize::MAX / 2 || self.0.load(Ordering::Acquire) == 0
    }
}

/// Memory wrapping a real buffer whose every method but `record_use` steps a [`Tripwire`]:
/// a user implementation of the public (unsafe) memory traits that panics at one chosen call.
struct Trapped<M> {
    inner: M,
    wire: Tripwire,
}

// SAFETY: every method answers for the wrapped memory (or panics before answering).
unsafe impl<M: Memory> Memory for Trapped<M> {
    type Elem = M::Elem;
    fn context(&self) -> &Context {
        self.wire.step("context");
        self.inner.context()
    }
    fn addr(&self) -> *const std::ffi::c_void {
        self.wire.step("addr");
        self.inner.addr()
    }
    fn len(&self) -> usize {
        self.wire.step("len");
        self.inner.len()
    }
    fn record_use(&self, completion: &Completion) {
        self.inner.record_use(completion)
    }
}

// SAFETY: as above, the wrapped memory's.
unsafe impl<M: MemoryMut> MemoryMut for Trapped<M> {
    fn addr_mut(&mut self) -> *mut std::ffi::c_void {
        self.wire.step("addr_mut");
        self.inner.addr_mut()
    }
}

// SAFETY: the wrapped memory is device memory.
unsafe impl<M: DeviceSlice> DeviceSlice for Trapped<M> {}

// SAFETY: the wrapped memory is page-locked host memory.
unsafe impl<M: HostSlice> HostSlice for Trapped<M> {}

/// One kind of submission with one trapped buffer; returns whether the wire went off.
type Case = fn(&npu::Stream, &Context, &Tripwire) -> bool;

fn trapped<M>(inner: M, wire: &Tripwire) -> Trapped<M> {
    Trapped {
        inner,
        wire: wire.clone(),
    }
}

/// Submits and awaits `op` (made by `submit`, which may panic); whether the wire went off.
fn attempt<T>(wire: &Tripwire, submit: impl FnOnce() -> npu::Op<T>) -> bool
where
    T: Send + 'static,
{
    match catch_unwind(AssertUnwindSafe(|| run(submit()))) {
        Err(_) => {
            assert!(wire.tripped(), "only the wire panics");
            true
        }
        Ok(result) => {
            result.unwrap();
            wire.tripped()
        }
    }
}

/// Awaits a staged copy (which may panic inside its submission) through `pool`; whether the
/// wire went off. The pool's blocks must all come back.
fn staged<T, E, F>(wire: &Tripwire, pool: &PinnedPool, copy: impl FnOnce() -> F) -> bool
where
    F: std::future::Future<Output = Result<T, E>>,
{
    let tripped = match catch_unwind(AssertUnwindSafe(|| run(copy()))) {
        Err(_) => {
            assert!(wire.tripped(), "only the wire panics");
            true
        }
        Ok(result) => {
            assert!(result.is_ok(), "the staged copy works");
            wire.tripped()
        }
    };
    until_released("the staging block is back in its pool", || {
        pool.stats().allocated == 0
    });
    tripped
}

/// `scale_f32` `{float *x, uint64_t n, float alpha}` from the registry.
fn scale_function(ctx: &Context) -> Function {
    in_process(ctx, "scale_f32")
}

const CASES: [(&str, Case); 11] = [
    ("write_value, trapped word", |s, ctx, wire| {
        let memory = trapped(DeviceBuffer::<u64>::new(ctx, 1).unwrap(), wire);
        let Ok(word) = catch_unwind(AssertUnwindSafe(|| ValueWord::from_memory(memory).ok()))
        else {
            return true;
        };
        attempt(wire, || s.write_value(word.expect("one aligned word"), 5))
    }),
    ("wait_value, shared trapped word", |s, ctx, wire| {
        let memory = trapped(DeviceBuffer::<u64>::new(ctx, 1).unwrap(), wire);
        let Ok(word) = catch_unwind(AssertUnwindSafe(|| ValueWord::from_memory(memory).ok()))
        else {
            return true;
        };
        let word = Arc::new(word.expect("one aligned word"));
        attempt(wire, || s.wait_value(word, 0, ValueCondition::AtLeast))
    }),
    ("launch, trapped view argument", |s, ctx, wire| {
        let scale = scale_function(ctx);
        let x = DeviceBuffer::from_host_blocking(ctx, &[1.0f32; 4]).unwrap();
        let Ok(Some(x)) = catch_unwind(AssertUnwindSafe(|| trapped(x, wire).view(..).ok())) else {
            return true;
        };
        // SAFETY: scale_f32 scales n = 4 elements of x, which holds 4.
        attempt(wire, || unsafe { s.launch(&scale, 1, (x, 4u64, 2.0f32)) })
    }),
    (
        "copy_from_slice_staged, trapped destination",
        |s, ctx, wire| {
            let pool = PinnedPool::new(ctx);
            let dst = trapped(DeviceBuffer::<u32>::new(ctx, 16).unwrap(), wire);
            staged(wire, &pool, || {
                s.copy_from_slice_staged(&pool, &[4u32; 16], dst)
            })
        },
    ),
    ("copy_to_vec_staged, trapped source", |s, ctx, wire| {
        let pool = PinnedPool::new(ctx);
        let src = trapped(
            DeviceBuffer::from_host_blocking(ctx, &[5u32; 16]).unwrap(),
            wire,
        );
        staged(wire, &pool, || s.copy_to_vec_staged(&pool, src))
    }),
    ("copy_h2d, trapped source", |s, ctx, wire| {
        let src = trapped(PinnedBuffer::from_slice(ctx, &[1u32; 16]).unwrap(), wire);
        let dst = DeviceBuffer::<u32>::new(ctx, 16).unwrap();
        attempt(wire, || s.copy_h2d(src, dst))
    }),
    ("copy_h2d, trapped destination", |s, ctx, wire| {
        let src = PinnedBuffer::from_slice(ctx, &[1u32; 16]).unwrap();
        let dst = trapped(DeviceBuffer::<u32>::new(ctx, 16).unwrap(), wire);
        attempt(wire, || s.copy_h2d(src, dst))
    }),
    ("copy_d2h, trapped destination", |s, ctx, wire| {
        let src = DeviceBuffer::from_host_blocking(ctx, &[2u32; 16]).unwrap();
        let dst = trapped(PinnedBuffer::<u32>::new(ctx, 16).unwrap(), wire);
        attempt(wire, || s.copy_d2h(src, dst))
    }),
    ("copy_d2d, trapped source", |s, ctx, wire| {
        let src = trapped(DeviceBuffer::<u32>::new(ctx, 16).unwrap(), wire);
        let dst = DeviceBuffer::<u32>::new(ctx, 16).unwrap();
        attempt(wire, || s.copy_d2d(src, dst))
    }),
    ("copy_2d_h2d, trapped destination", |s, ctx, wire| {
        let src = PinnedBuffer::from_slice(ctx, &[3u32; 16]).unwrap();
        let dst = trapped(DeviceBuffer::<u32>::new(ctx, 16).unwrap(), wire);
        let shape = npu::stream::Copy2d {
            width: 4,
            height: 4,
            src_pitch: 4,
            dst_pitch: 4,
        };
        attempt(wire, || s.copy_2d_h2d(src, dst, shape))
    }),
    ("memset, trapped destination", |s, ctx, wire| {
        let dst = trapped(DeviceBuffer::<u32>::new(ctx, 16).unwrap(), wire);
        attempt(wire, || s.memset(dst, 9))
    }),
];

/// The leak promise (a refused operation hands back or releases every buffer it took), for
/// user memory that panics at any call npu-rs makes into it while submitting, not only in
/// `record_use`: the panic propagates, the operation's other buffer is released (its use was
/// recorded before the panic), and the stream keeps working. Each case is run with the panic
/// moved one call later each round, until a round runs without it.
#[test]
fn a_memory_panicking_at_any_call_of_a_submission_leaks_nothing() {
    let (_guard, ctx, _) = exclusive(None);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        for (name, case) in CASES {
            for calls in 1.. {
                let before = live_memory(&ctx);
                let wire = Tripwire::new(calls);
                let tripped = case(&s, &ctx, &wire);
                until_released(
                    &format!("{strategy:?}, {name}, panic at call {calls}: every buffer freed"),
                    || within(live_memory(&ctx), before),
                );
                let filled = run(s.memset(DeviceBuffer::<u8>::new(&ctx, 8).unwrap(), 7)).unwrap();
                assert_eq!(
                    filled.to_vec_blocking().unwrap(),
                    [7; 8],
                    "{strategy:?} {name}"
                );
                run(s.synchronize()).unwrap();
                if !tripped {
                    assert!(calls > 2, "{name}: the wire went off inside the submission");
                    break;
                }
                assert!(calls < 64, "{name}: the wire went off at every call");
            }
        }
    }
}

/// Device memory whose drop panics after its buffer is released: a user implementation of the
/// public memory traits whose `Drop` is as hostile as it may be.
struct PanicOnDrop(Option<DeviceBuffer<u32>>);

impl Drop for PanicOnDrop {
    fn drop(&mut self) {
        drop(self.0.take());
        panic!("a user Memory panicked when dropped");
    }
}

// SAFETY: every method answers for the wrapped buffer, which it holds until dropped.
unsafe impl Memory for PanicOnDrop {
    type Elem = u32;
    fn context(&self) -> &Context {
        self.0.as_ref().unwrap().context()
    }
    fn addr(&self) -> *const std::ffi::c_void {
        self.0.as_ref().unwrap().addr()
    }
    fn len(&self) -> usize {
        self.0.as_ref().unwrap().len()
    }
    fn record_use(&self, completion: &Completion) {
        Memory::record_use(self.0.as_ref().unwrap(), completion)
    }
}

// SAFETY: as above.
unsafe impl MemoryMut for PanicOnDrop {
    fn addr_mut(&mut self) -> *mut std::ffi::c_void {
        self.0.as_mut().unwrap().addr_mut()
    }
}

// SAFETY: the wrapped buffer is device memory.
unsafe impl DeviceSlice for PanicOnDrop {}

/// Rule 6 for the values of dropped operations: a value whose drop panics, dropped by the
/// reaper once the device is done, harms nothing else. The operation's other buffer (dropped
/// with it) is released, the reaper runs later releases, and a pool block dropped in flight
/// after it returns to its pool.
#[test]
fn a_value_panicking_when_dropped_on_the_reaper_harms_no_other_release() {
    let (_guard, ctx, _) = exclusive(None);
    let pool = PinnedPool::new(&ctx);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let before = live_memory(&ctx);
        let held = npu::sim::hold(&ctx.device()).unwrap();
        let src = DeviceBuffer::from_host_blocking(&ctx, &[6u32; 16]).unwrap();
        let dst = PanicOnDrop(Some(DeviceBuffer::<u32>::new(&ctx, 16).unwrap()));
        let hostile = s.copy_d2d(src, dst);
        let block = run(pool.alloc::<u32>(16)).unwrap();
        let later = s.copy_d2h(DeviceBuffer::<u32>::new(&ctx, 16).unwrap(), block);
        let done = [hostile.completion().clone(), later.completion().clone()];
        drop((hostile, later));
        assert!(!done[0].is_complete(), "{strategy:?}: the device is held");
        held.release().unwrap();
        all_completed(&done);
        until_released(
            &format!("{strategy:?}: both copies' buffers are freed after the panicking drop"),
            // The pool keeps its returned block cached: its host allocation stays live.
            || live_memory(&ctx)[0] <= before[0] && pool.stats().allocated == 0,
        );
        let filled = run(s.memset(DeviceBuffer::<u8>::new(&ctx, 8).unwrap(), 3)).unwrap();
        assert_eq!(filled.to_vec_blocking().unwrap(), [3; 8], "{strategy:?}");
    }
}

/// The drain that a panicking submission now hands its operation to, attacked: behind held
/// work the operation's buffers stay allocated (it may not be known whether the runtime
/// accepted it), an abort or a stop of the stream resolves the drain, everything is released,
/// and the stream works again.
#[test]
fn a_submission_that_panicked_behind_held_work_resolves_with_an_abort_or_a_stop() {
    let (_guard, ctx, _) = exclusive(None);
    for strategy in STRATEGIES {
        for stop in [false, true] {
            let what = format!("{strategy:?}, stop={stop}");
            let s = stream(&ctx, strategy);
            let before = live_memory(&ctx);
            let held = npu::sim::hold(&ctx.device()).unwrap();
            let queued = s.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
            let wire = Tripwire::new(2);
            let src = PinnedBuffer::from_slice(&ctx, &[1u32; 16]).unwrap();
            let dst = trapped(DeviceBuffer::<u32>::new(&ctx, 16).unwrap(), &wire);
            let panicked = catch_unwind(AssertUnwindSafe(|| drop(s.copy_h2d(src, dst))));
            assert!(
                panicked.is_err() && wire.tripped(),
                "{what}: the wire went off"
            );
            npu::sim::flush_releases();
            assert!(
                !within(live_memory(&ctx), before),
                "{what}: nothing is released under held work"
            );
            if stop {
                s.stop().unwrap();
                held.release().unwrap();
            } else {
                let abort = s.abort();
                held.release().unwrap();
                run(abort).unwrap();
            }
            let outcome = run(queued);
            assert!(
                outcome.is_ok() || stop || outcome.as_ref().is_err_and(|e| e.is_aborted()),
                "{what}: {outcome:?}"
            );
            drop(outcome);
            until_released(&format!("{what}: everything is released"), || {
                within(live_memory(&ctx), before)
            });
            if stop {
                run(s.abort()).unwrap();
            }
            let filled = run(s.memset(DeviceBuffer::<u8>::new(&ctx, 8).unwrap(), 5)).unwrap();
            assert_eq!(filled.to_vec_blocking().unwrap(), [5; 8], "{what}");
        }
    }
}

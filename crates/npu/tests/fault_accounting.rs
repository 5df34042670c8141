//! Where device faults and pooled memory are accounted for, through the `npu` facade: the
//! fault of work drained without a completion event (the device out of events), which a fence
//! hands to the stream's failure record, across an abort or a stop, beside a second drained
//! fault, and when the fence's own wait fails; the blocks a `DevicePool` gives back (a trim's,
//! an eviction's, an unclaimed allocation's) caught between leaving the pool and their frees
//! being queued by a request out of memory, and a bounded caching pool's hit going on beside
//! an eviction held there; and the work a raw `aclrtDeviceTaskAbort`
//! discards (or, refused by another callback, does not).
//!
//! The simulator of this process has five devices of 64 MiB (installed by the first test to
//! take the lock), so that a pool can fill a device; devices 2 to 4 are lost by the test that
//! loses a device. Every test takes the device lock; every wait is bounded (`run`, `until`,
//! `until_released`), so a hang fails its test.

mod common;

use std::future::Future;
use std::sync::{Condvar, Mutex, Once};

use common::*;
use npu::error::AclCode;
use npu::memory::{DevicePool, DevicePoolBackend};
use npu::prelude::*;
use npu::{Stream, ffi, sim};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context as LayerContext, SubscriberExt};

/// The memory of each simulated device in this process.
const DEVICE_MEMORY: u64 = 64 << 20;

/// A request the filled device cannot serve before the pool's cache is freed.
const BIG: usize = 24 << 20;

/// The device lock and device 0's primary context, on this file's simulator, once device 0's
/// memory is all back: the tests before may have dropped pools whose blocks go back on the
/// reaper or a pool's destroying thread, and several of these tests fill the device.
fn devices() -> (std::sync::MutexGuard<'static, ()>, Context) {
    let (guard, ctx) = devices_of(5, DEVICE_MEMORY);
    until("device 0's memory is back from the tests before", || {
        sim::device_stats(&ctx.device()).unwrap().bytes_allocated == 0
    });
    (guard, ctx)
}

/// [`drain_a_failing_memset`], then the events given back and the next memset submitted, which
/// fences the drained work off and resolves with its own bytes. The failed task's id.
fn a_drained_fault_fenced_off(ctx: &Context, s: &Stream) -> u32 {
    let (events, task) = drain_a_failing_memset(ctx, s);
    drop(events);
    a_memset_writes(ctx, s, 1, &format!("{:?}", s.strategy()));
    task
}

/// How the stream is reset after its fence reported the drained fault.
#[derive(Debug, Clone, Copy)]
enum Reset {
    Abort,
    StopThenAbort,
    /// An abort that discards a `synchronize` queued behind a held device.
    AbortDiscardingASynchronize,
}

/// A drained task's fault, captured by the fence and not yet read by a `synchronize`, is
/// reported by the next `synchronize` after an abort (alone, after a stop, or discarding a
/// queued `synchronize`, which fails `Aborted` and reports nothing): the abort discards work
/// not yet run, and that task ran and failed before it began. Its own operation reported only
/// the refusal of its completion event, so the record was the one place left. The break: the
/// abort cleared the stream's failure record whole, and the fault was reported nowhere.
#[test]
fn an_abort_keeps_a_drained_fault_the_fence_captured_before_it() {
    let (_devices, _) = devices();
    let device = Device::open(1).unwrap();
    for strategy in STRATEGIES {
        for reset in [
            Reset::Abort,
            Reset::StopThenAbort,
            Reset::AbortDiscardingASynchronize,
        ] {
            in_a_fresh_context(&device, |ctx| {
                let s = stream(ctx, strategy);
                let task = a_drained_fault_fenced_off(ctx, &s);
                match reset {
                    Reset::Abort => run(s.abort()).unwrap(),
                    Reset::StopThenAbort => {
                        s.stop().unwrap();
                        run(s.abort()).unwrap();
                    }
                    Reset::AbortDiscardingASynchronize => {
                        let held = sim::hold(&device).unwrap();
                        let queued = s.synchronize();
                        run(s.abort()).unwrap();
                        drop(held);
                        let discarded = run(queued).unwrap_err();
                        assert!(
                            discarded.error.is_aborted(),
                            "{strategy:?} {reset:?}: {discarded}"
                        );
                    }
                }
                a_memset_writes(ctx, &s, 2, &format!("{strategy:?} {reset:?}"));
                synchronize_reports_the_drained_fault(&s, task);
            });
        }
    }
}

/// What an abort clears: the failures of the work it discarded and of the work a stop left
/// undone, which carry no fault of a task that ran. A stream stopped with a memset queued
/// behind a held device fails that memset; once aborted, its next `synchronize` succeeds.
#[test]
fn an_abort_clears_what_a_stop_left_undone() {
    let (_devices, _) = devices();
    let device = Device::open(1).unwrap();
    for strategy in STRATEGIES {
        in_a_fresh_context(&device, |ctx| {
            let s = stream(ctx, strategy);
            let held = sim::hold(&device).unwrap();
            let stopped = s.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), 1);
            s.stop().unwrap();
            drop(held);
            let failed = run(stopped).unwrap_err();
            assert!(failed.error.fault().is_none(), "{strategy:?}: {failed}");
            run(s.abort()).unwrap();
            run(s.synchronize()).unwrap_or_else(|err| panic!("{strategy:?}: {err}"));
        });
    }
}

/// A memset of `value` on `s` queued behind the held `device`, which a raw device task abort
/// (`aclrtDeviceTaskAbort`, succeeding) discards: it fails `Aborted` and hands its 64-byte
/// buffer back (`what` names the case in a failure).
fn a_memset_a_device_task_abort_discards(
    ctx: &Context,
    device: &Device,
    s: &Stream,
    value: u8,
    what: &str,
) {
    let held = sim::hold(device).unwrap();
    let queued = s.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), value);
    assert_eq!(device_task_abort(ctx, 1000), AclCode(0), "{what}");
    drop(held);
    let discarded = run(queued).unwrap_err();
    let aborted = matches!(discarded.error, npu::Error::Aborted { .. });
    assert!(aborted, "{what}: {discarded}");
    assert_eq!(discarded.value.map(|b| b.len()), Some(64), "{what}");
}

/// A device-wide abort made through the raw API (`aclrtDeviceTaskAbort`, not npu-rs's
/// `Stream::abort`) discards a memset queued behind a held device, and its completion event's
/// record with it: npu-rs's abort callback marks the stream's work before the runtime's
/// discard and confirms it after, so the memset fails as aborted and hands its buffer back,
/// and the stream runs new work. The break: the event was never reached, the stream was
/// alive and idle, and the memset stayed pending for ever under every strategy.
#[test]
fn a_raw_device_task_abort_fails_the_work_it_discarded() {
    let (_devices, _) = devices();
    let device = Device::open(1).unwrap();
    for strategy in STRATEGIES {
        in_a_fresh_context(&device, |ctx| {
            let s = stream(ctx, strategy);
            a_memset_a_device_task_abort_discards(ctx, &device, &s, 1, &format!("{strategy:?}"));
            a_memset_writes(ctx, &s, 2, &format!("{strategy:?}"));
            run(s.synchronize()).unwrap_or_else(|err| panic!("{strategy:?}: {err}"));
        });
    }
}

/// A device task abort that another registrant's PRE callback refuses discards nothing, and
/// npu-rs, whose callback marked the stream's work before it, takes nothing for discarded:
/// the queued memset runs once the device is released. The next abort, which happens, fails
/// the memset queued before it, its mark taking the place of the refused one's.
#[test]
fn a_device_task_abort_refused_by_another_callback_discards_nothing() {
    let (_devices, _) = devices();
    let device = Device::open(1).unwrap();
    for strategy in STRATEGIES {
        in_a_fresh_context(&device, |ctx| {
            let s = stream(ctx, strategy);
            let held = sim::hold(&device).unwrap();
            let kept = s.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), 1);
            let refused = refused_device_task_abort(ctx, 1000);
            assert_eq!(refused, AclCode(ffi::ACL_ERROR_RT_TASK_ABORT_STOP));
            drop(held);
            let kept = run(kept).unwrap_or_else(|err| panic!("{strategy:?}: {err}"));
            assert_eq!(kept.to_vec_blocking().unwrap(), [1; 64]);

            a_memset_a_device_task_abort_discards(ctx, &device, &s, 2, &format!("{strategy:?}"));
            run(s.synchronize()).unwrap_or_else(|err| panic!("{strategy:?}: {err}"));
        });
    }
}

/// Two drained tasks' faults before any `synchronize`: the first fenced off by the memset
/// after it, which one event given back lets record the fence but not its own event, so that
/// its task, which fails too, is drained in turn (or, had the fence's event come back in
/// time, fails on its own event); all the events back, the next memset fences that off. The
/// stream's failure record keeps the first failure since the last `synchronize`, as
/// `aclrtSynchronizeStream` reports the first task error: the next `synchronize` reports the
/// first drained task's fault (its `DeviceFault` names that task), and the one after it
/// nothing. A second drained operation reports the refusal of its event, and its task's fault
/// is reported nowhere else (by design: docs/cancellation.md).
#[test]
fn a_synchronize_reports_the_first_of_two_drained_faults() {
    let (_devices, _) = devices();
    let device = Device::open(1).unwrap();
    for strategy in STRATEGIES {
        in_a_fresh_context(&device, |ctx| {
            let s = stream(ctx, strategy);
            let (mut events, first) = drain_a_failing_memset(ctx, &s);
            drop(events.pop());
            sim::fail_task(&s, 1, AclCode(507015)).unwrap();
            let second = s.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), 2);
            // Its own record, if it got an event, is the last task of the submission.
            let last_of_its_own = last_task_id(ctx);
            let failed = run(second).unwrap_err();
            let own_fault = failed.error.fault().map(|fault| fault.task_id);
            let drained = failed.error.acl_code() == Some(AclCode(207007));
            let own = own_fault.is_some_and(|task| task > first && task <= last_of_its_own);
            assert!(drained || own, "{strategy:?}: {failed}");
            drop(events);
            a_memset_writes(ctx, &s, 3, &format!("{strategy:?}"));
            synchronize_reports_the_drained_fault(&s, first);
        });
    }
}

/// A fence whose own wait fails: queued with the operation after the drained work behind a
/// held device, which is then lost. The fence fails with the loss in place of what it
/// captured (its record never ran), as any operation's failed wait does; the operation fails
/// with its buffer back, and every `synchronize` reports the loss, which stands for every
/// fault of the stream from then on. Nothing hangs. Devices 2 to 4, lost for good.
#[test]
fn a_fence_whose_wait_fails_reports_the_device_loss() {
    let _devices = devices();
    for (strategy, id) in STRATEGIES.into_iter().zip(2..) {
        let device = Device::open(id).unwrap();
        let ctx = device.primary_context();
        let s = stream(ctx, strategy);
        let (events, _) = drain_a_failing_memset(ctx, &s);
        drop(events);
        let held = sim::hold(&device).unwrap();
        let fenced = s.memset(DeviceBuffer::<u8>::new(ctx, 64).unwrap(), 1);
        sim::lose(&device).unwrap();
        drop(held);
        let failed = run(fenced).unwrap_err();
        assert!(failed.value.is_some(), "{strategy:?}: {failed}");
        for _ in 0..2 {
            let err = run(s.synchronize()).unwrap_err().error;
            assert_eq!(
                err.acl_code(),
                Some(AclCode::DEVICE_LOST),
                "{strategy:?}: {err}"
            );
        }
    }
}

/// Where the thread giving blocks back (a trim, an eviction, an unclaimed allocation's drop)
/// stops when armed: at the log of its frees (the blocks out of the cache or the allocation,
/// their frees not yet queued), and what the requesting thread has done.
struct FreeGate {
    armed: bool,
    held: bool,
    /// The requesting thread's allocation failed out of memory.
    refused: bool,
}

static FREE_GATE: Mutex<FreeGate> = Mutex::new(FreeGate {
    armed: false,
    held: false,
    refused: false,
});
static FREE_GATE_CHANGED: Condvar = Condvar::new();

/// The thread that gives blocks back, which the gate holds.
const HOLDER: &str = "fa-give-back";
/// The thread that requests the memory given back.
// Both under the 15 bytes `/proc` keeps of a thread's name.
const REQUESTER: &str = "fa-request";

/// Whether `event` is one whose message contains `text`.
fn says(event: &tracing::Event<'_>, text: &str) -> bool {
    let mut found = false;
    event.record(
        &mut |field: &tracing::field::Field, value: &dyn std::fmt::Debug| {
            if field.name() == "message" {
                found |= format!("{value:?}").contains(text);
            }
        },
    );
    found
}

/// A tracing layer that holds [`HOLDER`] at the log of its frees (queued on the release
/// stream, or `aclrtFree` on the caching backend) while the gate is armed, and notes
/// [`REQUESTER`]'s allocation refused out of memory (the simulator logs each failed call):
/// the test's hold on a thread that makes only immediate runtime calls, which the device's
/// hold cannot stop.
struct HoldsFrees;

impl<S: tracing::Subscriber> Layer<S> for HoldsFrees {
    fn on_event(&self, event: &tracing::Event<'_>, _: LayerContext<'_, S>) {
        let thread = std::thread::current();
        let mut gate = FREE_GATE.lock().unwrap_or_else(|e| e.into_inner());
        let refused = ["aclrtMemPoolMallocAsync failed", "aclrtMalloc failed"];
        if thread.name() == Some(REQUESTER) && refused.iter().any(|text| says(event, text)) {
            gate.refused = true;
            FREE_GATE_CHANGED.notify_all();
            return;
        }
        let freeing = ["release stream", "freeing cached blocks"];
        if thread.name() != Some(HOLDER) || !gate.armed || !freeing.iter().any(|t| says(event, t)) {
            return;
        }
        gate.held = true;
        FREE_GATE_CHANGED.notify_all();
        while gate.armed {
            gate = FREE_GATE_CHANGED
                .wait(gate)
                .unwrap_or_else(|e| e.into_inner());
        }
        gate.held = false;
    }
}

/// Arms the gate (installing the layer as the process's subscriber the first time, with
/// the simulator's and npu-stream's events enabled).
fn arm_the_free_gate() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        let subscriber = tracing_subscriber::registry().with(HoldsFrees);
        tracing::subscriber::set_global_default(subscriber).unwrap();
    });
    let mut gate = FREE_GATE.lock().unwrap();
    gate.armed = true;
    gate.refused = false;
}

/// Opens the gate: the held trimming thread goes on.
fn open_the_free_gate() {
    FREE_GATE.lock().unwrap().armed = false;
    FREE_GATE_CHANGED.notify_all();
}

/// Waits (bounded) until the gate's state satisfies `done`.
fn until_the_gate(what: &str, done: impl Fn(&FreeGate) -> bool) {
    let gate = FREE_GATE.lock().unwrap_or_else(|e| e.into_inner());
    let (gate, timeout) = FREE_GATE_CHANGED
        .wait_timeout_while(gate, HANG, |gate| !done(gate))
        .unwrap_or_else(|e| e.into_inner());
    assert!(!timeout.timed_out(), "never: {what}");
    drop(gate);
}

/// Whether the thread of this process named `name` is asleep (`/proc`'s state `S`): blocked,
/// here on a lock, as nothing else it does between its refused allocation and its drain
/// sleeps.
fn asleep(name: &str) -> bool {
    let tasks = std::fs::read_dir("/proc/self/task").unwrap();
    tasks.flatten().any(|task| {
        let path = task.path();
        let named =
            std::fs::read_to_string(path.join("comm")).is_ok_and(|comm| comm.trim() == name);
        // The state follows the name, which is in parentheses: "tid (name) S ...".
        let sleeping = std::fs::read_to_string(path.join("stat")).is_ok_and(|stat| {
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('S'))
        });
        named && sleeping
    })
}

/// Opens the gate when dropped: a failed wait of the test's thread must not leave the holder
/// held, which the thread scope would then wait for without end.
struct OpensTheGate;

impl Drop for OpensTheGate {
    fn drop(&mut self) {
        open_the_free_gate();
    }
}

/// Runs `give_back` on [`HOLDER`], held at the log of its frees, and meanwhile a request of
/// `bytes` on `s` on [`REQUESTER`], which fails its first attempt out of memory (the pools
/// here have room for the request beside what is held, so its grant itself evicts nothing
/// and waits for no drain lock) and then either gives up or waits, asleep; then lets the
/// holder go. What `give_back` returned,
/// and the request's block length or error.
fn requested_while_held<T: Send>(
    pool: &DevicePool,
    s: &Stream,
    bytes: usize,
    give_back: impl FnOnce() -> T + Send,
) -> (T, npu::Result<usize>) {
    arm_the_free_gate();
    std::thread::scope(|scope| {
        let _opens = OpensTheGate;
        let giving = std::thread::Builder::new()
            .name(HOLDER.into())
            .spawn_scoped(scope, give_back)
            .unwrap();
        until_the_gate("the blocks given back are held", |gate| gate.held);
        let requesting = std::thread::Builder::new()
            .name(REQUESTER.into())
            .spawn_scoped(scope, || {
                run(pool.alloc::<u8>(s, bytes)).map(|block| block.len())
            })
            .unwrap();
        until("the request is refused or waits", || {
            FREE_GATE.lock().unwrap().refused || asleep(REQUESTER)
        });
        // Refused out of memory, then either done (it gave up) or waiting for the frees.
        until("the request gives up or waits", || {
            requesting.is_finished() || asleep(REQUESTER)
        });
        open_the_free_gate();
        (giving.join().unwrap(), requesting.join().unwrap())
    })
}

/// A request out of memory while a `trim` holds the blocks it took out of the cache, their
/// frees not yet queued on the release stream, waits for the trim and then for those frees,
/// and is served: the memory was on its way back. The trimming thread is held at the log of
/// its frees; the request's thread fails its first attempt out of memory meanwhile. The
/// break: the request found the cache empty and no frees counted, took nothing to be on its
/// way back, and failed out of memory while the trim was giving the device's memory back.
#[test]
fn a_request_out_of_memory_during_a_trim_waits_for_the_memory_it_gives_back() {
    let (_devices, ctx) = devices();
    let s = stream(&ctx, npu::stream::Strategy::EventPoll);
    let pool = pool_holding_the_device(&ctx, &s);
    let (trimmed, served) = requested_while_held(&pool, &s, BIG, || pool.trim());
    let trimmed = trimmed.unwrap();
    assert!(trimmed >= 48 << 20, "{trimmed} bytes");
    assert_eq!(served.unwrap_or_else(|err| panic!("{err}")), BIG);
}

/// The caching backend's frees are immediate, but a trim takes the blocks out of the cache
/// before it frees them: a request out of memory while a trim on another thread holds them,
/// their `aclrtFree` not yet made, waits for the trim and retries, and is served. The break:
/// the request found the cache empty and nothing to free, and failed out of memory while the
/// trim was giving the device's memory back (the caching backend took no lock there).
#[test]
fn a_caching_request_out_of_memory_during_a_trim_waits_for_the_memory_it_gives_back() {
    let (_devices, ctx) = devices();
    let s = stream(&ctx, npu::stream::Strategy::EventPoll);
    let pool = device_pool(&ctx, DevicePoolBackend::Caching, None);
    drop(fill_the_device(&pool, &s));
    let cached = pool.stats().cache.cached;
    assert!(cached >= BIG, "{cached} bytes");
    let (trimmed, served) = requested_while_held(&pool, &s, BIG, || pool.trim());
    assert_eq!(trimmed.unwrap(), cached);
    assert_eq!(served.unwrap_or_else(|err| panic!("{err}")), BIG);
}

/// Device buffers of `piece` bytes outside any pool, allocated until the device is out of
/// memory: less than `piece` is left.
fn fill_outside_the_pool(ctx: &Context, piece: usize) -> Vec<DeviceBuffer<u8>> {
    let mut filler = Vec::new();
    let full = loop {
        match DeviceBuffer::<u8>::new(ctx, piece) {
            Ok(buffer) => filler.push(buffer),
            Err(err) => break err,
        }
    };
    assert!(full.is_out_of_memory(), "{full}");
    filler
}

/// A request out of memory while a bounded pool's eviction holds the cached blocks it took to
/// make room for another request, their frees not yet queued, waits for them and is served.
/// The pool (36 MiB) caches a 16 MiB block and the device is full: a 24 MiB request evicts it
/// (16 + 24 > 36) on the held thread, and an 8 MiB request, which fits beside the 24 MiB
/// room, fails its first attempt meanwhile. The 24 MiB request itself never fits the 16 MiB
/// left, so only the waiting request can take the memory. The break: it found the cache empty
/// and no frees counted, and failed out of memory while the eviction gave 16 MiB back.
#[test]
fn a_request_out_of_memory_during_an_eviction_waits_for_the_memory_it_gives_back() {
    const MIB: usize = 1 << 20;
    let (_devices, ctx) = devices();
    let s = stream(&ctx, npu::stream::Strategy::EventPoll);
    let pool = device_pool(&ctx, DevicePoolBackend::RuntimePool, Some(36 * MIB));
    drop(run(pool.alloc::<u8>(&s, 16 * MIB)).unwrap());
    assert_eq!(pool.stats().cache.cached, 16 * MIB);
    let filler = fill_outside_the_pool(&ctx, 4 << 20);
    let (evicting, served) = requested_while_held(&pool, &s, 8 * MIB, || {
        run(pool.alloc::<u8>(&s, BIG)).map(|block| block.len())
    });
    let evicting = evicting.expect_err("24 MiB never fit the 16 MiB given back");
    assert!(evicting.is_out_of_memory(), "{evicting}");
    assert_eq!(pool.stats().cache.evictions, 1);
    assert_eq!(served.unwrap_or_else(|err| panic!("{err}")), 8 * MIB);
    drop(filler);
}

/// A request out of memory while a block dropped into a bounded pool makes it evict its cache
/// for a queued waiter, the evicted blocks' frees not yet queued, waits for them and is served.
/// The pool (19 MiB) caches an 8 MiB block and lends a 4 MiB one; a 16 MiB request waits
/// (4 + 16 > 19), and the device is full. The 4 MiB block dropped on the held thread serves
/// the waiter: both cached blocks are evicted (12 + 16 > 19) for its room. A 2 MiB request,
/// which fits beside it, fails its first attempt meanwhile; the waiter itself never fits the
/// 12 MiB given back. The break: the request found the cache empty and no frees counted, and
/// failed out of memory while the eviction gave 12 MiB back.
#[test]
fn a_request_out_of_memory_during_an_eviction_for_a_waiter_waits_for_the_memory_it_gives_back() {
    const MIB: usize = 1 << 20;
    let (_devices, ctx) = devices();
    let s = stream(&ctx, npu::stream::Strategy::EventPoll);
    let pool = device_pool(&ctx, DevicePoolBackend::RuntimePool, Some(19 * MIB));
    drop(run(pool.alloc::<u8>(&s, 8 * MIB)).unwrap());
    let lent = run(pool.alloc::<u8>(&s, 4 * MIB)).unwrap();
    let filler = fill_outside_the_pool(&ctx, MIB);
    let mut waiter = Box::pin(pool.alloc::<u8>(&s, 16 * MIB));
    assert!(polled_once(waiter.as_mut()).is_pending());
    assert_eq!(pool.stats().cache.waiters, 1);
    let ((), served) = requested_while_held(&pool, &s, 2 * MIB, move || drop(lent));
    assert_eq!(pool.stats().cache.evictions, 2);
    assert_eq!(served.unwrap_or_else(|err| panic!("{err}")), 2 * MIB);
    let waited = run(waiter).expect_err("16 MiB never fit the 12 MiB given back");
    assert!(waited.is_out_of_memory(), "{waited}");
    drop(filler);
}

/// A bounded caching pool's hit and its return go on while an eviction on another thread
/// holds the blocks it took, their `aclrtFree` not yet made: only a change that may take
/// blocks out of the cache gives them back as one step with their frees (the drain lock), and
/// a hit's return cannot. The pool (36 MiB) caches a 16 MiB and a 1 MiB block; a 24 MiB
/// request evicts the 16 MiB one (17 + 24 > 36) on the held thread, and the 1 MiB block is
/// allocated and dropped meanwhile. The break: every change of a bounded cache took the
/// drain lock, so the return waited for the eviction's frees, serialising the pool's hot
/// path behind any eviction.
#[test]
fn a_bounded_caching_pools_hit_goes_on_while_an_eviction_is_held() {
    const MIB: usize = 1 << 20;
    let (_devices, ctx) = devices();
    let s = stream(&ctx, npu::stream::Strategy::EventPoll);
    let pool = device_pool(&ctx, DevicePoolBackend::Caching, Some(36 * MIB));
    drop(run(pool.alloc::<u8>(&s, 16 * MIB)).unwrap());
    drop(run(pool.alloc::<u8>(&s, MIB)).unwrap());
    assert_eq!(pool.stats().cache.cached, 17 * MIB);
    arm_the_free_gate();
    std::thread::scope(|scope| {
        let _opens = OpensTheGate;
        let evicting = std::thread::Builder::new()
            .name(HOLDER.into())
            .spawn_scoped(scope, || {
                run(pool.alloc::<u8>(&s, BIG)).map(|block| block.len())
            })
            .unwrap();
        until_the_gate("the evicted block is held", |gate| gate.held);
        let (done, returned) = std::sync::mpsc::channel();
        let (pool, s) = (&pool, &s);
        scope.spawn(move || {
            let hit = run(pool.alloc::<u8>(s, MIB)).map(|block| block.len());
            let _ = done.send(hit);
        });
        let hit = returned.recv_timeout(HANG);
        let hit = hit.expect("the hit's return waited for the held eviction");
        assert_eq!(hit.unwrap_or_else(|err| panic!("{err}")), MIB);
        open_the_free_gate();
        assert_eq!(evicting.join().unwrap().unwrap(), BIG);
    });
    let stats = pool.stats().cache;
    assert_eq!((stats.evictions, stats.hits), (1, 1), "{stats:?}");
    assert_eq!(stats.cached, 25 * MIB, "{stats:?}");
}

/// A waker that counts its wake-ups.
#[derive(Default)]
struct Woken(std::sync::atomic::AtomicUsize);

impl std::task::Wake for Woken {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A request out of memory while the block of an allocation whose `alloc` future was dropped
/// unclaimed is on its way back, its free not yet queued, waits for it and is served. The
/// allocation (24 MiB) is submitted while the device is held, so that its future is pending;
/// the device is then filled outside the pool, let go, and the future dropped on the held
/// thread once its allocation has completed (its only wake-up), which gives the block back
/// there. The break: the request found nothing cached and no frees counted, and failed out of
/// memory while the unclaimed block's memory was on its way back.
#[test]
fn a_request_out_of_memory_while_an_unclaimed_block_goes_back_waits_for_it() {
    let (_devices, ctx) = devices();
    let s = stream(&ctx, npu::stream::Strategy::EventPoll);
    let pool = device_pool(&ctx, DevicePoolBackend::RuntimePool, None);
    let woken = std::sync::Arc::new(Woken::default());
    let waker = std::task::Waker::from(woken.clone());
    let hold = sim::hold(&ctx.device()).unwrap();
    let mut unclaimed = Box::pin(pool.alloc::<u8>(&s, BIG));
    let polled = unclaimed
        .as_mut()
        .poll(&mut std::task::Context::from_waker(&waker));
    assert!(
        polled.is_pending(),
        "the allocation waits for the held device"
    );
    let filler = fill_outside_the_pool(&ctx, 4 << 20);
    hold.release().unwrap();
    until("the allocation completes", || {
        woken.0.load(std::sync::atomic::Ordering::SeqCst) > 0
    });
    let ((), served) = requested_while_held(&pool, &s, BIG, move || drop(unclaimed));
    assert_eq!(served.unwrap_or_else(|err| panic!("{err}")), BIG);
    // The unclaimed allocation counted nowhere; the request's block, dropped, is cached.
    let stats = pool.stats().cache;
    let counted = (stats.allocated, stats.cached, stats.misses);
    assert_eq!(counted, (0, BIG, 1), "{stats:?}");
    drop(filler);
}

//! A simulated device: memory accounting, loss, the hold gate, peer access and its clock.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, RwLock, RwLockReadGuard, TryLockError};
use std::time::Instant;

use npu_sys::*;

use crate::clock::Clock;
use crate::config::TimingModel;
use crate::error::{Res, SimError, ensure, fail};
use crate::handle::Handle;
use crate::kernel_fault::KernelFaults;
use crate::res_limit::ResLimits;
use crate::sim::Sim;
use crate::sync::{Bell, OwnedGate, lock, read, wait_until, write};

/// Rung after every task or synchronous operation that wrote device memory, and after memory
/// left the memory map (freed, unmapped, closed), for the aclrtValueWait tasks polling it. One
/// bell for the process, not one per device: a task of one device writes another device's
/// memory (a peer copy, a kernel given a peer pointer), and the wait polling that memory
/// belongs to the memory's device, not the writer's; a per-device bell rung by the writer left
/// such a wait asleep with its condition met.
pub(crate) static MEMORY_BELL: Bell = Bell::new();

/// A task's admission to touch a device's memory ([`Device::admit`]), held while it does.
pub(crate) struct Admitted<'a> {
    device: &'a Device,
    ticket: u64,
    gate: Option<RwLockReadGuard<'a, ()>>,
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        // The gate first: whoever the bell wakes finds it free.
        drop(self.gate.take());
        lock(&self.device.running).remove(&self.ticket);
        self.device.running_bell.ring();
    }
}

/// The device's primary context and its reference count (aclrtSetDevice / aclrtResetDevice),
/// and how many explicit contexts (aclrtCreateContext) live on the device.
#[derive(Default)]
pub(crate) struct Primary {
    pub(crate) ctx: Option<Handle>,
    pub(crate) refs: u32,
    pub(crate) explicit: u32,
}

impl Primary {
    /// Whether a reset (`force`: aclrtResetDeviceForce) now releases the primary context: the
    /// device is set, and this is its last reference or a force.
    pub(crate) fn releases(&self, force: bool) -> bool {
        self.ctx.is_some() && self.refs > 0 && (force || self.refs == 1)
    }
}

/// The hold gate's value while the gate is closed; otherwise it holds the simulated time of
/// the last release (0 before any).
const HELD: u64 = u64::MAX;

pub(crate) struct Device {
    pub(crate) id: i32,
    pub(crate) capacity: u64,
    used: AtomicU64,
    /// The most `used` has been.
    peak: AtomicU64,
    live_allocations: AtomicU64,
    fail_next_alloc: AtomicBool,
    /// Armed by npusimFailKernel; counted as launches are queued on the device's streams.
    pub(crate) kernel_faults: KernelFaults,
    lost: AtomicBool,
    /// Rung when the device is lost.
    pub(crate) lost_bell: Bell,
    /// Held for reading while a task touches memory; taken for writing before a loss is
    /// reported, so that work already executing has finished when a caller sees the loss.
    exec_gate: RwLock<()>,
    /// Admission tickets of the tasks touching memory now, for [`Self::fence`] (which must not
    /// take the gate for writing: a writer waiting blocks new readers, and a kernel may wait
    /// for one that has not started).
    running: Mutex<BTreeSet<u64>>,
    next_ticket: AtomicU64,
    /// Rung when a task stops touching memory.
    running_bell: Bell,
    pub(crate) primary: Mutex<Primary>,
    /// Held by an aclrtSetDevice or aclrtResetDevice(Force) from deciding whether it changes
    /// the device's state (and telling the device state callbacks so) until it has changed
    /// it, so that no other thread's set or reset comes in between.
    pub(crate) state_gate: OwnedGate,
    peers: AtomicU64,
    pub(crate) clock: Clock,
    /// [`HELD`], or when the gate last opened: one atomic, as every task of every stream
    /// reads it before it starts.
    hold: AtomicU64,
    /// Rung when the hold gate opens.
    pub(crate) hold_bell: Bell,
    next_stream_id: AtomicI32,
    pub(crate) live_streams: AtomicU64,
    /// Holders of the device's default stream, which takes one of `live_streams` while it has
    /// any: the primary context's default stream (until it is destroyed), and the explicit
    /// contexts together (one holder while any lives). The slot passes between them without
    /// ever being given back in between, so a stream created meanwhile cannot take it.
    default_stream_holders: Mutex<u32>,
    pub(crate) live_events: AtomicU64,
    /// Contexts of the device whose handle is valid: the primary context and the explicit
    /// ones, each from its creation until its handle is retired ([`crate::context::Context`]'s
    /// `destroy`).
    pub(crate) live_contexts: AtomicU64,
    /// Live events holding a hardware event ([`crate::event::MAX_EVENTS_PER_DEVICE`]).
    pub(crate) hardware_events: AtomicU64,
    pub(crate) next_event_id: AtomicU32,
    /// aclrtSetDeviceSatMode's float overflow mode (an `aclrtFloatOverflowMode`).
    pub(crate) sat_mode: AtomicU32,
    pub(crate) res_limits: ResLimits,
    pub(crate) live_notifies: AtomicU64,
    pub(crate) next_notify_id: AtomicU32,
    /// The code of the latest task failure on the device (0: none), for aclrtGetErrorVerbose.
    last_fault: AtomicI32,
    /// aclrtDeviceTaskAbort in progress: submissions to the device's streams are refused.
    aborting_tasks: AtomicBool,
    /// How many aclrtDeviceTaskAbort calls have begun dropping the device's work (past their
    /// PRE callbacks), for the synchronous copies and memsets such an abort stops
    /// ([`Self::stops_since`]).
    task_aborts: AtomicU64,
    /// Rung when an aclrtDeviceTaskAbort begins dropping the device's work.
    pub(crate) task_abort_bell: Bell,
}

impl Device {
    pub(crate) fn new(id: i32, capacity: u64, epoch: Instant, timing: Option<TimingModel>) -> Self {
        Self {
            id,
            capacity,
            used: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            live_allocations: AtomicU64::new(0),
            fail_next_alloc: AtomicBool::new(false),
            kernel_faults: KernelFaults::default(),
            lost: AtomicBool::new(false),
            lost_bell: Bell::new(),
            exec_gate: RwLock::new(()),
            running: Mutex::new(BTreeSet::new()),
            next_ticket: AtomicU64::new(0),
            running_bell: Bell::new(),
            primary: Mutex::new(Primary::default()),
            state_gate: OwnedGate::default(),
            peers: AtomicU64::new(0),
            clock: Clock::new(epoch, timing),
            hold: AtomicU64::new(0),
            hold_bell: Bell::new(),
            next_stream_id: AtomicI32::new(1),
            live_streams: AtomicU64::new(0),
            default_stream_holders: Mutex::new(0),
            live_events: AtomicU64::new(0),
            live_contexts: AtomicU64::new(0),
            hardware_events: AtomicU64::new(0),
            next_event_id: AtomicU32::new(0),
            sat_mode: AtomicU32::new(ACL_RT_OVERFLOW_MODE_INFNAN),
            res_limits: ResLimits::default(),
            live_notifies: AtomicU64::new(0),
            next_notify_id: AtomicU32::new(0),
            last_fault: AtomicI32::new(0),
            aborting_tasks: AtomicBool::new(false),
            task_aborts: AtomicU64::new(0),
            task_abort_bell: Bell::new(),
        }
    }

    /// Accounts `bytes` of device memory, failing with ACL_ERROR_RT_MEMORY_ALLOCATION when the
    /// capacity would be exceeded or a failure was injected.
    pub(crate) fn reserve(&self, bytes: u64) -> Res<()> {
        self.reserve_preferring(bytes, None).map(drop)
    }

    /// Accounts `preferred` bytes of device memory, or `fallback` bytes (if any) when
    /// `preferred` does not fit; returns which. Fails as [`Self::reserve`] does when neither
    /// fits, and an injected failure fails the allocation whatever its size.
    pub(crate) fn reserve_preferring(&self, preferred: u64, fallback: Option<u64>) -> Res<u64> {
        ensure!(
            !self.fail_next_alloc.swap(false, Ordering::AcqRel),
            ACL_ERROR_RT_MEMORY_ALLOCATION,
            "out of memory on device {} (injected failure)",
            self.id
        );
        let take = |bytes: u64| {
            self.used
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                    used.checked_add(bytes)
                        .filter(|&total| total <= self.capacity)
                })
                .ok()
                .map(|before| before + bytes)
        };
        let taken = take(preferred)
            .map(|total| (preferred, total))
            .or_else(|| fallback.and_then(|bytes| Some((bytes, take(bytes)?))));
        let Some((bytes, total)) = taken else {
            fail!(
                ACL_ERROR_RT_MEMORY_ALLOCATION,
                "out of memory on device {}: {} bytes requested, {} of {} free",
                self.id,
                fallback.unwrap_or(preferred),
                self.free(),
                self.capacity
            );
        };
        self.peak.fetch_max(total, Ordering::AcqRel);
        self.live_allocations.fetch_add(1, Ordering::Relaxed);
        Ok(bytes)
    }

    /// Returns accounted memory.
    pub(crate) fn unreserve(&self, bytes: u64) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
        self.live_allocations.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }

    /// The most device memory that has been in use at once.
    pub(crate) fn peak(&self) -> u64 {
        self.peak.load(Ordering::Acquire)
    }

    pub(crate) fn free(&self) -> u64 {
        self.capacity.saturating_sub(self.used())
    }

    pub(crate) fn live_allocations(&self) -> u64 {
        self.live_allocations.load(Ordering::Relaxed)
    }

    pub(crate) fn fail_next_alloc(&self) {
        self.fail_next_alloc.store(true, Ordering::Release);
    }

    /// Disarms an armed [`fail_next_alloc`](Device::fail_next_alloc); whether one was armed.
    pub(crate) fn clear_fail_next_alloc(&self) -> bool {
        self.fail_next_alloc.swap(false, Ordering::AcqRel)
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// ACL_ERROR_RT_LOST_HEARTBEAT, returned only once no task is touching memory any more
    /// (a caller told of the loss may free the memory its work used).
    pub(crate) fn loss_error(&self) -> SimError {
        drop(write(&self.exec_gate));
        self.lost_heartbeat()
    }

    /// [`Self::loss_error`] for calls that wait at most until `deadline` (`Some(now)`: queries,
    /// which do not wait): `None` if a task still touches memory then, and the call reports
    /// the work as not done yet. Such calls, the reactor's and the sentinel's among them,
    /// must not wait for a lost device's running kernel.
    pub(crate) fn loss_error_by(&self, deadline: Option<Instant>) -> Option<SimError> {
        let Some(deadline) = deadline else {
            return Some(self.loss_error());
        };
        let idle = || !matches!(self.exec_gate.try_write(), Err(TryLockError::WouldBlock));
        wait_until(&[self.running_bell.any()], Some(deadline), || {
            idle().then_some(())
        })
        .map(|()| self.lost_heartbeat())
    }

    fn lost_heartbeat(&self) -> SimError {
        SimError::new(
            ACL_ERROR_RT_LOST_HEARTBEAT,
            format!("device {} is lost (no heartbeat)", self.id),
        )
    }

    /// Fails with the loss error if the device is lost, at once: for the calls that start
    /// something (allocations, creations, submissions), which a loss refuses whether or not a
    /// task still runs, so that no caller (a runtime's shared thread freeing into a pool, say)
    /// waits for a lost device's kernel. The synchronisations report the loss only once no
    /// task touches memory any more ([`Self::loss_error`], [`Self::check_alive_by`]).
    pub(crate) fn check_alive(&self) -> Res<()> {
        if self.is_lost() {
            Err(self.lost_heartbeat())
        } else {
            Ok(())
        }
    }

    /// [`Self::check_alive`] waiting at most until `deadline` ([`Self::loss_error_by`]):
    /// `Ok(false)` if the device is lost but a task still touches its memory then.
    pub(crate) fn check_alive_by(&self, deadline: Option<Instant>) -> Res<bool> {
        if !self.is_lost() {
            return Ok(true);
        }
        match self.loss_error_by(deadline) {
            Some(error) => Err(error),
            None => Ok(false),
        }
    }

    /// Marks the device lost. Returns once every task that was touching memory has finished.
    pub(crate) fn lose(&self) {
        self.lost.store(true, Ordering::SeqCst);
        self.lost_bell.ring();
        drop(write(&self.exec_gate));
    }

    /// Waits until the device has taken every task submitted to one of its idle streams
    /// before this began, and then until every task touching its memory at that point is done
    /// with it (tasks admitted later are not waited for). A synchronous copy or memset does
    /// this first, so it sees the results of the work already on the device: a kernel launched
    /// to an idle stream just before a synchronous aclrtMemcpy of its output has finished when
    /// the copy reads it, though its submission returned without waiting for the worker
    /// ([`crate::stream::Stream::await_taken`]).
    pub(crate) fn fence(&self, sim: &Sim) {
        for stream in sim.streams_of(self.id) {
            stream.await_taken();
        }
        let before = self.next_ticket.load(Ordering::Acquire);
        wait_until(&[self.running_bell.any()], None, || {
            let oldest = lock(&self.running).first().copied();
            oldest.is_none_or(|ticket| ticket >= before).then_some(())
        });
    }

    /// Keeps every task from being admitted to touch memory until the guard drops, so that a
    /// test can hold a task between its submission and its worker taking it.
    #[cfg(test)]
    pub(crate) fn stall_admission(&self) -> std::sync::RwLockWriteGuard<'_, ()> {
        write(&self.exec_gate)
    }

    /// Admits a task to touch memory, unless the device is lost.
    pub(crate) fn admit(&self) -> Option<Admitted<'_>> {
        let gate = read(&self.exec_gate);
        if self.is_lost() {
            return None;
        }
        let ticket = {
            let mut running = lock(&self.running);
            let ticket = self.next_ticket.fetch_add(1, Ordering::AcqRel);
            running.insert(ticket);
            ticket
        };
        Some(Admitted {
            device: self,
            ticket,
            gate: Some(gate),
        })
    }

    /// Closes the hold gate: tasks not yet started wait until [`Self::release`].
    pub(crate) fn hold(&self) {
        self.hold.store(HELD, Ordering::Release);
    }

    /// Opens the hold gate; every waiting task starts at this simulated instant.
    pub(crate) fn release(&self) {
        self.hold.store(self.clock.now_ns(), Ordering::Release);
        self.hold_bell.ring();
    }

    /// `None` while held, else the simulated time of the last release.
    pub(crate) fn hold_state(&self) -> Option<u64> {
        Some(self.hold.load(Ordering::Acquire)).filter(|&released_ns| released_ns != HELD)
    }

    fn peer_bit(peer: i32) -> u64 {
        1u64 << (peer as u32 % 64)
    }

    pub(crate) fn enable_peer(&self, peer: i32) {
        self.peers.fetch_or(Self::peer_bit(peer), Ordering::AcqRel);
    }

    pub(crate) fn disable_peer(&self, peer: i32) {
        self.peers
            .fetch_and(!Self::peer_bit(peer), Ordering::AcqRel);
    }

    pub(crate) fn peer_enabled(&self, peer: i32) -> bool {
        self.peers.load(Ordering::Acquire) & Self::peer_bit(peer) != 0
    }

    /// Counts one more live object in `live` (streams, notifies, events), failing with `code` when
    /// the device already has `limit` of them.
    pub(crate) fn take_slot(
        &self,
        live: &AtomicU64,
        limit: u64,
        code: aclError,
        what: &str,
    ) -> Res<()> {
        if live.fetch_add(1, Ordering::AcqRel) >= limit {
            live.fetch_sub(1, Ordering::AcqRel);
            fail!(code, "device {} already has {limit} {what}", self.id);
        }
        Ok(())
    }

    /// Marks an aclrtDeviceTaskAbort begun (`true`) or over; `false` if one was already
    /// running when beginning.
    pub(crate) fn set_aborting_tasks(&self, aborting: bool) -> bool {
        self.aborting_tasks.swap(aborting, Ordering::AcqRel) != aborting
    }

    /// Whether an aclrtDeviceTaskAbort is running on the device.
    pub(crate) fn is_aborting_tasks(&self) -> bool {
        self.aborting_tasks.load(Ordering::Acquire)
    }

    /// Counts an aclrtDeviceTaskAbort that begins dropping the device's work and wakes the
    /// synchronous copies and memsets it stops.
    pub(crate) fn begin_task_abort(&self) {
        self.task_aborts.fetch_add(1, Ordering::AcqRel);
        self.task_abort_bell.ring();
    }

    /// The count of device task aborts begun, for [`Self::stops_since`].
    pub(crate) fn task_abort_count(&self) -> u64 {
        self.task_aborts.load(Ordering::Acquire)
    }

    /// Whether an aclrtDeviceTaskAbort has begun dropping the device's work since the count
    /// was `count` ([`Self::task_abort_count`]).
    pub(crate) fn stops_since(&self, count: u64) -> bool {
        self.task_abort_count() != count
    }

    /// Forgets the latest task failure if it was `code` (the error was repaired).
    pub(crate) fn clear_fault(&self, code: aclError) {
        let _ = self
            .last_fault
            .compare_exchange(code, 0, Ordering::AcqRel, Ordering::Acquire);
    }

    pub(crate) fn record_fault(&self, code: aclError) {
        self.last_fault.store(code, Ordering::Release);
    }

    /// The code of the latest task failure on the device, if any.
    pub(crate) fn last_fault(&self) -> Option<aclError> {
        Some(self.last_fault.load(Ordering::Acquire)).filter(|&code| code != 0)
    }

    /// Counts one more live stream, failing with 207008 once the device holds
    /// [`MAX_STREAMS_PER_DEVICE`](crate::stream::MAX_STREAMS_PER_DEVICE). A `device_default`
    /// stream (the primary context's default stream) is the device's default stream: it takes
    /// a slot only if no explicit context holds that stream already.
    pub(crate) fn take_stream_slot(&self, device_default: bool) -> Res<()> {
        let take = || {
            self.take_slot(
                &self.live_streams,
                crate::stream::MAX_STREAMS_PER_DEVICE,
                ACL_ERROR_RT_NO_STREAM_RESOURCE,
                "streams",
            )
        };
        if !device_default {
            return take();
        }
        // Under the lock, so that the slot is taken once for all holders, and a holder
        // leaving cannot give it back while another arrives.
        let mut holders = lock(&self.default_stream_holders);
        if *holders == 0 {
            take()?;
        }
        *holders += 1;
        Ok(())
    }

    /// Gives back what [`Self::take_stream_slot`] took: the device's default stream's slot
    /// only once its last holder leaves.
    pub(crate) fn give_stream_slot(&self, device_default: bool) {
        if device_default {
            let mut holders = lock(&self.default_stream_holders);
            *holders -= 1;
            if *holders > 0 {
                return;
            }
        }
        self.live_streams.fetch_sub(1, Ordering::AcqRel);
    }

    /// The primary context's default stream leaves the device's default stream (its context
    /// was released and the stream is about to be destroyed, perhaps after waiting for its
    /// work): it keeps a slot of its own until then, and the device's default stream keeps its
    /// slot for its other holders (the explicit contexts, a primary context set again).
    pub(crate) fn detach_default_stream(&self) {
        let mut holders = lock(&self.default_stream_holders);
        *holders -= 1;
        if *holders > 0 {
            // Beyond the limit for a moment if the device is full: the creations meanwhile are
            // refused, as the stream is still there.
            self.live_streams.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Counts an explicit context about to be created (`true`) or one destroyed or not
    /// created after all (`false`). The first explicit context of the device holds the
    /// device's default stream (the reference counts it beside the context's own), and the
    /// last one gives it back: a creation fails (207008) if the device has no stream left
    /// for it.
    pub(crate) fn count_explicit_context(&self, created: bool) -> Res<()> {
        let mut primary = lock(&self.primary);
        if created {
            if primary.explicit == 0 {
                self.take_stream_slot(true)?;
            }
            primary.explicit += 1;
        } else {
            primary.explicit -= 1;
            if primary.explicit == 0 {
                self.give_stream_slot(true);
            }
        }
        Ok(())
    }

    pub(crate) fn next_stream_id(&self) -> i32 {
        self.next_stream_id.fetch_add(1, Ordering::Relaxed)
    }
}

//! The work a stream runs: copies, memsets, kernels, host callbacks and event operations.

use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use npu_sys::*;

use crate::config::TimingModel;
use crate::control_flow::Program;
use crate::error::SimError;
use crate::event::{Event, Record, ResetGate};
use crate::indirect::IndirectCopy;
use crate::ipc::SharedEvent;
use crate::kernel::{Launch, LaunchArgs};
use crate::memory::{Lease, MemoryMap};
use crate::notify::Notify;
use crate::op_timeout;
use crate::random::RandomTask;
use crate::reduce::{Element, Reduction, reduce};
use crate::task_update::{PatchSlot, TaskUpdate};

/// Direction of a copy after kind correction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    HostToHost,
    HostToDevice,
    DeviceToHost,
    DeviceToDevice,
}

impl Direction {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Direction::HostToHost => "H2H",
            Direction::HostToDevice => "H2D",
            Direction::DeviceToHost => "D2H",
            Direction::DeviceToDevice => "D2D",
        }
    }

    fn bandwidth(self, model: &TimingModel) -> u64 {
        match self {
            Direction::HostToDevice => model.h2d_bytes_per_sec,
            Direction::DeviceToHost => model.d2h_bytes_per_sec,
            Direction::HostToHost | Direction::DeviceToDevice => model.d2d_bytes_per_sec,
        }
    }
}

/// A rectangle of memory: `rows` rows of `width` bytes, `pitch` bytes apart (1D: one row).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Extent {
    pub(crate) width: usize,
    pub(crate) rows: usize,
    pub(crate) dpitch: usize,
    pub(crate) spitch: usize,
}

impl Extent {
    pub(crate) fn linear(len: usize) -> Self {
        Self {
            width: len,
            rows: 1,
            dpitch: len,
            spitch: len,
        }
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.width as u64 * self.rows as u64
    }

    /// Bytes spanned from the first to the last byte touched with `pitch`.
    pub(crate) fn span(&self, pitch: usize) -> usize {
        (self.rows - 1) * pitch + self.width
    }
}

/// Where a copy reads from.
#[derive(Clone)]
pub(crate) enum Source {
    /// Memory at this address when the task runs.
    Ptr(usize),
    /// Data staged at submission (ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE): the caller's buffer may be
    /// reused as soon as the call returns.
    Staged(Box<[u8]>),
}

/// A copy or memset target/source the simulator owns and therefore re-checks when the task
/// runs (a free in between fails the task instead of touching freed memory).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Owned {
    pub(crate) dst: bool,
    pub(crate) src: bool,
}

pub(crate) type HostFn = unsafe extern "C" fn(*mut c_void);

/// A task's work. Cloneable, so that a model runtime instance can replay what it captured.
#[derive(Clone)]
pub(crate) enum Op {
    Copy {
        dst: usize,
        src: Source,
        extent: Extent,
        dir: Direction,
        owned: Owned,
    },
    /// Fills `len` bytes with `value`'s low `width` bytes (1: memset, 4: 32-bit words).
    Memset {
        dst: usize,
        len: usize,
        value: u32,
        width: usize,
        owned: bool,
    },
    Kernel(Launch),
    /// A device-to-device copy whose addresses are read from device memory when it runs.
    IndirectCopy(IndirectCopy),
    /// aclrtReduceAsync: `dst[i] = op(dst[i], src[i])` over `len` bytes of device memory.
    Reduce {
        dst: usize,
        src: usize,
        len: usize,
        op: Reduction,
        element: Element,
    },
    Callback {
        func: HostFn,
        data: usize,
        block: bool,
    },
    HostFunc {
        func: HostFn,
        data: usize,
    },
    Record(Arc<Record>),
    /// Waits for a record; fails with ACL_ERROR_RT_WAIT_TIMEOUT if it is still pending
    /// `timeout` after the wait started.
    Wait {
        record: Arc<Record>,
        timeout: Option<Duration>,
    },
    /// Waits for the record that opens `gate` (the next record of an event reset when the wait
    /// was issued), then for that record as `Wait` does; passes if the event is destroyed
    /// first.
    ResetWait {
        gate: Arc<ResetGate>,
        timeout: Option<Duration>,
    },
    /// Waits for record `n` of an event shared between processes (or a later one) to
    /// complete; fails like `Wait`, and with ACL_ERROR_RT_STREAM_ABORT if it was dropped.
    SharedWait {
        shared: Arc<SharedEvent>,
        n: u64,
        timeout: Option<Duration>,
    },
    /// aclrtRecordNotify: sets the notify.
    NotifySet(Arc<Notify>),
    /// aclrtWaitAndResetNotify: waits until the notify is set, then clears it.
    NotifyWait {
        notify: Arc<Notify>,
        timeout: Option<Duration>,
    },
    /// aclrtValueWrite: stores a 64-bit value in device memory.
    ValueWrite {
        dst: usize,
        value: u64,
    },
    /// aclrtValueWait: waits until the 64-bit value in device memory satisfies `cmp`.
    ValueWait {
        src: usize,
        value: u64,
        cmp: Compare,
    },
    Reset {
        event: Arc<Event>,
        captured: Option<Arc<Record>>,
    },
    /// aclrtProfTrace: a profiling marker carrying the user's bytes (zero-padded), shown in
    /// the timeline trace.
    ProfMarker([u8; PROF_MARKER_BYTES]),
    /// aclrtRandomNumAsync: random numbers into device memory.
    Random(RandomTask),
    /// aclrtTaskUpdateAsync: new fields for a task of a model runtime instance.
    TaskUpdate(TaskUpdate),
    /// An execution of a model runtime instance with branches: the worker runs its tasks,
    /// choosing them as it goes ([`crate::control_flow`]).
    Program(Arc<Program>),
}

/// The bytes an aclrtProfTrace marker carries.
pub(crate) const PROF_MARKER_BYTES: usize = 18;

impl Op {
    /// (category, name) for the trace.
    pub(crate) fn label(&self) -> (&'static str, String) {
        match self {
            Self::Copy { dir, .. } => ("copy", dir.name().to_owned()),
            Self::Memset { .. } => ("memset", "memset".to_owned()),
            Self::Reduce { op, .. } => ("copy", format!("reduce {op:?}").to_lowercase()),
            Self::Kernel(launch) => ("kernel", launch.name().to_owned()),
            Self::IndirectCopy(_) => ("copy", "D2D (indirect)".to_owned()),
            Self::Callback { .. } => ("host", "callback".to_owned()),
            Self::HostFunc { .. } => ("host", "host func".to_owned()),
            Self::Record(_) => ("event", "record".to_owned()),
            Self::Wait { .. } | Self::ResetWait { .. } => ("event", "wait".to_owned()),
            Self::SharedWait { .. } => ("event", "wait (IPC)".to_owned()),
            Self::NotifySet(_) => ("notify", "record".to_owned()),
            Self::NotifyWait { .. } => ("notify", "wait and reset".to_owned()),
            Self::ValueWrite { .. } => ("value", "write".to_owned()),
            Self::ValueWait { .. } => ("value", "wait".to_owned()),
            Self::Reset { .. } => ("event", "reset".to_owned()),
            Self::Random(task) => ("random", task.name().to_owned()),
            Self::TaskUpdate(_) => ("update", "task update".to_owned()),
            Self::Program(_) => ("model", "execution".to_owned()),
            Self::ProfMarker(data) => {
                let hex: String = data.iter().map(|b| format!("{b:02x}")).collect();
                ("profiling", format!("prof trace {hex}"))
            }
        }
    }
}

/// How aclrtValueWait compares the memory (`m`) with its value (`v`): the
/// ACL_STREAM_WAIT_VALUE_* flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compare {
    /// `(int64_t)(m - v) >= 0`: wrap-around aware "at least".
    Geq,
    /// `m == v`.
    Eq,
    /// `(m & v) != 0`.
    And,
    /// `!(m | v) != 0`.
    Nor,
}

impl Compare {
    /// The comparison of an ACL_STREAM_WAIT_VALUE_* flag.
    pub(crate) fn from_flag(flag: u32) -> Option<Self> {
        match flag {
            ACL_STREAM_WAIT_VALUE_GEQ => Some(Self::Geq),
            ACL_STREAM_WAIT_VALUE_EQ => Some(Self::Eq),
            ACL_STREAM_WAIT_VALUE_AND => Some(Self::And),
            ACL_STREAM_WAIT_VALUE_NOR => Some(Self::Nor),
            _ => None,
        }
    }

    /// Its ACL_STREAM_WAIT_VALUE_* flag.
    pub(crate) fn flag(self) -> u32 {
        match self {
            Self::Geq => ACL_STREAM_WAIT_VALUE_GEQ,
            Self::Eq => ACL_STREAM_WAIT_VALUE_EQ,
            Self::And => ACL_STREAM_WAIT_VALUE_AND,
            Self::Nor => ACL_STREAM_WAIT_VALUE_NOR,
        }
    }

    pub(crate) fn holds(self, memory: u64, value: u64) -> bool {
        match self {
            Self::Geq => memory.wrapping_sub(value) as i64 >= 0,
            Self::Eq => memory == value,
            Self::And => memory & value != 0,
            Self::Nor => !(memory | value) != 0,
        }
    }
}

pub(crate) struct Task {
    pub(crate) op: Op,
    /// The task's position in its stream (1 for its first task), set at submission.
    pub(crate) position: u64,
    /// The submitting thread's id (gettid), for exception reports.
    pub(crate) thread_id: u32,
    pub(crate) submit_ns: u64,
    /// An injected failure: the task fails with this code instead of running.
    pub(crate) inject: Option<aclError>,
    /// Held until the task has left its stream: a replayed task holds its model's, which
    /// tells whether the model is still running ([`crate::model_ri::ModelRi::running`]).
    pub(crate) keep: Option<Arc<()>>,
    /// Set by aclmdlRIAbort for the execution a replayed task belongs to: the task is dropped
    /// instead of run.
    pub(crate) aborted: Option<Arc<AtomicBool>>,
    /// A replayed task's slot for aclrtTaskUpdateAsync: the task takes its latest fields as
    /// it starts.
    pub(crate) patch: Option<Arc<PatchSlot>>,
    /// A wait task's ticket of its event ([`crate::event::Event::wait_ticket`]), dropped
    /// before the task counts as finished.
    pub(crate) wait_ticket: Option<Arc<()>>,
}

impl Task {
    pub(crate) fn new(op: Op) -> Self {
        Self {
            op,
            position: 0,
            thread_id: 0,
            submit_ns: 0,
            inject: None,
            keep: None,
            aborted: None,
            patch: None,
            wait_ticket: None,
        }
    }

    /// Whether aclmdlRIAbort stopped the execution the task belongs to.
    pub(crate) fn is_aborted(&self) -> bool {
        self.aborted
            .as_ref()
            .is_some_and(|aborted| aborted.load(Ordering::Acquire))
    }

    /// Whether the task is work the device runs, the tasks fault injection counts: not a
    /// synchronisation operation (events, notifies, value writes and waits), and not a host
    /// task (callbacks and host functions), which run on a host thread where no device fault
    /// can strike them (their stream's failure mode still applies to them). Nor is an
    /// execution of an instance with branches, whose tasks are chosen as it runs: a fault
    /// strikes tasks the host queued.
    pub(crate) fn is_device_work(&self) -> bool {
        !matches!(
            self.op,
            Op::Record(_)
                | Op::Wait { .. }
                | Op::ResetWait { .. }
                | Op::SharedWait { .. }
                | Op::Reset { .. }
                | Op::ProfMarker(_)
                | Op::NotifySet(_)
                | Op::NotifyWait { .. }
                | Op::ValueWrite { .. }
                | Op::ValueWait { .. }
                | Op::Callback { .. }
                | Op::HostFunc { .. }
                | Op::Program(_)
        )
    }

    /// Whether the task touches memory through the device's execution gate (copies, memsets,
    /// kernels): the work a synchronous copy must see finished ([`crate::device::Device::fence`]).
    pub(crate) fn touches_memory(&self) -> bool {
        matches!(
            self.op,
            Op::Copy { .. }
                | Op::Memset { .. }
                | Op::Kernel(_)
                | Op::IndirectCopy(_)
                | Op::Reduce { .. }
                | Op::ValueWrite { .. }
                | Op::Random(_)
                | Op::TaskUpdate(_)
        )
    }

    /// Bytes moved or written, for the timing model and the trace.
    pub(crate) fn bytes(&self) -> u64 {
        match &self.op {
            Op::Copy { extent, .. } => extent.bytes(),
            Op::Memset { len, .. } | Op::Reduce { len, .. } => *len as u64,
            Op::Random(task) => task.known_len(),
            _ => 0,
        }
    }

    /// The task's duration under a timing model.
    pub(crate) fn duration_ns(&self, model: &TimingModel) -> u64 {
        match &self.op {
            Op::Copy { dir, .. } => model.transfer_ns(self.bytes(), dir.bandwidth(model)),
            Op::Memset { .. } | Op::Reduce { .. } | Op::Random(_) => {
                model.transfer_ns(self.bytes(), model.d2d_bytes_per_sec)
            }
            Op::Kernel(launch) => {
                model.work_ns(model.kernel_ns.get(launch.name()).copied().unwrap_or(0))
            }
            Op::Callback { .. } | Op::HostFunc { .. } | Op::TaskUpdate(_) => model.work_ns(0),
            _ => 0,
        }
    }

    /// Whether a kernel of simulated duration `duration_ns` runs past its execute timeout (its
    /// launch's own, else the one aclrtSetOpExecuteTimeOut* set; `interval_us` is the timeout
    /// step): if so, the
    /// simulated time at which the device stops it, after its start, and the failure it
    /// reports (ACL_ERROR_RT_AICORE_TIMEOUT, or ACL_ERROR_RT_VECTOR_CORE_TIMEOUT on the AIV
    /// engine). Other tasks never time out.
    pub(crate) fn overrun(&self, duration_ns: u64, interval_us: u64) -> Option<(u64, SimError)> {
        let Op::Kernel(launch) = &self.op else {
            return None;
        };
        let limit_us = launch
            .timeout_us
            .unwrap_or_else(|| op_timeout::execute_timeout_us(interval_us));
        let limit_ns = limit_us.saturating_mul(1000);
        if limit_us == op_timeout::NEVER || duration_ns <= limit_ns {
            return None;
        }
        let (code, engine) = match launch.vector_engine {
            true => (ACL_ERROR_RT_VECTOR_CORE_TIMEOUT, "vector core"),
            false => (ACL_ERROR_RT_AICORE_TIMEOUT, "AI core"),
        };
        let error = SimError::new(
            code,
            format!(
                "kernel {:?} ran past the execute timeout ({limit_us} µs) on the {engine}: its duration is {duration_ns} ns",
                launch.name()
            ),
        );
        Some((limit_ns, error))
    }

    /// (category, name) for the trace.
    pub(crate) fn label(&self) -> (&'static str, String) {
        self.op.label()
    }

    /// Runs a copy, memset or kernel, leasing the simulator-owned memory it touches (so it is
    /// not freed meanwhile; memory freed before is a DMA fault).
    pub(crate) fn run_memory(&self, memory: &MemoryMap) -> Result<(), SimError> {
        match &self.op {
            Op::Copy {
                dst,
                src,
                extent,
                owned,
                ..
            } => {
                let src_ptr = match src {
                    Source::Ptr(ptr) => *ptr,
                    Source::Staged(data) => data.as_ptr() as usize,
                };
                let _dst = lease(memory, owned.dst, *dst, extent.span(extent.dpitch))?;
                let _src = lease(memory, owned.src, src_ptr, extent.span(extent.spitch))?;
                for row in 0..extent.rows {
                    // SAFETY: simulator-owned ranges were checked against their allocations at
                    // submission and are leased above (which checks them again and keeps them
                    // allocated); staged data is ours; any other host range is the caller's,
                    // who promised (C contract) it stays valid until the task completes.
                    // `ptr::copy` tolerates overlap.
                    unsafe {
                        ptr::copy(
                            (src_ptr + row * extent.spitch) as *const u8,
                            (dst + row * extent.dpitch) as *mut u8,
                            extent.width,
                        );
                    }
                }
                Ok(())
            }
            Op::Memset {
                dst,
                len,
                value,
                width,
                owned,
            } => {
                let _dst = lease(memory, *owned, *dst, *len)?;
                let pattern = value.to_ne_bytes();
                // SAFETY: as for copies: checked if simulator-owned, else the caller's promise.
                // The words may be unaligned, so they are written as bytes.
                unsafe {
                    if *width == 1 {
                        ptr::write_bytes(*dst as *mut u8, *value as u8, *len);
                    } else {
                        for at in (0..*len).step_by(*width) {
                            ptr::copy_nonoverlapping(
                                pattern.as_ptr(),
                                (*dst + at) as *mut u8,
                                *width,
                            );
                        }
                    }
                }
                Ok(())
            }
            Op::Reduce {
                dst,
                src,
                len,
                op,
                element,
            } => {
                let _dst = lease(memory, true, *dst, *len)?;
                let _src = lease(memory, true, *src, *len)?;
                // SAFETY: both ranges are device memory checked at submission and leased above;
                // they are equal or disjoint (checked at submission).
                unsafe { reduce(*op, *element, *dst as *mut u8, *src as *const u8, *len) };
                Ok(())
            }
            Op::Kernel(launch) => {
                // Device-memory arguments freed since the launch: fault instead of reading them.
                let _args = match launch.args {
                    LaunchArgs::Device(address, len) => lease(memory, address != 0, address, len)?,
                    LaunchArgs::Owned(_) => None,
                };
                launch.run()
            }
            Op::IndirectCopy(copy) => copy.run(memory),
            Op::Random(task) => task.run(memory),
            Op::TaskUpdate(update) => update.run(memory),
            Op::ValueWrite { dst, value } => {
                let _dst = lease(memory, true, *dst, 8)?;
                // SAFETY: device memory checked (8 bytes, 8-aligned) at submission and leased
                // above. Other streams' workers may write or wait on the same word meanwhile
                // (that is what value words are for), so every access to it is atomic: one
                // aligned 64-bit store, as the device's.
                unsafe { AtomicU64::from_ptr(*dst as *mut u64) }.store(*value, Ordering::Release);
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// Reads the 64-bit value an aclrtValueWait compares; a DMA fault if the memory was freed
/// since the wait was submitted.
pub(crate) fn read_value(memory: &MemoryMap, src: usize) -> Result<u64, SimError> {
    let _src = lease(memory, true, src, 8)?;
    // SAFETY: device memory checked (8 bytes, 8-aligned) at submission and leased above; read
    // atomically, as other streams' workers write it atomically (`Op::ValueWrite`).
    Ok(unsafe { AtomicU64::from_ptr(src as *mut u64) }.load(Ordering::Acquire))
}

/// Reads the `width` bytes (4 or 8) at `src`, zero-extended, as a switch reads its values
/// when it runs.
pub(crate) fn read_bits(memory: &MemoryMap, src: usize, width: usize) -> Result<u64, SimError> {
    if width == 8 {
        return read_value(memory, src);
    }
    let _src = lease(memory, true, src, 4)?;
    // SAFETY: device memory checked (4 bytes, 4-aligned) at submission and leased above; read
    // atomically, as other streams' workers may write it.
    Ok(u64::from(
        unsafe { std::sync::atomic::AtomicU32::from_ptr(src as *mut u32) }.load(Ordering::Acquire),
    ))
}

/// Leases `[ptr, ptr+len)` if it is simulator-owned memory (`owned`: memory the runtime knew at
/// submission); a DMA fault if it was freed since the task was submitted, a device memory
/// error if it has an uncorrectable error. Registered host memory is not the simulator's to
/// lease: all of the range must still be registered (a replay of a capture made before
/// aclrtHostUnregister must not touch the memory the program may have freed since); keeping it
/// registered while the task runs is the program's part, as for every task.
fn lease(
    memory: &MemoryMap,
    owned: bool,
    ptr: usize,
    len: usize,
) -> Result<Option<Lease>, SimError> {
    if !owned {
        return Ok(None);
    }
    match memory.lease(ptr, len) {
        Some(lease) => {
            memory.uce.check(ptr, len)?;
            Ok(Some(lease))
        }
        // The whole range: memory registered again, smaller, since the submission (or the
        // capture) is partly memory the program may have given back.
        None if memory.registered(ptr, len) => Ok(None),
        None => Err(SimError::new(
            ACL_ERROR_RT_SYS_DMA,
            format!(
                "DMA fault: {ptr:#x}+{len} was freed before the task ran (or unregistered, host memory)"
            ),
        )),
    }
}

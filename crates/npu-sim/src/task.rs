//! The work a stream runs: copies, memsets, kernels, host callbacks and event operations.

use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;

use npu_sys::*;

use crate::config::TimingModel;
use crate::error::SimError;
use crate::event::{Event, Record};
use crate::kernel::{Launch, LaunchArgs};
use crate::memory::{Lease, MemoryMap};

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
    Wait(Arc<Record>),
    Reset {
        event: Arc<Event>,
        captured: Option<Arc<Record>>,
    },
}

pub(crate) struct Task {
    pub(crate) op: Op,
    pub(crate) submit_ns: u64,
    /// An injected failure: the task fails with this code instead of running.
    pub(crate) inject: Option<aclError>,
}

impl Task {
    pub(crate) fn new(op: Op) -> Self {
        Self {
            op,
            submit_ns: 0,
            inject: None,
        }
    }

    /// Whether the task is device work (counted by fault injection and timed by the model),
    /// as opposed to an event operation.
    pub(crate) fn is_work(&self) -> bool {
        !matches!(self.op, Op::Record(_) | Op::Wait(_) | Op::Reset { .. })
    }

    /// Bytes moved or written, for the timing model and the trace.
    pub(crate) fn bytes(&self) -> u64 {
        match &self.op {
            Op::Copy { extent, .. } => extent.bytes(),
            Op::Memset { len, .. } => *len as u64,
            _ => 0,
        }
    }

    /// The task's duration under a timing model.
    pub(crate) fn duration_ns(&self, model: &TimingModel) -> u64 {
        match &self.op {
            Op::Copy { dir, .. } => model.transfer_ns(self.bytes(), dir.bandwidth(model)),
            Op::Memset { .. } => model.transfer_ns(self.bytes(), model.d2d_bytes_per_sec),
            Op::Kernel(launch) => {
                model.work_ns(model.kernel_ns.get(launch.name()).copied().unwrap_or(0))
            }
            Op::Callback { .. } | Op::HostFunc { .. } => model.work_ns(0),
            Op::Record(_) | Op::Wait(_) | Op::Reset { .. } => 0,
        }
    }

    /// (category, name) for the trace.
    pub(crate) fn label(&self) -> (&'static str, String) {
        match &self.op {
            Op::Copy { dir, .. } => ("copy", dir.name().to_owned()),
            Op::Memset { .. } => ("memset", "memset".to_owned()),
            Op::Kernel(launch) => ("kernel", launch.name().to_owned()),
            Op::Callback { .. } => ("host", "callback".to_owned()),
            Op::HostFunc { .. } => ("host", "host func".to_owned()),
            Op::Record(_) => ("event", "record".to_owned()),
            Op::Wait(_) => ("event", "wait".to_owned()),
            Op::Reset { .. } => ("event", "reset".to_owned()),
        }
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
            Op::Kernel(launch) => {
                // Device-memory arguments freed since the launch: fault instead of reading them.
                let _args = match launch.args {
                    LaunchArgs::Device(address, len) => lease(memory, address != 0, address, len)?,
                    LaunchArgs::Owned(_) => None,
                };
                launch.run()
            }
            _ => Ok(()),
        }
    }
}

/// Leases `[ptr, ptr+len)` if it is simulator-owned memory (`owned`); a DMA fault if it was
/// freed since the task was submitted.
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
        Some(lease) => Ok(Some(lease)),
        None => Err(SimError::new(
            ACL_ERROR_RT_SYS_DMA,
            format!("DMA fault: {ptr:#x}+{len} was freed before the task ran"),
        )),
    }
}

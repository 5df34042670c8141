//! Task updates (aclrtTaskUpdateAsync): a task on a stream that, when it runs, reads new
//! fields for a task of a model runtime instance from device memory and patches that task.
//!
//! Each random number task and kernel launch of an instance has a patch slot, shared by every
//! copy of it an execution queues; a copy takes the slot's latest patch as it starts. So an
//! update changes the executions whose task starts after the update task has run (on the
//! update's stream, or ordered after it by events), as the device patching the task's
//! descriptor would; an execution whose task started before keeps the old fields.

use std::sync::{Arc, Mutex};

use npu_sys::*;

use crate::error::{Res, SimError, ensure};
use crate::handle::Handle;
use crate::indirect::read_device;
use crate::kernel::{Binary, Function};
use crate::memory::MemoryMap;
use crate::random::{Fields, TASK_INFO_SIZE, refused_at_run};
use crate::sync::lock;
use crate::task::Op;

/// The new fields of a task.
#[derive(Clone)]
enum Patch {
    /// randomParaAddr, randomResultAddr, randomCounterAddr, randomSeed and randomNum.
    Random(Fields),
    /// The function (and its handle, for exception reports) and the block count.
    Kernel {
        function: Arc<Function>,
        handle: Handle,
        blocks: u32,
    },
}

/// The latest update of a task of an instance.
#[derive(Default)]
pub(crate) struct PatchSlot(Mutex<Option<Patch>>);

impl PatchSlot {
    /// Gives `op`, a copy of the slot's task starting now, the latest update's fields.
    pub(crate) fn apply(&self, op: &mut Op) {
        match (&*lock(&self.0), op) {
            (Some(Patch::Random(fields)), Op::Random(task)) => task.fields = *fields,
            (
                Some(Patch::Kernel {
                    function,
                    handle,
                    blocks,
                }),
                Op::Kernel(launch),
            ) => {
                launch.function = function.clone();
                launch.handle = *handle;
                launch.blocks = *blocks;
            }
            _ => {}
        }
    }
}

/// Where an update finds the new fields.
#[derive(Clone)]
pub(crate) enum Source {
    /// An aclrtRandomNumTaskInfo at this device address.
    Random { src: usize },
    /// A kernel entry (u64, as aclrtGetFunctionAddr gives it) at `entry`, resolved among the
    /// functions resolved from `binary`, and a block count (u32) at `blocks`. `args_len` is
    /// the bytes of arguments the target launch passes, which the new function must accept.
    Kernel {
        binary: Arc<Binary>,
        entry: usize,
        blocks: usize,
        args_len: usize,
    },
}

/// An update task.
#[derive(Clone)]
pub(crate) struct TaskUpdate {
    pub(crate) device: i32,
    pub(crate) slot: Arc<PatchSlot>,
    pub(crate) source: Source,
}

impl TaskUpdate {
    /// Reads the new fields and patches the target: an address that is not device memory of
    /// the device is a DMA fault, fields the submission of such a task would refuse fail the
    /// update with ACL_ERROR_RT_TS_ERROR, and the target keeps its fields.
    pub(crate) fn run(&self, memory: &MemoryMap) -> Result<(), SimError> {
        let device = self.device;
        let patch = match &self.source {
            Source::Random { src } => {
                let mut bytes = [0u8; TASK_INFO_SIZE];
                read_device(memory, device, *src, &mut bytes, "srcAddr")?;
                Patch::Random(Fields::of_update(&bytes).map_err(refused)?)
            }
            Source::Kernel {
                binary,
                entry,
                blocks,
                args_len,
            } => {
                let mut word = [0u8; 8];
                read_device(memory, device, *entry, &mut word, "funcEntryAddr")?;
                let entry = u64::from_ne_bytes(word);
                let mut count = [0u8; 4];
                read_device(memory, device, *blocks, &mut count, "blockDimAddr")?;
                let blocks = u32::from_ne_bytes(count);
                let (handle, function) =
                    kernel_at(binary, entry, blocks, *args_len).map_err(refused)?;
                Patch::Kernel {
                    function,
                    handle,
                    blocks,
                }
            }
        };
        *lock(&self.slot.0) = Some(patch);
        Ok(())
    }
}

/// The function of `binary` whose entry is `entry`, launched on `blocks` blocks with
/// `args_len` bytes of arguments (107000 if there is none, or it cannot be so launched).
fn kernel_at(
    binary: &Binary,
    entry: u64,
    blocks: u32,
    args_len: usize,
) -> Res<(Handle, Arc<Function>)> {
    ensure!(
        blocks != 0,
        ACL_ERROR_RT_PARAM_INVALID,
        "the block count at blockDimAddr is 0"
    );
    let sim = crate::sim::sim()?;
    let found = binary.function_handles().into_iter().find_map(|handle| {
        let function = sim.functions.get(handle)?;
        (function.code_address() as u64 == entry).then_some((handle, function))
    });
    let Some((handle, function)) = found else {
        crate::error::fail!(
            ACL_ERROR_RT_PARAM_INVALID,
            "{entry:#x} is the entry of no function resolved from the binary (aclrtGetFunctionAddr)"
        );
    };
    function.check_args(args_len)?;
    Ok((handle, function))
}

/// Fields an update read from device memory that the submission would have refused.
fn refused(error: SimError) -> SimError {
    refused_at_run("task update", error)
}

//! aclrtTaskUpdateAsync: a stream task that gives a task of a model runtime instance new
//! fields, read from device memory when it runs.

use npu_sys::*;

use crate::context;
use crate::error::{Res, ensure, fail, guard, non_null};
use crate::handle;
use crate::indirect::check_on_device;
use crate::model_ri::Step;
use crate::random::TASK_INFO_SIZE;
use crate::sim::{Sim, sim};
use crate::task::{Op, Task};
use crate::task_update::{Source, TaskUpdate};

/// Where an update's new fields are, as the attribute names them (checked for what does not
/// need the device: 107000).
enum Attr {
    Random {
        src: usize,
        size: usize,
    },
    Kernel {
        bin: handle::Handle,
        entry: usize,
        blocks: usize,
    },
}

fn reserved_zero(rsv: &[u32]) -> Res<()> {
    ensure!(
        rsv.iter().all(|&word| word == 0),
        ACL_ERROR_RT_PARAM_INVALID,
        "the attribute's rsv is reserved and must be 0"
    );
    Ok(())
}

/// The attribute `info` names (an id outside aclrtUpdateTaskAttrId → 107000).
fn attr(info: &aclrtTaskUpdateInfo) -> Res<Attr> {
    match info.id {
        ACL_RT_UPDATE_RANDOM_TASK => {
            // SAFETY: every field of the union is plain data, valid for any bytes.
            let attr = unsafe { info.val.randomTaskAttr };
            ensure!(
                !attr.srcAddr.is_null(),
                ACL_ERROR_RT_PARAM_INVALID,
                "randomTaskAttr.srcAddr is NULL"
            );
            ensure!(
                attr.size >= TASK_INFO_SIZE,
                ACL_ERROR_RT_PARAM_INVALID,
                "randomTaskAttr.size is {}: the aclrtRandomNumTaskInfo it holds takes {TASK_INFO_SIZE} bytes",
                attr.size
            );
            reserved_zero(&attr.rsv)?;
            Ok(Attr::Random {
                src: attr.srcAddr as usize,
                size: attr.size,
            })
        }
        ACL_RT_UPDATE_AIC_AIV_TASK => {
            // SAFETY: every field of the union is plain data, valid for any bytes.
            let attr = unsafe { info.val.aicAivTaskAttr };
            for (ptr, what) in [
                (attr.binHandle, "binHandle"),
                (attr.funcEntryAddr, "funcEntryAddr"),
                (attr.blockDimAddr, "blockDimAddr"),
            ] {
                ensure!(
                    !ptr.is_null(),
                    ACL_ERROR_RT_PARAM_INVALID,
                    "aicAivTaskAttr.{what} is NULL"
                );
            }
            reserved_zero(&attr.rsv)?;
            Ok(Attr::Kernel {
                bin: handle::from_ptr(attr.binHandle),
                entry: attr.funcEntryAddr as usize,
                blocks: attr.blockDimAddr as usize,
            })
        }
        id => fail!(
            ACL_ERROR_RT_PARAM_INVALID,
            "id {id} is not an aclrtUpdateTaskAttrId"
        ),
    }
}

/// Where the update reads from, once the target is a task of the kind the attribute updates
/// (107000 otherwise) and the addresses are device memory of `device` (107000).
fn source(sim: &Sim, attr: Attr, target: &Step, device: i32) -> Res<Source> {
    let memory = &sim.memory;
    match (attr, target) {
        (Attr::Random { src, size }, Step::Run(Op::Random(_))) => {
            check_on_device(memory, src, size, device, "randomTaskAttr.srcAddr")?;
            Ok(Source::Random { src })
        }
        (Attr::Kernel { bin, entry, blocks }, Step::Run(Op::Kernel(launch))) => {
            let binary = sim.binaries.resolve(bin)?;
            check_on_device(memory, entry, 8, device, "aicAivTaskAttr.funcEntryAddr")?;
            check_on_device(memory, blocks, 4, device, "aicAivTaskAttr.blockDimAddr")?;
            Ok(Source::Kernel {
                binary,
                entry,
                blocks,
                args_len: launch.args().1,
            })
        }
        (attr, target) => fail!(
            ACL_ERROR_RT_PARAM_INVALID,
            "the target task is a {} task, not {}",
            target.label().1,
            match attr {
                Attr::Random { .. } => "a random number task (ACL_RT_UPDATE_RANDOM_TASK)",
                Attr::Kernel { .. } => "a kernel launch (ACL_RT_UPDATE_AIC_AIV_TASK)",
            }
        ),
    }
}

/// Queues on `execStream` a task that, when it runs, reads new fields from device memory
/// for task `taskId` (aclrtGetThreadLastTaskId) of `taskStream`, a stream bound to a model
/// runtime instance (a built instance's, or a captured one's model stream): a random number
/// task's randomParaAddr, randomResultAddr, randomCounterAddr, randomSeed and randomNum from an
/// aclrtRandomNumTaskInfo at `srcAddr`, or a kernel launch's function (the entry
/// aclrtGetFunctionAddr gives, a u64 at funcEntryAddr, among the functions resolved from
/// binHandle) and block count (a u32 at blockDimAddr). The executions whose task starts after
/// the update has run use them. NULL info → 100000; then the attribute, before any lookup: an
/// id outside aclrtUpdateTaskAttrId, a NULL address or handle, a size smaller than the
/// struct, reserved words not 0 → 107000; a stream of another context → 107003; `taskStream`
/// bound to no instance (the default stream, an ordinary one) → 107005; no random number task
/// or kernel launch `taskId` on the stream, one of the other kind, or an address that is not
/// device memory of the device → 107000; an unloaded binary → 107017.
///
/// # Safety
/// `info` must be NULL or valid for a read of an aclrtTaskUpdateInfo.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtTaskUpdateAsync(
    taskStream: aclrtStream,
    taskId: u32,
    info: *mut aclrtTaskUpdateInfo,
    execStream: aclrtStream,
) -> aclError {
    guard("aclrtTaskUpdateAsync", || {
        non_null(info, "info")?;
        // SAFETY: non-NULL, and valid for a read of the struct by the caller's contract.
        let info = unsafe { info.read_unaligned() };
        // The attribute is an argument: checked (107000, the runtime's code for its structs)
        // before any stream is looked up, as aclrtRandomNumAsync checks its task's fields.
        let attr = attr(&info)?;
        let sim = sim()?;
        let (_, target_stream) = context::owned_stream(sim, taskStream)?;
        let Some(model) = target_stream.bound_model() else {
            fail!(
                ACL_ERROR_RT_STREAM_MODEL,
                "stream {} is bound to no model runtime instance (aclmdlRIBindStream)",
                target_stream.id
            );
        };
        let Some((step, slot)) = model.updatable(target_stream.id, taskId) else {
            fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "stream {} has no task {taskId} an update can change (a random number task or \
                 a kernel launch) in model runtime instance {}",
                target_stream.id,
                model.id
            );
        };
        let exec = context::submit_stream(sim, execStream)?;
        let device = exec.device.id;
        let source = source(sim, attr, &step, device)?;
        let update = TaskUpdate {
            device,
            slot,
            source,
        };
        exec.submit(Task::new(Op::TaskUpdate(update)))
    })
}

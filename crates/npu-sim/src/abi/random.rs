//! aclrtRandomNumAsync: random numbers generated into device memory by a stream task.

use std::ffi::c_void;

use npu_sys::*;

use crate::context;
use crate::error::{ensure, guard, non_null};
use crate::random::{RandomTask, TaskBytes};
use crate::sim::sim;
use crate::task::{Op, Task};

/// Queues a task that, when it runs, writes `randomNum` values of `dataType` to
/// `randomResultAddr`: a dropout bitmask (one bit per value, LSB first, 1 = kept), or values
/// of a uniform ([min, max)), normal or truncated normal (within 2 standard deviations)
/// distribution, from Philox4x32-10 keyed by the seed at the counter offset
/// (`randomCounterAddr`, a u64; NULL: 0). Parameters given by address are read when the task
/// runs. NULL taskInfo or `reserve` not NULL → 100000; a field the task cannot take (a data
/// type or function outside the reference's lists, an integer type for a bitmask or a normal
/// distribution, a parameter's isAddr, size or reserved bytes, parameter values out of range,
/// NULL randomResultAddr, reserved bytes not 0) or an address that is not device memory of
/// the stream's device, large enough → 107000; a stream of another context → 107003.
///
/// # Safety
/// `taskInfo` must be NULL or valid for a read of an aclrtRandomNumTaskInfo.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtRandomNumAsync(
    taskInfo: *const aclrtRandomNumTaskInfo,
    stream: aclrtStream,
    reserve: *mut c_void,
) -> aclError {
    guard("aclrtRandomNumAsync", || {
        non_null(taskInfo, "taskInfo")?;
        ensure!(
            reserve.is_null(),
            ACL_ERROR_INVALID_PARAM,
            "reserve must be NULL"
        );
        // SAFETY: non-NULL, and valid for a read of the struct by the caller's contract; the
        // struct has no padding, so all of its bytes are initialised.
        let bytes = unsafe { taskInfo.cast::<TaskBytes>().read_unaligned() };
        let task = RandomTask::new(&bytes)?;
        let sim = sim()?;
        let stream = context::submit_stream(sim, stream)?;
        let task = task.on_device(stream.device.id, &sim.memory)?;
        stream.submit(Task::new(Op::Random(task)))
    })
}

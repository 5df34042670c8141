//! aclrtProfTrace: profiling markers a program places on a stream. The simulator's profiler is
//! its timeline trace (`npusimTraceEnable`, NPU_TRACE): a marker appears there as an instant on
//! its stream's track, named with the marker's bytes in hex, when the stream reaches it.

use std::ffi::c_void;

use npu_sys::*;

use crate::context;
use crate::error::{ensure, guard, non_null};
use crate::sim::sim;
use crate::task::{Op, PROF_MARKER_BYTES, Task};

/// Queues a profiling marker carrying `length` bytes of `userdata` (at most 18, zero-padded to
/// 18). NULL userdata, a negative length or one above 18 → 100000; a stream of another context
/// → 107003. NULL is the default stream.
///
/// # Safety
/// `userdata` must be NULL or valid for reads of `length` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtProfTrace(
    userdata: *mut c_void,
    length: i32,
    stream: aclrtStream,
) -> aclError {
    guard("aclrtProfTrace", || {
        non_null(userdata, "userdata")?;
        let len = usize::try_from(length).unwrap_or(usize::MAX);
        ensure!(
            len <= PROF_MARKER_BYTES,
            ACL_ERROR_INVALID_PARAM,
            "length {length} is outside 0..={PROF_MARKER_BYTES} bytes"
        );
        let stream = context::submit_stream(sim()?, stream)?;
        let mut data = [0u8; PROF_MARKER_BYTES];
        // SAFETY: non-NULL, and the caller's buffer holds `len` readable bytes (C contract);
        // `len` fits `data`.
        unsafe { std::ptr::copy_nonoverlapping(userdata.cast::<u8>(), data.as_mut_ptr(), len) };
        stream.submit(Task::new(Op::ProfMarker(data)))
    })
}

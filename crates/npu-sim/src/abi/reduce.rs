//! aclrtReduceAsync: an element-wise reduction of device memory into device memory, queued on
//! a stream (the SDMA engine's reduce on the hardware).

use std::ffi::c_void;

use npu_sys::*;

use crate::context;
use crate::error::{ensure, fail, guard, non_null};
use crate::memory::PtrClass;
use crate::reduce::{Element, Reduction};
use crate::sim::sim;
use crate::task::{Op, Task};

/// Queues `dst[i] = kind(dst[i], src[i])` over `count` bytes of elements of `type` (SUM, MAX or
/// MIN of int8, int16, int32, fp16, fp32 or bf16, the types an Atlas A2 reduces). NULL `dst` or
/// `src`, `reserve` not NULL, or a kind outside aclrtReduceKind → 100000; then the stream (no
/// context → 107002, destroyed → 107017, another context's → 107003); then EQUAL or another
/// type → 207000; `count` not a whole number of elements, either range not device memory of
/// the stream's device (inside one allocation), or ranges that overlap without being the same
/// → 107000. `count` 0 does nothing.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtReduceAsync(
    dst: *mut c_void,
    src: *const c_void,
    count: u64,
    kind: aclrtReduceKind,
    r#type: aclDataType,
    stream: aclrtStream,
    reserve: *mut c_void,
) -> aclError {
    guard("aclrtReduceAsync", || {
        non_null(dst, "dst")?;
        non_null(src, "src")?;
        ensure!(
            reserve.is_null(),
            ACL_ERROR_INVALID_PARAM,
            "reserve must be NULL"
        );
        let op = match kind {
            ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM => Some(Reduction::Sum),
            ACL_RT_MEMCPY_SDMA_AUTOMATIC_MAX => Some(Reduction::Max),
            ACL_RT_MEMCPY_SDMA_AUTOMATIC_MIN => Some(Reduction::Min),
            ACL_RT_MEMCPY_SDMA_AUTOMATIC_EQUAL => None,
            _ => fail!(
                ACL_ERROR_INVALID_PARAM,
                "kind {kind} is not an aclrtReduceKind"
            ),
        };
        let sim = sim()?;
        let stream = context::submit_stream(sim, stream)?;
        // The features after the stream, as every call looks its handles up before refusing
        // one.
        let Some(op) = op else {
            fail!(
                ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                "the simulator does not simulate the EQUAL reduction"
            );
        };
        let Some(element) = Element::of(r#type) else {
            fail!(
                ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                "an Atlas A2 reduces int8, int16, int32, fp16, fp32 and bf16, not data type {}",
                r#type
            );
        };
        let Ok(len) = usize::try_from(count) else {
            fail!(ACL_ERROR_RT_PARAM_INVALID, "count {count} is too large");
        };
        ensure!(
            len % element.size() == 0,
            ACL_ERROR_RT_PARAM_INVALID,
            "count {count} is not a whole number of {}-byte elements",
            element.size()
        );
        if len == 0 {
            return Ok(());
        }
        let (dst, src) = (dst as usize, src as usize);
        for (addr, what) in [(dst, "dst"), (src, "src")] {
            let located = sim.memory.locate(addr);
            ensure!(
                located.class == PtrClass::Device(stream.device.id),
                ACL_ERROR_RT_PARAM_INVALID,
                "{what} {addr:#x} is not device memory of device {}",
                stream.device.id
            );
            located.check_range(addr, len, what)?;
        }
        ensure!(
            dst == src || dst + len <= src || src + len <= dst,
            ACL_ERROR_RT_PARAM_INVALID,
            "dst and src overlap without being the same range"
        );
        stream.submit(Task::new(Op::Reduce {
            dst,
            src,
            len,
            op,
            element,
        }))
    })
}

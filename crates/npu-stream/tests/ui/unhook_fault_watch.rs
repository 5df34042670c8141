// A stream's fault watch and fault detail are npu-stream's: safe code can neither replace the
// watch (so the reactor would no longer hear of the stream's faults) nor claim its faults.
use npu_core::{AclCode, Device};
use npu_stream::Stream;

fn main() -> npu_core::Result<()> {
    let ctx = Device::open(0)?.primary_context().clone();
    let stream = Stream::new(&ctx)?;
    let runtime = ctx.runtime();
    drop(runtime.watch_faults(0, stream.id(), std::ptr::null_mut(), || {}));
    let _ = runtime.claim_fault(0, stream.id(), AclCode(507015));
    Ok(())
}

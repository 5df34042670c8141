// An operation's completion is read-only: it cannot be completed early to take the buffers back.
use npu_core::Device;
use npu_mem::DeviceBuffer;
use npu_stream::Stream;

fn main() -> npu_core::Result<()> {
    let ctx = Device::open(0)?.primary_context().clone();
    let stream = Stream::new(&ctx)?;
    let op = stream.memset(DeviceBuffer::<u8>::new(&ctx, 64)?, 0);
    op.completion().complete(Ok(()));
    Ok(())
}

// Running code after a completion (on the shared reaper thread) is not open to safe code.
use npu_core::Device;
use npu_mem::DeviceBuffer;
use npu_stream::Stream;

fn main() -> npu_core::Result<()> {
    let ctx = Device::open(0)?.primary_context().clone();
    let stream = Stream::new(&ctx)?;
    let op = stream.memset(DeviceBuffer::<u8>::new(&ctx, 64)?, 0);
    op.completion().defer(|| ());
    op.completion().drop_after(vec![0u8; 4]);
    Ok(())
}

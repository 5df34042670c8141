// A launch takes its arguments by value, as a copy takes its buffers: a borrowed buffer (how
// cudarc's launches take theirs) is refused, and the error says to move it or share an `Arc`.
use npu_core::Function;
use npu_mem::DeviceBuffer;
use npu_stream::Stream;

fn launch(stream: &Stream, scale: &Function, x: &DeviceBuffer<f32>) {
    // SAFETY: never compiled.
    let _ = unsafe { stream.launch(scale, 1, (x, 2u64, 0.5f32)) };
}

fn main() {}

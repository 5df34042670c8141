// A `Vec` is pageable memory: the copy is refused, and the error names the staged copies.
use npu_mem::DeviceBuffer;
use npu_stream::Stream;

fn upload(stream: &Stream, data: Vec<f32>, dst: DeviceBuffer<f32>) {
    let _ = stream.copy_h2d(data, dst);
}

fn main() {}

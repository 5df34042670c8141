// The parts of a split buffer are owned values: neither a part nor the buffer it came from can
// be reached by a second operation while one holds it.
use npu_mem::{DeviceBuffer, MemoryMut};
use npu_stream::Stream;

fn alias(stream: &Stream, buffer: DeviceBuffer<u8>) {
    let (head, _tail) = buffer.into_halves(4).unwrap();
    let first = stream.memset(head, 1);
    let second = stream.memset(head, 2); // the part moved into the first memset
    let whole = stream.memset(buffer, 3); // the buffer moved into its parts
    drop((first, second, whole));
}

fn main() {}

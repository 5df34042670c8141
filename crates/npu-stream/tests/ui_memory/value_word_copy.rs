// A value word may be shared and written by `write_value` on another stream at any moment, so
// neither it nor its `Arc` is memory a copy or memset accepts: a plain copy would race the
// store. Its value is read back once it is owned again.
use std::sync::Arc;

use npu_mem::PinnedBuffer;
use npu_stream::{Stream, ValueWord};

fn race(stream: &Stream, word: Arc<ValueWord>, host: PinnedBuffer<u64>) {
    let copy = stream.copy_d2h(word.clone(), host);
    let memset = stream.memset(word, 0);
    drop((copy, memset));
}

fn main() {}

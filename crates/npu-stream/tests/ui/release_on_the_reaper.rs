// Running code on the shared reaper thread (a deferred release, a pool source's free) is not
// open to safe code: a release that blocks would hold up every release of the process.
use npu_core::UseList;
use npu_mem::pool_cache::Source;

struct Blocking;

impl Source for Blocking {
    type Block = ();
    const NAME: &'static str = "Blocking::alloc";

    fn block_bytes(_: &()) -> usize {
        0
    }

    fn free(&self, _: Vec<()>) {}
}

fn main() {
    let mut uses = UseList::new();
    uses.release(|| ());
    npu_core::reaper::release_later(|| ());
}

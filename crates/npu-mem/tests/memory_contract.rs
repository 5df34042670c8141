//! What the library's own unsafe code trusts of the `unsafe` memory traits, and what it does
//! not: an implementation's own `byte_len`.

use std::ffi::c_void;

use npu_core::{Completion, Context, Device};
use npu_mem::{DeviceBuffer, DeviceSlice, HostSlice, Memory, MemoryMut, PinnedBuffer, PinnedPool};
use npu_stream::Stream;

/// Memory behind a wrapper that keeps every promise `Memory`'s safety section lists (address,
/// length, allocation, uses, drop) but reports the size of the page it sits in as its "size in
/// bytes" (a 64 KiB huge page), which the contract does not mention.
struct Paged<B>(B);

const PAGE: usize = 64 << 10;

// SAFETY: address, length, context and uses are the inner buffer's own; `byte_len` is not
// among the guarantees `Memory`'s safety section asks for.
unsafe impl<B: Memory<Elem = u8>> Memory for Paged<B> {
    type Elem = u8;

    fn context(&self) -> &Context {
        self.0.context()
    }

    fn addr(&self) -> *const c_void {
        self.0.addr()
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn byte_len(&self) -> usize {
        self.0.len().next_multiple_of(PAGE)
    }

    fn record_use(&self, completion: &Completion) {
        self.0.record_use(completion)
    }
}

// SAFETY: the inner buffer's, which is the only access to its memory.
unsafe impl<B: MemoryMut<Elem = u8>> MemoryMut for Paged<B> {
    fn addr_mut(&mut self) -> *mut c_void {
        self.0.addr_mut()
    }
}

// SAFETY: the inner buffer's: pinned host memory.
unsafe impl<B: HostSlice<Elem = u8>> HostSlice for Paged<B> {}

// SAFETY: the inner buffer's: device memory of its context's device.
unsafe impl<B: DeviceSlice<Elem = u8>> DeviceSlice for Paged<B> {}

fn context() -> Context {
    Device::open(0).unwrap().primary_context().clone()
}

/// The library's own `as_bytes` and `Cast` read only the `len()` elements the memory holds,
/// whatever a `Memory` implementation reports as its size in bytes.
#[test]
fn host_views_read_only_the_elements_the_memory_holds() {
    let ctx = context();
    let memory = Paged(PinnedBuffer::from_slice(&ctx, &[7u8; 16]).unwrap());
    // Sums before lengths, so that a read past the elements shows under valgrind.
    let sum = memory.as_bytes().iter().map(|&b| u32::from(b)).sum::<u32>();
    assert_eq!((sum, memory.as_bytes().len()), (16 * 7, 16));
    let bytes = memory.into_bytes();
    let sum = bytes[..].iter().map(|&b| u32::from(b)).sum::<u32>();
    assert_eq!((sum, bytes.len()), (16 * 7, 16));
}

/// Copies and memsets move `len()` elements, not what `byte_len` says.
#[test]
fn copies_move_only_the_elements_the_memory_holds() {
    let ctx = context();
    let stream = Stream::new(&ctx).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let src = Paged(PinnedBuffer::from_slice(&ctx, &[3u8; 16]).unwrap());
        let dst = DeviceBuffer::<u8>::new(&ctx, 16).unwrap();
        let (_src, dst) = stream.copy_h2d(src, dst).await.unwrap();
        assert_eq!(dst.to_vec_blocking().unwrap(), [3u8; 16]);
        let back = Paged(PinnedBuffer::new(&ctx, 16).unwrap());
        let (_dst, back) = stream.copy_d2h(dst, back).await.unwrap();
        assert_eq!(back.0[..], [3u8; 16]);
    });
}

/// A memset and a staged download size themselves from `len()` too: the memset writes the
/// buffer's 16 bytes and no more (the simulator refuses a write past an allocation), and the
/// download stages and returns those 16.
#[test]
fn memsets_and_staged_downloads_move_only_the_elements_the_memory_holds() {
    let ctx = context();
    let stream = Stream::new(&ctx).unwrap();
    let pool = PinnedPool::new(&ctx);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let device = Paged(DeviceBuffer::<u8>::new(&ctx, 16).unwrap());
        let device = stream.memset(device, 9).await.unwrap();
        let (_device, data) = stream.copy_to_vec_staged(&pool, device).await.unwrap();
        assert_eq!(data, [9u8; 16]);
    });
}

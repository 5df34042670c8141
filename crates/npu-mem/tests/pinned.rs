//! Pinned buffers: alignment, argument errors, `bytes` adapters, and socket data landing
//! straight in pinned memory on its way to the device.

use bytes::{Buf, BufMut};
use npu_core::{Context, Device};
use npu_mem::{
    DeviceBuffer, Filled, HostAllocConfig, HostSlice, Memory, PageAlignedBuffer, PinnedBuffer,
};
use npu_stream::Stream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn context() -> Context {
    Device::open(0).unwrap().primary_context().clone()
}

#[repr(C, align(128))]
#[derive(Clone, Copy, bytemuck::Zeroable, bytemuck::Pod)]
struct OverAligned([u8; 128]);

#[test]
fn every_allocation_is_aligned() {
    let ctx = context();
    let config = HostAllocConfig::new().module_id(HostAllocConfig::APP_MODULE);
    for len in [1, 3, 64, 4095, 4096, 100_000, 1 << 20] {
        let bytes = PinnedBuffer::<u8>::new(&ctx, len).unwrap();
        assert_eq!(
            bytes.host_ptr() as usize % 64,
            0,
            "PinnedBuffer<u8> of {len}"
        );
        let words = PinnedBuffer::<u64>::with_config(&ctx, len, &config).unwrap();
        assert_eq!(words.host_ptr() as usize % 64, 0, "with_config, {len}");
        let device = DeviceBuffer::<f32>::new(&ctx, len).unwrap();
        assert_eq!(device.addr() as usize % 64, 0, "DeviceBuffer of {len}");
        let paged = PageAlignedBuffer::<u16>::new(len).unwrap();
        assert_eq!(
            paged.as_ptr() as usize % 4096,
            0,
            "PageAlignedBuffer of {len}"
        );
    }
}

/// The allocators with options name themselves in their errors, not the plain constructor
/// the caller did not call.
#[test]
fn allocators_with_options_name_themselves_in_errors() {
    let ctx = context();
    let config = HostAllocConfig::new();
    let named = |err: npu_core::Error| match err {
        npu_core::Error::InvalidArgument { api, argument, .. } => (api, argument),
        other => panic!("expected an argument error, got {other}"),
    };
    let err = DeviceBuffer::<u8>::with_policy(&ctx, 0, npu_mem::MallocPolicy::NormalOnly);
    assert_eq!(
        named(err.unwrap_err()),
        ("DeviceBuffer::with_policy", "len")
    );
    let err = PinnedBuffer::<u8>::with_config(&ctx, 0, &config);
    assert_eq!(
        named(err.unwrap_err()),
        ("PinnedBuffer::with_config", "len")
    );
    let err = PinnedBuffer::<OverAligned>::with_config(&ctx, 1, &config);
    assert_eq!(named(err.unwrap_err()), ("PinnedBuffer::with_config", "T"));
}

#[test]
fn empty_and_oversized_requests_are_typed_errors() {
    let ctx = context();
    let cases = [
        PinnedBuffer::<u8>::new(&ctx, 0).map(drop),
        PinnedBuffer::<u32>::new(&ctx, usize::MAX / 2).map(drop),
        PinnedBuffer::<OverAligned>::new(&ctx, 1).map(drop),
        DeviceBuffer::<u8>::new(&ctx, 0).map(drop),
        DeviceBuffer::<u64>::new(&ctx, usize::MAX / 8 + 1).map(drop),
        PageAlignedBuffer::<u8>::new(0).map(drop),
    ];
    let rules = [
        "PinnedBuffer::new: invalid argument `len`: must be at least 1",
        "isize::MAX",
        "alignment of 128 bytes exceeds the 64 bytes aclrtMallocHost guarantees",
        "DeviceBuffer::new: invalid argument `len`: must be at least 1",
        "isize::MAX",
        "PageAlignedBuffer::new: invalid argument `len`",
    ];
    for (case, rule) in cases.into_iter().zip(rules) {
        let err = case.unwrap_err();
        assert!(
            err.acl_code().is_none(),
            "rejected before calling ACL: {err}"
        );
        assert!(
            err.to_string().contains(rule),
            "{err} should mention {rule:?}"
        );
    }
}

#[test]
fn filled_tracks_what_was_written_and_read() {
    let ctx = context();
    let mut buf = Filled::new(PinnedBuffer::<u8>::new(&ctx, 8).unwrap());
    buf.put_slice(b"abcdef");
    assert_eq!((buf.remaining(), buf.remaining_mut()), (6, 2));
    assert_eq!(buf.get_u16(), u16::from_be_bytes(*b"ab"));
    assert_eq!(buf.chunk(), b"cdef");
    buf.advance(100);
    assert_eq!(buf.remaining(), 0, "advancing past the end stops there");
    buf.put_slice(b"gh");
    assert_eq!(buf.remaining_mut(), 0);
    // SAFETY: advancing a full buffer writes nothing; the adapter clamps it.
    unsafe { buf.advance_mut(5) };
    assert_eq!(buf.filled(), b"abcdefgh");
    let view = buf.into_view().unwrap();
    assert_eq!((view.offset(), view.len()), (6, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socket_data_lands_in_pinned_memory_and_reaches_the_device() {
    const LEN: usize = 3 << 20;
    let payload: Vec<u8> = (0..LEN).map(|i| (i * 31 % 253) as u8).collect();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let sent = payload.clone();
    let writer = tokio::spawn(async move {
        let mut socket = tokio::net::TcpStream::connect(address).await.unwrap();
        socket.write_all(&sent).await.unwrap();
        socket.shutdown().await.unwrap();
    });
    let (mut socket, _) = listener.accept().await.unwrap();

    let ctx = context();
    let mut landing = Filled::new(PinnedBuffer::<u8>::new(&ctx, LEN + 4096).unwrap());
    while socket.read_buf(&mut landing).await.unwrap() > 0 {}
    writer.await.unwrap();
    assert_eq!(landing.filled().len(), LEN);

    let stream = Stream::new(&ctx).unwrap();
    let device = DeviceBuffer::<u8>::new(&ctx, LEN).unwrap();
    let (_landing, device) = stream
        .copy_h2d(landing.into_view().unwrap(), device)
        .await
        .unwrap();
    assert!(
        device.to_vec_blocking().unwrap() == payload,
        "byte for byte"
    );
}

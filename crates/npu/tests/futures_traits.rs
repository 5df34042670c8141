//! Compile-time checks of what a Tokio user relies on from every public future of npu-rs:
//! each is `Send` (so it can be `tokio::spawn`ed), `'static` where it owns its inputs, and
//! `Unpin` where the type promises it (so `select!` on `&mut fut` needs no `pin!`); the types
//! users hold implement `Debug`. The checks are generic functions applied to real futures, so
//! a regression fails to compile; each test then drives its futures so that nothing is left
//! half done on the device.

use std::fmt::Debug;
use std::future::Future;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use npu::memory::{HostRegistration, PageAlignedBuffer, PooledDeviceBuffer, RegisterFlags};
use npu::prelude::*;
use npu::stream::{Copy2d, Notify, Op, StreamPool, ValueCondition, ValueWord};
use npu::{Pod, Stream};

fn assert_send_sync<T: Send + Sync + 'static>(_: &T) {}
fn assert_unpin<T: Unpin>(_: &T) {}
fn assert_debug<T: Debug>(_: &T) {}

/// A future that can be handed to `tokio::spawn` as it is: `Send + 'static`, with a `Send`
/// output.
fn assert_spawnable<F: Future + Send + 'static>(_: &F)
where
    F::Output: Send,
{
}

/// A future that borrows its receiver or arguments: `Send`, with a `Send` output, so that a
/// task awaiting it (and owning what it borrows) is spawnable.
fn assert_send_future<F: Future + Send>(_: &F)
where
    F::Output: Send,
{
}

/// The checks every `Op` gets: spawnable, `Unpin` (usable as `&mut op` in `select!`),
/// `Debug`.
fn assert_op<T: Send + 'static>(op: &Op<T>) {
    assert_spawnable(op);
    assert_unpin(op);
    assert_debug(op);
}

fn setup() -> (Context, Stream) {
    let ctx = Device::open(0).unwrap().primary_context().clone();
    let stream = Stream::new(&ctx).unwrap();
    (ctx, stream)
}

#[tokio::test]
async fn copies_and_memsets_are_spawnable_unpin_ops() {
    let (ctx, stream) = setup();
    let host = PinnedBuffer::from_slice(&ctx, &[1u32; 16]).unwrap();
    let dev = DeviceBuffer::<u32>::new(&ctx, 16).unwrap();

    let op = stream.copy_h2d(host, dev);
    assert_op(&op);
    let (host, dev) = op.await.unwrap();

    let op = stream.copy_d2h(dev, host);
    assert_op(&op);
    let (dev, host) = op.await.unwrap();

    let op = stream.copy_d2d(dev, DeviceBuffer::<u32>::new(&ctx, 16).unwrap());
    assert_op(&op);
    let (dev, dev2) = op.await.unwrap();

    let op = stream.copy_h2h(host, PinnedBuffer::<u32>::new(&ctx, 16).unwrap());
    assert_op(&op);
    // npu-sim models an EP host, which refuses async host-to-host copies: the buffers come
    // back with the error.
    let (host, _host2) = match op.await {
        Ok(pair) => pair,
        Err(failed) => failed.value.expect("the buffers come back"),
    };

    let shape = Copy2d {
        width: 4,
        height: 4,
        src_pitch: 4,
        dst_pitch: 4,
    };
    let op = stream.copy_2d_h2d(host, dev, shape);
    assert_op(&op);
    let (host, dev) = op.await.unwrap();
    let op = stream.copy_2d_d2h(dev, host, shape);
    assert_op(&op);
    let (dev, _host) = op.await.unwrap();
    let op = stream.copy_2d_d2d(dev, dev2, shape);
    assert_op(&op);
    let (dev, _dev2) = op.await.unwrap();

    let op = stream.memset(dev, 0);
    assert_op(&op);
    op.await.unwrap();

    // The helper is no stronger than spawning: an `Op` really is spawned.
    let op = stream.memset(DeviceBuffer::<u8>::new(&ctx, 8).unwrap(), 1);
    tokio::spawn(op).await.unwrap().unwrap();

    let op = stream.synchronize();
    assert_op(&op);
    op.await.unwrap();
}

#[tokio::test]
async fn launches_are_spawnable_unpin_ops() {
    let (ctx, stream) = setup();
    // SAFETY: npu-sim's shipped kernel library, built for its kernel ABI.
    let module = unsafe { Module::from_file(&ctx, npu::sim::kernel::LIBRARY_PATH) }.unwrap();
    let scale = module.function("scale_f32").unwrap();
    let x = DeviceBuffer::<f32>::new(&ctx, 2).unwrap();
    // SAFETY: scale_f32(float *x, uint64_t n, float alpha) scales n elements of x in place.
    let op = unsafe { stream.launch(&scale, 1, (x, 2u64, 3.0f32)) };
    assert_op(&op);
    let (x, _, _) = op.await.unwrap();
    // SAFETY: as above.
    let op = unsafe {
        stream.launch_with(
            &scale,
            LaunchConfig::new(NonZeroU32::MIN),
            (x, 2u64, 0.5f32),
        )
    };
    assert_op(&op);
    op.await.unwrap();
    assert_debug(&module);
    assert_debug(&scale);
}

#[tokio::test]
async fn events_notifies_and_values_are_spawnable() {
    let (ctx, stream) = setup();
    let event = Event::new(&ctx).unwrap();
    event.record(&stream).unwrap();
    let wait = event.wait();
    assert_spawnable(&wait);
    assert_unpin(&wait);
    assert_debug(&wait);
    wait.await.unwrap();

    let op = stream.wait_event_timeout(&event, Duration::from_secs(5));
    assert_op(&op);
    op.await.unwrap();

    let notify = Notify::new(&ctx).unwrap();
    let record = stream.record_notify(&notify);
    assert_op(&record);
    let wait = stream.wait_notify(&notify);
    assert_op(&wait);
    record.await.unwrap();
    wait.await.unwrap();
    let record = stream.record_notify(&notify);
    let wait = stream.wait_notify_timeout(&notify, Duration::from_secs(5));
    assert_op(&wait);
    record.await.unwrap();
    wait.await.unwrap();

    let word = ValueWord::new(&ctx, 0).unwrap();
    let op = stream.write_value(word, 3);
    assert_op(&op);
    let word = Arc::new(op.await.unwrap());
    let op = stream.wait_value(word.clone(), 3, ValueCondition::Equal);
    assert_op(&op);
    op.await.unwrap();

    // `Completion::wait`, the future under every operation.
    let op = stream.synchronize();
    let wait = op.completion().wait();
    assert_spawnable(&wait);
    assert_unpin(&wait);
    assert_debug(&wait);
    wait.await.unwrap();
    op.await.unwrap();

    // The handles a task moves or shares (`Arc`) into spawned tasks.
    assert_send_sync(&event);
    assert_send_sync(&notify);
    assert_send_sync(&word);
    assert_send_sync(&stream);
    for held in [&event as &dyn Debug, &notify, &word, &stream] {
        assert!(!format!("{held:?}").is_empty());
    }
}

#[tokio::test]
async fn abort_and_timed_are_spawnable() {
    let (ctx, stream) = setup();
    let abort = stream.abort();
    assert_spawnable(&abort);
    assert_unpin(&abort);
    abort.await.unwrap();

    let buffer = DeviceBuffer::<u8>::new(&ctx, 64).unwrap();
    let timed = stream.timed(|s| s.memset(buffer, 1));
    assert_send_future(&timed);
    timed.await.unwrap();
    // Spawned as a Tokio user would: the task owns the stream it borrows.
    let owned = stream.clone();
    let buffer = DeviceBuffer::<u8>::new(&ctx, 64).unwrap();
    tokio::spawn(async move { owned.timed(|s| s.memset(buffer, 2)).await })
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn pools_and_staged_copies_are_spawnable() {
    let (ctx, stream) = setup();
    let pinned = PinnedPool::new(&ctx);
    let alloc = pinned.alloc::<u32>(16);
    assert_send_future(&alloc);
    let block = alloc.await.unwrap();
    assert_debug(&block);
    assert_debug(&pinned);

    let pool = DevicePool::new(&ctx).unwrap();
    let alloc = pool.alloc::<u32>(&stream, 16);
    assert_send_future(&alloc);
    let dblock: PooledDeviceBuffer<u32> = alloc.await.unwrap();
    assert_debug(&dblock);
    assert_debug(&pool);
    let reserve = pool.reserve(&stream, 1, 4096);
    assert_send_future(&reserve);
    reserve.await.unwrap();

    let data = [7u32; 16];
    let staged = stream.copy_from_slice_staged(&pinned, &data, dblock);
    assert_send_future(&staged);
    let dblock = staged.await.unwrap();
    let staged = stream.copy_to_vec_staged(&pinned, dblock);
    assert_send_future(&staged);
    let (dblock, back) = staged.await.unwrap();
    assert_eq!(back, data);

    let upload = stream.upload(&data);
    assert_send_future(&upload);
    let uploaded = upload.await.unwrap();
    let download = stream.download(uploaded);
    assert_send_future(&download);
    assert_eq!(download.await.unwrap(), data);
    drop(dblock);

    let streams = StreamPool::new(&ctx, 2).unwrap();
    assert_debug(&streams);
    for handle in [
        &pinned as &(dyn Debug + Send + Sync),
        &pool,
        &streams,
        &back,
    ] {
        assert!(!format!("{handle:?}").is_empty());
    }
    assert_send_sync(&pinned);
    assert_send_sync(&pool);
    assert_send_sync(&streams);
}

/// The same futures, created in generic code: a caller generic over the element type needs
/// `T: Send + Sync` beside `Pod` and nothing more. `Pod` alone does not imply them (bytemuck
/// makes raw pointers `Pod`), and the staged copies borrow a `&[T]` or resolve to a `Vec<T>`,
/// as any code holding those across an `.await` would.
fn generic_futures_are_send<T: Pod + Send + Sync>(
    ctx: &Context,
    stream: &Stream,
    pinned: &PinnedPool,
    pool: &DevicePool,
    data: &[T],
) {
    let dst = DeviceBuffer::<T>::new(ctx, data.len()).unwrap();
    assert_send_future(&stream.copy_from_slice_staged(pinned, data, dst));
    let src = DeviceBuffer::<T>::new(ctx, data.len()).unwrap();
    assert_send_future(&stream.copy_to_vec_staged(pinned, src));
    assert_send_future(&stream.upload(data));
    let src = DeviceBuffer::<T>::new(ctx, data.len()).unwrap();
    assert_send_future(&stream.download(src));
    assert_send_future(&pinned.alloc::<T>(data.len()));
    assert_send_future(&pool.alloc::<T>(stream, data.len()));
    let op = stream.memset(DeviceBuffer::<T>::new(ctx, data.len()).unwrap(), 0);
    assert_op(&op);
}

#[tokio::test]
async fn generic_callers_get_send_futures() {
    let (ctx, stream) = setup();
    let pinned = PinnedPool::new(&ctx);
    let pool = DevicePool::new(&ctx).unwrap();
    generic_futures_are_send::<f32>(&ctx, &stream, &pinned, &pool, &[1.0; 8]);
    stream.synchronize().await.unwrap();
}

#[tokio::test]
async fn registration_into_inner_is_spawnable() {
    let ctx = Device::open(0).unwrap().primary_context().clone();
    let buffer = PageAlignedBuffer::from_slice(&[1u16; 2048]).unwrap();
    let reg = HostRegistration::new(&ctx, buffer, RegisterFlags::PINNED).unwrap();
    assert_debug(&reg);
    let inner = reg.into_inner();
    assert_spawnable(&inner);
    let buffer = tokio::spawn(inner).await.unwrap().unwrap();
    assert_debug(&buffer);
}

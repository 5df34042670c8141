//! Split parts, casts, byte views and `Filled` over any `Pod` element: parts never alias,
//! every part keeps the allocation alive until the operations on every part have completed,
//! and the device sees the same bytes as the host.
//!
//! Only the release test holds a device's task gate (device 1), so no other test in this
//! process can open the gate under it.

use bytes::BufMut;
use npu_core::{Context, Device};
use npu_mem::{DeviceBuffer, Filled, HostSlice, Memory, MemoryMut, PinnedBuffer};
use npu_sim::control::device_stats;
use npu_stream::{Strategy, Stream};

const STRATEGIES: [Strategy; 3] = [
    Strategy::EventPoll,
    Strategy::CallbackThread,
    Strategy::BlockingSync,
];

fn context(device: u32) -> Context {
    Device::open(device).unwrap().primary_context().clone()
}

fn stream(ctx: &Context, strategy: Strategy) -> Stream {
    Stream::builder(ctx).strategy(strategy).build().unwrap()
}

fn run<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

#[test]
fn the_parts_of_a_device_buffer_are_written_by_two_streams_at_once() {
    let ctx = context(0);
    for strategy in STRATEGIES {
        let (first, second) = (stream(&ctx, strategy), stream(&ctx, strategy));
        let (head, tail) = DeviceBuffer::<u16>::new(&ctx, 1000)
            .unwrap()
            .into_halves(300)
            .unwrap();
        let (head, tail) = run(async {
            let (head, tail) = tokio::join!(first.memset(head, 1), second.memset(tail, 2));
            (head.unwrap(), tail.unwrap())
        });
        let whole = tail.join(head).unwrap().into_whole().unwrap();
        let data = whole.to_vec_blocking().unwrap();
        assert!(data[..300].iter().all(|&x| x == 0x0101), "{strategy:?}");
        assert!(data[300..].iter().all(|&x| x == 0x0202), "{strategy:?}");
    }
}

#[test]
fn parts_never_overlap_and_writing_one_leaves_the_other_alone() {
    let ctx = context(0);
    let (mut a, rest) = PinnedBuffer::<u32>::new(&ctx, 10)
        .unwrap()
        .into_halves(4)
        .unwrap();
    let (mut b, mut c) = rest.into_halves(0).unwrap();
    let ranges: Vec<(usize, usize)> = [&a, &b, &c]
        .iter()
        .map(|part| (part.addr() as usize, part.addr() as usize + part.byte_len()))
        .collect();
    for (i, x) in ranges.iter().enumerate() {
        for y in &ranges[i + 1..] {
            assert!(x.1 <= y.0 || y.1 <= x.0, "{x:?} overlaps {y:?}");
        }
    }
    a.fill(7);
    b.fill(8); // empty: writes nothing
    c.fill(9);
    assert_eq!((&a[..], b.len(), &c[..]), (&[7; 4][..], 0, &[9; 6][..]));
    let whole = a.join(b).unwrap().join(c).unwrap().into_whole().unwrap();
    assert_eq!(whole[..], [7, 7, 7, 7, 9, 9, 9, 9, 9, 9]);
}

#[test]
fn parts_of_different_buffers_do_not_join() {
    let ctx = context(0);
    let (a, _) = DeviceBuffer::<u8>::new(&ctx, 8)
        .unwrap()
        .into_halves(4)
        .unwrap();
    let (_, b) = DeviceBuffer::<u8>::new(&ctx, 8)
        .unwrap()
        .into_halves(4)
        .unwrap();
    let failed = a.join(b).unwrap_err();
    assert!(failed.to_string().contains("different buffers"), "{failed}");
    assert!(failed.value.is_some(), "both parts handed back");
}

#[test]
fn a_dropped_part_keeps_the_allocation_until_every_part_is_done() {
    let ctx = context(1);
    let stream = stream(&ctx, Strategy::EventPoll);
    let before = device_stats(1).unwrap().live_allocations;
    let (head, tail) = DeviceBuffer::<u8>::new(&ctx, 4096)
        .unwrap()
        .into_halves(2048)
        .unwrap();
    npu_sim::control::hold(1).unwrap();
    let pending = stream.memset(tail, 3);
    let done = pending.completion().clone();
    drop((pending, head)); // every value that reaches the allocation is gone
    npu_core::reaper::flush();
    assert_eq!(
        device_stats(1).unwrap().live_allocations,
        before + 1,
        "the memset on the tail is still pending: the buffer must stay allocated"
    );
    npu_sim::control::release(1).unwrap();
    done.wait_blocking().unwrap();
    while device_stats(1).unwrap().live_allocations > before {
        npu_core::reaper::flush();
        std::thread::yield_now();
    }
}

#[test]
fn a_cast_device_buffer_reads_back_the_same_bytes() {
    let ctx = context(0);
    for strategy in STRATEGIES {
        let stream = stream(&ctx, strategy);
        let floats = [1.0f32, -0.5, 3.25];
        let mut host = PinnedBuffer::<u8>::new(&ctx, 12).unwrap();
        host.copy_from_slice(bytemuck::cast_slice(&floats));
        let device = DeviceBuffer::<u8>::new(&ctx, 12).unwrap();
        let (_, device) = run(stream.copy_h2d(host, device)).unwrap();
        let device = device.cast::<f32>().unwrap();
        let back = PinnedBuffer::<f32>::new(&ctx, 3).unwrap();
        let (device, back) = run(stream.copy_d2h(device, back)).unwrap();
        assert_eq!(back[..], floats, "{strategy:?}");
        assert_eq!(device.into_inner().len(), 12);
    }
}

#[test]
fn filled_takes_floats_from_a_byte_source_and_copies_them_to_the_device() {
    let ctx = context(0);
    for strategy in STRATEGIES {
        let stream = stream(&ctx, strategy);
        let mut buf = Filled::new(PinnedBuffer::<f32>::new(&ctx, 4).unwrap());
        for x in [0.5f32, 1.5, 2.5] {
            buf.put_f32_ne(x);
        }
        assert_eq!(buf.remaining_mut(), 4);
        let view = buf.into_view().unwrap();
        assert_eq!(view.len(), 3);
        let (view, device) =
            run(stream.copy_h2d(view, DeviceBuffer::new(&ctx, 3).unwrap())).unwrap();
        assert_eq!(device.to_vec_blocking().unwrap(), [0.5, 1.5, 2.5]);
        assert_eq!(view.into_inner().as_bytes().len(), 16);
    }
}

#[test]
fn a_cast_to_a_type_without_size_is_refused_and_hands_the_memory_back() {
    let ctx = context(0);
    let failed = DeviceBuffer::<u8>::new(&ctx, 4)
        .unwrap()
        .cast::<()>()
        .unwrap_err();
    assert!(
        failed.to_string().contains("the target type has no size"),
        "{failed}"
    );
    assert_eq!(failed.value.expect("handed back").len(), 4);
}

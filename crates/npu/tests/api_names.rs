//! Every public entry point that refuses bad input names itself and the argument its caller
//! passed: the `(api, argument)` of each `InvalidArgument`, one test per area. An error of a
//! method built on another one must still name the method the caller called (not the inner
//! one), and an argument the caller has (a parameter, `self`, or `T`/`U`); a consuming method
//! hands its value back where its siblings do.

mod common;

use std::num::NonZeroU32;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use common::*;
use npu::HostAllocConfig;
use npu::ffi;
use npu::kernel::{ArgPacker, LaunchConfig, ModuleLoader};
use npu::memory::{
    DevicePoolBuilder, Filled, HostRegistration, MallocPolicy, PageAlignedBuffer,
    PinnedPoolBuilder, RegisterFlags,
};
use npu::prelude::*;
use npu::sim;
use npu::stream::{Copy2d, Event, Notify, Op, Stream, StreamPool, ValueCondition, ValueWord};
use tracing_subscriber::layer::SubscriberExt;

/// The `(api, argument)` of an operation's error, with the value it handed back.
fn refused<T: Send + 'static>(op: Op<T>) -> ((&'static str, &'static str), T) {
    let err = run(op).err().expect("refused");
    (
        invalid(&err.error),
        err.value.expect("the value comes back"),
    )
}

#[test]
fn memory() {
    let (_guard, ctx, ctx1) = exclusive(None);
    let none: [u16; 0] = [];

    let err = DeviceBuffer::<u16>::new(&ctx, 0).unwrap_err();
    assert_eq!(invalid(&err), ("DeviceBuffer::new", "len"));
    let err = DeviceBuffer::<()>::new(&ctx, 1).unwrap_err();
    assert_eq!(invalid(&err), ("DeviceBuffer::new", "T"));
    let err = DeviceBuffer::<u16>::with_policy(&ctx, usize::MAX, MallocPolicy::HugeFirst);
    assert_eq!(
        invalid(&err.unwrap_err()),
        ("DeviceBuffer::with_policy", "len")
    );
    let err = DeviceBuffer::from_host_blocking(&ctx, &none).unwrap_err();
    assert_eq!(invalid(&err), ("DeviceBuffer::from_host_blocking", "data"));
    // The host slice of a blocking copy is the caller's `src` or `dst`.
    let mut buffer = DeviceBuffer::<u16>::new(&ctx, 4).unwrap();
    let err = buffer.copy_from_host_blocking(&[1, 2]).unwrap_err();
    assert_eq!(
        invalid(&err),
        ("DeviceBuffer::copy_from_host_blocking", "src")
    );
    let err = buffer.copy_to_host_blocking(&mut [0; 5]).unwrap_err();
    assert_eq!(
        invalid(&err),
        ("DeviceBuffer::copy_to_host_blocking", "dst")
    );

    let err = PinnedBuffer::<u16>::new(&ctx, 0).unwrap_err();
    assert_eq!(invalid(&err), ("PinnedBuffer::new", "len"));
    let err = PinnedBuffer::<u16>::with_config(&ctx, 0, &HostAllocConfig::new()).unwrap_err();
    assert_eq!(invalid(&err), ("PinnedBuffer::with_config", "len"));
    let err = PinnedBuffer::from_slice(&ctx, &none).unwrap_err();
    assert_eq!(invalid(&err), ("PinnedBuffer::from_slice", "data"));
    let err = PageAlignedBuffer::<u16>::new(0).unwrap_err();
    assert_eq!(invalid(&err), ("PageAlignedBuffer::new", "len"));
    let err = PageAlignedBuffer::from_slice(&none).unwrap_err();
    assert_eq!(invalid(&err), ("PageAlignedBuffer::from_slice", "data"));

    // 100 bytes are not whole pages, wherever the Vec starts: refused, the Vec handed back.
    let err = HostRegistration::new(&ctx, vec![7u8; 100], RegisterFlags::PINNED).unwrap_err();
    assert_eq!(invalid(&err.error), ("HostRegistration::new", "buffer"));
    assert_eq!(err.buffer, [7; 100]);

    // The consuming adapters hand the memory back. Three u16s: no whole u64.
    let err = DeviceBuffer::<u16>::new(&ctx, 3)
        .unwrap()
        .view(2..9)
        .unwrap_err();
    assert_eq!(invalid(&err.error), ("Memory::view", "range"));
    let err = err.value.unwrap().cast::<u64>().unwrap_err();
    assert_eq!(invalid(&err.error), ("Memory::cast", "U"));
    let err = err.value.unwrap().into_halves(5).unwrap_err();
    assert_eq!(invalid(&err.error), ("MemoryMut::into_halves", "mid"));
    let (head, tail) = err.value.unwrap().into_halves(2).unwrap();
    let err = head.into_halves(3).unwrap_err();
    assert_eq!(invalid(&err.error), ("Split::into_halves", "mid"));
    let head = err.value.unwrap();
    let (first, second) = head.into_halves(1).unwrap();
    let err = first.join(tail).unwrap_err();
    assert_eq!(invalid(&err.error), ("Split::join", "other"));
    let (first, tail) = err.value.unwrap();
    let err = first.into_whole().unwrap_err();
    assert_eq!(invalid(&err.error), ("Split::into_whole", "self"));
    drop((err, second, tail));
    let mut filled = Filled::new(PinnedBuffer::<u32>::new(&ctx, 2).unwrap());
    bytes::BufMut::put_slice(&mut filled, &[1, 2, 3]);
    let err = filled.into_view().unwrap_err();
    assert_eq!(invalid(&err.error), ("Filled::into_view", "self"));
    assert_eq!(err.value.unwrap().filled(), [1, 2, 3]);

    let err = ValueWord::from_memory(DeviceBuffer::<u64>::new(&ctx, 2).unwrap()).unwrap_err();
    assert_eq!(invalid(&err.error), ("ValueWord::from_memory", "memory"));
    assert_eq!(err.value.unwrap().len(), 2);
    drop(ctx1);
}

/// A tracing layer that runs `HOOK` for every event emitted on the thread that set it.
struct Hooked(Mutex<Option<Box<dyn FnMut() + Send>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Hooked {
    fn on_event(&self, _: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        // Taken out before it runs: it fires once, and what it calls may log again.
        let hook = self.0.lock().unwrap().take();
        if let Some(mut hook) = hook {
            hook();
        }
    }
}

#[test]
fn streams() {
    let (_guard, ctx, ctx1) = exclusive(None);
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let host = |len| PinnedBuffer::<u16>::new(&ctx, len).unwrap();
        let device = |len| DeviceBuffer::<u16>::new(&ctx, len).unwrap();

        let (named, _) = refused(s.copy_h2d(host(4), device(3)));
        assert_eq!(named, ("Stream::copy_h2d", "dst"));
        let (named, _) = refused(s.copy_d2h(device(4), host(3)));
        assert_eq!(named, ("Stream::copy_d2h", "dst"));
        let (named, _) = refused(s.copy_d2d(device(4), device(3)));
        assert_eq!(named, ("Stream::copy_d2d", "dst"));
        let (named, _) = refused(s.copy_h2h(host(4), host(3)));
        assert_eq!(named, ("Stream::copy_h2h", "dst"));
        // A copy between two buffers of device 0 on a stream of device 1: the stream is
        // `self`, not an argument of its own.
        let other = stream(&ctx1, strategy);
        let (named, _) = refused(other.copy_d2d(device(4), device(4)));
        assert_eq!(named, ("Stream::copy_d2d", "self"));

        // A bad shape is the caller's `shape`, whichever field breaks the rule.
        let wide = Copy2d {
            width: 5,
            height: 1,
            src_pitch: 4,
            dst_pitch: 8,
        };
        let (named, _) = refused(s.copy_2d_h2d(host(8), device(8), wide));
        assert_eq!(named, ("Stream::copy_2d_h2d", "shape"));
        let tall = Copy2d {
            width: 1,
            height: npu::MAX_2D_HEIGHT + 1,
            ..wide
        };
        let (named, _) = refused(s.copy_2d_d2h(device(8), host(8), tall));
        assert_eq!(named, ("Stream::copy_2d_d2h", "shape"));
        let long = Copy2d {
            width: 4,
            height: 3,
            src_pitch: 4,
            dst_pitch: 4,
        };
        let (named, _) = refused(s.copy_2d_d2d(device(8), device(16), long));
        assert_eq!(named, ("Stream::copy_2d_d2d", "src"));

        let elsewhere = DeviceBuffer::<u8>::new(&ctx1, 8).unwrap();
        let (named, _) = refused(s.memset(elsewhere, 0));
        assert_eq!(named, ("Stream::memset", "dst"));
        let word = || ValueWord::new(&ctx1, 0).unwrap();
        let (named, _) = refused(s.write_value(word(), 1));
        assert_eq!(named, ("Stream::write_value", "word"));
        let (named, _) = refused(s.wait_value(word(), 1, ValueCondition::Equal));
        assert_eq!(named, ("Stream::wait_value", "word"));

        // The staged copies and their one-liners.
        let pool = PinnedPool::new(&ctx);
        let err = run(s.copy_from_slice_staged(&pool, &[1u16, 2], device(3))).unwrap_err();
        assert_eq!(
            invalid(&err.error),
            ("Stream::copy_from_slice_staged", "dst")
        );
        assert_eq!(err.value.unwrap().len(), 3);
        let small = PinnedPool::builder(&ctx).capacity(4096).build().unwrap();
        let err = run(s.copy_to_vec_staged(&small, device(4096))).unwrap_err();
        assert_eq!(invalid(&err.error), ("Stream::copy_to_vec_staged", "pool"));
        assert_eq!(err.value.unwrap().len(), 4096);
        let err = run(s.upload::<u16>(&[])).unwrap_err();
        assert_eq!(invalid(&err), ("Stream::upload", "data"));
        let err = run(s.upload(&[(); 4])).unwrap_err();
        assert_eq!(invalid(&err), ("Stream::upload", "T"));
        let err = run(other.download(device(4))).unwrap_err();
        assert_eq!(invalid(&err.error), ("Stream::download", "src"));
        assert_eq!(err.value.unwrap().len(), 4);

        // An operation polled again after it resolved.
        let mut op = pin!(s.synchronize());
        let done = op.completion().clone();
        run(done.wait()).unwrap();
        assert!(matches!(polled_once(op.as_mut()), Poll::Ready(Ok(()))));
        let Poll::Ready(Err(err)) = polled_once(op.as_mut()) else {
            panic!("a second poll resolves again")
        };
        assert_eq!(invalid(&err.error), ("Op::poll", "self"));
    }

    let err = Stream::builder(&ctx)
        .flags(ffi::ACL_STREAM_PERSISTENT)
        .build()
        .unwrap_err();
    assert_eq!(invalid(&err), ("StreamBuilder::build", "flags"));
}

/// A submission made from inside another submission's ACL call (a tracing subscriber called
/// back by the simulator, which logs the failed call) is refused naming the method the caller
/// called and the stream as it passed it, not the ACL function the operation would submit.
#[test]
fn reentered_submissions() {
    let (_guard, ctx, _ctx1) = exclusive(None);
    // The module's context is the primary one, the stream's an explicit context of the same
    // device: the launch is refused by the runtime (ACL_ERROR_RT_STREAM_CONTEXT), inside the
    // stream's submission.
    let explicit = ctx.device().create_context().unwrap();
    let image = sim::kernel::registry_image(&["scale_f32"]);
    // SAFETY: a registry image names in-process kernels; loading it runs no code.
    let scale = unsafe { Module::from_data(&ctx, &image) }
        .unwrap()
        .function("scale_f32");
    let scale = scale.unwrap();
    for strategy in STRATEGIES {
        let s = stream(&explicit, strategy);
        let inner: Arc<Mutex<Vec<Op<DeviceBuffer<u8>>>>> = Arc::default();
        let (hook_stream, hook_ctx, ops) = (s.clone(), explicit.clone(), inner.clone());
        let hook: Box<dyn FnMut() + Send> = Box::new(move || {
            let buffer = DeviceBuffer::<u8>::new(&hook_ctx, 16).unwrap();
            ops.lock().unwrap().push(hook_stream.memset(buffer, 5));
        });
        let layer = Hooked(Mutex::new(Some(hook)));
        let subscriber = tracing_subscriber::registry().with(layer);
        let x = DeviceBuffer::<f32>::new(&ctx, 4).unwrap();
        common::see_every_callsite();
        // SAFETY: refused by the runtime before the kernel runs.
        let launched = tracing::subscriber::with_default(subscriber, || unsafe {
            s.launch(&scale, 1, (x, 4u64, 2.0f32))
        });
        assert!(
            run(launched).is_err(),
            "{strategy:?}: another context's stream"
        );
        let op = inner.lock().unwrap().pop().expect("the hook submitted");
        let (named, _) = refused(op);
        assert_eq!(named, ("Stream::memset", "self"), "{strategy:?}");
    }
}

#[test]
fn events() {
    let (_guard, ctx, ctx1) = exclusive(None);
    let s = stream(&ctx, npu::stream::Strategy::EventPoll);
    let foreign = dlopened_simulator().device(0).unwrap();
    let foreign_stream = Stream::new(foreign.primary_context()).unwrap();
    let foreign_event = Event::new(foreign.primary_context()).unwrap();

    let event = Event::new(&ctx).unwrap();
    let err = event.record(&foreign_stream).unwrap_err();
    assert_eq!(invalid(&err), ("Event::record", "stream"));
    let err = s.wait_event(&foreign_event).unwrap_err();
    assert_eq!(invalid(&err), ("Stream::wait_event", "event"));
    let (named, _) = refused(s.wait_event_timeout(&event, Duration::ZERO));
    assert_eq!(named, ("Stream::wait_event_timeout", "timeout"));
    let (named, _) = refused(s.wait_event_timeout(&foreign_event, Duration::from_secs(1)));
    assert_eq!(named, ("Stream::wait_event_timeout", "event"));

    let untimed = Event::builder(&ctx)
        .flags(ffi::ACL_EVENT_SYNC)
        .build()
        .unwrap();
    let err = Event::elapsed(&untimed, &event).unwrap_err();
    assert_eq!(invalid(&err), ("Event::elapsed", "start"));
    let err = Event::elapsed(&event, &Event::new(&ctx1).unwrap()).unwrap_err();
    assert_eq!(invalid(&err), ("Event::elapsed", "end"));

    let elsewhere = Notify::new(&ctx1).unwrap();
    let (named, _) = refused(s.record_notify(&elsewhere));
    assert_eq!(named, ("Stream::record_notify", "notify"));
    let (named, _) = refused(s.wait_notify(&elsewhere));
    assert_eq!(named, ("Stream::wait_notify", "notify"));
    let notify = Notify::new(&ctx).unwrap();
    let (named, _) = refused(s.wait_notify_timeout(&notify, Duration::ZERO));
    assert_eq!(named, ("Stream::wait_notify_timeout", "timeout"));

    // An operation whose completer was dropped without completing: each wait names itself.
    // SAFETY: no device work or memory stands behind these completions.
    let (abandoned, waited) = unsafe { (npu::Completer::new(), npu::Completer::new()) };
    let (done, waiter) = (
        abandoned.completion(),
        waited.completion().blocking_waiter(),
    );
    drop((abandoned, waited));
    assert_eq!(
        invalid(&done.wait_blocking().unwrap_err()),
        ("Completion::wait_blocking", "self")
    );
    let err = waiter.wait_for(HANG).expect("not a timeout").unwrap_err();
    assert_eq!(invalid(&err), ("BlockingWaiter::wait_for", "self"));
}

#[test]
fn kernels_and_modules() {
    let (_guard, ctx, ctx1) = exclusive(None);
    // SAFETY: refused before anything is loaded.
    let err = unsafe { Module::from_file(&ctx, "kernels\0.so") }.unwrap_err();
    assert_eq!(invalid(&err), ("Module::from_file", "path"));
    // SAFETY: refused before anything is loaded.
    let err = unsafe { Module::loader(&ctx).file("kernels\0.so") }.unwrap_err();
    assert_eq!(invalid(&err), ("ModuleLoader::file", "path"));
    // SAFETY: refused before anything is loaded.
    let err = unsafe { Module::from_data(&ctx, &[]) }.unwrap_err();
    assert_eq!(invalid(&err), ("Module::from_data", "data"));
    let loader: ModuleLoader = Module::loader(&ctx).lazy_load(true);
    // SAFETY: refused before anything is loaded.
    let err = unsafe { loader.data(&[]) }.unwrap_err();
    assert_eq!(invalid(&err), ("ModuleLoader::data", "data"));

    let image = sim::kernel::registry_image(&["scale_f32"]);
    // SAFETY: a registry image names in-process kernels; loading it runs no code.
    let module = unsafe { Module::from_data(&ctx, &image) }.unwrap();
    assert_eq!(
        invalid(&module.function("").unwrap_err()),
        ("Module::function", "name")
    );
    let err = module.function("scale\0f32").unwrap_err();
    assert_eq!(invalid(&err), ("Module::function", "name"));
    let scale = module.function("scale_f32").unwrap();

    let s = stream(&ctx, npu::stream::Strategy::EventPoll);
    let x = || DeviceBuffer::<f32>::new(&ctx, 4).unwrap();
    let elsewhere = DeviceBuffer::<f32>::new(&ctx1, 4).unwrap();
    // SAFETY: refused before the kernel runs.
    let (named, _) = refused(unsafe { s.launch(&scale, 0, (x(), 4u64, 1.0f32)) });
    assert_eq!(named, ("Stream::launch", "blocks"));
    let (named, (elsewhere, ..)) =
        // SAFETY: refused before the kernel runs.
        refused(unsafe { s.launch(&scale, 1, (elsewhere, 4u64, 1.0f32)) });
    assert_eq!(named, ("Stream::launch", "args"));
    let config = LaunchConfig::new(NonZeroU32::MIN);
    // SAFETY: refused before the kernel runs.
    let (named, _) = refused(unsafe { s.launch_with(&scale, config, (elsewhere, 4u64, 1.0f32)) });
    assert_eq!(named, ("Stream::launch_with", "args"));

    let mut args = ArgPacker::new("my_kernel");
    assert_eq!(
        invalid(&args.push(&[0; 3], 3).unwrap_err()),
        ("my_kernel", "args")
    );
}

#[test]
fn pools() {
    let (_guard, ctx, ctx1) = exclusive(None);
    let builder: PinnedPoolBuilder = PinnedPool::builder(&ctx).capacity(100);
    assert_eq!(
        invalid(&builder.build().unwrap_err()),
        ("PinnedPoolBuilder::build", "capacity")
    );
    let pool = PinnedPool::builder(&ctx).capacity(1 << 20).build().unwrap();
    let err = run(pool.alloc::<u16>(0)).unwrap_err();
    assert_eq!(invalid(&err), ("PinnedPool::alloc", "len"));
    let err = pool.try_alloc::<u16>(1 << 20).unwrap_err();
    assert_eq!(invalid(&err), ("PinnedPool::try_alloc", "len"));
    // `reserve` is given a size in bytes, not a length.
    assert_eq!(
        invalid(&pool.reserve(1, 2 << 20).unwrap_err()),
        ("PinnedPool::reserve", "bytes")
    );
    assert_eq!(
        invalid(&pool.reserve(2, 1 << 20).unwrap_err()),
        ("PinnedPool::reserve", "count")
    );

    let builder: DevicePoolBuilder = DevicePool::builder(&ctx).capacity(100);
    assert_eq!(
        invalid(&builder.build().unwrap_err()),
        ("DevicePoolBuilder::build", "capacity")
    );
    let pool = DevicePool::builder(&ctx).capacity(1 << 20).build().unwrap();
    let s = stream(&ctx, npu::stream::Strategy::EventPoll);
    let err = run(pool.alloc::<u16>(&s, 0)).unwrap_err();
    assert_eq!(invalid(&err), ("DevicePool::alloc", "len"));
    let other = stream(&ctx1, npu::stream::Strategy::EventPoll);
    let err = run(pool.alloc::<u16>(&other, 4)).unwrap_err();
    assert_eq!(invalid(&err), ("DevicePool::alloc", "stream"));
    let err = pool.try_alloc::<u16>(&s, 1 << 20).unwrap_err();
    assert_eq!(invalid(&err), ("DevicePool::try_alloc", "len"));
    let err = run(pool.reserve(&s, 1, 2 << 20)).unwrap_err();
    assert_eq!(invalid(&err), ("DevicePool::reserve", "bytes"));
    let err = run(pool.reserve(&s, usize::MAX, 1 << 20)).unwrap_err();
    assert_eq!(invalid(&err), ("DevicePool::reserve", "count"));

    let err = StreamPool::new(&ctx, 0).unwrap_err();
    assert_eq!(invalid(&err), ("StreamPool::new", "count"));
    let err = StreamPool::with_builder(Stream::builder(&ctx), 0).unwrap_err();
    assert_eq!(invalid(&err), ("StreamPool::with_builder", "count"));
    let unwatchable = Stream::builder(&ctx).flags(ffi::ACL_STREAM_PERSISTENT);
    let err = StreamPool::with_builder(unwatchable, 2).unwrap_err();
    assert_eq!(invalid(&err), ("StreamPool::with_builder", "builder"));
}

#[test]
fn devices_contexts_and_runtime() {
    let (_guard, ctx, _ctx1) = exclusive(None);
    let count = Device::count().unwrap();
    assert_eq!(
        invalid(&Device::open(count).unwrap_err()),
        ("Device::open", "id")
    );
    let runtime = ctx.runtime();
    assert_eq!(
        invalid(&runtime.device(count).unwrap_err()),
        ("Runtime::device", "id")
    );
    let err = runtime.package_version("run\0time").unwrap_err();
    assert_eq!(invalid(&err), ("Runtime::package_version", "package"));

    let device = ctx.device();
    let err = device.can_access_peer(&device).unwrap_err();
    assert_eq!(invalid(&err), ("Device::can_access_peer", "peer"));
    let foreign = dlopened_simulator().device(1).unwrap();
    let err = device.enable_peer_access(&foreign).unwrap_err();
    assert_eq!(invalid(&err), ("Device::enable_peer_access", "peer"));
    assert!(
        device.peer_access_to(&device).is_none(),
        "no error: nothing to refuse"
    );

    // The simulator's controls refuse another backend's device, named as it was passed.
    let err = sim::hold(&foreign).unwrap_err();
    assert_eq!(invalid(&err), ("npu::sim::hold", "device"));
    let foreign_stream = Stream::new(foreign.primary_context()).unwrap();
    let err = sim::fail_task(&foreign_stream, 1, npu::AclCode(507015)).unwrap_err();
    assert_eq!(invalid(&err), ("npu::sim::fail_task", "stream"));
    let foreign_memory = DeviceBuffer::<u8>::new(foreign.primary_context(), 64).unwrap();
    let err = sim::inject_memory_error(&foreign_memory, 0..8).unwrap_err();
    assert_eq!(invalid(&err), ("npu::sim::inject_memory_error", "memory"));
    let memory = DeviceBuffer::<u16>::new(&ctx, 32).unwrap();
    for bytes in [0..0, 60..65] {
        let err = sim::inject_memory_error(&memory, bytes).unwrap_err();
        assert_eq!(invalid(&err), ("npu::sim::inject_memory_error", "bytes"));
    }
}

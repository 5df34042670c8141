//! The thirty-seventh session's second helper: bad input through the `npu` facade, swept area
//! by area (memory and its adapters, pools, streams and their copies and waits, events,
//! kernels and modules, devices and runtimes, the simulator's controls) at the edges: zero,
//! one, `usize::MAX` and `u32::MAX`, sizes whose product or page rounding overflows, ranges
//! past the end or reversed, misaligned casts, handles of another device or runtime, names
//! with a NUL or empty, raw attribute and flag values outside ACL's enums. Every refusal must
//! be a typed error naming the API the caller called and the argument it broke (or, for a
//! runtime refusal, the ACL function and its code), and its `Display`, `Debug` and `source()`
//! chain must be true and say each thing once.
//!
//! The refusals that held are tables, one per area, of `(what was passed, expected error)`.
//! Six defects have tests of their own. Of the errors' names and chains: `RegisterError`'s
//! `Debug` dumped the whole buffer the caller tried to register and its `source()` repeated
//! its own message; `Stream::timed` named `Event::record` and its `stream` for a refusal of the
//! caller's stream; `Device::open` and `Device::count` named `Runtime::global` for its refusal
//! on the thread making it. Of the messages' truth: `Memory::view` called a reversed range
//! "outside the slice" and showed `0..=usize::MAX` as `0..usize::MAX`; `HostRegistration::new`
//! called 4096 elements of a zero-sized type "empty". Of the simulator's fidelity: it refused a
//! kernel library whose path is not UTF-8, which a Linux path may be.

mod common;

use std::num::NonZeroU32;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use common::*;
use npu::error::{AclCode, Error};
use npu::kernel::{ArgPacker, LaunchConfig};
use npu::memory::{DevicePoolBackend, HostRegistration, PageAlignedBuffer, RegisterFlags};
use npu::prelude::*;
use npu::stream::{Copy2d, Event, Notify, Strategy};
use npu::{DeviceAttr, ffi, sim};
use tracing_subscriber::layer::SubscriberExt;

/// What an error must be: refused by npu-rs naming `(api, argument)`, or by the runtime with
/// an ACL error naming the ACL function and keeping its code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Invalid(&'static str, &'static str),
    Acl(&'static str, i32),
}

/// Checks one row: the variant, its names or code, and that the error's `Display`, `Debug`
/// and source chain are sound.
fn check(case: &str, err: &Error, expected: Expect) {
    match expected {
        Expect::Invalid(api, argument) => {
            assert_eq!(invalid(err), (api, argument), "{case}: {err}");
        }
        Expect::Acl(api, code) => {
            let Error::Acl(acl) = err else {
                panic!("{case}: expected an ACL error, got {err:?}")
            };
            assert_eq!((acl.api, acl.code), (api, AclCode(code)), "{case}: {err}");
            assert_eq!(err.acl_code(), Some(AclCode(code)), "{case}");
            let shown = err.to_string();
            assert!(shown.starts_with(api), "{case}: names {api}: {shown}");
            assert_eq!(
                shown.matches(&code.to_string()).count(),
                1,
                "{case}: {shown}"
            );
        }
    }
    sound_chain(case, err);
}

/// An error's report, walking its sources, says each message once, and its `Debug` is short
/// (values handed back are named, not dumped).
fn sound_chain(case: &str, err: &(dyn std::error::Error + 'static)) {
    let mut seen = vec![err.to_string()];
    let mut source = err.source();
    while let Some(inner) = source {
        let message = inner.to_string();
        assert!(
            !seen.iter().any(|outer| outer.contains(&message)),
            "{case}: the source {message:?} repeats {seen:?}"
        );
        seen.push(message);
        source = inner.source();
    }
    let debug = format!("{err:?}");
    assert!(
        debug.len() < 2048,
        "{case}: a Debug of {} bytes",
        debug.len()
    );
}

/// A range that starts after it ends (spelled out: clippy refuses the literal `3..1`).
const REVERSED: std::ops::Range<usize> = std::ops::Range { start: 3, end: 1 };

/// A path whose file name is not UTF-8, naming nothing.
fn not_utf8() -> &'static std::path::Path {
    use std::os::unix::ffi::OsStrExt;
    std::path::Path::new(std::ffi::OsStr::from_bytes(
        b"/nonexistent/kernels-\xff\xfe.so",
    ))
}

/// Runs a refused operation and checks its error; the value comes back.
fn refused_op<T: Send + 'static>(case: &str, op: npu::stream::Op<T>, expected: Expect) {
    let failed = run(op).err().unwrap_or_else(|| panic!("{case}: accepted"));
    check(case, &failed.error, expected);
    sound_chain(case, &failed);
    assert!(failed.value.is_some(), "{case}: the value comes back");
}

#[test]
fn memory_sizes_views_and_casts() {
    use Expect::Invalid;
    let (_guard, ctx, _ctx1) = exclusive(None);
    let big = isize::MAX as usize;
    let device = |len| DeviceBuffer::<u32>::new(&ctx, len).unwrap();
    let view = |range: std::ops::Range<usize>| device(4).view(range).map(drop).map_err(|e| e.error);
    let rows: Vec<(&str, Result<(), Error>, Expect)> = vec![
        (
            "u64 elements past isize::MAX bytes",
            DeviceBuffer::<u64>::new(&ctx, usize::MAX / 4).map(drop),
            Invalid("DeviceBuffer::new", "len"),
        ),
        (
            "one byte past isize::MAX",
            DeviceBuffer::<u8>::new(&ctx, big + 1).map(drop),
            Invalid("DeviceBuffer::new", "len"),
        ),
        (
            "pinned u64 past isize::MAX bytes",
            PinnedBuffer::<u64>::new(&ctx, usize::MAX / 4).map(drop),
            Invalid("PinnedBuffer::new", "len"),
        ),
        (
            "isize::MAX bytes do not round to pages",
            PageAlignedBuffer::<u8>::new(big).map(drop),
            Invalid("PageAlignedBuffer::new", "len"),
        ),
        (
            "an empty registration",
            HostRegistration::new(&ctx, Vec::<u8>::new(), RegisterFlags::PINNED)
                .map(drop)
                .map_err(|e| e.error),
            Invalid("HostRegistration::new", "buffer"),
        ),
        (
            "a registration of a zero-sized element type",
            HostRegistration::new(&ctx, vec![(); 4096], RegisterFlags::PINNED)
                .map(drop)
                .map_err(|e| e.error),
            Invalid("HostRegistration::new", "buffer"),
        ),
        (
            "a zero-sized element type",
            PinnedBuffer::<()>::new(&ctx, 1).map(drop),
            Invalid("PinnedBuffer::new", "T"),
        ),
        (
            "a cast to a zero-sized type",
            device(3).cast::<()>().map(drop).map_err(|e| e.error),
            Invalid("Memory::cast", "U"),
        ),
        (
            "a view at usize::MAX",
            view(usize::MAX..usize::MAX),
            Invalid("Memory::view", "range"),
        ),
        (
            "a reversed view",
            view(REVERSED),
            Invalid("Memory::view", "range"),
        ),
        (
            "a view to usize::MAX",
            view(0..usize::MAX),
            Invalid("Memory::view", "range"),
        ),
        (
            "halves at usize::MAX",
            device(4)
                .into_halves(usize::MAX)
                .map(drop)
                .map_err(|e| e.error),
            Invalid("MemoryMut::into_halves", "mid"),
        ),
        (
            "a cast of a misaligned view",
            DeviceBuffer::<u8>::new(&ctx, 16)
                .unwrap()
                .view(1..9)
                .unwrap()
                .cast::<u64>()
                .map(drop)
                .map_err(|e| e.error),
            Invalid("Memory::cast", "U"),
        ),
    ];
    for (case, result, expected) in rows {
        check(case, &result.expect_err(case), expected);
    }
}

#[test]
fn pools() {
    use Expect::{Acl, Invalid};
    let (_guard, ctx, _ctx1) = exclusive(None);
    let s = stream(&ctx, Strategy::EventPoll);
    let pinned = PinnedPool::new(&ctx);
    let big = usize::MAX / 4;
    let mut rows: Vec<(String, Result<(), Error>, Expect)> = vec![
        (
            "a pinned pool of capacity 0".into(),
            PinnedPool::builder(&ctx).capacity(0).build().map(drop),
            Invalid("PinnedPoolBuilder::build", "capacity"),
        ),
        (
            "a device pool of capacity 0".into(),
            DevicePool::builder(&ctx).capacity(0).build().map(drop),
            Invalid("DevicePoolBuilder::build", "capacity"),
        ),
        (
            "no pinned bytes".into(),
            pinned.reserve(0, 0).map(drop),
            Invalid("PinnedPool::reserve", "bytes"),
        ),
        (
            "usize::MAX pinned blocks".into(),
            pinned.reserve(usize::MAX, 1).map(drop),
            Invalid("PinnedPool::reserve", "count"),
        ),
        (
            "usize::MAX pinned bytes".into(),
            pinned.reserve(1, usize::MAX).map(drop),
            Invalid("PinnedPool::reserve", "bytes"),
        ),
        (
            "a pinned try_alloc past isize::MAX".into(),
            pinned.try_alloc::<u64>(big).map(drop),
            Invalid("PinnedPool::try_alloc", "len"),
        ),
        (
            "a pinned alloc past isize::MAX".into(),
            run(pinned.alloc::<u64>(big)).map(drop),
            Invalid("PinnedPool::alloc", "len"),
        ),
        // isize::MAX bytes are a valid length, rounded up to their class: the runtime's
        // out-of-memory error, not an overflow.
        (
            "isize::MAX pinned bytes".into(),
            run(pinned.alloc::<u8>(isize::MAX as usize)).map(drop),
            Acl("aclrtMallocHost", 207001),
        ),
    ];
    for backend in [DevicePoolBackend::Caching, DevicePoolBackend::RuntimePool] {
        let pool = DevicePool::builder(&ctx).backend(backend).build().unwrap();
        rows.extend([
            (
                format!("{backend:?}: no device bytes"),
                run(pool.reserve(&s, 1, 0)).map(drop),
                Invalid("DevicePool::reserve", "bytes"),
            ),
            (
                format!("{backend:?}: usize::MAX device bytes"),
                run(pool.reserve(&s, usize::MAX, usize::MAX)).map(drop),
                Invalid("DevicePool::reserve", "bytes"),
            ),
            (
                format!("{backend:?}: a try_alloc past isize::MAX"),
                pool.try_alloc::<u64>(&s, big).map(drop),
                Invalid("DevicePool::try_alloc", "len"),
            ),
            (
                format!("{backend:?}: an alloc past isize::MAX"),
                run(pool.alloc::<u64>(&s, big)).map(drop),
                Invalid("DevicePool::alloc", "len"),
            ),
            (
                format!("{backend:?}: isize::MAX bytes"),
                run(pool.alloc::<u8>(&s, isize::MAX as usize)).map(drop),
                match backend {
                    DevicePoolBackend::Caching => Acl("aclrtMalloc", 207001),
                    _ => Acl("aclrtMemPoolMallocAsync", 207001),
                },
            ),
        ]);
    }
    for (case, result, expected) in rows {
        check(&case, &result.expect_err(&case), expected);
    }
    assert_eq!(
        PinnedPool::size_class(usize::MAX),
        None,
        "no class, no panic"
    );
    assert_eq!(
        DevicePool::size_class(usize::MAX),
        None,
        "no class, no panic"
    );
}

#[test]
fn copies_and_waits() {
    use Expect::Invalid;
    let (_guard, ctx, ctx1) = exclusive(None);
    let host = || PinnedBuffer::<u32>::new(&ctx, 8).unwrap();
    let device = || DeviceBuffer::<u32>::new(&ctx, 8).unwrap();
    let shape = |width, height, src_pitch| Copy2d {
        width,
        height,
        src_pitch,
        dst_pitch: width.max(1),
    };
    let shapes = [
        (
            "a pitch whose extent overflows",
            shape(1, 2, usize::MAX),
            "src",
        ),
        (
            "an extent past the source",
            shape(1, 2, usize::MAX / 4 + 1),
            "src",
        ),
        (
            "a width past ACL's row limit",
            shape(usize::MAX, 1, usize::MAX),
            "shape",
        ),
        (
            "a height past ACL's limit",
            shape(1, usize::MAX, 1),
            "shape",
        ),
        ("a width past a pitch of 0", shape(1, 2, 0), "shape"),
    ];
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        for (case, shape, argument) in shapes {
            let case = format!("{strategy:?}: {case}");
            let h2d = s.copy_2d_h2d(host(), device(), shape);
            refused_op(&case, h2d, Invalid("Stream::copy_2d_h2d", argument));
            let d2d = s.copy_2d_d2d(device(), device(), shape);
            refused_op(&case, d2d, Invalid("Stream::copy_2d_d2d", argument));
        }
        let event = Event::new(&ctx).unwrap();
        event.record(&s).unwrap();
        let wait = s.wait_event_timeout(&event, Duration::MAX);
        refused_op(
            "an event wait of Duration::MAX",
            wait,
            Invalid("Stream::wait_event_timeout", "timeout"),
        );
        let notify = Notify::new(&ctx).unwrap();
        let wait = s.wait_notify_timeout(&notify, Duration::MAX);
        refused_op(
            "a notify wait of Duration::MAX",
            wait,
            Invalid("Stream::wait_notify_timeout", "timeout"),
        );
        // Nothing to copy or set is checked like anything else: memory of another device is
        // refused, and the same on this device completes.
        let elsewhere = || {
            DeviceBuffer::<u32>::new(&ctx1, 4)
                .unwrap()
                .view(0..0)
                .unwrap()
        };
        refused_op(
            "an empty memset elsewhere",
            s.memset(elsewhere(), 1),
            Invalid("Stream::memset", "dst"),
        );
        let flat = shape(0, 1, 1);
        let h2d = s.copy_2d_h2d(host(), elsewhere(), flat);
        refused_op(
            "a 2D copy of width 0 elsewhere",
            h2d,
            Invalid("Stream::copy_2d_h2d", "dst"),
        );
        run(s.memset(device().view(8..8).unwrap(), 1)).unwrap();
        run(s.copy_2d_h2d(host(), device(), flat)).unwrap();
        run(s.synchronize()).unwrap();
    }
}

#[test]
fn events() {
    use Expect::{Acl, Invalid};
    let (_guard, ctx, _ctx1) = exclusive(None);
    let s = stream(&ctx, Strategy::EventPoll);
    let untimed = Event::builder(&ctx)
        .flags(ffi::ACL_EVENT_SYNC)
        .build()
        .unwrap();
    untimed.record(&s).unwrap();
    run(untimed.wait()).unwrap();
    let never = Event::new(&ctx).unwrap();
    let rows: Vec<(&str, Result<(), Error>, Expect)> = vec![
        (
            "every flag bit",
            Event::builder(&ctx).flags(u32::MAX).build().map(drop),
            Acl("aclrtCreateEventWithFlag", 107000),
        ),
        (
            "the top flag bit",
            Event::builder(&ctx).flags(1 << 31).build().map(drop),
            Acl("aclrtCreateEventWithFlag", 107000),
        ),
        (
            "a timestamp never recorded",
            never.timestamp_us().map(drop),
            Invalid("Event::timestamp_us", "self"),
        ),
        (
            "a timestamp without TIME_LINE",
            untimed.timestamp_us().map(drop),
            Invalid("Event::timestamp_us", "self"),
        ),
        (
            "elapsed from a record never made",
            Event::elapsed(&never, &never).map(drop),
            Invalid("Event::elapsed", "start"),
        ),
    ];
    for (case, result, expected) in rows {
        check(case, &result.expect_err(case), expected);
    }
    // The same event as start and end: no time passed, nothing refused.
    let timed = Event::new(&ctx).unwrap();
    timed.record(&s).unwrap();
    run(timed.wait()).unwrap();
    assert_eq!(Event::elapsed(&timed, &timed).unwrap(), Duration::ZERO);
}

#[test]
fn kernels_and_modules() {
    use Expect::{Acl, Invalid};
    let (_guard, ctx, ctx1) = exclusive(None);
    let s = stream(&ctx, Strategy::EventPoll);
    let image = sim::kernel::registry_image(&["scale_f32"]);
    let scale = |ctx: &Context| {
        // SAFETY: a registry image names in-process kernels; loading it runs no code.
        let module = unsafe { Module::from_data(ctx, &image) }.unwrap();
        module.function("scale_f32").unwrap()
    };
    let foreign = dlopened_simulator().device(0).unwrap();
    // SAFETY: a registry image names in-process kernels; loading it runs no code.
    let module = unsafe { Module::from_data(&ctx, &image) }.unwrap();
    let mut rows: Vec<(String, Result<(), Error>, Expect)> = Vec::new();
    for align in [0, 3, 1 << 20, 1 << 63] {
        let pushed = ArgPacker::new("my_kernel").push(&[1, 2], align).map(drop);
        rows.push((
            format!("alignment {align}"),
            pushed,
            Invalid("my_kernel", "args"),
        ));
    }
    rows.extend([
        (
            "a missing kernel".into(),
            module.function("no_such_kernel").map(drop),
            Acl("aclrtBinaryGetFunction", 107042),
        ),
        (
            "garbage data".into(),
            // SAFETY: the data is refused before anything is loaded.
            unsafe { Module::from_data(&ctx, &[0u8; 16]) }.map(drop),
            Acl("aclrtBinaryLoadFromData", 107000),
        ),
        (
            "an empty path".into(),
            // SAFETY: refused before anything is loaded.
            unsafe { Module::from_file(&ctx, "") }.map(drop),
            Invalid("Module::from_file", "path"),
        ),
        (
            "a missing path that is not UTF-8".into(),
            // SAFETY: no such file: nothing is loaded.
            unsafe { Module::from_file(&ctx, not_utf8()) }.map(drop),
            Acl("aclrtBinaryLoadFromFile", 107009),
        ),
    ]);
    for (case, result, expected) in rows {
        check(&case, &result.expect_err(&case), expected);
    }
    for (case, function) in [
        ("a function of device 1", scale(&ctx1)),
        (
            "a function of another runtime",
            scale(foreign.primary_context()),
        ),
    ] {
        let x = DeviceBuffer::<f32>::new(&ctx, 4).unwrap();
        let config = LaunchConfig::new(NonZeroU32::MIN);
        // SAFETY: refused before the kernel runs.
        let launch = unsafe { s.launch_with(&function, config, (x, 4u64, 1.0f32)) };
        refused_op(case, launch, Invalid("Stream::launch_with", "function"));
    }
}

#[test]
fn devices_runtimes_and_simulator_controls() {
    use Expect::{Acl, Invalid};
    let (_guard, ctx, _ctx1) = exclusive(None);
    let device = ctx.device();
    let s = stream(&ctx, Strategy::EventPoll);
    let memory = DeviceBuffer::<u32>::new(&ctx, 4).unwrap();
    let trap = AclCode::AICORE_EXCEPTION;
    let rows: Vec<(&str, Result<(), Error>, Expect)> = vec![
        (
            "device u32::MAX",
            Device::open(u32::MAX).map(drop),
            Invalid("Device::open", "id"),
        ),
        (
            "an attribute outside the enum",
            device.attribute(DeviceAttr::Raw(u32::MAX as _)).map(drop),
            Acl("aclrtGetDeviceInfo", 107000),
        ),
        (
            "a configuration path that is not UTF-8, ACL running without one",
            npu::Runtime::builder()
                .acl_config(not_utf8())
                .build()
                .map(drop),
            Invalid("RuntimeBuilder::build", "acl_config"),
        ),
        (
            "a configuration path with a NUL",
            npu::Runtime::builder()
                .acl_config("acl\0.json")
                .build()
                .map(drop),
            Invalid("RuntimeBuilder::build", "acl_config"),
        ),
        (
            "itself as a peer",
            device.enable_peer_access(&device).map(drop),
            Invalid("Device::enable_peer_access", "peer"),
        ),
        (
            "a task fault of code 0",
            sim::fail_task(&s, 1, AclCode(0)),
            Invalid("npu::sim::fail_task", "code"),
        ),
        (
            "the 0th task",
            sim::fail_task(&s, 0, trap),
            Invalid("npu::sim::fail_task", "nth"),
        ),
        (
            "an empty kernel name",
            sim::fail_kernel(&device, "", 1, trap),
            Invalid("npu::sim::fail_kernel", "name"),
        ),
        (
            "a kernel name with a NUL",
            sim::set_kernel_duration(&device, "scale\0f32", Duration::MAX),
            Invalid("npu::sim::set_kernel_duration", "name"),
        ),
        (
            "a reversed byte range",
            sim::inject_memory_error(&memory, REVERSED),
            Invalid("npu::sim::inject_memory_error", "bytes"),
        ),
        (
            "bytes to usize::MAX",
            sim::inject_memory_error(&memory, 0..usize::MAX),
            Invalid("npu::sim::inject_memory_error", "bytes"),
        ),
    ];
    for (case, result, expected) in rows {
        check(case, &result.expect_err(case), expected);
    }
    assert_eq!(
        sim::clear_faults(&device).unwrap(),
        0,
        "nothing refused was armed"
    );
}

/// `RegisterError` is what `HostRegistration::new` returns with the buffer handed back. Its
/// derived `Debug` printed that buffer element by element, so the `unwrap()` of a refused
/// registration of 4 MiB panicked with a message of megabytes (and `unwrap` needed the buffer
/// to be `Debug`), where `OpError` names its value's type; and its `source()` was its own
/// `error`, whose message it also displays, so a report walking the chain said it twice.
#[test]
fn a_refused_registration_reports_its_error_once_and_names_its_buffer() {
    let (_guard, ctx, _ctx1) = exclusive(None);
    // Not whole pages: refused before ACL, the Vec handed back.
    let buffer = vec![7u8; (4 << 20) + 1];
    let refused = HostRegistration::new(&ctx, buffer, RegisterFlags::PINNED).unwrap_err();
    assert_eq!(invalid(&refused.error), ("HostRegistration::new", "buffer"));
    assert_eq!(refused.to_string(), refused.error.to_string());
    sound_chain("a refused registration", &refused);
    assert!(
        format!("{refused:?}").contains("alloc::vec::Vec<u8>"),
        "{refused:?}"
    );
    assert_eq!(refused.buffer.len(), (4 << 20) + 1, "handed back whole");

    // 4096 elements of no size: refused as holding no bytes, which it does not; not as
    // empty, which it is not.
    let units = HostRegistration::new(&ctx, vec![(); 4096], RegisterFlags::PINNED).unwrap_err();
    assert_eq!(
        units.to_string(),
        "HostRegistration::new: invalid argument `buffer`: holds no bytes: ACL rejects \
         zero-size registrations"
    );
    assert_eq!(units.buffer.len(), 4096);
}

/// A tracing layer that runs its hook once, for the first event emitted on the thread that
/// set it as its default subscriber.
struct Hooked(Mutex<Option<Box<dyn FnOnce() + Send>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Hooked {
    fn on_event(&self, _: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        // Taken out before it runs: it fires once, and what it calls may log again.
        let hook = self.0.lock().unwrap().take();
        if let Some(hook) = hook {
            hook();
        }
    }
}

/// `Stream::timed` records its start event on `self` before it runs the caller's closure. On
/// a thread that is submitting to that stream already (a tracing subscriber called back by the
/// simulator while it refuses a launch on it), the record is refused; the error named
/// `Event::record` and its `stream`, an API and an argument the caller never passed, where
/// every other method built on another names the caller's own (`api_names.rs`).
#[test]
fn a_refused_timing_names_stream_timed_and_self() {
    let (_guard, ctx, _ctx1) = exclusive(None);
    // The module's context is the primary one, the stream's an explicit context of the same
    // device: the launch is refused inside the stream's submission, which the simulator logs.
    let explicit = ctx.device().create_context().unwrap();
    let image = sim::kernel::registry_image(&["scale_f32"]);
    // SAFETY: a registry image names in-process kernels; loading it runs no code.
    let module = unsafe { Module::from_data(&ctx, &image) }.unwrap();
    let scale = module.function("scale_f32").unwrap();
    for strategy in STRATEGIES {
        let s = stream(&explicit, strategy);
        let timed: Arc<Mutex<Option<Error>>> = Arc::default();
        let (hook_stream, hook_ctx, seen) = (s.clone(), explicit.clone(), timed.clone());
        let hook: Box<dyn FnOnce() + Send> = Box::new(move || {
            let buffer = DeviceBuffer::<u8>::new(&hook_ctx, 16).unwrap();
            let timing = pin!(hook_stream.timed(|s| s.memset(buffer, 5)));
            // Refused before its first await: ready at the first poll.
            let Poll::Ready(result) = polled_once(timing) else {
                panic!("the refusal is immediate")
            };
            let failed = result.expect_err("refused under the submission lock");
            assert!(failed.value.is_none(), "refused before the closure ran");
            *seen.lock().unwrap() = Some(failed.error);
        });
        let subscriber = tracing_subscriber::registry().with(Hooked(Mutex::new(Some(hook))));
        let x = DeviceBuffer::<f32>::new(&ctx, 4).unwrap();
        common::see_every_callsite();
        // SAFETY: refused by the runtime before the kernel runs.
        let launched = tracing::subscriber::with_default(subscriber, || unsafe {
            s.launch(&scale, 1, (x, 4u64, 2.0f32))
        });
        assert!(
            run(launched).is_err(),
            "{strategy:?}: another context's function"
        );
        let err = timed.lock().unwrap().take().expect("the hook ran");
        assert_eq!(invalid(&err), ("Stream::timed", "self"), "{strategy:?}");
        // The stream is whole: a timing outside the callback runs.
        let buffer = DeviceBuffer::<u8>::new(&explicit, 16).unwrap();
        let (buffer, _took) = run(s.timed(|s| s.memset(buffer, 9))).unwrap();
        assert_eq!(buffer.to_vec_blocking().unwrap(), [9; 16]);
    }
}

/// The environment variable that makes [`child`] run a case.
const CHILD_ENV: &str = "NPU_SESSION37_INPUTS_CHILD";

/// A child process's case; does nothing without [`CHILD_ENV`].
#[test]
fn child() {
    let Ok(case) = std::env::var(CHILD_ENV) else {
        return;
    };
    match case.as_str() {
        "opened while made" => devices_asked_for_while_the_runtime_is_made(),
        other => panic!("no child case {other}"),
    }
    println!("CHILD OK");
}

/// `Device::open` and `Device::count` ask for the process-wide runtime on the caller's
/// behalf. Called from a tracing subscriber while the first of them makes it (the fallback to
/// the simulator, or the choice of a real runtime, is logged), `Runtime::global` refuses
/// rather than wait for itself, and that refusal named `Runtime::global`, a call the caller
/// never made. Run in a process of its own: the runtime must not exist yet.
#[test]
fn a_device_asked_for_while_the_runtime_is_made_names_the_call_made() {
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "opened while made")
        // `auto` logs its choice on the making thread, whichever backend it picks.
        .env_remove("NPU_BACKEND")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child_succeeded(child, HANG, "a device asked for while the runtime is made");
}

fn devices_asked_for_while_the_runtime_is_made() {
    let refusals: Arc<Mutex<Vec<Error>>> = Arc::default();
    let seen = refusals.clone();
    let hook: Box<dyn FnOnce() + Send> = Box::new(move || {
        let mut seen = seen.lock().unwrap();
        seen.push(Device::open(0).map(drop).unwrap_err());
        seen.push(Device::count().map(drop).unwrap_err());
    });
    let subscriber = tracing_subscriber::registry().with(Hooked(Mutex::new(Some(hook))));
    common::see_every_callsite();
    let device = tracing::subscriber::with_default(subscriber, || Device::open(0)).unwrap();
    let refusals = std::mem::take(&mut *refusals.lock().unwrap());
    let named: Vec<_> = refusals.iter().map(invalid).collect();
    assert_eq!(
        named,
        [("Device::open", "thread"), ("Device::count", "thread")]
    );
    assert!(
        device
            .runtime()
            .same_library(&npu::Runtime::global().unwrap()),
        "the refusals are not kept as the runtime's result"
    );
}

/// `Memory::view` refused a reversed range as "outside the slice", which it is not, and showed
/// an inclusive range ending at `usize::MAX` as the exclusive one its end saturated to, a
/// range the caller never passed.
#[test]
fn a_refused_view_shows_the_range_passed() {
    let (_guard, ctx, _ctx1) = exclusive(None);
    let device = || DeviceBuffer::<u32>::new(&ctx, 4).unwrap();
    let cases = [
        (
            device().view(REVERSED),
            "3..1 is reversed: it starts after it ends",
        ),
        (
            device().view(0..=usize::MAX),
            "0..=18446744073709551615 is outside the slice's 4 elements",
        ),
        (
            device().view(usize::MAX..),
            "18446744073709551615.. is outside the slice's 4 elements",
        ),
        (
            device().view(2..5),
            "2..5 is outside the slice's 4 elements",
        ),
    ];
    for (result, rule) in cases {
        let failed = result.unwrap_err();
        assert_eq!(invalid(&failed.error), ("Memory::view", "range"));
        assert_eq!(
            failed.error.to_string(),
            format!("Memory::view: invalid argument `range`: {rule}")
        );
        assert_eq!(failed.value.unwrap().len(), 4, "handed back");
    }
}

/// A Linux path is bytes, and CANN opens the file it is given. The simulator refused a kernel
/// library's path that is not UTF-8 (107000, "binPath is not valid UTF-8"), where its other
/// path arguments (aclInit's configuration, the dump configuration) take the bytes as they
/// are: a program whose kernels lie under such a directory could not load them.
#[test]
fn a_kernel_library_under_a_path_that_is_not_utf8_loads() {
    use std::os::unix::ffi::OsStrExt;
    let (_guard, ctx, _ctx1) = exclusive(None);
    let mut name = b"npu-session37-\xff\xfe-".to_vec();
    name.extend_from_slice(std::process::id().to_string().as_bytes());
    let dir = std::env::temp_dir().join(std::ffi::OsStr::from_bytes(&name));
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("kernels.so");
    let _ = std::fs::remove_file(&link);
    // A link to the shipped library: the dynamic loader finds the library already loaded.
    std::os::unix::fs::symlink(sim::kernel::LIBRARY_PATH, &link).unwrap();
    assert!(link.to_str().is_none(), "the path is not UTF-8");
    // SAFETY: npu-sim's shipped kernel library, built for its kernel ABI.
    let loaded = unsafe { Module::from_file(&ctx, &link) };
    std::fs::remove_file(&link).unwrap();
    std::fs::remove_dir(&dir).unwrap();
    let module = loaded.unwrap();
    let add = module.function("vector_add_f32").unwrap();
    let s = stream(&ctx, Strategy::EventPoll);
    let a = run(s.upload(&[1.0f32, 2.0])).unwrap();
    let b = run(s.upload(&[10.0f32, 20.0])).unwrap();
    let c = DeviceBuffer::<f32>::new(&ctx, 2).unwrap();
    // SAFETY: vector_add_f32(const float *a, const float *b, float *c, uint64_t n) touches n
    // elements of each buffer; all three hold 2.
    let (_a, _b, c, _) = run(unsafe { s.launch(&add, 1, (a, b, c, 2u64)) }).unwrap();
    assert_eq!(run(s.download(c)).unwrap(), [11.0, 22.0]);
}

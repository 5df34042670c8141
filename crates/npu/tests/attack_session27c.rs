//! Attacks of the twenty-seventh session's third helper, through the `npu` facade: runtimes,
//! devices, contexts, modules and the errors they return. Runtimes of their own built again
//! after being finalised, and after another component initialised ACL; a process forked after
//! a runtime started; contexts destroyed while current on another thread; errors as values
//! (traits, `Display`, `source`); and the angles listed with each test.
//!
//! Each test names the promise it attacks. npu-sim's cdylib is one library of the process, so
//! its tests take turns (`LIBRARY`); every wait is bounded, so a hang fails its test.

mod common;

use std::sync::Mutex;

use common::*;
use npu::prelude::*;
use npu::stream::Strategy;
use npu::{Error, Op, sim};

/// npu-sim's cdylib is initialised and finalised by its tests: they take turns.
static LIBRARY: Mutex<()> = Mutex::new(());

fn library_turn() -> std::sync::MutexGuard<'static, ()> {
    LIBRARY.lock().unwrap_or_else(|e| e.into_inner())
}

// ---- Child processes (a fork, a process-wide setting). ----

const CHILD_ENV: &str = "NPU_ATTACK27C_CHILD";

/// Runs this file's `child` test in a child process with `case`.
fn in_child(case: &str) {
    in_child_test("child", CHILD_ENV, case);
}

#[test]
fn child() {
    let Ok(case) = std::env::var(CHILD_ENV) else {
        return;
    };
    match case.as_str() {
        "fork" => forking_with_work_in_flight(),
        other => panic!("no child case {other}"),
    }
    println!("CHILD OK");
}

// ---- The runtime's message. ----

/// The runtime message of an error `rt` reports on this thread: a module load that fails
/// with its own message, and a code checked by hand, to which no message belongs.
fn assert_no_stale_message(rt: &npu::Runtime, what: &str) {
    let ctx = rt.device(0).unwrap().primary_context().clone();
    // SAFETY: nothing is loaded: the file does not exist.
    let missing = unsafe { Module::from_file(&ctx, "/nonexistent/attack27c.so") }.unwrap_err();
    let Error::Acl(acl) = &missing else {
        panic!("{what}: {missing:?}")
    };
    let message = acl.detail().unwrap_or_default();
    assert!(
        message.starts_with("cannot open kernel binary") && !message.contains('\n'),
        "{what}: the load's error carries another call's message: {missing}"
    );
    let checked = rt.check("aclrtProbe", 107000).unwrap_err();
    let Error::Acl(acl) = &checked else {
        panic!("{what}: {checked:?}")
    };
    assert_eq!(
        acl.message, None,
        "{what}: a code checked by hand carries another call's message: {checked}"
    );
}

/// `AclError::message` is "the text of `aclGetRecentErrMsg` right after the failure": the
/// runtime's account of that failure, not of another. docs/ascend.md allows a runtime of its
/// own to be dropped (ACL finalised) and built again, and ACL initialised by another component
/// first (`aclInit` then answers `ACL_ERROR_REPEAT_INITIALIZE`, which npu-rs takes for
/// success). Both times the runtime explained, on the thread making the runtime, a call npu-rs
/// took for success or only logged (the repeated `aclInit`; the stream-state callback
/// registered again, which the runtime still had from the first initialisation), and the next
/// error npu-rs reported on that thread carried those explanations as its own: "(runtime:
/// cannot open kernel binary ... \n a stream state callback is already registered ... \n
/// aclInit failed with 100002 ...)".
#[test]
fn a_runtime_initialised_again_leaves_no_stale_message_for_the_next_error() {
    let _turn = library_turn();
    let own = OwnRuntime::new("attack27c-messages");
    let first = own.build();
    let api = first.api();
    assert_no_stale_message(&first, "the first initialisation");
    drop(first);
    own.when_finalised("the first runtime", |again| {
        assert_no_stale_message(&again, "initialised again after it was finalised");
    });
    own.when_finalised("the runtime initialised again", drop);
    // Another component of the process initialises ACL first (docs/ascend.md).
    // SAFETY: NULL is no configuration file; ACL is finalised (checked just above).
    assert_eq!(unsafe { (api.aclInit)(std::ptr::null()) }, 0);
    let borrowed = own.build();
    assert_no_stale_message(&borrowed, "initialised by another component first");
    drop(borrowed);
    // SAFETY: the other component's reference, released as that component would.
    assert_eq!(unsafe { (api.aclFinalize)() }, 0);
    own.when_finalised("the borrowed runtime", drop);
}

// ---- fork(). ----

/// What a child forked with work in flight must find: every wait for that work and every new
/// call ends with `Error::Forked`, the values come back, and nothing waits.
fn in_the_forked_child(
    ctx: Context,
    streams: Vec<npu::Stream>,
    pending: Vec<Op<DeviceBuffer<u8>>>,
    event: npu::Event,
    spare: DeviceBuffer<u8>,
) {
    let forked = |err: &Error, api: &str| {
        assert!(
            matches!(err, Error::Forked { api: named } if *named == api),
            "expected {api} refused as forked: {err:?}"
        );
        assert!(err.to_string().starts_with(api), "{err}");
        assert!(err.to_string().contains("fork()"), "{err}");
    };
    assert!(npu::runtime::forked());
    // Work submitted before the fork: nothing in the child will ever complete it.
    let done = pending[0].completion().clone();
    forked(
        &done.wait_blocking().unwrap_err(),
        "Completion::wait_blocking",
    );
    forked(
        &futures::executor::block_on(event.wait()).unwrap_err(),
        "Completion::wait",
    );
    for op in pending {
        let (err, buffer) = futures::executor::block_on(op).unwrap_err().into_parts();
        forked(&err, "Completion::wait");
        assert_eq!(buffer.expect("the buffer comes back").len(), 64);
    }
    // New calls: refused before they reach ACL, whose threads are the parent's.
    forked(&Device::open(0).unwrap_err(), "aclrtGetDeviceCount");
    forked(
        &DeviceBuffer::<u8>::new(&ctx, 64).unwrap_err(),
        "aclrtMalloc",
    );
    forked(
        &npu::Stream::builder(&ctx).build().unwrap_err(),
        "aclrtCreateStreamWithConfig",
    );
    let (err, back) = futures::executor::block_on(streams[0].memset(spare, 1))
        .unwrap_err()
        .into_parts();
    assert!(matches!(err, Error::Forked { .. }), "{err:?}");
    assert!(back.is_some(), "the refused memset hands its buffer back");
    forked(
        &ctx.synchronize_blocking().unwrap_err(),
        "aclrtSynchronizeDevice",
    );
    forked(
        &npu::Runtime::builder()
            .backend(npu::runtime::BackendChoice::Sim)
            .build()
            .unwrap_err(),
        "RuntimeBuilder::build",
    );
    assert!(matches!(event.is_complete(), Err(Error::Forked { .. })));
    sim::flush_releases();
    // Everything dropped in the child: nothing waits for the parent's threads.
    drop((streams, event, ctx));
    sim::flush_releases();
}

/// "Never UB, never a hang" for a process forked while npu-rs runs (a pre-fork server, a
/// library that daemonises): memsets held on the device under every strategy, an event
/// recorded behind them. The child (bounded by `alarm`) used npu-rs as if it were its own:
/// opening the device, allocating and making a stream all "worked", and the memset it
/// submitted, and every wait for the work from before the fork, waited for ever (the
/// runtime's and npu-rs's threads stayed in the parent), so the child was killed by its alarm.
/// The parent's work must be untouched by the child.
fn forking_with_work_in_flight() {
    let ctx = Device::open(0).unwrap().primary_context().clone();
    let streams: Vec<npu::Stream> = STRATEGIES.iter().map(|&s| stream(&ctx, s)).collect();
    for stream in &streams {
        run(stream.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 0)).unwrap();
    }
    let hold = sim::hold(&ctx.device()).unwrap();
    let pending: Vec<Op<DeviceBuffer<u8>>> = streams
        .iter()
        .map(|stream| stream.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 7))
        .collect();
    let event = npu::Event::new(&ctx).unwrap();
    event.record(&streams[0]).unwrap();
    let spare = DeviceBuffer::<u8>::new(&ctx, 64).unwrap();
    sim::flush_releases();
    // SAFETY: the child makes no call that another thread of this process could have left
    // locked at the fork: this process runs this one test, whose threads are idle (the
    // device is held, every release flushed), and glibc's allocator is fork-safe. It ends
    // with `_exit`, running no destructor of the parent's state.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: an alarm turns a hang of the child into its death by SIGALRM.
        unsafe { libc::alarm(10) };
        let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            in_the_forked_child(ctx, streams, pending, event, spare)
        }));
        // SAFETY: ends the child at once, as a child of a multi-threaded process must.
        unsafe { libc::_exit(if checked.is_ok() { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: `pid` is our child; `status` a valid out-pointer.
    watchdog("the forked child", || unsafe {
        libc::waitpid(pid, &mut status, 0)
    });
    hold.release().unwrap();
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the forked child failed or hung (status {status:#x})"
    );
    // The parent's work is its own: it completes with its bytes.
    for op in pending {
        assert_eq!(run(op).unwrap().to_vec_blocking().unwrap(), vec![7; 64]);
    }
    run(event.wait()).unwrap();
    drop(spare);
}

#[test]
fn a_process_forked_with_work_in_flight_refuses_npu_and_never_hangs() {
    in_child("fork");
}

// ---- Contexts across threads. ----

/// "Binding per call means no API ever asks you to set the device first", for a thread whose
/// current context was destroyed under it: thread `t` creates explicit contexts (each becomes
/// current there), hands them to the test's thread, which drops them (destroying them while
/// they are current on `t`), and on `t` every kind of call on the primary contexts of both
/// devices then lands on the right device (allocations, pinned memory, a module and its
/// kernel, a stream's round trip, memory information), with a context of the other library
/// (npu-sim's cdylib) made current on `t` in between.
#[test]
fn a_thread_whose_current_context_was_destroyed_elsewhere_keeps_working() {
    let _turn = library_turn();
    let (tx, rx) = std::sync::mpsc::channel::<Context>();
    let (back, done) = std::sync::mpsc::channel::<()>();
    let other = dlopened_simulator();
    let thread = std::thread::spawn(move || {
        let foreign = other.device(0).unwrap().create_context().unwrap();
        for round in 0..4u32 {
            let device = Device::open(round % 2).unwrap();
            tx.send(device.create_context().unwrap()).unwrap();
            done.recv().unwrap(); // destroyed on the test's thread, current here
            if round == 2 {
                let _ = DeviceBuffer::<u8>::new(&foreign, 8).unwrap();
            }
            for id in [0, 1] {
                let device = Device::open(id).unwrap();
                let ctx = device.primary_context();
                let buffer = DeviceBuffer::<u32>::from_host_blocking(ctx, &[round; 16]).unwrap();
                assert_eq!(buffer.context().device_id(), id);
                let pinned = PinnedBuffer::<u32>::from_slice(ctx, &[id; 16]).unwrap();
                let image = sim::kernel::registry_image(&["scale_f32"]);
                // SAFETY: a registry image names in-process kernels; loading it runs no code.
                let module = unsafe { Module::from_data(ctx, &image) }.unwrap();
                module.function("scale_f32").unwrap();
                let stream = stream(ctx, Strategy::EventPoll);
                let (_, back) = run(stream.copy_h2d(pinned, buffer)).unwrap();
                assert_eq!(back.to_vec_blocking().unwrap(), vec![id; 16]);
                assert!(device.memory_info(npu::MemAttr::Normal).unwrap().total > 0);
            }
        }
    });
    for _ in 0..4 {
        let ctx = rx.recv().unwrap();
        drop(ctx);
        back.send(()).unwrap();
    }
    watchdog("the thread using destroyed contexts", || {
        thread.join().unwrap()
    });
}

// ---- Errors as values. ----

fn send_sync_static<T: Send + Sync + 'static>() {}

/// Errors travel: across tasks and threads (`Send + Sync + 'static`, so `anyhow` and
/// `Box<dyn Error + Send + Sync>` take them), and each kind's `Display` names the API it
/// belongs to; `source()` never loops and an `OpError`'s is its error.
#[test]
fn every_error_kind_is_send_sync_static_and_names_its_api() {
    send_sync_static::<Error>();
    send_sync_static::<npu::AclError>();
    send_sync_static::<npu::LoadError>();
    send_sync_static::<npu::stream::OpError<DeviceBuffer<u8>>>();
    send_sync_static::<sim::ControlError>();
    let rt = npu::Runtime::global().unwrap();
    let kinds: Vec<(Error, &str)> = vec![
        (rt.check("aclrtMalloc", 207001).unwrap_err(), "aclrtMalloc"),
        (rt.check("aclrtMalloc", -7).unwrap_err(), "aclrtMalloc"),
        (rt.check("aclrtFree", i32::MIN).unwrap_err(), "aclrtFree"),
        (
            Error::invalid("Device::open", "id", "too large"),
            "Device::open",
        ),
        (
            Error::Unsupported {
                api: "aclrtBinaryLoadFromData",
            },
            "aclrtBinaryLoadFromData",
        ),
        (
            Error::Aborted {
                api: "aclrtMemsetAsync",
            },
            "aclrtMemsetAsync",
        ),
        (Error::Forked { api: "aclrtMalloc" }, "aclrtMalloc"),
        (Device::open(u32::MAX).unwrap_err(), "Device::open"),
    ];
    for (err, api) in kinds {
        let shown = err.to_string();
        assert!(shown.starts_with(api), "{shown}");
        let boxed: Box<dyn std::error::Error + Send + Sync + 'static> = Box::new(err.clone());
        let mut depth = 0;
        let mut source = boxed.source();
        while let Some(next) = source {
            depth += 1;
            assert!(depth < 8, "{shown}: a source chain that does not end");
            source = next.source();
        }
        let code = err.acl_code();
        if let Some(code) = code {
            assert!(shown.contains(&code.0.to_string()), "{shown}");
        }
    }
    // A code outside ACL's ranges (negative, or past them) is unknown, never a panic.
    for raw in [i32::MIN, -1, 42, 999_999, 1_000_000, i32::MAX] {
        let code = npu::AclCode(raw);
        assert_eq!(code.class(), npu::ErrorClass::Unknown, "{raw}");
        assert!(code.to_string().contains(&raw.to_string()));
    }
    let failed = npu::stream::OpError::new(
        rt.check("aclrtMemsetAsync", 507015).unwrap_err(),
        DeviceBuffer::<u8>::new(Device::open(0).unwrap().primary_context(), 8).unwrap(),
    );
    assert_eq!(failed.to_string(), failed.error.to_string());
    assert!(
        format!("{failed:?}").contains("DeviceBuffer"),
        "Debug names the value's type"
    );
    let boxed: Box<dyn std::error::Error + Send + Sync + 'static> = Box::new(failed);
    assert!(boxed.to_string().starts_with("aclrtMemsetAsync failed"));
}

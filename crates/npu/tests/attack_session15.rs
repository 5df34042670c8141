//! Attacks on session 15's changes: the reentrancy refusals (`lock_here`, the initialising
//! flag, the global runtime's making flag), the per-runtime paused-clock keeper, byte-staged
//! copies and frees that bind their memory's context.
//!
//! Tests needing a process-wide tracing subscriber run in a child process of their own.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use npu::DeviceBuffer;
use npu::prelude::*;
use tracing_subscriber::layer::SubscriberExt;

type Hook = Arc<dyn Fn() + Send + Sync>;

/// A layer that runs a hook on every event.
struct OnEvent(Hook);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for OnEvent {
    fn on_event(&self, _: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        (self.0)();
    }
}

fn child(name: &str) -> bool {
    std::env::var("NPU_SESSION15_CHILD").as_deref() == Ok(name)
}

/// Runs the test `name` of this file in a child process and checks it printed `CHILD OK`.
fn in_child(name: &str) {
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env("NPU_SESSION15_CHILD", name)
        .env_remove("NPU_BACKEND")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child_succeeded(child, HANG, name);
}

/// A layer that opens a device (through the process-wide runtime) when anything is logged
/// while an explicit runtime is being built, on the building thread: `acquire` refuses the
/// global runtime's build there (this thread is initialising AscendCL), and that refusal must
/// not become the process-wide runtime's result for ever.
#[test]
fn global_runtime_refused_while_initialising_child() {
    if !child("global_runtime_refused_while_initialising_child") {
        return;
    }
    let fired = Arc::new(AtomicUsize::new(0));
    let count = fired.clone();
    let builder = std::thread::current().id();
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(OnEvent(
        Arc::new(move || {
            if std::thread::current().id() == builder && count.fetch_add(1, Ordering::SeqCst) == 0 {
                let _ = Device::open(0);
            }
        }),
    )))
    .unwrap();
    let explicit = npu::Runtime::builder()
        .backend(npu::BackendChoice::Sim)
        .build()
        .unwrap();
    assert!(fired.load(Ordering::SeqCst) >= 1, "nothing was logged");
    drop(explicit);
    let device = Device::open(0).expect("the process-wide runtime after the refusal");
    drop(device);
    println!("CHILD OK");
}

#[test]
fn a_refused_global_runtime_while_initialising_is_not_kept() {
    in_child("global_runtime_refused_while_initialising_child");
}

thread_local! {
    /// Which role this thread plays in a child's hook (0: none).
    static ROLE: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
}

/// Waits until `flag` is set, at most a few seconds (a rendezvous, so that both threads are
/// inside their hooks at once; a schedule that can also happen by itself).
fn rendezvous(mine: &std::sync::atomic::AtomicBool, theirs: &std::sync::atomic::AtomicBool) {
    mine.store(true, Ordering::SeqCst);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !theirs.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
        std::thread::park_timeout(Duration::from_millis(1));
    }
}

/// Two threads whose subscriber calls npu-rs back from inside ACL calls npu-rs makes under
/// two different locks: thread A's submission to a stopped context fails (logged under the
/// stream's submission lock) and its hook opens a device (the runtime's shared lock); thread
/// B's peer-access disable on a lost device fails (logged under the shared lock) and its hook
/// submits to the same stream (its submission lock). `lock_here` refuses only a lock the
/// thread itself holds: across two threads the two hooks take the locks in opposite orders.
#[test]
fn hooks_taking_two_locks_in_opposite_orders_child() {
    if !child("hooks_taking_two_locks_in_opposite_orders_child") {
        return;
    }
    use std::sync::atomic::AtomicBool;
    npu::sim::SimConfig::default().devices(4).install().unwrap();
    let ctx = Device::open(0).unwrap().create_context().unwrap();
    let s = stream(&ctx, npu::stream::Strategy::EventPoll);
    s.set_failure_mode(npu::FailureMode::Stop).unwrap();
    npu::sim::fail_task(&s, 1, npu::AclCode(507015)).unwrap();
    assert!(run(s.memset(DeviceBuffer::<u8>::new(&ctx, 16).unwrap(), 1)).is_err());
    let (d2, d3) = (Device::open(2).unwrap(), Device::open(3).unwrap());
    let access = d3.enable_peer_access(&d2).unwrap();
    npu::sim::lose(&d3).unwrap();
    let b_buffer = std::sync::Mutex::new(Some(DeviceBuffer::<u8>::new(&ctx, 16).unwrap()));
    let a_buffer = DeviceBuffer::<u8>::new(&ctx, 16).unwrap();

    let (a_in, b_in) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let b_ops = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (hook_s, hook_ops, ha, hb) = (s.clone(), b_ops.clone(), a_in.clone(), b_in.clone());
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(OnEvent(
        Arc::new(move || match ROLE.with(|r| r.replace(0)) {
            1 => {
                rendezvous(&ha, &hb);
                let _ = Device::open(1);
            }
            2 => {
                rendezvous(&hb, &ha);
                if let Some(buffer) = b_buffer.lock().unwrap().take() {
                    hook_ops.lock().unwrap().push(hook_s.memset(buffer, 5));
                }
            }
            _ => {}
        }),
    )))
    .unwrap();
    watchdog("two hooks taking two locks in opposite orders", || {
        let a_stream = s.clone();
        let a = std::thread::spawn(move || {
            ROLE.with(|r| r.set(1));
            let op = a_stream.memset(a_buffer, 2);
            ROLE.with(|r| r.set(0));
            run(op).map(drop).map_err(|e| e.error)
        });
        let b = std::thread::spawn(move || {
            ROLE.with(|r| r.set(2));
            drop(access);
            ROLE.with(|r| r.set(0));
        });
        assert!(a.join().unwrap().is_err(), "a stopped context refuses work");
        b.join().unwrap();
    });
    assert!(
        a_in.load(Ordering::SeqCst) && b_in.load(Ordering::SeqCst),
        "both hooks ran"
    );
    for op in b_ops.lock().unwrap().drain(..) {
        let _ = run(op);
    }
    println!("CHILD OK");
}

#[test]
fn hooks_taking_two_locks_in_opposite_orders_do_not_deadlock() {
    in_child("hooks_taking_two_locks_in_opposite_orders_child");
}

/// A layer that drops peer-access guards while the runtime's shared lock is held on its
/// thread (enabling access from a lost device fails in `aclrtDeviceEnablePeerAccess` under it,
/// and the simulator logs that there): the drops go to the reaper, and each is counted once.
#[test]
fn peer_guards_dropped_under_the_shared_lock_child() {
    if !child("peer_guards_dropped_under_the_shared_lock_child") {
        return;
    }
    npu::sim::SimConfig::default().devices(4).install().unwrap();
    let (d0, d1) = (Device::open(0).unwrap(), Device::open(1).unwrap());
    let (d2, d3) = (Device::open(2).unwrap(), Device::open(3).unwrap());
    let guards = Arc::new(std::sync::Mutex::new(vec![
        d3.enable_peer_access(&d2).unwrap(),
        d3.enable_peer_access(&d2).unwrap(),
    ]));
    npu::sim::lose(&d1).unwrap();
    let fired = Arc::new(AtomicUsize::new(0));
    let (hook_guards, count) = (guards.clone(), fired.clone());
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(OnEvent(
        Arc::new(move || {
            if ROLE.with(|r| r.replace(0)) == 3 {
                count.fetch_add(1, Ordering::SeqCst);
                let popped = hook_guards.lock().unwrap().pop();
                drop(popped);
            }
        }),
    )))
    .unwrap();
    ROLE.with(|r| r.set(3));
    assert!(d1.enable_peer_access(&d0).is_err());
    assert_eq!(
        fired.load(Ordering::SeqCst),
        1,
        "the failed enable was logged"
    );
    npu::sim::flush_releases();
    assert_eq!(
        guards.lock().unwrap().len(),
        1,
        "one guard dropped by the hook"
    );
    assert!(
        d3.peer_access_to(&d2).is_some(),
        "the other guard keeps access enabled"
    );
    ROLE.with(|r| r.set(3));
    assert!(d1.enable_peer_access(&d0).is_err());
    npu::sim::flush_releases();
    assert!(guards.lock().unwrap().is_empty());
    assert!(
        d3.peer_access_to(&d2).is_none(),
        "both guards' drops were counted"
    );
    // Enabled again from scratch: the count is not left below zero or above.
    let again = d3.enable_peer_access(&d2).unwrap();
    assert!(d3.peer_access_to(&d2).is_some());
    drop(again);
    npu::sim::flush_releases();
    assert!(d3.peer_access_to(&d2).is_none());
    println!("CHILD OK");
}

#[test]
fn peer_guards_dropped_under_the_shared_lock_are_counted_once() {
    in_child("peer_guards_dropped_under_the_shared_lock_child");
}

/// Staged copies stage bytes: elements of an odd size (3 bytes, alignment 1) and of 6 bytes
/// aligned to 2, through views that start mid-buffer, round-trip; a copy that fails on the device hands back the very view it
/// was given.
#[test]
fn staged_copies_of_odd_elements_through_views_round_trip_and_fail_cleanly() {
    let (_guard, ctx, _) = exclusive(Some(4));
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        let data: Vec<[u8; 3]> = (0..7u8).map(|i| [i, i + 100, i + 200]).collect();
        let device = DeviceBuffer::<[u8; 3]>::new(&ctx, 9).unwrap();
        let view = device.view(2..9).unwrap();
        let view = run(s.copy_from_slice_staged(s.staging_pool(), &data, view))
            .map_err(|e| e.error)
            .unwrap();
        assert_eq!(view.len(), 7);
        let (_, back) = run(s.copy_to_vec_staged(s.staging_pool(), view))
            .map_err(|e| e.error)
            .unwrap();
        assert_eq!(back, data, "{strategy:?}");

        let wide: Vec<[u16; 3]> = (0..5u16).map(|i| [i, i * 7, u16::MAX - i]).collect();
        let device = DeviceBuffer::<[u16; 3]>::new(&ctx, 6).unwrap();
        let view = device.view(1..6).unwrap();
        let view = run(s.copy_from_slice_staged(s.staging_pool(), &wide, view))
            .map_err(|e| e.error)
            .unwrap();
        let (view, back) = run(s.copy_to_vec_staged(s.staging_pool(), view))
            .map_err(|e| e.error)
            .unwrap();
        assert_eq!(back, wide, "{strategy:?}");

        // The device copy fails: the view comes back, whole.
        npu::sim::fail_task(&s, 1, npu::AclCode(507015)).unwrap();
        let failed = run(s.copy_from_slice_staged(s.staging_pool(), &wide, view)).unwrap_err();
        assert!(failed.error.acl_code().is_some(), "{:?}", failed.error);
        let view = failed.value.expect("the view comes back");
        assert_eq!(view.len(), 5);
        npu::sim::fail_task(&s, 1, npu::AclCode(507015)).unwrap();
        let failed = run(s.copy_to_vec_staged(s.staging_pool(), view)).unwrap_err();
        let view = failed.value.expect("the view comes back");
        assert_eq!(view.len(), 5);
        run(s.synchronize()).unwrap_err();
        let (_, back) = run(s.copy_to_vec_staged(s.staging_pool(), view))
            .map_err(|e| e.error)
            .unwrap();
        assert_eq!(back, wide, "{strategy:?}: the failed copies wrote nothing");
    }
}

/// A CANN-like library that defines none of AscendCL's functions itself (a thin
/// `libacl_rt.so` whose `aclInit` lives in the `libascendcl.so` it links against) and whose
/// `libascendcl.so` dependency the dynamic loader resolved to npu-sim's build: every symbol,
/// `aclInit` included, comes from the simulator, so comparing `aclInit`'s file with the
/// marker's cannot tell it from the simulator itself.
#[test]
fn a_library_whose_every_symbol_comes_from_a_simulator_dependency_is_refused() {
    let deps = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    assert!(
        deps.join("libascendcl.so").exists(),
        "npu-sim's build beside the test"
    );
    let dir = std::env::temp_dir().join(format!("npu-session15-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let c_file = dir.join("thin.c");
    std::fs::write(&c_file, "int thin_marker(void) { return 0; }\n").unwrap();
    let library = dir.join("libacl_rt.so");
    let status = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&library)
        .arg(&c_file)
        .arg(format!("-L{}", deps.display()))
        .args(["-Wl,--no-as-needed", "-lascendcl"])
        .arg(format!("-Wl,-rpath,{}", deps.display()))
        .status()
        .expect("a C compiler (cc)");
    assert!(status.success());
    // SAFETY: a library linking npu-sim's build of libascendcl.so, which exports its ACL
    // functions: an AscendCL runtime as far as its exports go (the point of the test).
    let built = unsafe { npu::Runtime::builder().library(&library) }.build();
    let _ = std::fs::remove_dir_all(&dir);
    let err = built
        .map(|rt| format!("{:?}", rt.backend()))
        .expect_err("loaded as the simulator");
    let text = err.to_string();
    assert!(text.contains("links npu-sim's build"), "{text}");
}

/// A layer that panics as a submission enters its operation's span (and not as it leaves):
/// the submission's containment must leave the thread's span context as it found it, not
/// inside an `npu_op` span that nothing will ever leave (later events and spans of the thread
/// would hang under it, and the registry would keep every such span).
#[test]
fn a_layer_panicking_on_enter_leaves_the_threads_span_context_alone() {
    struct PanicOnEnter;
    impl<S> tracing_subscriber::Layer<S> for PanicOnEnter
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        fn on_enter(&self, id: &tracing::span::Id, ctx: tracing_subscriber::layer::Context<'_, S>) {
            if ctx.span(id).is_some_and(|span| span.name() == "npu_op") {
                panic!("a layer panicking on enter");
            }
        }
    }
    let (_guard, ctx, _) = exclusive(Some(4));
    let subscriber = tracing_subscriber::registry()
        .with(PanicOnEnter)
        .with(tracing_subscriber::filter::LevelFilter::TRACE);
    let s = stream(&ctx, npu::stream::Strategy::EventPoll);
    common::see_every_callsite();
    let op = tracing::subscriber::with_default(subscriber, || {
        let op = s.memset(DeviceBuffer::<u8>::new(&ctx, 16).unwrap(), 3);
        let current = tracing::Span::current();
        let name = current.metadata().map(|m| m.name());
        assert_ne!(
            name,
            Some("npu_op"),
            "the thread is left inside the operation's span"
        );
        op
    });
    // Not awaited: `Op::poll` enters the span too, uncontained, and the span keeps its
    // subscriber (reported). The memset itself went through.
    op.completion().wait_blocking().unwrap();
    drop(op);
}

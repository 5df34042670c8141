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
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env("NPU_SESSION15_CHILD", name)
        .env_remove("NPU_BACKEND")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + HANG;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("{name} hung in the child process");
        }
        std::thread::park_timeout(Duration::from_millis(20));
    };
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
    assert!(
        status.success() && out.contains("CHILD OK"),
        "{status}: {out}"
    );
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

//! docs/observability.md as a user reads it: the `fmt` subscriber it shows (an `EnvFilter` of
//! `npu_stream=debug` and `warn` for the rest, one line per closed span), installed once for the process before
//! anything touches a device, writing into a buffer the tests read; and the counters the docs
//! name (`npu::stream::reactor_stats`, the pools' `stats`).

use std::io::Write;
use std::sync::{Arc, Mutex, Once};

use npu::error::AclCode;
use npu::prelude::*;
use npu::sim;
use npu::stream::reactor_stats;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::format::FmtSpan;

/// Everything the subscriber wrote.
#[derive(Clone, Default)]
struct Written(Arc<Mutex<Vec<u8>>>);

impl Written {
    /// The lines written so far that mention `stream` of `device`, from line `from` on.
    fn lines_of(&self, from: usize, stream: &npu::Stream) -> Vec<String> {
        let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
        let ours = format!(
            "stream={} device={}",
            stream.id(),
            stream.context().device_id()
        );
        text.lines()
            .skip(from)
            .filter(|line| line.contains(&ours))
            .map(str::to_string)
            .collect()
    }

    /// The lines written so far, from line `from` on.
    fn lines(&self, from: usize) -> Vec<String> {
        let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
        text.lines().skip(from).map(str::to_string).collect()
    }

    fn count(&self) -> usize {
        String::from_utf8(self.0.lock().unwrap().clone())
            .unwrap()
            .lines()
            .count()
    }
}

impl Write for Written {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Written {
    type Writer = Written;

    fn make_writer(&'a self) -> Written {
        self.clone()
    }
}

/// The subscriber docs/observability.md shows, installed once for the process; what it wrote.
fn subscriber() -> Written {
    static WRITTEN: Mutex<Option<Written>> = Mutex::new(None);
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let written = Written::default();
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("warn,npu_stream=debug"))
            .with_span_events(FmtSpan::CLOSE)
            .with_ansi(false)
            .with_writer(written.clone())
            .init();
        *WRITTEN.lock().unwrap() = Some(written);
    });
    WRITTEN.lock().unwrap().clone().unwrap()
}

/// The tests take turns: the subscriber's output and the reactor's counters are the process's.
async fn turn() -> (tokio::sync::MutexGuard<'static, ()>, Written) {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let written = subscriber();
    (TURN.lock().await, written)
}

/// Copy in, a kernel, copy out: one line per operation, closed with its fields (the ACL
/// function, the stream, the device, the bytes, the direction or the kernel) after a
/// `completed` event inside it; the reactor counted each operation and has none pending.
#[tokio::test]
async fn each_operation_is_a_line_with_its_fields_and_the_reactor_counts_it() -> npu::Result<()> {
    let (_turn, written) = turn().await;
    let ctx = Device::open(0)?.primary_context().clone();
    let stream = NpuStream::new(&ctx)?;
    // SAFETY: npu-sim's shipped kernel library, built for its kernel ABI.
    let module = unsafe { Module::from_file(&ctx, sim::kernel::LIBRARY_PATH) }?;
    let scale = module.function("scale_f32")?;
    let (from, before) = (written.count(), reactor_stats());

    let host = PinnedBuffer::from_slice(&ctx, &[1.0f32; 100])?;
    let (host, x) = stream.copy_h2d(host, DeviceBuffer::new(&ctx, 100)?).await?;
    // SAFETY: scale_f32(float *x, uint64_t n, float alpha) scales n elements of x in place.
    let (x, _, _) = unsafe { stream.launch(&scale, 1, (x, 100u64, 2.0f32)) }.await?;
    let (_, host) = stream.copy_d2h(x, host).await?;
    assert_eq!(&host[..], [2.0; 100]);

    let after = reactor_stats();
    assert_eq!(
        after.registered - before.registered,
        3,
        "{before:?} {after:?}"
    );
    assert_eq!(
        after.completed - before.completed,
        3,
        "{before:?} {after:?}"
    );
    assert_eq!(after.pending(), 0);

    let lines = written.lines_of(from, &stream);
    let closes: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("npu_stream::stream: close "))
        .collect();
    assert_eq!(closes.len(), 3, "{lines:#?}");
    for (line, parts) in closes.iter().zip([
        &["op=\"aclrtMemcpyAsync\"", "bytes=400", "direction=\"h2d\""][..],
        &[
            "op=\"aclrtLaunchKernelWithHostArgs\"",
            "bytes=0",
            "kernel=\"scale_f32\"",
        ],
        &["op=\"aclrtMemcpyAsync\"", "bytes=400", "direction=\"d2h\""],
    ]) {
        assert!(line.contains("DEBUG npu_op{"), "{line}");
        for part in parts {
            assert!(line.contains(part), "{part} in {line}");
        }
    }
    let completed = lines
        .iter()
        .filter(|l| l.contains("npu_stream::op: completed"));
    assert_eq!(completed.count(), 3, "{lines:#?}");
    Ok(())
}

/// A failed operation's line carries its `error` field (where the device saw the fault), and a
/// `failed` event inside it; the reactor completed it.
#[tokio::test]
async fn a_failed_operation_is_a_failed_line_with_the_error() -> npu::Result<()> {
    let (_turn, written) = turn().await;
    let ctx = Device::open(0)?.primary_context().clone();
    let stream = NpuStream::new(&ctx)?;
    let (from, before) = (written.count(), reactor_stats());
    sim::fail_task(&stream, 1, AclCode::AICORE_EXCEPTION)?;
    let err = stream
        .memset(DeviceBuffer::<u8>::new(&ctx, 64)?, 0)
        .await
        .unwrap_err();
    let lines = written.lines_of(from, &stream);
    let failed: Vec<&String> = lines.iter().filter(|l| l.contains(": failed")).collect();
    assert_eq!(failed.len(), 1, "{lines:#?}");
    assert!(failed[0].contains("npu_stream::op"), "{}", failed[0]);
    let close = lines
        .iter()
        .find(|l| l.contains("npu_stream::stream: close "))
        .unwrap();
    let shown = err.to_string();
    assert!(
        shown.contains(&format!("at task 1 of stream {} on device 0", stream.id())),
        "{shown}"
    );
    assert!(close.contains("op=\"aclrtMemsetAsync\""), "{close}");
    assert!(close.contains("error="), "{close}");
    // Not `fault_notices`: a pass may find the operation done before it reads the notice.
    let after = reactor_stats();
    assert!(
        after.completed > before.completed,
        "the reactor completed the failed operation: {before:?} {after:?}"
    );
    Ok(())
}

/// A pool block returned after a memory error on it is repaired, and the warning the docs
/// describe says so (level, target, message and fields); the pool counts the repair.
#[tokio::test]
async fn a_repaired_pool_block_is_a_warning_with_its_fields() -> npu::Result<()> {
    let (_turn, written) = turn().await;
    let ctx = Device::open(0)?.primary_context().clone();
    let (stream, pool) = (NpuStream::new(&ctx)?, DevicePool::new(&ctx)?);
    let block = pool.alloc::<u8>(&stream, 4096).await?;
    sim::inject_memory_error(&block, 0..16)?;
    let from = written.count();
    let err = stream.memset(block, 0).await.unwrap_err();
    assert!(err.error.is_memory_error(), "{err}");
    drop(err);
    // The pool examines the block on a thread of its own: flush_releases does not wait for it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while pool.stats().cache.awaiting_blocks > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the repair never ended"
        );
        sim::flush_releases();
        std::thread::yield_now();
    }
    assert_eq!(pool.stats().cache.repaired, 1);
    let lines = written.lines(from);
    let warning = lines
        .iter()
        .find(|l| l.contains("a pooled block's uncorrectable memory errors were repaired"))
        .unwrap_or_else(|| panic!("{lines:#?}"));
    for part in [
        " WARN ",
        "npu_mem::pool::cache:",
        "pool=",
        "bytes=4096",
        "repaired=",
    ] {
        assert!(warning.contains(part), "{part} in {warning}");
    }
    Ok(())
}

//! The copy pipeline's speedup: the pipelined and serial runs of `examples/copy_pipeline.rs`
//! (whose code, `examples/support/pipeline.rs`, is compiled into this module), on the
//! simulator with a timing model that makes the copy in, the kernel and the copy out of a
//! chunk take the same time.

use std::time::Duration;

use npu::prelude::*;

use crate::Table;

#[path = "../../examples/support/pipeline.rs"]
mod work;

const SECTION: &str = "copy pipeline";
/// Chunks per run.
const CHUNKS: usize = 32;
/// Elements per chunk (1 MiB of f32).
const CHUNK_LEN: usize = 256 << 10;
/// Simulated time of each stage.
const STAGE: Duration = Duration::from_millis(2);
/// Rounds; the median speedup is reported.
const ROUNDS: usize = 3;

/// Runs the section.
pub fn run(table: &mut Table) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a Tokio runtime");
    let ctx = Device::open(0).expect("device 0").primary_context().clone();
    // SAFETY: npu-sim's shipped kernel library, built for its kernel ABI.
    let module = unsafe { Module::from_file(&ctx, npu::sim::kernel::LIBRARY_PATH) };
    let add = module
        .and_then(|m| m.function(work::KERNEL))
        .expect("the kernel");
    let chunk_bytes = CHUNK_LEN * size_of::<f32>();
    let model = work::equal_stages(chunk_bytes, STAGE);
    npu::sim::control::set_timing(0, Some(model)).expect("set the timing model");
    let mut rounds = runtime.block_on(async {
        let work = work::Work::new(&ctx, add, CHUNKS, CHUNK_LEN).await?;
        let mut rounds = Vec::new();
        for _ in 0..ROUNDS {
            let (serial, pipelined) = (work.serial(&()).await?, work.pipelined(&()).await?);
            assert_eq!(
                serial.wrong_chunks + pipelined.wrong_chunks,
                0,
                "wrong results"
            );
            rounds.push((serial, pipelined));
        }
        Ok::<_, npu::Error>(rounds)
    });
    npu::sim::control::set_timing(0, None).expect("clear the timing model");
    let rounds = rounds.as_mut().expect("the pipeline runs");
    let speedup =
        |(s, p): &(work::Outcome, work::Outcome)| s.wall.as_secs_f64() / p.wall.as_secs_f64();
    rounds.sort_by(|a, b| speedup(a).total_cmp(&speedup(b)));
    let median = &rounds[ROUNDS / 2];
    let (serial, pipelined) = median;
    let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1e3);
    let what = format!(
        "{CHUNKS} chunks of {} KiB, {} ms per stage",
        chunk_bytes >> 10,
        STAGE.as_millis()
    );
    table.push(
        SECTION,
        "serial: copy in, kernel, copy out, each awaited",
        ms(serial.wall),
        format!("{what}, {} stream", serial.streams.len()),
    );
    table.push(
        SECTION,
        "pipelined: double-buffered, ordered with events",
        ms(pipelined.wall),
        format!("{} streams", pipelined.streams.len()),
    );
    table.push(
        SECTION,
        "pipeline speedup (serial / pipelined)",
        format!("{:.2}x", speedup(median)),
        format!(
            "target ≥ 1.8x; median of {ROUNDS} rounds (overlap alone gives up to 3x; the \
             serial run also waits on the host between stages)"
        ),
    );
}

//! npu-stream against the alternatives a Tokio user would pick: the await latency of one tiny
//! operation against the synchronous floor, throughput of the three completion strategies
//! (`BlockingSync` is what `spawn_blocking` + synchronize code does), the reactor's event
//! queries per completed operation, and the reactor thread's CPU time while idle.
//!
//! Everything runs on device 0 of the in-process simulator. Task durations come from the
//! simulator's timing model; host costs are real. Every comparison is measured interleaved
//! (the variants take turns, round by round), so the machine's background load weighs on each
//! alike, and each row says whether its target is met.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use npu_core::{BackendChoice, Context, Runtime, acl_call};
use npu_mem::{DeviceBuffer, MemoryMut};
use npu_sim::{TimingModel, control};
use npu_stream::{Strategy, Stream};

use crate::placement::{self, DeviceAlone};
use crate::stats::{self, median, micros, percentile};
use crate::{Filter, Table};

const SECTION: &str = "npu-stream";
const STRATEGIES: [Strategy; 3] = [
    Strategy::EventPoll,
    Strategy::CallbackThread,
    Strategy::BlockingSync,
];
/// Bytes each throughput operation sets; the timing model turns it into 10 or 100 µs.
const TASK_BYTES: u64 = 1000;
/// How long each strategy runs in each throughput cell, split into [`RUNS`] interleaved runs,
/// after a warm-up of a tenth of that.
const WINDOW: Duration = Duration::from_millis(240);
/// Interleaved runs of each strategy per throughput cell; their median is compared.
const RUNS: usize = 3;
/// How long each throughput run goes before its completions count: long enough for every
/// chain to have started and for the reactor to have learned each new stream's pace (a few
/// dozen operations of 100 µs).
const STEADY_AFTER: Duration = Duration::from_millis(40);
/// Independent repetitions of the await-latency measurement: its targets must hold in every
/// one.
const LATENCY_RUNS: usize = 10;
/// Awaited-op targets, as ratios to the sync floor.
const P50_TARGET: f64 = 1.2;
const P99_TARGET: f64 = 2.0;
/// Event polling against the best alternative, in every throughput cell and at 1 in flight.
const CELL_TARGET: f64 = 1.0;
const ONE_IN_FLIGHT_TARGET: f64 = 1.2;
/// Event queries per completed operation over the whole run.
const QUERIES_TARGET: f64 = 2.0;

fn strategy_name(strategy: Strategy) -> &'static str {
    match strategy {
        Strategy::EventPoll => "event polling",
        Strategy::CallbackThread => "callback thread",
        Strategy::BlockingSync => "spawn_blocking+sync",
        // `Strategy` is non-exhaustive; a strategy added later is measured under this label
        // until it gets its own.
        _ => "another strategy",
    }
}

/// Runs the parts of the npu-stream section `filter` wants: `stream-latency`,
/// `stream-throughput`, `stream-spread` and `stream-idle`.
pub fn run(table: &mut Table, filter: &Filter) {
    let runtime = Runtime::builder()
        .backend(BackendChoice::Sim)
        .build()
        .expect("the in-process simulator");
    let context = runtime
        .device(0)
        .expect("device 0")
        .primary_context()
        .clone();
    let tokio = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a Tokio runtime");
    // Each part's share of the queries, so that a miss of the whole-run target says where
    // the queries were made.
    let mut parts = Vec::new();
    if filter.wants("stream-latency") {
        let before = npu_stream::reactor_stats();
        await_latency(table, &tokio, &context);
        parts.push(("latency", before, npu_stream::reactor_stats()));
    }
    if filter.wants("stream-throughput") {
        let before = npu_stream::reactor_stats();
        throughput(table, &tokio, &context);
        parts.push(("throughput", before, npu_stream::reactor_stats()));
    }
    if !parts.is_empty() {
        let stats = npu_stream::reactor_stats();
        let ratio = stats.polls_per_completion();
        let shares: Vec<String> = parts
            .iter()
            .map(|(name, before, after)| {
                let queries = after.queries - before.queries;
                let completed = (after.completed - before.completed).max(1);
                format!("{name} part {:.2}", queries as f64 / completed as f64)
            })
            .collect();
        table.push(
            SECTION,
            "reactor event queries per completed operation (whole run)",
            format!("{ratio:.2}"),
            format!(
                "target ≤ {QUERIES_TARGET}: {}; {} queries, {} completed, {} parks; {}",
                verdict(ratio <= QUERIES_TARGET),
                stats.queries,
                stats.completed,
                stats.parks,
                shares.join(", ")
            ),
        );
    }
    if filter.wants("stream-spread") {
        run_to_run_spread(table, &tokio, &context);
    }
    if filter.wants("stream-idle") {
        idle_reactor(table);
    }
}

/// How a target row ends: "met" or "missed".
pub(crate) fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "missed" }
}

/// The p50 and p99 of one variant in one latency run, in µs.
#[derive(Debug, Clone, Copy)]
struct Quantiles {
    p50: f64,
    p99: f64,
}

impl Quantiles {
    fn of(samples: &mut [Duration]) -> Self {
        Quantiles {
            p50: micros(percentile(samples, 0.5)),
            p99: micros(percentile(samples, 0.99)),
        }
    }
}

/// One awaited 64-byte memset per strategy against the sync floor (the same memset followed
/// by `aclrtSynchronizeStream` on the calling thread), [`LATENCY_RUNS`] times.
///
/// In each run, rounds of the floor and of each strategy take turns, so the background load
/// and the threads a strategy leaves behind (the callback thread, the blocking pool's threads)
/// weigh on every variant alike, and each strategy is compared with the floor of its own run.
/// Event polling's targets must hold in every run, so its row gives the spread of its ratios
/// over the runs; the other strategies' rows give medians over the runs.
fn await_latency(table: &mut Table, tokio: &tokio::runtime::Runtime, context: &Context) {
    const ROUNDS: usize = 40;
    const PER_ROUND: usize = 50;
    control::set_timing(0, None).expect("timing off");
    let floor_stream = Stream::new(context).expect("stream");
    let streams: Vec<Stream> = STRATEGIES
        .map(|strategy| {
            Stream::builder(context)
                .strategy(strategy)
                .build()
                .expect("stream")
        })
        .into();
    let mut buffer = Some(DeviceBuffer::<u8>::new(context, 64).expect("buffer"));
    // runs[run] = (floor, one entry per strategy)
    let mut runs: Vec<(Quantiles, Vec<Quantiles>)> = Vec::new();
    // Over all runs, per variant (the floor, then each strategy): each round's first
    // operation, which follows the other variants' rounds (so the threads it needs may have
    // gone to sleep), and the operations after it.
    let mut openers: Vec<Vec<Duration>> = vec![Vec::new(); STRATEGIES.len() + 1];
    let mut followers: Vec<Vec<Duration>> = vec![Vec::new(); STRATEGIES.len() + 1];
    let mut split = |variant: usize, i: usize, sample: Duration| match i {
        0 => openers[variant].push(sample),
        _ => followers[variant].push(sample),
    };
    for _ in 0..LATENCY_RUNS {
        let mut floor = Vec::new();
        let mut awaited: Vec<Vec<Duration>> = vec![Vec::new(); STRATEGIES.len()];
        for round in 0..=ROUNDS {
            // Round 0 warms up and is discarded.
            let keep = round > 0;
            let device = buffer.as_mut().expect("the buffer is back");
            let (ptr, raw) = (device.addr_mut(), floor_stream.as_raw());
            context.bind().expect("bind");
            for i in 0..PER_ROUND {
                let start = Instant::now();
                // SAFETY: `ptr` is a live 64-byte device allocation of this context, which
                // is bound; the stream belongs to it; the memset is synchronised before the
                // buffer is used again.
                unsafe {
                    acl_call!(
                        context.runtime(),
                        aclrtMemsetAsync(ptr, 64, i as i32, 64, raw)
                    )
                    .and_then(|()| acl_call!(context.runtime(), aclrtSynchronizeStream(raw)))
                    .expect("memset + synchronize");
                }
                if keep {
                    let elapsed = start.elapsed();
                    floor.push(elapsed);
                    split(0, i, elapsed);
                }
            }
            for (variant, (stream, samples)) in streams.iter().zip(&mut awaited).enumerate() {
                tokio.block_on(async {
                    for i in 0..PER_ROUND {
                        let start = Instant::now();
                        let device = buffer.take().expect("the buffer is back");
                        buffer = Some(stream.memset(device, i as u8).await.expect("memset"));
                        if keep {
                            let elapsed = start.elapsed();
                            samples.push(elapsed);
                            split(variant + 1, i, elapsed);
                        }
                    }
                });
            }
        }
        runs.push((
            Quantiles::of(&mut floor),
            awaited.iter_mut().map(|s| Quantiles::of(s)).collect(),
        ));
    }
    let samples = ROUNDS * PER_ROUND;
    let split_rows: Vec<(Quantiles, Quantiles)> = openers
        .iter_mut()
        .zip(&mut followers)
        .map(|(first, rest)| (Quantiles::of(first), Quantiles::of(rest)))
        .collect();
    for (index, strategy) in STRATEGIES.into_iter().enumerate() {
        let ratios: Vec<(f64, f64)> = runs
            .iter()
            .map(|(floor, strategies)| {
                let q = strategies[index];
                (q.p50 / floor.p50, q.p99 / floor.p99)
            })
            .collect();
        let pick = |f: fn(&Quantiles) -> f64, of_floor: bool| -> f64 {
            median(
                &mut runs
                    .iter()
                    .map(|(floor, strategies)| f(if of_floor { floor } else { &strategies[index] }))
                    .collect::<Vec<_>>(),
            )
        };
        let (p50, p99) = (pick(|q| q.p50, false), pick(|q| q.p99, false));
        let (floor_p50, floor_p99) = (pick(|q| q.p50, true), pick(|q| q.p99, true));
        let name = strategy_name(strategy);
        table.push(
            SECTION,
            format!("awaited 64 B memset, {name}, p50 / p99 (median of {LATENCY_RUNS} runs)"),
            format!("{p50:.1} / {p99:.1} µs"),
            format!(
                "floor (memset + aclrtSynchronizeStream) {floor_p50:.1} / {floor_p99:.1} µs; \
                 {samples} samples per run and variant"
            ),
        );
        if strategy == Strategy::EventPoll {
            let ((first, rest), (floor_first, floor_rest)) = (split_rows[index + 1], split_rows[0]);
            table.push(
                SECTION,
                format!("awaited 64 B memset, {name}: a round's first operation / the rest"),
                format!(
                    "{:.1} / {:.1} µs p50, {:.1} / {:.1} µs p99",
                    first.p50, rest.p50, first.p99, rest.p99
                ),
                format!(
                    "floor {:.1} / {:.1} µs p50, {:.1} / {:.1} µs p99; all runs, {} first \
                     operations (after the other variants' rounds) per variant",
                    floor_first.p50,
                    floor_rest.p50,
                    floor_first.p99,
                    floor_rest.p99,
                    ROUNDS * LATENCY_RUNS
                ),
            );
            let spread = |values: Vec<f64>| {
                let mut values = values;
                values.sort_by(f64::total_cmp);
                format!(
                    "{:.2} / {:.2} / {:.2}",
                    values[0],
                    median(&mut values.clone()),
                    values[values.len() - 1]
                )
            };
            let met = ratios
                .iter()
                .filter(|(p50, p99)| *p50 <= P50_TARGET && *p99 <= P99_TARGET)
                .count();
            table.push(
                SECTION,
                format!("awaited 64 B memset, {name}: p50 ratio to the floor, min / median / max"),
                format!("{}×", spread(ratios.iter().map(|r| r.0).collect())),
                format!(
                    "p99 ratio min / median / max {}×; targets p50 ≤ {P50_TARGET}× and \
                     p99 ≤ {P99_TARGET}× in every run: {} ({met} of {LATENCY_RUNS} runs)",
                    spread(ratios.iter().map(|r| r.1).collect()),
                    verdict(met == LATENCY_RUNS)
                ),
            );
        }
    }
}

/// One throughput run of one strategy.
struct Run {
    /// Completions per second in the counted window.
    rate: f64,
    /// How often the thread running the awaiting tasks waited (parked) per completed
    /// operation, over the whole run: each wait is a hand-over of its core, and a strategy
    /// that wakes it once for several completions makes fewer. `None` where the OS does not
    /// report a thread's waits.
    waits_per_op: Option<f64>,
}

/// Operations completed per second in steady state, with `in_flight` chains of memsets spread
/// over `streams` streams, each chain awaiting its memset before submitting the next; and how
/// often the thread running the chains waited per operation.
///
/// Only completions within `window` count, after the chains have run for [`STEADY_AFTER`]:
/// the streams, their buffers and the first operations of every chain (the fill, and the
/// reactor learning each new stream's pace) stay out of it, as they do for a server whose
/// streams live as long as it does; so do the operations still in flight when it ends.
///
/// With `device_alone`, the simulator's stream workers run on one core and every other thread
/// on the others, for the run ([`DeviceAlone`]).
fn ops_per_sec(
    tokio: &tokio::runtime::Runtime,
    context: &Context,
    strategy: Strategy,
    streams: usize,
    in_flight: usize,
    window: Duration,
    device_alone: bool,
) -> Run {
    let before = placement::sim_workers();
    let streams: Vec<Stream> = (0..streams)
        .map(|_| {
            Stream::builder(context)
                .strategy(strategy)
                .build()
                .expect("stream")
        })
        .collect();
    // Placed only when every stream's worker is known; otherwise the scheduler places them.
    let _placed = device_alone
        .then(|| placement::new_sim_workers(&before, streams.len()))
        .flatten()
        .and_then(|workers| DeviceAlone::pin(&workers));
    let buffers: Vec<DeviceBuffer<u8>> = (0..in_flight)
        .map(|_| DeviceBuffer::<u8>::new(context, TASK_BYTES as usize).expect("buffer"))
        .collect();
    let completed = Rc::new(Cell::new(0u64));
    let all = Rc::new(Cell::new(0u64));
    let waits_before = stats::thread_waits();
    let from = Instant::now() + STEADY_AFTER;
    let end = from + window;
    tokio.block_on(async {
        let local = tokio::task::LocalSet::new();
        for (chain, mut buffer) in buffers.into_iter().enumerate() {
            let stream = streams[chain % streams.len()].clone();
            let (completed, all) = (completed.clone(), all.clone());
            local.spawn_local(async move {
                loop {
                    buffer = stream.memset(buffer, chain as u8).await.expect("memset");
                    all.set(all.get() + 1);
                    let now = Instant::now();
                    if now >= end {
                        break;
                    }
                    if now >= from {
                        completed.set(completed.get() + 1);
                    }
                }
            });
        }
        local.await;
    });
    let waits = stats::thread_waits()
        .zip(waits_before)
        .map(|(after, before)| after - before);
    Run {
        rate: completed.get() as f64 / window.as_secs_f64(),
        waits_per_op: waits.map(|waits| waits as f64 / all.get().max(1) as f64),
    }
}

/// Each strategy's throughput for one cell: the median of three runs, the strategies taking
/// turns so that they share the machine's background load; after one warm-up run each.
///
/// At 1 in flight one stream is busy, so its worker can have a core of its own, as a real
/// device's cores are its own: left to the scheduler, a worker that shares a core with the
/// reactor or the awaiting thread slows whichever strategy it lands beside, from run to run
/// (the spread part shows by how much). With more in flight the busy workers outnumber the
/// cores they could be given, so the scheduler places them.
///
/// Returns each strategy's median rate and the median of its runs' waits per operation (if
/// every run has them).
fn rates(
    tokio: &tokio::runtime::Runtime,
    context: &Context,
    streams: usize,
    in_flight: usize,
) -> Vec<(f64, Option<f64>)> {
    let mut runs: Vec<Vec<Run>> = STRATEGIES.map(|_| Vec::new()).into();
    for run in 0..=RUNS {
        for (strategy, samples) in STRATEGIES.into_iter().zip(&mut runs) {
            let window = if run == 0 {
                WINDOW / 10
            } else {
                WINDOW / RUNS as u32
            };
            let measured = ops_per_sec(
                tokio,
                context,
                strategy,
                streams,
                in_flight,
                window,
                in_flight == 1,
            );
            if run > 0 {
                samples.push(measured);
            }
        }
    }
    runs.into_iter()
        .map(|samples| {
            let mut rates: Vec<f64> = samples.iter().map(|run| run.rate).collect();
            let waits: Option<Vec<f64>> = samples.iter().map(|run| run.waits_per_op).collect();
            (
                median(&mut rates),
                waits.map(|mut waits| median(&mut waits)),
            )
        })
        .collect()
}

/// The throughput matrix: for each task length, in-flight count and stream count, every
/// strategy, with event polling's ratio to the best alternative in each cell and the ratios
/// the design targets at 256 in flight.
fn throughput(table: &mut Table, tokio: &tokio::runtime::Runtime, context: &Context) {
    let (mut cells, mut cells_met, mut ties, mut single, mut single_met) = (0, 0, 0, 0, 0);
    for task_us in [10u64, 100] {
        let model = TimingModel::default().d2d_bandwidth(TASK_BYTES * 1_000_000 / task_us);
        control::set_timing(0, Some(model)).expect("timing model");
        for in_flight in [1usize, 16, 256] {
            for streams in [1usize, 4, 16] {
                let device_bound = 1e6 / task_us as f64 * streams.min(in_flight) as f64;
                // The simulated device runs its tasks back to back in simulated time, so a
                // worker thread the host held up finishes its backlog in a burst: a window can
                // count a little more than the device can sustain. That excess is the host's
                // lag, not a strategy's speed, and is not credited to anyone.
                let cpu_before = stats::CpuTime::now();
                let reactor_before = npu_stream::reactor_stats();
                let (measured, waits): (Vec<f64>, Vec<Option<f64>>) =
                    rates(tokio, context, streams, in_flight)
                        .into_iter()
                        .unzip();
                let reactor_after = npu_stream::reactor_stats();
                let cell_queries = (reactor_after.queries - reactor_before.queries) as f64
                    / (reactor_after.completed - reactor_before.completed).max(1) as f64;
                let stolen = stats::stolen(cpu_before);
                let clamped = measured.iter().any(|rate| *rate > device_bound);
                let rates: Vec<f64> = measured.iter().map(|rate| rate.min(device_bound)).collect();
                let (over_callback, over_blocking) = (rates[0] / rates[1], rates[0] / rates[2]);
                let over_best = over_callback.min(over_blocking);
                let target = if in_flight == 1 {
                    ONE_IN_FLIGHT_TARGET
                } else {
                    CELL_TARGET
                };
                let tie = tie_note(&rates, streams.min(in_flight));
                cells += 1;
                cells_met += usize::from(over_best >= CELL_TARGET || tie.is_some());
                ties += usize::from(over_best < CELL_TARGET && tie.is_some());
                if in_flight == 1 {
                    single += 1;
                    single_met += usize::from(over_best >= ONE_IN_FLIGHT_TARGET);
                }
                // Where event polling already runs the device flat out, no strategy can be
                // ahead of another by more than the device leaves them.
                let at_bound = if rates[0] >= 0.9 * device_bound {
                    ", event polling at the device's bound"
                } else {
                    ""
                };
                let design = match in_flight {
                    1 => "; the device's worker alone on a core".to_string(),
                    256 => format!(
                        "; EP/CB ≥ 1.5× and EP/BS ≥ 3×: {} / {}",
                        verdict(over_callback >= 1.5),
                        verdict(over_blocking >= 3.0)
                    ),
                    _ => String::new(),
                };
                table.push(
                    SECTION,
                    format!(
                        "ops/s, {task_us} µs tasks, {in_flight} in flight, {streams} stream(s): \
                         event polling"
                    ),
                    format!("{:.0}", rates[0]),
                    format!(
                        "callback {:.0}, spawn_blocking+sync {:.0}; EP/CB {over_callback:.2}×, \
                         EP/BS {over_blocking:.2}×; EP/best ≥ {target}×: {}{}{design}{at_bound}; \
                         device bound {device_bound:.0}{}; CPU stolen {stolen}; \
                         {cell_queries:.2} queries per completion; the awaiting thread's waits \
                         per operation EP {}, CB {}, BS {}",
                        rates[1],
                        rates[2],
                        verdict(over_best >= target || (target == CELL_TARGET && tie.is_some())),
                        tie.unwrap_or_default(),
                        if clamped {
                            " (rates over it counted at it)"
                        } else {
                            ""
                        },
                        per_op(waits[0]),
                        per_op(waits[1]),
                        per_op(waits[2])
                    ),
                );
            }
        }
    }
    control::set_timing(0, None).expect("timing off");
    table.push(
        SECTION,
        "event polling ≥ the best alternative, cells of the sweep",
        format!("{cells_met} of {cells}"),
        format!(
            "target: every cell ({}; {ties} of them a tie within the count's resolution); \
             ≥ {ONE_IN_FLIGHT_TARGET}× at 1 in flight in {single_met} of {single} cells ({})",
            verdict(cells_met == cells),
            verdict(single_met == single)
        ),
    );
}

/// A count per operation as the table prints it: two decimals, or "n/a" where the OS gave
/// none.
fn per_op(value: Option<f64>) -> String {
    value.map_or_else(|| "n/a".into(), |value| format!("{value:.2}"))
}

/// Runs of each strategy in the spread part, per placement.
const SPREAD_RUNS: usize = 15;
/// The spread part's task length.
const SPREAD_TASK_US: u64 = 10;

/// The run-to-run spread of the cell that misses most often (10 µs tasks, 1 in flight, 1
/// stream): [`SPREAD_RUNS`] interleaved runs of each strategy, with the quartiles of their
/// rates, so that a miss of the sweep's median-of-three can be read against how far single
/// runs move on the same binary. Then the same with the simulator's stream worker (the
/// device) on a core of its own and every other thread on the other, which the scheduler
/// otherwise decides anew for each run's new stream. Its queries come after the whole-run row
/// and are not in it: this cell makes the most queries per completion, and repeating it
/// would weigh the whole-run figure towards one cell.
fn run_to_run_spread(table: &mut Table, tokio: &tokio::runtime::Runtime, context: &Context) {
    let model = TimingModel::default().d2d_bandwidth(TASK_BYTES * 1_000_000 / SPREAD_TASK_US);
    control::set_timing(0, Some(model)).expect("timing model");
    for (device_alone, placement) in [
        (false, "threads where the scheduler puts them"),
        (true, "the device's worker alone on a core"),
    ] {
        spread_rows(table, tokio, context, device_alone, placement);
    }
    control::set_timing(0, None).expect("timing off");
}

fn spread_rows(
    table: &mut Table,
    tokio: &tokio::runtime::Runtime,
    context: &Context,
    device_alone: bool,
    placement: &str,
) {
    let window = WINDOW / RUNS as u32;
    let mut runs: Vec<Vec<f64>> = vec![Vec::new(); STRATEGIES.len()];
    // Event polling's runs split by how many queries each completion took, because the fast
    // runs are the ones where the learned pace is right.
    let (mut planned, mut retried) = (Vec::new(), Vec::new());
    for run in 0..=SPREAD_RUNS {
        for (strategy, samples) in STRATEGIES.into_iter().zip(&mut runs) {
            let before = npu_stream::reactor_stats();
            let rate = ops_per_sec(tokio, context, strategy, 1, 1, window, device_alone).rate;
            let after = npu_stream::reactor_stats();
            if run == 0 {
                continue;
            }
            samples.push(rate);
            if strategy == Strategy::EventPoll {
                let queries = (after.queries - before.queries) as f64
                    / (after.completed - before.completed).max(1) as f64;
                if queries <= QUERIES_TARGET {
                    planned.push(rate);
                } else {
                    retried.push(rate);
                }
            }
        }
    }
    let medians: Vec<f64> = runs
        .iter()
        .map(|samples| median(&mut samples.clone()))
        .collect();
    let best_alternative = medians[1].max(medians[2]);
    for (strategy, samples) in STRATEGIES.into_iter().zip(&mut runs) {
        samples.sort_by(f64::total_cmp);
        let quartile = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
        let mut note = format!(
            "min / p25 / p75 / max {:.0} / {:.0} / {:.0} / {:.0}; {SPREAD_RUNS} runs of {} ms, \
             interleaved",
            quartile(0.0),
            quartile(0.25),
            quartile(0.75),
            quartile(1.0),
            window.as_millis()
        );
        if strategy == Strategy::EventPoll {
            note += &format!(
                "; median / best alternative's median {:.2}×; runs with ≤ {QUERIES_TARGET} \
                 queries per completion: {} (median {:.0}), with more: {} (median {:.0})",
                medians[0] / best_alternative,
                planned.len(),
                median(&mut planned),
                retried.len(),
                median(&mut retried)
            );
        }
        table.push(
            SECTION,
            format!(
                "ops/s, {SPREAD_TASK_US} µs tasks, 1 in flight, 1 stream, {placement}: {}",
                strategy_name(strategy)
            ),
            format!("{:.0}", quartile(0.5)),
            note,
        );
    }
}

/// When event polling trails the best alternative by less than one operation per busy stream
/// in a run's window, the note that says it is a tie.
///
/// A stream that completes its operations back to back at a steady pace counts the same
/// number in every window up to one: whether the operation spanning the window's opening or
/// its close is counted depends on where the window falls between two completions, not on
/// who reported them. A gap of at most `busy_streams` operations per window is therefore
/// below what the count can tell apart; a larger one is a miss however close the ratio is.
fn tie_note(rates: &[f64], busy_streams: usize) -> Option<String> {
    let per_run = (WINDOW / RUNS as u32).as_secs_f64();
    let behind = (rates[1].max(rates[2]) - rates[0]) * per_run;
    (behind > 0.0 && behind <= busy_streams as f64 + 1e-9).then(|| {
        format!(
            " (a tie: {behind:.0} operation(s) fewer in the window, within the ±{busy_streams} \
             its edges decide)"
        )
    })
}

/// The `npu-reactor` thread's id, from /proc/self/task/*/comm.
fn reactor_tid() -> Option<String> {
    std::fs::read_dir("/proc/self/task")
        .ok()?
        .flatten()
        .find_map(|task| {
            let comm = std::fs::read_to_string(task.path().join("comm")).ok()?;
            (comm.trim() == "npu-reactor").then(|| task.file_name().to_string_lossy().into_owned())
        })
}

/// CPU time of a thread: (utime + stime from `stat`, in clock ticks converted to ns; on-CPU
/// time from `schedstat`, in ns, when the kernel provides it).
fn thread_cpu(tid: &str) -> (u64, Option<u64>) {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap_or_default();
    // Fields after the parenthesised command name start with field 3 (state); utime and
    // stime are fields 14 and 15.
    let fields: Vec<u64> = stat
        .rsplit_once(')')
        .map(|(_, rest)| {
            rest.split_whitespace()
                .filter_map(|f| f.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let ticks = fields.get(10).copied().unwrap_or(0) + fields.get(11).copied().unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let schedstat = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok());
    (ticks * 1_000_000_000 / hz, schedstat)
}

/// The reactor's CPU time over one second with nothing pending.
fn idle_reactor(table: &mut Table) {
    let Some(tid) = reactor_tid() else {
        table.push(
            SECTION,
            "reactor CPU while idle",
            "n/a",
            "no npu-reactor thread found",
        );
        return;
    };
    let before = (
        thread_cpu(&tid),
        npu_stream::reactor_stats(),
        Instant::now(),
    );
    std::thread::sleep(Duration::from_secs(1));
    let after = (
        thread_cpu(&tid),
        npu_stream::reactor_stats(),
        Instant::now(),
    );
    let wall = (after.2 - before.2).as_nanos() as f64;
    let percent = |a: u64, b: u64| (b.saturating_sub(a)) as f64 / wall * 100.0;
    let stat = percent(before.0.0, after.0.0);
    let precise = before.0.1.zip(after.0.1).map(|(a, b)| percent(a, b));
    let (queries, parks) = (
        after.1.queries - before.1.queries,
        after.1.parks - before.1.parks,
    );
    table.push(
        SECTION,
        "npu-reactor thread CPU over 1 s idle",
        format!("{:.4} %", precise.unwrap_or(stat)),
        format!(
            "target 0 (parked until work arrives: no query, no wake-up): {}; /proc stat ticks \
             give {stat:.2} %; {queries} queries, {parks} parks meanwhile",
            verdict(queries == 0 && parks == 0)
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::tie_note;

    #[test]
    fn one_operation_per_busy_stream_is_a_tie_and_more_is_a_miss() {
        // Run 20's cell: 100 µs tasks on 4 streams, one operation fewer in an 80 ms window.
        assert!(tie_note(&[39_938.0, 39_950.0, 39_000.0], 4).is_some());
        // Four fewer on 4 streams is still within the edges; five is not.
        assert!(tie_note(&[39_950.0, 40_000.0, 0.0], 4).is_some());
        assert!(tie_note(&[39_937.5, 40_000.0, 0.0], 4).is_none());
        // Run 18's cell: 49 operations fewer on one stream is a miss, however close the ratio.
        assert!(tie_note(&[99_338.0, 0.0, 99_950.0], 1).is_none());
        // Ahead or level is no tie to report.
        assert!(tie_note(&[40_000.0, 39_950.0, 39_950.0], 4).is_none());
        assert!(tie_note(&[40_000.0, 40_000.0, 0.0], 4).is_none());
    }
}

//! The simulator's own costs: an empty async task round trip, what a completion check costs
//! against a completion-word write (the trade a flag-write strategy would make), and copy
//! throughput against a plain `memcpy` measured in the same run.

use std::ffi::c_void;
use std::hint::black_box;
use std::ptr;
use std::time::{Duration, Instant};

use npu_sim::abi::*;
use npu_sys::{
    ACL_EVENT_RECORDED_STATUS_COMPLETE, ACL_MEMCPY_HOST_TO_DEVICE, aclrtEventRecordedStatus,
};

use crate::Table;
use crate::stats::{micros, percentile};

const SECTION: &str = "simulator";
/// Size of the throughput copies.
const COPY_BYTES: usize = 64 << 20;

fn check(code: aclError, what: &str) {
    assert_eq!(code, 0, "{what} failed with ACL error {code}");
}

/// Runs the simulator section.
pub fn run(table: &mut Table) {
    // SAFETY: every pointer handed to the simulator is valid for the call's contract, and the
    // buffers outlive the work that uses them (each measurement synchronises).
    unsafe {
        check(aclrtSetDevice(0), "aclrtSetDevice");
        let mut stream = ptr::null_mut();
        check(aclrtCreateStream(&mut stream), "aclrtCreateStream");
        round_trip(table, stream);
        flag_write_costs(table, stream);
        copy_throughput(table, stream);
        check(aclrtDestroyStream(stream), "aclrtDestroyStream");
        check(aclrtResetDevice(0), "aclrtResetDevice");
    }
}

/// Record an event on an idle stream, then poll aclrtQueryEventStatus until it completes.
///
/// # Safety
/// `stream` must be a live stream of the current context.
unsafe fn round_trip(table: &mut Table, stream: aclrtStream) {
    const ITERATIONS: usize = 20_000;
    // SAFETY: valid out pointers and a live stream (caller's contract).
    unsafe {
        let mut event = ptr::null_mut();
        check(
            aclrtCreateEventExWithFlag(&mut event, 0),
            "aclrtCreateEventExWithFlag",
        );
        let mut samples = Vec::with_capacity(ITERATIONS);
        for _ in 0..ITERATIONS {
            let start = Instant::now();
            check(aclrtRecordEvent(event, stream), "aclrtRecordEvent");
            let mut status: aclrtEventRecordedStatus = 0;
            while status != ACL_EVENT_RECORDED_STATUS_COMPLETE {
                check(
                    aclrtQueryEventStatus(event, &mut status),
                    "aclrtQueryEventStatus",
                );
            }
            samples.push(start.elapsed());
        }
        check(aclrtDestroyEvent(event), "aclrtDestroyEvent");
        let median = percentile(&mut samples, 0.5);
        table.push(
            SECTION,
            "empty task round trip (record + query until complete), median",
            format!("{:.2} µs", micros(median)),
            format!("{ITERATIONS} iterations"),
        );
    }
}

/// What a flag-write strategy would trade: the event queries the reactor makes per completed
/// operation (the stream section counts them) against one more submission per operation, an
/// `aclrtValueWrite` of a completion word, and the device task that runs it. Medians of rounds
/// of `BATCH` calls each: queries of an event that has completed, and value writes submitted to
/// an idle stream (timed alone, then with the stream drained so the tasks' execution counts).
///
/// # Safety
/// `stream` must be a live stream of the current context.
unsafe fn flag_write_costs(table: &mut Table, stream: aclrtStream) {
    const ROUNDS: usize = 201;
    const BATCH: u32 = 100;
    // SAFETY: valid out pointers, a live stream (caller's contract), and an 8-byte device word
    // that outlives every write (the stream is drained before it is freed).
    unsafe {
        let mut event = ptr::null_mut();
        check(
            aclrtCreateEventExWithFlag(&mut event, 0),
            "aclrtCreateEventExWithFlag",
        );
        check(aclrtRecordEvent(event, stream), "aclrtRecordEvent");
        check(aclrtSynchronizeEvent(event), "aclrtSynchronizeEvent");
        let mut word = ptr::null_mut::<c_void>();
        check(aclrtMalloc(&mut word, 8, 0), "aclrtMalloc");

        let (mut queries, mut submits, mut writes) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..ROUNDS {
            let start = Instant::now();
            for _ in 0..BATCH {
                let mut status: aclrtEventRecordedStatus = 0;
                check(
                    aclrtQueryEventStatus(event, &mut status),
                    "aclrtQueryEventStatus",
                );
                black_box(status);
            }
            queries.push(start.elapsed() / BATCH);

            let start = Instant::now();
            for value in 0..u64::from(BATCH) {
                let value = round as u64 * u64::from(BATCH) + value;
                check(aclrtValueWrite(word, value, 0, stream), "aclrtValueWrite");
            }
            submits.push(start.elapsed() / BATCH);
            check(aclrtSynchronizeStream(stream), "aclrtSynchronizeStream");
            writes.push(start.elapsed() / BATCH);
        }
        check(aclrtFree(word), "aclrtFree");
        check(aclrtDestroyEvent(event), "aclrtDestroyEvent");
        let query = percentile(&mut queries, 0.5);
        let submit = percentile(&mut submits, 0.5);
        let write = percentile(&mut writes, 0.5);
        table.push(
            SECTION,
            "aclrtQueryEventStatus of a completed event, per call, median",
            format!("{:.3} µs", micros(query)),
            format!("{ROUNDS} rounds of {BATCH}"),
        );
        table.push(
            SECTION,
            "aclrtValueWrite of a completion word: submit / submit + run, per call, median",
            format!("{:.3} / {:.3} µs", micros(submit), micros(write)),
            format!(
                "one write costs {:.1} queries; the reactor's queries per completion are below",
                write.as_secs_f64() / query.as_secs_f64()
            ),
        );
    }
}

/// 64 MiB pinned-host → device copies on a stream (timing model off) against a plain
/// `memcpy` between the same two buffers, interleaved round by round so both see the same
/// memory system state. A round is one copy queued and synchronised on the stream against one
/// memcpy. Throughput is taken from the best round of each (the least disturbed by the rest of the
/// machine); medians are shown alongside.
///
/// # Safety
/// `stream` must be a live stream of the current context.
unsafe fn copy_throughput(table: &mut Table, stream: aclrtStream) {
    const ROUNDS: usize = 41;
    // SAFETY: buffers of COPY_BYTES each; every copy is synchronised before the next one.
    unsafe {
        let (mut host, mut dev) = (ptr::null_mut::<c_void>(), ptr::null_mut::<c_void>());
        check(aclrtMallocHost(&mut host, COPY_BYTES), "aclrtMallocHost");
        check(aclrtMalloc(&mut dev, COPY_BYTES, 0), "aclrtMalloc");
        // Touch every page first, so no round pays for page faults.
        host.cast::<u8>().write_bytes(0x5a, COPY_BYTES);
        dev.cast::<u8>().write_bytes(0, COPY_BYTES);

        let (mut sim_samples, mut memcpy_samples) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let start = Instant::now();
            check(
                aclrtMemcpyAsync(
                    dev,
                    COPY_BYTES,
                    host,
                    COPY_BYTES,
                    ACL_MEMCPY_HOST_TO_DEVICE,
                    stream,
                ),
                "aclrtMemcpyAsync",
            );
            check(aclrtSynchronizeStream(stream), "aclrtSynchronizeStream");
            sim_samples.push(start.elapsed());

            let start = Instant::now();
            ptr::copy_nonoverlapping(host.cast::<u8>(), dev.cast::<u8>(), COPY_BYTES);
            black_box(dev);
            memcpy_samples.push(start.elapsed());
        }
        let gib = |d: Duration| COPY_BYTES as f64 / d.as_secs_f64() / f64::from(1u32 << 30);
        let best = |samples: &[Duration]| samples.iter().copied().min().unwrap_or_default();
        let (sim_best, memcpy_best) = (gib(best(&sim_samples)), gib(best(&memcpy_samples)));
        let (sim_median, memcpy_median) = (
            gib(percentile(&mut sim_samples, 0.5)),
            gib(percentile(&mut memcpy_samples, 0.5)),
        );
        table.push(
            SECTION,
            "64 MiB H2D copy on a stream (timing off), best",
            format!("{sim_best:.2} GiB/s"),
            format!("median {sim_median:.2} GiB/s, {ROUNDS} rounds"),
        );
        table.push(
            SECTION,
            "64 MiB plain memcpy, same buffers, best",
            format!("{memcpy_best:.2} GiB/s"),
            format!("median {memcpy_median:.2} GiB/s, {ROUNDS} rounds"),
        );
        table.push(
            SECTION,
            "H2D copy / memcpy throughput ratio (best rounds)",
            format!("{:.3}", sim_best / memcpy_best),
            format!(
                "target ≥ 0.9; medians give {:.3}",
                sim_median / memcpy_median
            ),
        );
        check(aclrtFree(dev), "aclrtFree");
        check(aclrtFreeHost(host), "aclrtFreeHost");
    }
}

//! The timeline trace: Chrome/Perfetto JSON with one track per stream, on the simulated clock.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::ptr;

use common::*;
use npu_sim::abi::*;
use npu_sim::kernel::{self, VectorAddArgs};
use npu_sim::{TimingModel, control};
use serde_json::Value;

#[test]
fn the_trace_has_one_track_per_stream_with_named_sized_tasks() {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("npu-sim-trace-test.json");
    npu_sim::trace::enable(&path);
    control::set_timing(
        0,
        Some(
            TimingModel::default()
                .h2d_bandwidth(1 << 30)
                .d2d_bandwidth(1 << 30),
        ),
    )
    .unwrap();
    set_device(0);
    let streams = [create_stream(), create_stream(), create_stream()];
    let (dev, host) = (malloc(1 << 20), malloc_host(1 << 20));
    let add = function(registry_binary(&[]), kernel::VECTOR_ADD_F32);
    control::hold(0).unwrap();
    for &stream in &streams {
        h2d_async(dev, host, 1 << 20, stream);
        acl!(aclrtMemsetAsync(dev, 4096, 0, 4096, stream));
        let args = VectorAddArgs {
            a: 0,
            b: 0,
            c: 0,
            n: 0,
        };
        assert_eq!(launch(add, 2, stream, &args, ptr::null_mut()), 0);
    }
    let mut step = *b"step-1";
    acl!(aclrtProfTrace(step.as_mut_ptr().cast(), 6, streams[0]));
    control::release(0).unwrap();
    for &stream in &streams {
        acl!(aclrtSynchronizeStream(stream));
    }
    assert_eq!(
        npu_sim::trace::flush().unwrap().as_deref(),
        Some(path.as_path())
    );

    let json: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let events = json["traceEvents"].as_array().unwrap();
    let tasks: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    let mut per_track: BTreeMap<(i64, i64), Vec<&Value>> = BTreeMap::new();
    for task in &tasks {
        per_track
            .entry((task["pid"].as_i64().unwrap(), task["tid"].as_i64().unwrap()))
            .or_default()
            .push(task);
    }
    let ids: BTreeSet<i64> = streams
        .iter()
        .map(|&s| {
            let mut id = 0;
            acl!(aclrtStreamGetId(s, &mut id));
            i64::from(id)
        })
        .collect();
    assert_eq!(
        per_track
            .keys()
            .map(|&(_, tid)| tid)
            .collect::<BTreeSet<_>>(),
        ids,
        "one track per stream"
    );
    assert!(
        per_track.keys().all(|&(pid, _)| pid == 0),
        "pid is the device"
    );
    for track in per_track.values() {
        let names: Vec<&str> = track.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["H2D", "memset", "vector_add_f32"]);
        assert_eq!(track[0]["args"]["bytes"], 1 << 20);
        assert_eq!(track[0]["cat"], "copy");
        // 1 MiB at 1 GiB/s: 976562 ns, and the memset starts where the copy ended (times are
        // whole ns printed as µs, so compare in ns).
        let ns = |v: &Value| (v.as_f64().unwrap() * 1000.0).round() as u64;
        assert_eq!(ns(&track[0]["dur"]), 976_562);
        assert_eq!(
            ns(&track[1]["ts"]),
            ns(&track[0]["ts"]) + ns(&track[0]["dur"])
        );
    }
    // The profiling marker: an instant on its stream's track, its bytes zero-padded to 18.
    let markers: Vec<&Value> = events.iter().filter(|e| e["cat"] == "profiling").collect();
    assert_eq!(markers.len(), 1, "{markers:?}");
    assert_eq!(markers[0]["ph"], "i");
    assert_eq!(
        markers[0]["name"],
        format!("prof trace {}{}", "737465702d31", "00".repeat(12))
    );
    let mut first = 0;
    acl!(aclrtStreamGetId(streams[0], &mut first));
    assert_eq!(markers[0]["tid"], i64::from(first));
    // The three streams were released at one instant: their first tasks start together.
    let starts: BTreeSet<u64> = per_track
        .values()
        .map(|t| t[0]["ts"].as_f64().unwrap().to_bits())
        .collect();
    assert_eq!(starts.len(), 1);
    let named_tracks = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .count();
    assert_eq!(named_tracks, streams.len());

    // npusimTraceEnable takes its path as the bytes it is: a Linux path need not be UTF-8
    // (refused with 107000 before).
    use std::os::unix::ffi::OsStrExt;
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(std::ffi::OsStr::from_bytes(b"npu-sim-trace-\xff-not-utf8"));
    std::fs::create_dir_all(&dir).unwrap();
    let bytes_path = dir.join("trace.json");
    let c_path = std::ffi::CString::new(bytes_path.as_os_str().as_bytes()).unwrap();
    acl!(npusimTraceEnable(c_path.as_ptr()));
    assert_eq!(
        npu_sim::trace::flush().unwrap().as_deref(),
        Some(bytes_path.as_path())
    );
    npu_sim::trace::disable();
    assert!(
        bytes_path.is_file(),
        "the trace was written under the non-UTF-8 path"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

//! The trace file against the trace-event format: the fields each phase requires, flow
//! arrows that pair a record with its waits, and one named track per stream.
//!
//! A file of its own: the trace is process-wide, so no other test may add to it.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use npu_sim::abi::*;
use serde_json::Value;

/// The fields every event of phase `ph` must carry, in the trace-event format.
fn required_fields(ph: &str) -> &'static [&'static str] {
    match ph {
        "X" => &["name", "cat", "ph", "ts", "dur", "pid", "tid"],
        "i" => &["name", "cat", "ph", "ts", "pid", "tid", "s"],
        "s" => &["name", "cat", "ph", "id", "ts", "pid", "tid"],
        "f" => &["name", "cat", "ph", "id", "ts", "pid", "tid", "bp"],
        "M" => &["name", "ph", "pid", "args"],
        other => panic!("unexpected phase {other:?}"),
    }
}

fn stream_id(stream: aclrtStream) -> i64 {
    let mut id = 0;
    acl!(aclrtStreamGetId(stream, &mut id));
    i64::from(id)
}

#[test]
fn records_and_waits_are_instants_linked_by_flows_on_one_track_per_stream() {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("npu-sim-trace-format.json");
    let guard = npu_sim::trace::Guard::start(&path);
    set_device(0);
    let [producer, first, second] = [create_stream(), create_stream(), create_stream()];
    let dev = malloc(4096);
    let event = create_event();
    acl!(aclrtMemsetAsync(dev, 4096, 1, 4096, producer));
    acl!(aclrtRecordEvent(event, producer));
    for stream in [first, second] {
        acl!(aclrtStreamWaitEvent(stream, event));
        acl!(aclrtMemsetAsync(dev, 64, 2, 64, stream));
    }
    for stream in [producer, first, second] {
        acl!(aclrtSynchronizeStream(stream));
    }
    assert_eq!(guard.finish().unwrap().as_deref(), Some(path.as_path()));

    let json: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let events = json["traceEvents"].as_array().unwrap();
    for event in events {
        let ph = event["ph"].as_str().expect("every event has a phase");
        for field in required_fields(ph) {
            assert!(
                !event[field].is_null(),
                "{ph} event without {field}: {event}"
            );
        }
        if ph == "i" {
            assert_eq!(
                event["s"], "t",
                "instants are scoped to their stream's track"
            );
        }
        if ph == "X" {
            assert!(event["dur"].as_f64().unwrap() >= 0.0, "{event}");
        }
    }

    // Records and waits are instants, never zero-length slices.
    let by_phase = |ph: &str, name: &str| -> Vec<&Value> {
        let matches = |e: &&Value| e["ph"] == ph && e["name"] == name;
        events.iter().filter(matches).collect()
    };
    assert_eq!(by_phase("i", "record").len(), 1);
    assert_eq!(by_phase("i", "wait").len(), 2);
    assert!(by_phase("X", "record").is_empty() && by_phase("X", "wait").is_empty());

    // One flow per record, starting on its stream and ending on each waiting stream, never
    // before it starts.
    let starts: BTreeMap<&str, &Value> = events
        .iter()
        .filter(|e| e["ph"] == "s")
        .map(|e| (e["id"].as_str().unwrap(), e))
        .collect();
    let ends: Vec<&Value> = events.iter().filter(|e| e["ph"] == "f").collect();
    let ended: BTreeSet<&str> = ends.iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert!(
        starts.keys().all(|id| ended.contains(id)),
        "every flow that starts ends"
    );
    assert_eq!((starts.len(), ends.len()), (1, 2));
    for end in &ends {
        let start = starts[end["id"].as_str().unwrap()];
        assert_eq!(start["tid"].as_i64(), Some(stream_id(producer)));
        assert!(
            end["ts"].as_f64() >= start["ts"].as_f64(),
            "{start} -> {end}"
        );
    }
    let waiting: BTreeSet<i64> = ends.iter().map(|e| e["tid"].as_i64().unwrap()).collect();
    assert_eq!(
        waiting,
        BTreeSet::from([stream_id(first), stream_id(second)])
    );

    // Every event of a stream is on that stream's track, and each track is named once.
    let streams: BTreeSet<i64> = [producer, first, second].map(stream_id).into();
    let tracks: BTreeSet<i64> = events
        .iter()
        .filter(|e| e["ph"] != "M")
        .map(|e| e["tid"].as_i64().unwrap())
        .collect();
    assert_eq!(tracks, streams);
    let named: Vec<i64> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| e["tid"].as_i64().unwrap())
        .collect();
    assert_eq!(named.iter().copied().collect::<BTreeSet<_>>(), streams);
    assert_eq!(named.len(), streams.len(), "one name per track");
}

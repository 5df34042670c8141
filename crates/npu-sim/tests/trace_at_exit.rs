//! `NPU_TRACE` alone writes the trace when the program ends normally, with no flush.
//!
//! The parent test runs this test binary again, with `NPU_TRACE` set, for its other test only.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use common::*;
use npu_sim::abi::*;

/// Runs one memset and returns; in the child, the exit hook then writes the trace.
#[test]
fn one_memset() {
    set_device(0);
    let stream = create_stream();
    let dev = malloc(256);
    acl!(aclrtMemsetAsync(dev, 256, 7, 256, stream));
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(download::<u8>(dev, 256), [7; 256]);
}

#[test]
fn npu_trace_writes_its_file_at_exit() {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("npu-sim-trace-at-exit.json");
    std::fs::remove_file(&path).ok();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "one_memset", "--test-threads=1"])
        .env(npu_sim::trace::TRACE_ENV, &path)
        .status()
        .unwrap();
    assert!(status.success());
    let text = std::fs::read_to_string(&path).expect("the child wrote the trace at exit");
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let events = json["traceEvents"].as_array().unwrap();
    assert!(
        events
            .iter()
            .any(|e| e["ph"] == "X" && e["cat"] == "memset"),
        "{text}"
    );
}

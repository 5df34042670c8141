//! C programs compiled at test time against npu-sim's headers and linked to its
//! libascendcl.so; their output is compared byte for byte.

extern crate ascendcl as npu_sim;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The directory holding this test binary and libascendcl.so (target/<profile>/deps).
fn deps_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().to_owned()
}

fn include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("include")
}

/// The include directories, searched in order. With `NPU_SIM_TEST_HEADERS` set to a CANN
/// install's `include` directory, the programs compile against CANN's own ACL headers (ours
/// only supply what CANN has no header for: the simulator's controls and kernel ABI), so what
/// they print checks that our library's ABI is the one CANN's headers describe.
fn include_dirs() -> Vec<PathBuf> {
    let cann = std::env::var_os("NPU_SIM_TEST_HEADERS").map(PathBuf::from);
    cann.into_iter().chain([include_dir()]).collect()
}

/// The language a test program is compiled as.
#[derive(Clone, Copy)]
enum Lang {
    C,
    Cxx,
}

/// Compiles `tests/c/<name>.c` as C into an executable linked to the simulator's cdylib.
fn compile(name: &str, extra: &[&str]) -> PathBuf {
    compile_as(name, Lang::C, extra)
}

/// Compiles `tests/c/<name>.c` as `lang` into an executable linked to the simulator's cdylib.
fn compile_as(name: &str, lang: Lang, extra: &[&str]) -> PathBuf {
    let deps = deps_dir();
    assert!(
        deps.join("libascendcl.so").exists(),
        "libascendcl.so not found in {}",
        deps.display()
    );
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/c")
        .join(format!("{name}.c"));
    // Tests run in parallel and may build the same program: each build gets its own file.
    static BUILDS: AtomicUsize = AtomicUsize::new(0);
    let build = BUILDS.fetch_add(1, Ordering::Relaxed);
    let out = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("npu-sim-{name}-{}-{build}", std::process::id()));
    let compiler = cc::Build::new()
        .cpp(matches!(lang, Lang::Cxx))
        .target(env!("NPU_SIM_TARGET"))
        .host(env!("NPU_SIM_TARGET"))
        .opt_level(1)
        .cargo_metadata(false)
        .get_compiler();
    let output = Command::new(compiler.path())
        .args(compiler.args())
        .args(match lang {
            Lang::C => ["-std=c11"].as_slice(),
            Lang::Cxx => ["-x", "c++", "-std=c++11"].as_slice(),
        })
        .args(["-Wall", "-Wextra", "-Werror"])
        .args(extra)
        .args(
            include_dirs()
                .iter()
                .flat_map(|dir| ["-I".as_ref(), dir.as_os_str()]),
        )
        .arg(&source)
        .arg("-o")
        .arg(&out)
        .arg("-L")
        .arg(&deps)
        .arg(format!("-Wl,-rpath,{}", deps.display()))
        .arg("-lascendcl")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "compiling {} failed:\n{}",
        source.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    out
}

/// Runs a compiled program with a clean simulator environment (no NPU_SIM_CONFIG, NPU_TRACE or
/// CANN log variables) plus `env`; returns its stdout.
fn run_with(program: &Path, env: &[(&str, &Path)]) -> String {
    let mut command = Command::new(program);
    // cargo puts target/<profile> on the library path too, where a stale copy of the cdylib
    // (uplifted by an earlier `cargo build -p npu-sim`) would shadow the rpath to this build's.
    command
        .env_remove("NPU_SIM_CONFIG")
        .env_remove("NPU_TRACE")
        .env_remove("ASCEND_SLOG_PRINT_TO_STDOUT")
        .env_remove("ASCEND_GLOBAL_LOG_LEVEL")
        .env("LD_LIBRARY_PATH", deps_dir());
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output().unwrap();
    // Every build has its own file (see `compile`); do not let them pile up.
    let _ = std::fs::remove_file(program);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{} exited with {}:\n{stdout}{}",
        program.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

fn run(program: &Path) -> String {
    run_with(program, &[])
}

fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf29ce484222325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x100000001b3)
    })
}

#[test]
fn typical_flow_runs_byte_for_byte() {
    const BYTES: usize = 1 << 20;
    let expected: Vec<u8> = (0..BYTES)
        .map(|i| if i < 4096 { 0xAB } else { (i * 7 + 3) as u8 })
        .collect();
    let stdout = run(&compile("typical_flow", &[]));
    assert_eq!(
        stdout,
        format!(
            "event status after sync: 1\nbytes: {BYTES}, mismatches: 0\nfnv1a: {:016x}\ntypical flow ok\n",
            fnv1a(&expected)
        )
    );
}

#[test]
fn two_device_peer_copy_flow() {
    let stdout = run(&compile("peer_copy", &[]));
    assert_eq!(
        stdout,
        "can access peer: 0->1 1, 1->0 1\n\
         device 1 after copy from device 0: 0 bytes differ from 103\n\
         device 0 after copy from device 1: 0 bytes differ from 42\n\
         copy after disabling peer access: 207006\n\
         peer copy ok\n"
    );
}

#[test]
fn kernels_load_from_the_shipped_shared_object_in_c() {
    let stdout = run(&compile("kernel_flow", &[]));
    assert_eq!(
        stdout,
        "live allocations: 3\nvector_add_f32 over 10000 elements in 8 blocks: 0 wrong\nkernel flow ok\n"
    );
}

/// `tests/c/kernel_fault_flow.c`: npusimFailKernel counts a kernel's launches across streams
/// and at each execution of a captured instance (a PERSISTENT stream's kept launches do not
/// count, for its own npusimFailTask faults either), and npusimClearFaults disarms what has not
/// fired (npusimFailTask's faults too).
#[test]
fn kernel_faults_fire_on_any_stream_and_clear_in_c() {
    let stdout = run(&compile("kernel_fault_flow", &[]));
    assert_eq!(
        stdout,
        "refused: NULL name 100000, empty name 100000, nth 0 100000, success 100000, a wait's \
         code 100000, device 99 107001, clearing device 99 107001\n\
         nothing armed by the refusals: 0\n\
         first scale_f32 0, vector_add_f32 0\n\
         second scale_f32, on the other stream: 507015\n\
         executions: 0, then 507015\n\
         after a kept launch, the next one: 507015\n\
         a PERSISTENT stream's fault, after a kept launch: 1 armed\n\
         cleared 3, then scale_f32 0, cleared again (NULL count) 0\n\
         left armed: 0\n\
         kernel fault flow ok\n"
    );
}

#[test]
fn kernels_load_through_the_older_binary_path_in_c() {
    let stdout = run(&compile("binary_flow", &[]));
    assert_eq!(
        stdout,
        "function scale_f32 of its binary 1, one entry for both engines 1\n\
         arguments in device memory: 1\n\
         scale_f32 over 4096 elements in 4 blocks: 0 wrong, 0 exceptions\n\
         4 parameters at 0 8 16 20\n\
         scaled again from an array of parameters: 0 wrong\n\
         by entry: 207000\n\
         binary flow ok\n"
    );
}

/// aclrtBinaryLoadFromFile's path names a file relative to the current directory, as the
/// existence check reads it: a bare name is not searched for on the library path.
#[test]
fn a_relative_binary_path_is_the_file_in_the_current_directory() {
    let stdout = run(&compile("relative_load", &[]));
    assert_eq!(
        stdout,
        "kernel library by its bare name: loaded\n\
         a text file named libc.so.6: 100003\n\
         relative load ok\n"
    );
}

#[test]
fn descriptor_offset_batch_and_cache_functions_in_c() {
    let stdout = run(&compile("copy_flow", &[]));
    assert_eq!(
        stdout,
        "descriptor and offset copies: match\n\
         managed: read mostly 1, preferred location 0\n\
         copy flow ok\n"
    );
}

#[test]
fn the_stream_group_flow_in_c() {
    let stdout = run(&compile("stream_flow", &[]));
    assert_eq!(
        stdout,
        "stream configuration handle: not supported\n\
         kernel output read at once: 0 wrong\n\
         s2 waiting for the notify: yes\n\
         after the notify: 2\n\
         after the value write: 4\n\
         timed wait: 107019\n\
         sync after stop: 507000\n\
         event of the aborted work: 107023\n\
         after abort: 6\n\
         after destroy force: 7\n\
         trap: sync 507015, callback saw stream s1 with 507015\n\
         error verbose type: 65535\n\
         stream flow ok\n"
    );
}

/// The call orders of tests/attack_abi.rs that hung before, as a C program sees them: each
/// comes back with 207000 (the program ends itself with alarm() should one hang).
#[test]
fn callback_misuse_returns_codes_in_c() {
    let stdout = run(&compile("callback_misuse", &["-pthread"]));
    assert_eq!(
        stdout,
        "sync before processing the callback: 207000\n\
         a host function synchronizing its own stream: 207000\n\
         callback misuse ok\n"
    );
}

/// The flows CANN's runtime samples are made of, compiled as a sample is (against the ACL
/// headers, with pthreads): aclInit with an empty acl.json, device and memory queries, a
/// callback thread looping on aclrtProcessReport, worker threads sharing a context, timed
/// events, and a teardown that resets the device before destroying its stream and finalizes
/// with a context alive.
#[test]
fn the_runtime_samples_flows_in_c() {
    let stdout = run(&compile("sample_flows", &["-pthread"]));
    assert_eq!(
        stdout,
        "aclInit(white space only): 100006\n\
         run mode is ACL_HOST: 1\n\
         devices: 2\n\
         soc name set: 1\n\
         memory: free <= total 1, an allocation takes at least its size 1\n\
         second subscription of the stream: 107011\n\
         callbacks run: 4\n\
         callback after unsubscribing: 107015\n\
         callback thread set the context: 0\n\
         worker 0: error 0, mismatches 0\n\
         worker 1: error 0, mismatches 0\n\
         elapsed time before any record: 507000\n\
         end complete 1, host functions run 1, elapsed >= 0 1, timestamps ordered 1\n\
         destroy a stream of the reset device: 107017\n\
         reset the device again: 507007\n\
         second aclFinalize: 100037\n\
         sample flows ok\n"
    );
}

/// A sample's flow on every device at once, a thread per device: each device's copies,
/// memset and BLOCK callback (on a report thread of that device's own) give the bytes expected;
/// device 0 copies device 1's results once peer access is on (207006 before), waits for its
/// event and synchronises its stream from its own context but queues nothing on it (107003);
/// under `"err_msg_mode": "1"` the main thread reads both device threads' messages once, while
/// each last error stays its thread's; the teardown in the samples' order succeeds.
#[test]
fn a_sample_on_every_device_with_a_thread_each_in_c() {
    let stdout = run(&compile("sample_devices", &["-pthread"]));
    assert_eq!(
        stdout,
        "device 0: 0 wrong bytes, callbacks on its report thread 1, elsewhere 0\n\
         device 1: 0 wrong bytes, callbacks on its report thread 1, elsewhere 0\n\
         device 1's results on device 0: 0 wrong bytes\n\
         refused copies read from the main thread: 2\n\
         23 sample checks checked, 0 wrong\n"
    );
}

/// An inference server's threads, as a CANN application writes them: request threads sharing
/// one explicit context, each with its own stream; one report thread looping on
/// aclrtProcessReport for every stream's BLOCK callbacks; pinned buffers moved by
/// aclrtMemcpy2dAsync host to device, device to device and device to host; weights uploaded once
/// on a loader stream that every request stream waits for through an event; the device's free
/// memory the same before and after.
#[test]
fn serving_threads_share_a_context_a_report_thread_and_the_weights_in_c() {
    let stdout = run(&compile("serving_threads", &["-pthread"]));
    assert_eq!(
        stdout,
        "requests: weights seen after the upload 3/3, rounds right 12/12, timed 12/12\n\
         callbacks on the report thread: 15, elsewhere: 0, unexpected report codes: 0\n\
         13 serving checks checked, 0 wrong\n"
    );
}

/// Timed waits and host memory across threads: syncs of a stream held by a host function, of a
/// stream waiting on its event and of the event time out with their codes and a message on the
/// calling thread only, then succeed once the stream goes on, while another thread waits with
/// no timeout; asynchronous copies from aclrtMallocHost and aclrtHostRegister memory return
/// while their stream is held and read the buffer when they run.
#[test]
fn timed_waits_and_host_memory_across_threads_in_c() {
    let stdout = run(&compile("timeouts_threads", &["-pthread"]));
    assert_eq!(
        stdout,
        "watcher: named the call, its unread message not seen here\n\
         consumer read the producer's memset: 4096/4096 bytes; copies read at run time: pinned \
         4096/4096, registered 4096/4096\n\
         30 timeout checks checked, 0 wrong\n"
    );
}

/// aclrtResetDevice while other threads hold streams: resets that only drop a reference leave
/// every stream working; the last one releases the default context and waits for its stream's
/// held work (opened only once RESET_PRE announced the reset), whose stream is gone afterwards;
/// an explicit context of the device is untouched throughout.
#[test]
fn resets_while_other_threads_hold_streams_in_c() {
    let stdout = run(&compile("reset_threads", &["-pthread"]));
    assert_eq!(
        stdout,
        "the reset waited for the held work: 1\n\
         fills read back: shared 1, last 1, explicit context 3\n\
         29 reset checks checked, 0 wrong\n"
    );
}

/// Cancelling requests of a serving process across threads: aclrtStreamAbort of one request
/// stream, then aclrtDeviceTaskAbort of every one, while watcher threads wait on their
/// completion records with no timeout and a report thread serves their BLOCK callbacks. The
/// watchers get ACL_ERROR_RT_STREAM_ABORT, no dropped callback runs, every stream serves the
/// next request, the upstream stream is untouched, and a synchronous copy made from the device
/// task abort's PRE callback is refused with ACL_ERROR_RT_DEVICE_TASK_ABORT.
#[test]
fn cancelling_requests_across_threads_in_c() {
    let stdout = run(&compile("cancel_threads", &["-pthread"]));
    assert_eq!(
        stdout,
        "stream abort: the request served next 1, the upstream stream ran on\n\
         device task abort: PRE 1, POST 1, watchers ended by the abort 2/2, requests served next \
         2/2\n\
         callbacks: dropped ones run 0, served ones run 3\n\
         16 cancellation checks checked, 0 wrong\n"
    );
}

/// Calls that wait for a whole context or device (its synchronisation, a free or pool
/// destruction with device sync, the context's destruction or the device's reset, a device
/// task abort), made from a host function, a blocking callback or the report thread a blocking
/// callback waits for, would wait for the caller itself: each comes back with 207000 at once,
/// even when another stream waits for an event recorded behind the host task, and leaves the
/// memory, pool and context as they were (the program ends itself with alarm() should one hang).
#[test]
fn host_tasks_tearing_down_their_context_get_codes_in_c() {
    let stdout = run(&compile("host_task_teardown", &["-pthread"]));
    let mut expected = String::new();
    for how in [
        "a host function",
        "a blocking callback",
        "the report thread",
    ] {
        for call in [
            "aclrtSynchronizeDevice",
            "aclrtSynchronizeDeviceWithTimeout",
            "aclrtFreeWithDevSync",
            "aclrtFreeHostWithDevSync",
            "aclrtMemPoolDestroy",
            "aclrtDestroyContext",
            "aclrtResetDeviceForce",
        ] {
            expected += &format!("{call} from {how}: 207000\n");
        }
    }
    expected += "aclrtDeviceTaskAbort from a host function: 207000\n\
                 aclrtDeviceTaskAbort from a blocking callback: 207000\n\
                 host task teardown ok\n";
    assert_eq!(stdout, expected);
}

/// A stream state callback calling the runtime back as a default stream is created (the
/// current device and context, an allocation, setting the device being created) is answered,
/// on aclrtSetDevice of a thread still bound to the device and on aclrtCreateContext: the
/// callback ran under the device's lock, which those calls take, and waited for itself. The
/// nested line is the primary context of device 1 that the callback's own aclrtSetDevice(1)
/// creates from inside aclrtCreateContext's callback.
#[test]
fn stream_state_callbacks_may_call_the_runtime_in_c() {
    let stdout = run(&compile("state_callback_calls", &[]));
    assert_eq!(
        stdout,
        "created: device 0 (0), context set (0), malloc 0, set 0\n\
         created: device 1 (0), context set (0), malloc 0, set 0\n\
         created: device 1 (0), context set (0), malloc 0, set 0\n\
         state callback calls ok\n"
    );
}

/// An init callback calling AscendCL back from inside aclInit: the dump functions work, aclInit
/// (not counted) and the finalisations are refused; they all waited for the lock aclInit holds
/// while it runs its callbacks, for ever.
#[test]
fn init_callbacks_may_call_acl_back_in_c() {
    let stdout = run(&compile("init_callback_calls", &[]));
    assert_eq!(
        stdout,
        "inside aclInit: dump 0/0, aclInit 100002, aclFinalize 100037, \
         aclFinalizeReference 100037 (99)\n\
         references left: 0\n\
         init callback calls ok\n"
    );
}

/// Runtime calls from a pthread key's destructor, after the thread's own thread-local storage
/// is gone, return their codes: aclGetRecentErrMsg aborted the process (a panic in a function
/// that cannot unwind), and a submission returned 507000 for a task it had queued.
#[test]
fn calls_at_thread_exit_return_their_codes_in_c() {
    let stdout = run(&compile("thread_exit_calls", &["-pthread"]));
    assert_eq!(
        stdout,
        "at thread exit: memset 0, sync 0, refused 100000, last error 100000\n\
         the memset at thread exit ran: yes\n\
         thread exit calls ok\n"
    );
}

#[test]
fn the_device_recovery_flow_in_c() {
    let stdout = run(&compile("recovery_flow", &[]));
    assert_eq!(
        stdout,
        "task on the bad memory: 507053\n\
         error type 1, try repair 1, detail 1, ranges 1, offset 1024, len 1024\n\
         abort callbacks: pre 1, post 1\n\
         ranges left after repair: 0\n\
         bytes: first 11, repaired 00, last 11\n\
         after recovery: 44\n\
         recovery flow ok\n"
    );
}

#[test]
fn data_buffers_and_persistent_streams_in_c() {
    let stdout = run(&compile("data_buffer_flow", &[]));
    assert_eq!(
        stdout,
        "through the buffer: 256 bytes of 5a\n\
         emptied: NULL, 0\n\
         destroy again: 107017\n\
         task id after clean: 1\n\
         counted notify: 207000\n\
         group count: 207000, group info: NULL\n\
         shared buffer: 207000, NULL\n\
         memory link of no handle: 100000\n\
         L2 cache flush: 0\n\
         data buffer flow ok\n"
    );
}

#[test]
fn device_globals_of_a_kernel_library_in_c() {
    let library = compile("global_kernels", &["-shared", "-fPIC"]);
    let stdout = run_with(
        &compile("global_flow", &[]),
        &[("NPUSIM_GLOBALS_SO", &library)],
    );
    let _ = std::fs::remove_file(&library);
    assert_eq!(
        stdout,
        "global bias: 16 bytes (size alone: 16)\n\
         unknown global: 107042\n\
         add_bias over 16 elements: 0 wrong\n\
         after a memset of the global: 0 0\n\
         global after unload: 107000\n\
         global flow ok\n"
    );
}

#[test]
fn device_variables_by_symbol_in_c() {
    let library = compile("global_kernels", &["-shared", "-fPIC"]);
    let linked = format!("-Wl,--no-as-needed,{}", library.display());
    let stdout = run_with(
        &compile("symbol_flow", &[&linked]),
        &[("NPUSIM_GLOBALS_SO", &library)],
    );
    let _ = std::fs::remove_file(&library);
    assert_eq!(
        stdout,
        "before the binary is loaded: 107043\n\
         symbol: 16 bytes, the binary's global: same\n\
         kernel by symbol: the binary's function\n\
         read at offset 8: 7 8; the variable holds 8\n\
         async round trip: 9\n\
         past the end: 100000\n\
         wrong kind: 100000\n\
         not a device variable: 107043\n\
         symbol flow ok\n"
    );
}

#[test]
fn the_cxx_conveniences_of_acl_rt_api_h() {
    let library = compile("global_kernels", &["-shared", "-fPIC"]);
    let linked = format!("-Wl,--no-as-needed,{}", library.display());
    let stdout = run_with(
        &compile_as("rt_api_flow", Lang::Cxx, &["-pedantic", &linked]),
        &[("NPUSIM_GLOBALS_SO", &library)],
    );
    let _ = std::fs::remove_file(&library);
    assert_eq!(
        stdout,
        "typed copy: 0 1.5 3 4.5\n\
         2d: 0 1.5 3 4.5\n\
         batch, one attribute: 3 4.5 0 1.5\n\
         async batch, failIndex left at SIZE_MAX: 1\n\
         device pointer: location type 1\n\
         execute timeout 1 s takes effect as 4294967 us\n\
         registered host memory maps to a device pointer: 1\n\
         symbol of 16 bytes at the variable: 1, last element 8\n\
         rt api flow ok\n"
    );
}

#[test]
fn the_cxx_conveniences_for_managed_registered_and_device_variable_memory() {
    // Chapter 26's overloads rt_api_flow.c leaves out: typed managed memory and its prefetches
    // (a range, a batch with one location, a batch with a location per range), registration
    // with flags, and the asynchronous copies to and from a device variable.
    let library = compile("global_kernels", &["-shared", "-fPIC"]);
    let linked = format!("-Wl,--no-as-needed,{}", library.display());
    let stdout = run_with(
        &compile_as("rt_api_managed", Lang::Cxx, &["-pedantic", &linked]),
        &[("NPUSIM_GLOBALS_SO", &library)],
    );
    let _ = std::fs::remove_file(&library);
    assert_eq!(
        stdout,
        "managed: 10 13 0x7f7f7f7f\n\
         prefetch with flags 1: 100000\n\
         registered with flags: mapped 1, the device wrote 5\n\
         symbol, asynchronously: 3 4\n\
         from the symbol with kind HOST_TO_DEVICE: 100000\n\
         rt api managed flow ok\n"
    );
}

#[test]
fn headers_compile_warning_free_and_errors_are_reported_once() {
    let stdout = run(&compile("header_check", &["-pedantic"]));
    assert_eq!(
        stdout,
        "soc Ascend910B3, mode 1, devices 2\n\
         error 100000, peek 100000, last 100000, message set, then 0, NULL\n\
         page type 2, memory type 3, mapping 1 0 0 13, 20 addresses per device\n"
    );
}

/// The documented error paths of the device, context, stream, event, notify, memory, execution
/// control and exception functions, as a CANN program sees them: each returns the code CANN's
/// headers name (with `NPU_SIM_TEST_HEADERS`, the macros are CANN's own), and a failed call
/// leaves its outputs as they were; the ACL layer's NULL checks come before handles are looked
/// up and features refused, and parameters are checked in order. The program prints a line
/// for each mismatch.
#[test]
fn documented_error_paths_return_cann_codes_in_c() {
    let stdout = run(&compile("error_paths", &[]));
    assert_eq!(stdout, "114 error paths checked, 0 wrong\n");
}

/// The runtime samples' flows (devices, contexts, streams, events, copies, host memory,
/// callbacks) through the edge cases the API reference documents for them: the Set/Reset
/// pairing rules, stream and event limits, timeouts of -1, 0 and expiring ones (each held up
/// by a gate the program opens, so nothing depends on timing), the event flag rules, copy
/// kinds, 2D pitches that overflow or end the allocation, batch attribute indexes, host
/// registration and the callback subscription rules. The program prints a line for each
/// mismatch.
#[test]
fn the_samples_documented_edge_cases_in_c() {
    let stdout = run(&compile("sample_edges", &["-pthread"]));
    assert_eq!(stdout, "224 documented edges checked, 0 wrong\n");
}

/// `tests/c/memory_chapter_edges.c`: the virtual memory, stream-ordered pool, stream memory
/// operation, notify and pointer attribute chapters' flows and documented edge cases (a copy
/// across two adjoining mappings, only READWRITE access, one export per handle, a pool's
/// read-only counters and release at synchronisation, each value wait comparison, a notify
/// ordering two streams), checked in C; the program prints each mismatch.
#[test]
fn the_memory_chapters_documented_edge_cases_in_c() {
    let stdout = run(&compile("memory_chapter_edges", &[]));
    assert_eq!(stdout, "249 documented edges checked, 0 wrong\n");
}

/// `tests/c/kernel_chapter_edges.c`: the kernel loading and execution chapter (loading from a
/// file, lazily and from memory, the older binary path, what a function tells, every launch
/// form, argument handles with placeholders, updates, 128 parameters and caller memory, the
/// configuration's exclusive timeouts, the unsupported SIMT launches and AI CPU registration),
/// the exception handling chapter (a binary's callback, set and registered process-wide
/// callbacks, the thread's last error, task abort callbacks, error detail), resource limits,
/// the exporting half of IPC memory and the device queries, checked in C; the program prints
/// each mismatch.
#[test]
fn the_kernel_and_exception_chapters_documented_edge_cases_in_c() {
    let stdout = run(&compile("kernel_chapter_edges", &[]));
    assert_eq!(stdout, "327 documented edges checked, 0 wrong\n");
}

/// `tests/c/control_chapter_edges.c`: the notify, counted notify, label, execution control and
/// model runtime instance chapters, and the stream chapter's capture, switching, activation and
/// attribute parts (stream flags, priorities and attribute ranges, the streams whose
/// synchronisation does nothing, state callbacks; a wait resetting its notify, a batch reset,
/// export flags, the notifies of a device and labels of a process; every stream switch
/// condition, a label index past its list; building, capturing, capture modes on each thread,
/// task groups and updates, instance introspection, destroy callbacks, conditional tasks;
/// execute timeouts, the thread's last task, host functions holding their stream), checked in
/// C; the program prints each mismatch.
#[test]
fn the_control_chapters_documented_edge_cases_in_c() {
    let stdout = run(&compile("control_chapter_edges", &["-pthread"]));
    assert_eq!(stdout, "817 documented edges checked, 0 wrong\n");
}

/// `tests/c/control_chapters_function_by_function.c`: the notify, counted notify, label,
/// execution control, model runtime instance and compute group chapters function by function,
/// the edges `control_chapter_edges.c` does not walk (each function's NULL arguments before its
/// handles, destroyed handles, other contexts' and devices' streams, unbound streams; a notify
/// counting to one and ordering two streams and the default stream, batch resets that clear
/// all or none, a wait timing out; a label switch skipping the rest of its own stream;
/// callbacks holding their stream or not, captured ones at each execution, report threads'
/// subscriptions; a thread's own last task; an instance from capture or build to destruction,
/// its streams, tasks and names; the functions an Atlas A2 lacks), checked in C; the program
/// prints each mismatch.
#[test]
fn the_control_chapters_function_by_function_in_c() {
    let stdout = run(&compile(
        "control_chapters_function_by_function",
        &["-pthread"],
    ));
    assert_eq!(stdout, "486 documented edges checked, 0 wrong\n");
}

/// `tests/c/core_chapters_function_by_function.c`: the initialisation, runtime configuration,
/// device, context, stream and event chapters function by function, the edges
/// `config_chapter_edges.c` and `device_context_stream_event_edges.c` do not walk (init and
/// finalize callbacks' user data, the last aclFinalizeReference, a second init cycle; the
/// process, context, device, stream and thread scopes of parameters and limits; device ID
/// mappings, PCI bus IDs, UUIDs and atomic capabilities of each device; device and stream state
/// callbacks told of default streams; stream attributes, flags and counts; destroyed handles and
/// other contexts' and devices' streams for every function taking one; a stream waiting after
/// another's wait and reset, held until the next record; an Ex event's records replacing their
/// capture; IPC events in their own process; the SIMT limits an Atlas A2 lacks), checked in C;
/// the program prints each mismatch.
#[test]
fn the_core_chapters_function_by_function_in_c() {
    let stdout = run(&compile(
        "core_chapters_function_by_function",
        &["-pthread"],
    ));
    assert_eq!(stdout, "574 documented edges checked, 0 wrong\n");
}

/// `tests/c/device_context_stream_event_edges.c`: the device, context, stream and event
/// management chapters function by function (aclrtSetDevice's reference count against both
/// resets, the reference's right and wrong mixes and two threads forcing one device; the current
/// context and device after each set, switch, reset and destruction; the device queries, peer
/// access, state callbacks; context parameters and default streams, the streams a first context
/// takes; stream priorities, flags, destruction, the failure mode, queries, aborts and stops;
/// the flags each event creation takes, event counts, query states before, during and after a
/// record, timed waits and timestamps), checked in C; the program prints each mismatch.
#[test]
fn the_device_context_stream_and_event_chapters_documented_edge_cases_in_c() {
    let stdout = run(&compile("device_context_stream_event_edges", &["-pthread"]));
    assert_eq!(stdout, "711 documented edges checked, 0 wrong\n");
}

/// `tests/c/config_chapter_edges.c`: the initialisation chapter (aclInit's file and its
/// nesting limits, the operator cache's queue length as a positive count in a string, init callbacks at aclInit or at once, finalize callbacks, one aclFinalize
/// for many aclInit calls, aclFinalizeReference's count), runtime parameters and resource
/// limits, cache operations, IPC memory across two processes (whitelisted, unvalidated, closed
/// and freed keys, the import flags), custom allocators, device variable copies, compute
/// groups, dump sessions and the dump kinds that exclude each other, every snapshot stage and
/// state, and the other APIs (half conversions of special values, version order, the
/// platform's description, profiling marks, cached task information in a capture), checked in
/// C; the program prints each mismatch.
#[test]
fn the_configuration_chapters_documented_edge_cases_in_c() {
    let library = compile("global_kernels", &["-shared", "-fPIC"]);
    let linked = format!("-Wl,--no-as-needed,{}", library.display());
    let stdout = run_with(
        &compile("config_chapter_edges", &["-pthread", &linked]),
        &[("NPUSIM_GLOBALS_SO", &library)],
    );
    let _ = std::fs::remove_file(&library);
    assert_eq!(stdout, "531 documented edges checked, 0 wrong\n");
}

/// `tests/c/exception_and_memory_ext_edges.c`: the chapters no other edges program walks
/// function by function: exception handling (one registration per function, a function both
/// set and registered called twice, the set one not unregistered, every info getter inside a
/// callback and after it, the thread's own last error and message, UCE repair and
/// aclrtRepairError after a device abort), the second-generation shareable handles, unified
/// addressing (advice that ignores its location, the host's one NUMA node, attribute queries
/// that write nothing when refused, single and batched prefetches and where each range was
/// sent, peer mappings), the reserved shared buffers and the data buffers, checked in C; the
/// program prints each mismatch.
#[test]
fn the_exception_and_unified_memory_chapters_documented_edge_cases_in_c() {
    let stdout = run(&compile("exception_and_memory_ext_edges", &["-pthread"]));
    assert_eq!(stdout, "292 documented edges checked, 0 wrong\n");
}

/// `tests/c/memory_alloc_and_copy_edges.c`: the memory chapters' functions no other edges
/// program calls (aclrtMallocAlign32's rounding without aclrtMalloc's padding, a rule outside
/// the policy choosing pages by size, the configured allocations, memory type checks, the
/// usage report, cache flushes, configured pinned memory and its synchronising free, the
/// host-memory mapping capabilities, descriptor, offset and conditional copies, batched copies
/// without a fail index), checked in C; the program prints each mismatch.
#[test]
fn the_allocation_and_copy_functions_documented_edge_cases_in_c() {
    let stdout = run(&compile("memory_alloc_and_copy_edges", &[]));
    assert_eq!(stdout, "152 documented edges checked, 0 wrong\n");
}

/// `tests/c/memory_ext_and_kernel_function_by_function.c`: the CMO, IPC memory, custom
/// allocator, stream memory operation and stream-ordered pool chapters walked function by
/// function for the edges the other programs leave out (NULL and out-of-range arguments,
/// destroyed handles, another device's streams and memory, a pool's size limit and its reuse
/// rules across streams, stream order of prefetches and value writes, an IPC importer on the
/// exporter's device and on another one, where only asynchronous device-to-device copies of
/// an explicit kind are allowed), a function resolved on one device launched on another's
/// stream, argument handles' updates, placeholder buffers and unfinalized launches, a second
/// dump session and snapshot steps naming another process, checked in C; the program (and its
/// importer) prints each mismatch.
#[test]
fn the_memory_extension_chapters_function_by_function_in_c() {
    let stdout = run(&compile("memory_ext_and_kernel_function_by_function", &[]));
    assert_eq!(stdout, "364 documented edges checked, 0 wrong\n");
}

/// `tests/c/kernel_and_other_chapters_function_by_function.c`: the kernel loading and
/// execution, device variable, snapshot and other APIs chapters and the data types chapter's
/// operation APIs function by function, the edges the other programs leave out (NULL
/// arguments, then values such as a function attribute, reserved flags or a device
/// information item, before handles in parameter order; an unloaded binary's handles and
/// functions, destroyed and other contexts' streams for every launch form and asynchronous
/// device variable copy, the SIMT launches' and host function threads' argument checks before the
/// features an Atlas A2 lacks, the launch configuration's switches, a held launch's arguments
/// as at submission, a failed launch's arguments in its exception info, a global by symbol and
/// by name, a data buffer that never owned its memory, a snapshot callback only while
/// registered), checked in C with global_kernels.c's library linked in; the program prints
/// each mismatch.
#[test]
fn the_kernel_and_other_chapters_function_by_function_in_c() {
    let library = compile("global_kernels", &["-shared", "-fPIC"]);
    let linked = format!("-Wl,--no-as-needed,{}", library.display());
    let stdout = run_with(
        &compile("kernel_and_other_chapters_function_by_function", &[&linked]),
        &[("NPUSIM_GLOBALS_SO", &library)],
    );
    let _ = std::fs::remove_file(&library);
    assert_eq!(stdout, "377 documented edges checked, 0 wrong\n");
}

/// `tests/c/memory_chapters_function_by_function.c`: the device memory, host memory, copy and
/// set, virtual memory, unified addressing and exception handling chapters function by
/// function, the edges the other programs leave out (freed memory, another device's memory and
/// streams, another allocator's memory, calls without a context, policies outside the
/// enumeration and 1 GiB pages, what the synchronising frees wait for, the free figure a huge
/// page costs, registrations in each state, the synchronous copy's reserved kind, host memory
/// filled at once by aclrtMemsetD32Async while its stream is held, physical memory of two
/// devices in one reservation, an abort callback's name), checked in C; the program prints
/// each mismatch.
#[test]
fn the_memory_chapters_function_by_function_in_c() {
    let stdout = run(&compile(
        "memory_chapters_function_by_function",
        &["-pthread"],
    ));
    assert_eq!(stdout, "575 documented edges checked, 0 wrong\n");
}

#[test]
fn devices_and_information_flow_in_c() {
    let stdout = run(&compile("device_info", &[]));
    assert_eq!(
        stdout,
        "device 0 at 0000:01:00.0 (found 0), uuid starts npu-si\n\
         device 1 at 0000:02:00.0 (found 1), uuid starts npu-si\n\
         0-1 linked by HCCS: 1\n\
         peer 0->1 after enabling: 1\n\
         utilization cube 0 vector 0 aicpu 0 memory -1\n\
         cube cores for this thread: 10\n\
         after reset: 20\n\
         atomics on the host: simt add 0x0, dma add 0x3d; on device 1: 0x0, 0x3d\n\
         task update 1, own soc compatible 1, 2 cann attributes, bf16 1\n\
         0.5 as half 0x3800, back 0.5, float is 4 bytes\n\
         device info ok\n"
    );
}

#[test]
fn runtime_configuration_flow_in_c_and_cxx() {
    let expected = "init callback of app: 0 bytes of configuration\n\
         acl 1.17.0 (header 1.17.0), cann 8.5.0 = 8.5.0 patch 0\n\
         user device 0: logical 0, physical 0, back 0\n\
         user device 1: logical 1, physical 1, back 1\n\
         simd stack 49152, printf fifo 32768, simt stack on an Atlas A2: 207000\n\
         dump session: opened twice 100002, configured after it ended 100045\n\
         primary context of device 0 before aclrtSetDevice: 0\n\
         state: device 0 set pre\n\
         state: device 0 set post\n\
         after: 1\n\
         event ids differ 1, events left 65534\n\
         timeout step 4294967 us, default execute timeout 1090921 ms\n\
         60 s takes effect as 60129 ms\n\
         0 takes effect as 1090921618 us\n\
         ms form on an Atlas A2: 207000\n\
         deterministic 1, context debug kernel 1, inf/nan mode 1, overflow switch 1\n\
         reduced sum 3.50 -1.50\n\
         state: device 0 reset pre\n\
         state: device 0 reset post\n\
         after aclrtResetDevice: 0\n\
         finalize callback of app\n\
         runtime config ok\n";
    for lang in [Lang::C, Lang::Cxx] {
        assert_eq!(run(&compile_as("runtime_config", lang, &[])), expected);
    }
}

#[test]
fn acl_base_rt_h_or_acl_rt_h_alone_compiles_as_c_and_cxx() {
    let programs = [
        (
            "only_base_rt",
            "soc Ascend910B3, success 0, bad param 100000, handles 1, half 0\n\
             format ND 2, NZ 29, memtype host 1\n",
        ),
        (
            "only_rt",
            "devices 2, version known 1, ge code 145000, rt code 107000\n\
             connect types 0 1 2, form factors 0 1 2 3\n",
        ),
    ];
    for (program, expected) in programs {
        for lang in [Lang::C, Lang::Cxx] {
            assert_eq!(run(&compile_as(program, lang, &["-pedantic"])), expected);
        }
    }
}

#[test]
fn the_cdylib_exports_every_header_function() {
    let path = deps_dir().join("libascendcl.so");
    // SAFETY: loading the simulator's own library runs no foreign initialisers; it stays
    // loaded until the end of the test, longer than the table is used.
    let library = unsafe { libloading::Library::new(&path) }.unwrap();
    // SAFETY: the library is npu-sim, whose exports have the header's prototypes.
    let api = unsafe { npu_sys::AclApi::from_library(&library) }.unwrap();
    assert!(
        api.unsupported().is_empty(),
        "missing: {:?}",
        api.unsupported()
    );
    let mut count = 0u32;
    // SAFETY: a valid out pointer.
    assert_eq!(unsafe { (api.aclrtGetDeviceCount)(&mut count) }, 0);
    assert_eq!(count, npu_sim::config::DEFAULT_DEVICES);
    // C-variadic, so not in the table: looked up by name, with CANN's prototype, and called.
    type AppLog = unsafe extern "C" fn(
        npu_sys::aclLogLevel,
        *const std::ffi::c_char,
        *const std::ffi::c_char,
        u32,
        *const std::ffi::c_char,
        ...
    );
    // SAFETY: npu-sim's aclAppLog has CANN's prototype.
    let app_log = unsafe { library.get::<AppLog>(b"aclAppLog") }.unwrap();
    // SAFETY: valid strings and a format that matches its argument. The record goes to the
    // loaded copy's tracing log (and to stdout only if this test's environment asks).
    unsafe {
        app_log(
            npu_sys::ACL_INFO,
            c"exports".as_ptr(),
            c"c_programs.rs".as_ptr(),
            1,
            c"%d".as_ptr(),
            1i32,
        )
    };
    // The loaded copy is a separate simulator with its own state (as on a real dlopen path).
    std::mem::forget(library);
}

/// The line of `tests/c/<program>.c` that contains `needle` (once), 1-based.
fn source_line(program: &str, needle: &str) -> u32 {
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/c")
        .join(format!("{program}.c"));
    let text = std::fs::read_to_string(source).unwrap();
    let mut found = text.lines().enumerate().filter(|(_, l)| l.contains(needle));
    let (index, _) = found
        .next()
        .unwrap_or_else(|| panic!("{needle:?} not in {program}.c"));
    assert!(found.next().is_none(), "{needle:?} twice in {program}.c");
    u32::try_from(index + 1).unwrap()
}

/// The parts of one plog-like stdout line of app_log.c (`process` and `file` are checked):
/// level, file (`file` or empty), line, function and message.
type Record = (String, String, u32, String, String);

fn app_log_line(line: &str, process: &str, file: &str) -> Record {
    let (level, rest) = line[1..].split_once("] APP(").unwrap();
    let (pid, rest) = rest.split_once(',').unwrap();
    assert!(pid.parse::<u32>().is_ok(), "pid {pid:?} in {line:?}");
    let rest = rest.strip_prefix(process).unwrap();
    let rest = rest.strip_prefix("):").unwrap();
    // YYYY-MM-DD-hh:mm:ss.mmm.uuu
    let (time, rest) = rest.split_at(27);
    let shape = time
        .bytes()
        .map(|b| if b.is_ascii_digit() { b'd' } else { b })
        .collect::<Vec<_>>();
    assert_eq!(
        shape, b"dddd-dd-dd-dd:dd:dd.ddd.ddd",
        "time {time:?} in {line:?}"
    );
    let rest = rest.strip_prefix(" [").unwrap();
    // The program's file, or none (a NULL file).
    let (place, rest) = match rest.strip_prefix(file) {
        Some(rest) => (file, rest),
        None => ("", rest),
    };
    let rest = rest.strip_prefix(':').unwrap();
    let (number, rest) = rest.split_once(']').unwrap();
    let (func, message) = rest.split_once(": ").unwrap();
    (
        level.into(),
        place.into(),
        number.parse().unwrap(),
        func.into(),
        message.into(),
    )
}

/// Runs tests/c/app_log.c with `env` and returns its records and the lines it printed itself.
fn app_log_records(env: &[(&str, &Path)]) -> (Vec<Record>, Vec<String>) {
    let program = compile("app_log", &[]);
    let process = program.file_name().unwrap().to_str().unwrap().to_owned();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/app_log.c");
    let file = source.to_str().unwrap();
    let stdout = run_with(&program, env);
    // Records go through the C library's stdout, in order with the program's own output
    // (buffered, stdout being a pipe).
    assert!(stdout.starts_with("app log start\n"), "{stdout}");
    assert!(stdout.ends_with("\napp log ok\n"), "{stdout}");
    let mut records = Vec::new();
    let mut own = Vec::new();
    for line in stdout.lines() {
        if line.starts_with('[') {
            records.push(app_log_line(line, &process, file));
        } else {
            own.push(line.to_owned());
        }
    }
    (records, own)
}

#[test]
fn acl_app_log_prints_records_at_or_above_the_global_level_with_print_to_stdout() {
    let one = Path::new("1");
    let (records, own) = app_log_records(&[
        ("ASCEND_SLOG_PRINT_TO_STDOUT", one),
        ("ASCEND_GLOBAL_LOG_LEVEL", one),
    ]);
    assert_eq!(own, ["app log start", "app log ok"]);
    let at = |needle: &str| source_line("app_log", needle);
    let many = "many 1 2 0.1 0.2 0.3 0.4 0.5 0.6 0.7 0.8 0.9 1.0 -1234567890123 end 77";
    let fits = "y".repeat(1023);
    let cut_z = format!("{}...[truncated]", "z".repeat(1023 - 14));
    let cut_x = format!("long {}...[truncated]", "x".repeat(1023 - 14 - 5));
    let expected = [
        ("INFO", at("\"info %d"), "info 11 eleven 1.25"),
        ("WARNING", at("\"warning %d"), "warning 12 twelve -2.75"),
        ("ERROR", at("\"error %d"), "error 13 thirteen 3.50"),
        ("INFO", at("\"many %d"), many),
        ("INFO", at("modelId is"), "load model success, modelId is 1"),
        ("ERROR", at("\"no arguments\""), "no arguments"),
        ("WARNING", at("'y'") + 2, &fits),
        ("WARNING", at("'z'") + 2, &cut_z),
        ("ERROR", at("\"long %s\""), &cut_x),
    ];
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/app_log.c");
    let file = source.to_str().unwrap();
    let mut expected: Vec<Record> = expected
        .iter()
        .map(|(level, line, message)| {
            let level = (*level).to_owned();
            (level, file.into(), *line, "main".into(), (*message).into())
        })
        .collect();
    // NULL function and file.
    expected.push((
        "ERROR".into(),
        "".into(),
        7,
        "".into(),
        "anonymous 7".into(),
    ));
    assert_eq!(records, expected);
    // The cut records are exactly 1023 bytes: 1024 with the NUL.
    assert_eq!(records[7].4.len(), 1023);
    assert_eq!(records[8].4.len(), 1023);
}

#[test]
fn acl_app_log_prints_errors_by_default_and_nothing_without_print_to_stdout() {
    // ASCEND_GLOBAL_LOG_LEVEL defaults to 3 (error).
    let (records, own) = app_log_records(&[("ASCEND_SLOG_PRINT_TO_STDOUT", Path::new("1"))]);
    assert_eq!(own, ["app log start", "app log ok"]);
    let levels: Vec<&str> = records.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(levels, ["ERROR"; 4]);
    // 4 is "null": nothing is printed.
    let (records, _) = app_log_records(&[
        ("ASCEND_SLOG_PRINT_TO_STDOUT", Path::new("1")),
        ("ASCEND_GLOBAL_LOG_LEVEL", Path::new("4")),
    ]);
    assert!(records.is_empty(), "{records:?}");
    // Without ASCEND_SLOG_PRINT_TO_STDOUT the records go to the tracing log only, whatever
    // the level.
    for env in [&[][..], &[("ASCEND_GLOBAL_LOG_LEVEL", Path::new("0"))]] {
        let (records, own) = app_log_records(env);
        assert!(records.is_empty(), "{records:?}");
        assert_eq!(own, ["app log start", "app log ok"]);
    }
}

#[test]
fn npu_trace_is_written_by_acl_finalize() {
    let trace = Path::new(env!("CARGO_TARGET_TMPDIR")).join("npu-sim-typical-flow.trace.json");
    let _ = std::fs::remove_file(&trace);
    run_with(&compile("typical_flow", &[]), &[("NPU_TRACE", &trace)]);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let names: Vec<(&str, &str)> = json["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X" || e["ph"] == "i")
        .map(|e| (e["ph"].as_str().unwrap(), e["name"].as_str().unwrap()))
        .collect();
    // Tasks are slices; the event record is an instant.
    assert_eq!(
        names,
        [
            ("X", "H2D (sync)"),
            ("X", "D2D"),
            ("X", "memset"),
            ("i", "record"),
            ("X", "D2H (sync)")
        ]
    );
}

#[test]
fn stream_ordered_pool_flow() {
    let stdout = run(&compile("pool_flow", &[]));
    assert_eq!(
        stdout,
        "range of the third block: starts there 1, 4128 bytes\n\
         reserved 16512, used 16512\n\
         reused a returned block: 1\n\
         words read back: 1024, wrong: 0\n\
         after the synchronisation: reserved 0, used high 16512\n\
         components: 1, first: runtime\n\
         pool flow ok\n"
    );
}

#[test]
fn memory_group_flows() {
    let stdout = run(&compile("memory_flow", &[]));
    assert_eq!(
        stdout,
        "granularity 2097152, access 3, last word cafef00d\n\
         batch: failIndex is SIZE_MAX 1, copied 2 then 0\n\
         device to device batch: 107000, failIndex 0\n\
         managed: type 3, copied 7\n\
         memory flow ok\n"
    );
}

/// An explicitly built instance whose HEAD stream activates the stream that computes.
#[test]
fn a_built_instance_activates_its_second_stream_in_c_and_cxx() {
    let expected = "head stream 3 tasks, activated stream 2 tasks\n\
         execution 1: 0 wrong\n\
         execution 2: 0 wrong\n\
         execution 3: 0 wrong\n\
         build flow ok\n";
    for lang in [Lang::C, Lang::Cxx] {
        assert_eq!(run(&compile_as("build_flow", lang, &[])), expected);
    }
}

/// Random number tasks on a stream and in a built instance, updated by aclrtTaskUpdateAsync.
#[test]
fn random_numbers_and_task_updates_in_c_and_cxx() {
    let expected = "dropout: between 70% and 80% kept: 1\n\
         task id 1\n\
         execution 1: in [-1, 1): 1\n\
         execution 2, same seed: same values: 1\n\
         execution 3, updated: the values of seed 7: 1\n\
         execution 3, updated: other values than seed 1's: 1\n\
         random flow ok\n";
    for lang in [Lang::C, Lang::Cxx] {
        assert_eq!(run(&compile_as("random_flow", lang, &[])), expected);
    }
}

/// A snapshot's lock, backup, change, restore and unlock, and the states that refuse calls.
#[test]
fn a_process_snapshot_restores_device_memory_in_c_and_cxx() {
    let expected = "second registration: 507913\n\
         unlock while running: 507907\n\
         backup while running: 507908\n\
         lock of another process: 100000\n\
         lock again: 507906\n\
         restore before a backup: 507909\n\
         backup callbacks for device 0: 1\n\
         changed after the backup: 1\n\
         restored to the backup: 1\n\
         unregister again: 507913\n\
         snapshot flow ok\n";
    for lang in [Lang::C, Lang::Cxx] {
        assert_eq!(run(&compile_as("snapshot_flow", lang, &[])), expected);
    }
}

#[test]
fn a_captured_pipeline_replays_in_c_and_cxx() {
    let expected = "capturing: status 1\n\
         synchronous copy while capturing: 107030\n\
         previous mode 0\n\
         after the capture: status 0, instance NULL 1\n\
         instance add_pipeline, id 1\n\
         1 stream, 4 tasks\n\
         replay 1: 0 wrong\n\
         replay 2: 0 wrong\n\
         replay 3: 0 wrong\n\
         capture flow ok\n";
    for lang in [Lang::C, Lang::Cxx] {
        assert_eq!(run(&compile_as("capture_flow", lang, &[])), expected);
    }
}

/// Labels, stream switches and conditional tasks, written as a CANN program (C and C++):
/// each execution takes the path the values in device memory choose.
#[test]
fn control_flow_takes_the_path_device_memory_chooses_in_c_and_cxx() {
    let expected = "label 0: 7\n\
         label 1: 9\n\
         label 2: 9\n\
         stream switch taken: 9\n\
         run 0: if 1, while 3, switch 10\n\
         run 1: if 2, while 3, switch 30\n\
         run 2: if 1, while 3, switch 0\n\
         control flow ok\n";
    for lang in [Lang::C, Lang::Cxx] {
        assert_eq!(run(&compile_as("control_flow", lang, &[])), expected);
    }
}

#[test]
fn ipc_memory_notifies_and_events_are_shared_with_a_spawned_process_in_c() {
    let stdout = run(&compile("ipc_flow", &[]));
    assert_eq!(
        stdout,
        "importer pid reported: 1\n\
         bytes the importer wrote, after its notify: 10000\n\
         importer saw 0 wrong bytes\n\
         importer exit status: 0\n\
         ipc flow ok\n"
    );
}

/// The headers whose functions the ABI sweep calls: every function the simulator exports.
const SWEPT_HEADERS: [&str; 5] = [
    "acl_base_rt.h",
    "acl_rt.h",
    "acl_rt_allocator.h",
    "acl_rt_memory_soma.h",
    "acl_platform.h",
];

/// The types the sweep attacks as handles: by value the `void *` typedefs the runtime issues,
/// and the opaque structures it hands out pointers to. Memory addresses and the allocator's
/// user objects are the caller's, not handles.
const SWEPT_HANDLES: [&str; 21] = [
    "aclrtStream",
    "aclrtEvent",
    "aclrtContext",
    "aclrtNotify",
    "aclrtCntNotify",
    "aclrtLabel",
    "aclrtLabelList",
    "aclrtMemPool",
    "aclDataBuffer *",
    "aclrtDrvMemHandle",
    "aclrtGroupInfo *",
    "aclrtAllocatorDesc",
    "aclrtMbuf",
    "aclmdlRI",
    "aclrtBinary",
    "aclrtBinHandle",
    "aclrtFuncHandle",
    "aclrtArgsHandle",
    "aclrtParamHandle",
    "aclmdlRITask",
    "aclrtTaskGrp",
];

/// `text` without comments, preprocessor lines and what `#ifdef __cplusplus` guards.
fn c_declarations_only(text: &str) -> String {
    let mut plain = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("/*") {
        plain.push_str(&rest[..start]);
        let end = rest[start..].find("*/").expect("unterminated comment") + start + 2;
        plain.push(' ');
        rest = &rest[end..];
    }
    plain.push_str(rest);
    let mut kept = String::new();
    // The depth of open #if blocks, and the depth at which a __cplusplus block opened.
    let (mut depth, mut cxx_from) = (0usize, None);
    for line in plain.lines() {
        let line = line.split("//").next().unwrap();
        let directive = line.trim_start();
        if let Some(directive) = directive.strip_prefix('#') {
            let directive = directive.trim_start();
            if directive.starts_with("if") {
                depth += 1;
                if directive.contains("__cplusplus") && cxx_from.is_none() {
                    cxx_from = Some(depth);
                }
            } else if directive.starts_with("endif") {
                if cxx_from == Some(depth) {
                    cxx_from = None;
                }
                depth -= 1;
            }
        } else if cxx_from.is_none() {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    kept
}

/// Removes every `MACRO(...)` (its parenthesised argument may hold string literals).
fn without_macro(text: &str, macro_name: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find(macro_name) {
        out.push_str(&rest[..start]);
        let open = start + rest[start..].find('(').unwrap();
        let (mut nesting, mut in_string, mut end) = (0, false, open);
        for (offset, c) in rest[open..].char_indices() {
            match c {
                '"' => in_string = !in_string,
                '(' if !in_string => nesting += 1,
                ')' if !in_string => {
                    nesting -= 1;
                    if nesting == 0 {
                        end = open + offset + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// A function a header declares: its name, return type and parameter types.
struct Declared {
    name: String,
    returns: String,
    params: Vec<String>,
}

/// `params` split at the commas outside parentheses.
fn split_params(params: &str) -> Vec<String> {
    let (mut out, mut nesting, mut current) = (Vec::new(), 0, String::new());
    for c in params.chars() {
        match c {
            '(' => nesting += 1,
            ')' => nesting -= 1,
            ',' if nesting == 0 => {
                out.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    out.push(current);
    out.into_iter()
        .map(|param| param.split_whitespace().collect::<Vec<_>>().join(" "))
        // A variadic function is called without variable arguments.
        .filter(|param| !param.is_empty() && param != "void" && param != "...")
        .collect()
}

/// A parameter's type: its declaration without the parameter's name.
fn param_type(param: &str) -> String {
    assert!(
        !param.contains('(') && !param.contains('['),
        "the sweep's generator takes no function pointer or array parameters: {param}"
    );
    let name_start = param
        .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
        .map_or(0, |at| at + 1);
    let ty = param[..name_start].trim();
    assert!(!ty.is_empty(), "a parameter without a name: {param}");
    ty.to_owned()
}

/// The statements of `SWEPT_HEADERS` (declarations and definitions), whitespace collapsed.
fn header_statements() -> Vec<String> {
    let mut statements = Vec::new();
    for header in SWEPT_HEADERS {
        let text = std::fs::read_to_string(include_dir().join("acl").join(header)).unwrap();
        let text = without_macro(&c_declarations_only(&text), "ACL_DEPRECATED_MESSAGE");
        // Statements end at a ';' outside braces: structure and enum bodies stay inside theirs.
        let (mut statement, mut braces) = (String::new(), 0);
        for c in text.chars() {
            match c {
                '{' => braces += 1,
                '}' => braces -= 1,
                ';' if braces == 0 => {
                    let words = std::mem::take(&mut statement);
                    statements.push(words.split_whitespace().collect::<Vec<_>>().join(" "));
                    continue;
                }
                _ => {}
            }
            statement.push(c);
        }
    }
    statements
}

/// Every function `SWEPT_HEADERS` declare.
fn declared_functions() -> Vec<Declared> {
    let mut functions = Vec::new();
    for statement in header_statements() {
        let decl = statement.trim_start_matches("ACL_FUNC_VISIBILITY ");
        if decl.starts_with("typedef") || decl.contains('{') || !decl.ends_with(')') {
            continue;
        }
        let open = decl.find('(').unwrap();
        let head = decl[..open].trim();
        let name_start = head.rfind([' ', '*']).unwrap() + 1;
        functions.push(Declared {
            name: head[name_start..].to_owned(),
            returns: head[..name_start].trim().to_owned(),
            params: split_params(&decl[open + 1..decl.len() - 1])
                .iter()
                .map(|param| param_type(param))
                .collect(),
        });
    }
    functions
}

/// The function pointer types `SWEPT_HEADERS` define (`typedef R (*Name)(...)`).
fn callback_types() -> Vec<String> {
    header_statements()
        .iter()
        .filter(|statement| statement.starts_with("typedef"))
        .filter_map(|statement| {
            let name = &statement[statement.find("(*")? + 2..];
            Some(name[..name.find(')')?].trim().to_owned())
        })
        .collect()
}

/// The handle `ty` is (an entry of `SWEPT_HANDLES`), if it is one.
fn swept_handle(ty: &str) -> Option<&'static str> {
    let ty = ty.trim_start_matches("const ").replace(" *", "*");
    SWEPT_HANDLES
        .into_iter()
        .find(|handle| handle.replace(" *", "*") == ty)
}

/// abi_sweep_calls.h for `functions`: a thunk per function and the table abi_sweep.c runs.
fn sweep_calls_header(functions: &[Declared]) -> String {
    let callbacks = callback_types();
    let mut thunks = String::new();
    let mut table = String::from("static const struct sweep_entry sweep_entries[] = {\n");
    for (i, function) in functions.iter().enumerate() {
        thunks.push_str(&format!(
            "static long long sweep_{i}(const struct sweep_call *call)\n{{\n    (void)call;\n"
        ));
        let mut handles = Vec::new();
        for (index, ty) in function.params.iter().enumerate() {
            let kind = if let Some(handle) = swept_handle(ty) {
                handles.push(format!(
                    "{{{index}, HANDLE_{}}}",
                    handle.trim_end_matches(" *")
                ));
                "SWEEP_HANDLE"
            } else if callbacks.contains(ty) {
                "SWEEP_CALLBACK"
            } else if ty.contains('*') {
                "SWEEP_POINTER"
            } else {
                "SWEEP_VALUE"
            };
            // A const parameter is filled like any other: declare it without its top const.
            let declared = if ty.contains('*') {
                ty.trim_end_matches("const").trim_end()
            } else {
                ty.trim_start_matches("const ")
            };
            thunks.push_str(&format!(
                "    {declared} a{index};\n    sweep_fill(&a{index}, sizeof a{index}, {kind}, {index}, call);\n"
            ));
        }
        let args = (0..function.params.len())
            .map(|index| format!("a{index}"))
            .collect::<Vec<_>>()
            .join(", ");
        let invocation = format!("{}({args})", function.name);
        thunks.push_str(&match function.returns.as_str() {
            "void" => format!("    {invocation};\n    return 0;\n}}\n"),
            returns if returns.contains('*') || swept_handle(returns).is_some() => {
                format!("    return {invocation} != NULL;\n}}\n")
            }
            _ => format!("    return (long long){invocation};\n}}\n"),
        });
        table.push_str(&format!(
            "    {{\"{}\", sweep_{i}, {}, {{{}}}}},\n",
            function.name,
            handles.len(),
            handles.join(", ")
        ));
    }
    table.push_str("};\n");
    thunks + &table
}

/// The codes the headers define for aclError (ACL_ERROR_* and ACL_ERROR_RT_*).
fn defined_error_codes() -> std::collections::HashSet<i64> {
    let mut codes = std::collections::HashSet::new();
    let dir = include_dir().join("acl");
    let headers = std::fs::read_dir(&dir)
        .unwrap()
        .chain(std::fs::read_dir(dir.join("error_codes")).unwrap())
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "h"));
    for header in headers {
        for line in std::fs::read_to_string(header).unwrap().lines() {
            let Some(at) = line.find("ACL_ERROR_") else {
                continue;
            };
            let value = line[at..]
                .split(|c: char| !c.is_ascii_digit())
                .rfind(|digits| !digits.is_empty());
            if let Some(code) = value.and_then(|digits| digits.parse().ok()) {
                codes.insert(code);
            }
        }
    }
    codes
}

/// Every function the headers declare, called with NULL and zero arguments before and after
/// aclInit and after aclFinalize, with integers of all bits set, with valid pointers, with each
/// handle argument stale, never issued (0x1234), a pointer to zeroed memory and a live handle of
/// another kind, with handles from before a device reset or aclFinalize and with live handles
/// (tests/c/abi_sweep.c lists the calls): no call crashes, aborts, hangs or panics; every
/// aclError is 0 or a code the headers define; no bad handle is accepted (an aclError of 0, or a
/// non-zero pointer, size or value).
#[test]
fn every_declared_function_survives_null_zero_and_bad_handle_arguments() {
    let functions = declared_functions();
    assert!(
        functions.len() >= 400,
        "the header parser found {} functions",
        functions.len()
    );
    let generated = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("npu-sim-abi-sweep-{}", std::process::id()));
    std::fs::create_dir_all(&generated).unwrap();
    std::fs::write(
        generated.join("abi_sweep_calls.h"),
        sweep_calls_header(&functions),
    )
    .unwrap();
    let include = format!("-I{}", generated.display());
    let stdout = run(&compile("abi_sweep", &[&include]));
    let _ = std::fs::remove_dir_all(&generated);
    let codes = defined_error_codes();
    let returns_error: std::collections::HashMap<&str, bool> = functions
        .iter()
        .map(|function| (function.name.as_str(), function.returns == "aclError"))
        .collect();
    let mut defects = Vec::new();
    let mut done = 0;
    let mut stale_kinds = std::collections::BTreeSet::new();
    for line in stdout.lines() {
        let words: Vec<&str> = line.split(' ').collect();
        if let [name, mode, _] = words.as_slice()
            && let Some((kind, index)) = mode.split_once('@')
            && kind.starts_with("stale")
            && let Some(function) = functions.iter().find(|f| f.name == *name)
            && let Some(handle) = swept_handle(&function.params[index.parse::<usize>().unwrap()])
        {
            stale_kinds.insert(handle);
        }
        match words.as_slice() {
            [_, "done"] => done += 1,
            ["swept", count, "functions"] => assert_eq!(*count, functions.len().to_string()),
            [_, "signal" | "exit", _] => defects.push(line.to_owned()),
            [name, mode, value] if value.parse::<i64>().is_ok() => {
                let value: i64 = value.parse().unwrap();
                // Handles made before a reset or aclFinalize may live on (an explicit context,
                // events, host-side objects): those calls need only return a code.
                let bad_handle = mode.contains('@')
                    && !mode.starts_with("reset")
                    && !mode.starts_with("finalized")
                    // The reference: unregistering from a stream without a registration succeeds.
                    && *name != "aclrtAllocatorUnregister";
                let wrong = if returns_error[name] {
                    (value != 0 && !codes.contains(&value)) || (bad_handle && value == 0)
                } else {
                    bad_handle && value != 0
                };
                if wrong {
                    defects.push(line.to_owned());
                }
            }
            _ => defects.push(line.to_owned()),
        }
    }
    assert_eq!(defects, Vec::<String>::new(), "sweep output:\n{stdout}");
    assert_eq!(done, functions.len(), "sweep output:\n{stdout}");
    // Every kind is swept stale but those the simulator never issues (counted notifies and
    // group information, as an Atlas A2; shared buffers, reserved), whose creation fails.
    let unmade: Vec<_> = SWEPT_HANDLES
        .into_iter()
        .filter(|kind| !stale_kinds.contains(kind))
        .collect();
    assert_eq!(unmade, ["aclrtCntNotify", "aclrtGroupInfo *", "aclrtMbuf"]);
}

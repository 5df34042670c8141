//! IPC memory sharing across real processes: each test re-runs this test binary as a peer
//! process (the ignored `ipc_peer` test) that takes commands on stdin and answers on stdout,
//! so exporter and importer each have their own simulator, as two CANN processes have their
//! own runtimes. Every wait on the peer is bounded, so a broken peer fails the test.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::{CStr, c_char, c_void};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::ptr;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::Duration;

use common::*;
use npu_sim::abi::*;
use npu_sys::*;

const KEY_LEN: usize = 65;
/// The peer's answers follow this tag (libtest prints its own lines too).
const TAG: &str = "@ipc ";
/// The bound on every wait for the peer: long enough for a loaded machine, short enough that a
/// hung peer fails the run.
const PEER_TIMEOUT: Duration = Duration::from_secs(120);

/// A peer process running `ipc_peer`.
struct Peer {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

impl Peer {
    fn spawn() -> Peer {
        Peer::spawn_with(r#"{"devices": 2}"#)
    }

    /// A peer whose simulator has the configuration `config` (JSON).
    fn spawn_with(config: &str) -> Peer {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "ipc_peer",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("NPUSIM_IPC_PEER", "1")
            .env("NPU_SIM_CONFIG", config)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the peer process starts");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (send, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // libtest's "test ipc_peer ... " may precede the first answer on its line.
                if let Some(at) = line.find(TAG)
                    && send.send(line[at + TAG.len()..].to_owned()).is_err()
                {
                    break;
                }
            }
        });
        Peer {
            child,
            stdin,
            lines,
        }
    }

    /// Sends a command and returns the peer's answer.
    fn ask(&mut self, command: &str) -> String {
        writeln!(self.stdin, "{command}").expect("the peer takes commands");
        self.stdin.flush().unwrap();
        match self.lines.recv_timeout(PEER_TIMEOUT) {
            Ok(answer) => answer,
            Err(RecvTimeoutError::Timeout) => panic!("the peer did not answer {command:?}"),
            Err(RecvTimeoutError::Disconnected) => {
                panic!("the peer died before answering {command:?}")
            }
        }
    }

    /// Sends a command whose answer is an ACL code.
    fn code(&mut self, command: &str) -> aclError {
        let answer = self.ask(command);
        answer
            .strip_prefix("code ")
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("{command:?} answered {answer:?}"))
    }

    fn pid(&mut self) -> i32 {
        self.ask("pid").parse().unwrap()
    }

    /// Asks the peer to exit and waits until it has (bounded by the peer's stdin closing).
    fn exit(mut self) {
        assert_eq!(self.ask("exit"), "bye");
        drop(self.stdin);
        let status = self.child.wait().unwrap();
        assert!(status.success(), "the peer failed: {status}");
    }
}

/// The peer half: runs commands from stdin until `exit` or end of input. Each answer is one
/// tagged line; ACL results are `code <n>`.
#[test]
#[ignore = "the peer process of the cross-process tests, which run it themselves"]
fn ipc_peer() {
    // Run by hand (`--ignored`) it has no exporter or importer to talk to.
    if std::env::var_os("NPUSIM_IPC_PEER").is_none() {
        return;
    }
    set_device(0);
    let mut imported: usize = 0;
    let mut exported: Vec<usize> = Vec::new();
    let mut notify: aclrtNotify = ptr::null_mut();
    // The exported physical memory and where it is mapped.
    let mut vmm: Option<(usize, usize)> = None;
    // The IPC event this process opened or exported, and the stream its commands use.
    let mut event: aclrtEvent = ptr::null_mut();
    let mut event_stream: aclrtStream = ptr::null_mut();
    let say = |answer: String| println!("{TAG}{answer}");
    for line in std::io::stdin().lock().lines().map_while(Result::ok) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["pid"] => {
                let mut pid = 0;
                acl!(aclrtDeviceGetBareTgid(&mut pid));
                say(pid.to_string());
            }
            ["import", key, flags] => {
                let key = c_string(key);
                let mut ptr = ptr::null_mut();
                let code = code!(aclrtIpcMemImportByKey(
                    &mut ptr,
                    key.as_ptr(),
                    flags.parse().unwrap()
                ));
                if code == 0 {
                    imported = ptr as usize;
                }
                say(format!("code {code}"));
            }
            ["read", len] => {
                let bytes: Vec<u8> = download(imported as *const c_void, len.parse().unwrap());
                say(hex(&bytes));
            }
            ["fill", value, len] => {
                // A task on a stream, so the imported memory is used like any device memory.
                let stream = create_stream();
                acl!(aclrtMemsetAsync(
                    imported as *mut c_void,
                    len.parse().unwrap(),
                    value.parse().unwrap(),
                    len.parse().unwrap(),
                    stream
                ));
                acl!(aclrtSynchronizeStream(stream));
                acl!(aclrtDestroyStream(stream));
                say("code 0".into());
            }
            ["free-imported"] => say(format!(
                "code {}",
                code!(aclrtFree(imported as *mut c_void))
            )),
            ["close", key] => {
                let key = c_string(key);
                say(format!("code {}", code!(aclrtIpcMemClose(key.as_ptr()))));
            }
            ["export", device, len, value] => {
                let len: usize = len.parse().unwrap();
                set_device(device.parse().unwrap());
                let dev = malloc(len);
                set_device(0);
                upload(dev, &vec![value.parse::<u8>().unwrap(); len]);
                exported.push(dev as usize);
                say(export(
                    dev,
                    len,
                    ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION as u64,
                ));
            }
            ["free-exported"] => {
                for dev in exported.drain(..) {
                    acl!(aclrtFree(dev as *mut c_void));
                }
                say("code 0".into());
            }
            ["vmm-export", value] => {
                let mut physical = ptr::null_mut();
                acl!(aclrtMallocPhysical(
                    &mut physical,
                    TWO_MIB,
                    &physical_prop(),
                    0
                ));
                let va = map_physical(physical);
                acl!(aclrtMemset(va, TWO_MIB, value.parse().unwrap(), TWO_MIB));
                let mut shareable = 0u64;
                acl!(aclrtMemExportToShareableHandle(
                    physical,
                    ACL_MEM_HANDLE_TYPE_NONE,
                    ACL_RT_VMM_EXPORT_FLAG_DEFAULT as u64,
                    &mut shareable
                ));
                vmm = Some((physical as usize, va as usize));
                say(shareable.to_string());
            }
            ["vmm-export-v2", value] => {
                let mut physical = ptr::null_mut();
                acl!(aclrtMallocPhysical(
                    &mut physical,
                    TWO_MIB,
                    &physical_prop(),
                    0
                ));
                let va = map_physical(physical);
                acl!(aclrtMemset(va, TWO_MIB, value.parse().unwrap(), TWO_MIB));
                let mut shareable = 0u64;
                acl!(aclrtMemExportToShareableHandleV2(
                    physical,
                    ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION as u64,
                    ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT,
                    (&raw mut shareable).cast()
                ));
                vmm = Some((physical as usize, va as usize));
                say(shareable.to_string());
            }
            ["vmm-allow", shareable, pid] => {
                let mut pid: i32 = pid.parse().unwrap();
                say(format!(
                    "code {}",
                    code!(aclrtMemSetPidToShareableHandle(
                        shareable.parse().unwrap(),
                        &mut pid,
                        1
                    ))
                ));
            }
            ["vmm-read-tail"] => {
                let (_, va) = vmm.unwrap();
                say(hex(&download::<u8>((va + TWO_MIB - 8) as *const c_void, 8)));
            }
            ["vmm-free"] => {
                let (physical, va) = vmm.take().unwrap();
                unmap_physical(va as *mut c_void);
                say(format!(
                    "code {}",
                    code!(aclrtFreePhysical(physical as aclrtDrvMemHandle))
                ));
            }
            ["notify-import", key] => {
                let key = c_string(key);
                say(format!(
                    "code {}",
                    code!(aclrtNotifyImportByKey(
                        &mut notify,
                        key.as_ptr(),
                        u64::from(ACL_RT_NOTIFY_IMPORT_FLAG_ENABLE_PEER_ACCESS)
                    ))
                ));
            }
            ["notify-export"] => {
                acl!(aclrtCreateNotify(
                    &mut notify,
                    u64::from(ACL_NOTIFY_DEFAULT)
                ));
                say(notify_key(
                    notify,
                    u64::from(ACL_RT_NOTIFY_EXPORT_FLAG_DISABLE_PID_VALIDATION),
                ));
            }
            ["notify-record"] => {
                let stream = create_stream();
                acl!(aclrtRecordNotify(notify, stream));
                acl!(aclrtSynchronizeStream(stream));
                acl!(aclrtDestroyStream(stream));
                say("code 0".into());
            }
            ["notify-wait"] => {
                let stream = create_stream();
                acl!(aclrtWaitAndResetNotify(notify, stream, 120));
                let code = code!(aclrtSynchronizeStream(stream));
                acl!(aclrtDestroyStream(stream));
                say(format!("code {code}"));
            }
            ["notify-destroy"] => say(format!("code {}", code!(aclrtDestroyNotify(notify)))),
            ["event-open", handle] => {
                event_stream = create_stream();
                say(format!(
                    "code {}",
                    code!(aclrtIpcOpenEventHandle(ipc_handle(handle), &mut event))
                ));
            }
            ["event-export"] => {
                acl!(aclrtCreateEventExWithFlag(&mut event, ACL_EVENT_IPC));
                say(event_handle(event));
            }
            ["event-status"] => {
                let mut status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
                acl!(aclrtQueryEventStatus(event, &mut status));
                say(status.to_string());
            }
            ["event-wait"] => say(format!(
                "code {}",
                code!(aclrtStreamWaitEvent(event_stream, event))
            )),
            ["event-record"] => say(format!(
                "code {}",
                code!(aclrtRecordEvent(event, event_stream))
            )),
            ["event-sync"] => say(format!(
                "code {}",
                code!(aclrtSynchronizeEventWithTimeout(event, 120_000))
            )),
            ["event-destroy"] => say(format!("code {}", code!(aclrtDestroyEvent(event)))),
            ["stream-status"] => {
                let mut status = ACL_STREAM_STATUS_COMPLETE;
                acl!(aclrtStreamQuery(event_stream, &mut status));
                say(status.to_string());
            }
            ["stream-sync"] => say(format!(
                "code {}",
                code!(aclrtSynchronizeStreamWithTimeout(event_stream, 120_000))
            )),
            ["stream-abort"] => say(format!("code {}", code!(aclrtStreamAbort(event_stream)))),
            ["hold"] => {
                npu_sim::control::hold(0).unwrap();
                say("code 0".into());
            }
            ["release"] => {
                npu_sim::control::release(0).unwrap();
                say("code 0".into());
            }
            ["exit"] => {
                say("bye".into());
                return;
            }
            other => panic!("unknown peer command {other:?}"),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Exports `[dev, dev+len)` and returns its key.
fn export(dev: *mut c_void, len: usize, flags: u64) -> String {
    let mut key = [0 as c_char; KEY_LEN];
    acl!(aclrtIpcMemGetExportKey(
        dev,
        len,
        key.as_mut_ptr(),
        KEY_LEN,
        flags
    ));
    // SAFETY: the simulator wrote a NUL-terminated key into the buffer.
    unsafe { CStr::from_ptr(key.as_ptr()) }
        .to_str()
        .unwrap()
        .to_owned()
}

/// Exports a notify and returns its key.
fn notify_key(notify: aclrtNotify, flags: u64) -> String {
    let mut key = [0 as c_char; KEY_LEN];
    acl!(aclrtNotifyGetExportKey(
        notify,
        key.as_mut_ptr(),
        KEY_LEN,
        flags
    ));
    // SAFETY: the simulator wrote a NUL-terminated key into the buffer.
    unsafe { CStr::from_ptr(key.as_ptr()) }
        .to_str()
        .unwrap()
        .to_owned()
}

/// The handle of an IPC event, as hex.
fn event_handle(event: aclrtEvent) -> String {
    let mut handle = aclrtIpcEventHandle::default();
    acl!(aclrtIpcGetEventHandle(event, &mut handle));
    hex(&handle.reserved.map(|byte| byte as u8))
}

/// An IPC event handle from its hex.
fn ipc_handle(hex: &str) -> aclrtIpcEventHandle {
    let mut handle = aclrtIpcEventHandle::default();
    for (at, byte) in handle.reserved.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * at..2 * at + 2], 16).unwrap() as c_char;
    }
    handle
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

/// The whitelist decides who imports; the importer's tasks write the exporter's memory and the
/// exporter sees it, at the address it always had; close withdraws a key.
#[test]
fn an_import_shares_the_exporters_memory_with_a_whitelisted_process_only() {
    set_device(0);
    let len = 3 * 4096 + 100;
    let dev = malloc(len);
    let before = pattern(len);
    upload(dev, &before);
    // A range inside the allocation, not page-aligned at its end.
    let (offset, size) = (4096 + 64, 8192);
    let key = export(
        dev.wrapping_add(offset),
        size,
        ACL_RT_IPC_MEM_EXPORT_FLAG_DEFAULT as u64,
    );
    assert!(key.len() < KEY_LEN);
    // The export moved nothing: same pointer, same bytes.
    assert_eq!(download::<u8>(dev, len), before);

    let mut peer = Peer::spawn();
    let pid = peer.pid();
    assert_eq!(
        peer.code(&format!("import {key} 0")),
        ACL_ERROR_RT_NO_PERMISSION
    );
    let mut pids = [pid + 1_000_000, pid];
    acl!(aclrtIpcMemSetImportPid(
        c_string(&key).as_ptr(),
        pids.as_mut_ptr(),
        2
    ));
    assert_eq!(peer.code(&format!("import {key} 0")), 0);
    assert_eq!(peer.ask("read 16"), hex(&before[offset..offset + 16]));
    // A second import of the same key in one process is refused.
    assert_eq!(
        peer.code(&format!("import {key} 0")),
        ACL_ERROR_RT_PARAM_INVALID
    );

    assert_eq!(peer.code(&format!("fill 171 {size}")), 0);
    let after = download::<u8>(dev, len);
    let mut expected = before.clone();
    expected[offset..offset + size].fill(171);
    assert_eq!(
        after, expected,
        "the exporter sees what the importer wrote, and nothing more"
    );

    // Imported memory is not the importer's to free.
    assert_eq!(peer.code("free-imported"), ACL_ERROR_RT_MEMORY_FREE);
    assert_eq!(peer.code(&format!("close {key}")), 0);
    assert_eq!(
        peer.code(&format!("close {key}")),
        ACL_ERROR_RT_PARAM_INVALID
    );
    // The exporter's close withdraws the key: a new import finds nothing to import.
    acl!(aclrtIpcMemClose(c_string(&key).as_ptr()));
    assert_eq!(
        peer.code(&format!("import {key} 0")),
        ACL_ERROR_RT_PARAM_INVALID
    );
    peer.exit();

    // The exporter's memory lives on as device memory until freed.
    upload(dev, &before);
    assert_eq!(download::<u8>(dev, len), before);
    acl!(aclrtFree(dev));
}

/// aclrtValueWait holds its stream until the word satisfies the comparison, whoever writes it:
/// a word of exported memory written by the importing process releases the exporter's wait.
/// It waited on, since no write of its own process woke it to read the word again.
#[test]
fn a_value_wait_sees_a_write_made_by_another_process() {
    value_wait_released_by_the_importer(true);
}

/// The same when the wait began before the memory was exported: the export makes the waiting
/// stream read the word again every so often from then on (it had looked once, when it began,
/// and waited on for ever). If the worker has not reached the wait by the export, the test
/// takes the path of the one above.
#[test]
fn a_value_wait_begun_before_the_export_sees_the_other_process_write() {
    value_wait_released_by_the_importer(false);
}

/// A value wait on a word of exported memory (exported before the wait is queued, or after it
/// held its stream), released by the importing process's write of the word.
fn value_wait_released_by_the_importer(export_first: bool) {
    set_device(0);
    let dev = malloc(4096);
    let export_it = || {
        export(
            dev,
            4096,
            ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION as u64,
        )
    };
    let early_key = export_first.then(export_it);
    let stream = create_stream();
    acl!(aclrtValueWait(
        dev,
        u64::from_ne_bytes([171; 8]),
        ACL_STREAM_WAIT_VALUE_EQ,
        stream
    ));
    // The word is still 0: the wait holds the stream (and has read the word meanwhile).
    assert_eq!(
        code!(aclrtSynchronizeStreamWithTimeout(stream, 200)),
        ACL_ERROR_RT_STREAM_SYNC_TIMEOUT
    );
    recent_message();
    let key = early_key.unwrap_or_else(export_it);
    let mut peer = Peer::spawn();
    assert_eq!(peer.code(&format!("import {key} 0")), 0);
    assert_eq!(peer.code("fill 171 8"), 0);
    assert_eq!(
        code!(aclrtSynchronizeStreamWithTimeout(stream, 20_000)),
        0,
        "the other process's write satisfies the wait: {}",
        recent_message()
    );
    peer.exit();
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFree(dev));
}

/// What the importer mapped stays valid when the exporter frees the memory and exits; a key of
/// a freed allocation names nothing, and one of an exited exporter fails as an IPC error.
#[test]
fn imported_memory_outlives_the_exporters_free_and_exit() {
    set_device(0);
    let mut peer = Peer::spawn();
    let freed = peer.ask("export 0 8192 7");
    let kept = peer.ask("export 0 4096 9");
    let mut first = ptr::null_mut();
    acl!(aclrtIpcMemImportByKey(
        &mut first,
        c_string(&freed).as_ptr(),
        ACL_RT_IPC_MEM_IMPORT_FLAG_DEFAULT as u64
    ));
    let mut second = ptr::null_mut();
    acl!(aclrtIpcMemImportByKey(
        &mut second,
        c_string(&kept).as_ptr(),
        ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS as u64
    ));
    assert_eq!(download::<u8>(first, 8192), vec![7; 8192]);

    assert_eq!(peer.code("free-exported"), 0);
    assert_eq!(download::<u8>(first, 8192), vec![7; 8192]);
    upload(first, &[1u8; 100]);
    assert_eq!(download::<u8>(first, 100), vec![1; 100]);
    acl!(aclrtIpcMemClose(c_string(&freed).as_ptr()));
    // Freeing withdrew the key, though its exporter is alive.
    let mut again = ptr::null_mut();
    assert_eq!(
        code!(aclrtIpcMemImportByKey(
            &mut again,
            c_string(&freed).as_ptr(),
            0
        )),
        ACL_ERROR_RT_PARAM_INVALID
    );

    peer.exit();
    assert_eq!(download::<u8>(second, 4096), vec![9; 4096]);
    acl!(aclrtIpcMemClose(c_string(&kept).as_ptr()));
    assert_eq!(
        code!(aclrtIpcMemImportByKey(
            &mut again,
            c_string(&kept).as_ptr(),
            0
        )),
        ACL_ERROR_RT_IPC_ERROR
    );
    assert!(again.is_null());
}

/// Every parameter check of the IPC memory functions, in the order CANN makes them.
#[test]
fn every_ipc_memory_error_path() {
    set_device(0);
    let dev = malloc(4096);
    let host = malloc_host(4096);
    let mut key = [0 as c_char; KEY_LEN];
    let k = key.as_mut_ptr();
    let mut out = ptr::null_mut();
    let mut pid = [1];
    let valid = export(dev, 4096, 0);
    let valid_key = c_string(&valid);
    let own = valid_key.as_ptr();
    let junk = c_string("not-a-key");
    let absent = c_string("npusim-ipc-1-0-0");
    // On a thread without a context, the pointers are checked before the context is looked up.
    let key_at = own as usize;
    let no_context = std::thread::spawn(move || {
        let own = key_at as *const c_char;
        let mut out = ptr::null_mut();
        [
            code!(aclrtIpcMemImportByKey(ptr::null_mut(), own, 0)),
            code!(aclrtIpcMemImportByKey(&mut out, ptr::null(), 0)),
            code!(aclrtIpcMemImportByKey(&mut out, own, 0)),
        ]
    })
    .join()
    .unwrap();
    let mut managed = ptr::null_mut();
    acl!(aclrtMemAllocManaged(
        &mut managed,
        4096,
        ACL_RT_MEM_ATTACH_GLOBAL
    ));
    let props = aclrtMemPoolProps {
        allocType: ACL_MEM_ALLOCATION_TYPE_PINNED,
        handleType: ACL_MEM_HANDLE_TYPE_NONE,
        location: aclrtMemLocation {
            id: 0,
            type_: ACL_MEM_LOCATION_TYPE_DEVICE,
        },
        maxSize: 0,
        reserved: [0; 32],
    };
    let mut pool = ptr::null_mut();
    acl!(aclrtMemPoolCreate(&mut pool, &props));
    let stream = create_stream();
    let mut pooled = ptr::null_mut();
    acl!(aclrtMemPoolMallocAsync(&mut pooled, 4096, pool, stream));
    let cases: [(&str, aclError, aclError); 26] = [
        (
            "export NULL devPtr",
            code!(aclrtIpcMemGetExportKey(ptr::null_mut(), 64, k, KEY_LEN, 0)),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "export NULL key",
            code!(aclrtIpcMemGetExportKey(
                dev,
                64,
                ptr::null_mut(),
                KEY_LEN,
                0
            )),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "export size 0",
            code!(aclrtIpcMemGetExportKey(dev, 0, k, KEY_LEN, 0)),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "export short len",
            code!(aclrtIpcMemGetExportKey(dev, 64, k, KEY_LEN - 1, 0)),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "export unknown flag",
            code!(aclrtIpcMemGetExportKey(dev, 64, k, KEY_LEN, 2)),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "export host memory",
            code!(aclrtIpcMemGetExportKey(host, 64, k, KEY_LEN, 0)),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "export managed memory",
            code!(aclrtIpcMemGetExportKey(managed, 64, k, KEY_LEN, 0)),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "export pool memory",
            code!(aclrtIpcMemGetExportKey(pooled, 64, k, KEY_LEN, 0)),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "export past the end",
            code!(aclrtIpcMemGetExportKey(
                dev.wrapping_add(64),
                4096,
                k,
                KEY_LEN,
                0
            )),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "set pid NULL key",
            code!(aclrtIpcMemSetImportPid(ptr::null(), pid.as_mut_ptr(), 1)),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "set pid NULL pid",
            code!(aclrtIpcMemSetImportPid(own, ptr::null_mut(), 1)),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "set pid num 0",
            code!(aclrtIpcMemSetImportPid(own, pid.as_mut_ptr(), 0)),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "set pid unknown key",
            code!(aclrtIpcMemSetImportPid(junk.as_ptr(), pid.as_mut_ptr(), 1)),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "set pid not a pid",
            code!(aclrtIpcMemSetImportPid(own, [0].as_mut_ptr(), 1)),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "import NULL devPtr",
            code!(aclrtIpcMemImportByKey(ptr::null_mut(), own, 0)),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "import NULL key",
            code!(aclrtIpcMemImportByKey(&mut out, ptr::null(), 0)),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "import unknown flag",
            code!(aclrtIpcMemImportByKey(&mut out, own, 2)),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "import malformed key",
            code!(aclrtIpcMemImportByKey(&mut out, junk.as_ptr(), 0)),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "import own key",
            code!(aclrtIpcMemImportByKey(&mut out, own, 0)),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "import NULL devPtr without a context",
            no_context[0],
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "import NULL key without a context",
            no_context[1],
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "import without a context",
            no_context[2],
            ACL_ERROR_RT_CONTEXT_NULL,
        ),
        (
            "close NULL key",
            code!(aclrtIpcMemClose(ptr::null())),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "close unknown key",
            code!(aclrtIpcMemClose(absent.as_ptr())),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "set attr on an A2",
            code!(aclrtIpcMemSetAttr(
                own,
                ACL_RT_IPC_MEM_ATTR_ACCESS_LINK,
                ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_HCCS as u64
            )),
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        ),
        (
            "inter-server pids on an A2",
            code!(aclrtIpcMemImportPidInterServer(own, ptr::null_mut(), 0)),
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        ),
    ];
    for (case, got, want) in cases {
        assert_eq!(got, want, "{case}: {}", recent_message());
    }
    assert_eq!(
        code!(aclrtIpcMemSetAttr(
            ptr::null(),
            ACL_RT_IPC_MEM_ATTR_ACCESS_LINK,
            0
        )),
        ACL_ERROR_INVALID_PARAM
    );
    assert_eq!(
        code!(aclrtIpcMemImportPidInterServer(
            ptr::null(),
            ptr::null_mut(),
            0
        )),
        ACL_ERROR_INVALID_PARAM
    );
    // NULL pids are refused only when some are counted, as every array argument.
    assert_eq!(
        code!(aclrtIpcMemImportPidInterServer(own, ptr::null_mut(), 2)),
        ACL_ERROR_INVALID_PARAM
    );
    assert!(out.is_null());
    acl!(aclrtIpcMemClose(own));
    acl!(aclrtFree(dev));
    acl!(aclrtFreeHost(host));
    acl!(aclrtFree(managed));
    acl!(aclrtMemPoolFreeAsync(pooled, stream));
    acl!(aclrtSynchronizeStream(stream));
    acl!(aclrtMemPoolDestroy(pool));
    acl!(aclrtDestroyStream(stream));
}

/// A device allocation exported while it holds data keeps its bytes and its address, and
/// freeing it before closing its key withdraws the key.
#[test]
fn freeing_exported_memory_withdraws_its_keys() {
    set_device(0);
    let dev = malloc(100);
    upload(dev, &[5u8; 100]);
    let key = export(
        dev,
        100,
        ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION as u64,
    );
    let again = export(dev, 50, 0);
    assert_ne!(key, again, "every export has its own key");
    assert_eq!(download::<u8>(dev, 100), vec![5; 100]);
    acl!(aclrtFree(dev));
    for key in [key, again] {
        assert_eq!(
            code!(aclrtIpcMemClose(c_string(&key).as_ptr())),
            ACL_ERROR_RT_PARAM_INVALID
        );
    }
}

/// A record in one process releases a wait on a stream of another, both ways; the whitelist
/// decides who imports; destroying the exporter's notify withdraws its key, and a key of an
/// exited exporter fails as an IPC error.
#[test]
fn a_notify_shared_by_key_orders_streams_of_two_processes() {
    set_device(0);
    let mut notify = ptr::null_mut();
    acl!(aclrtCreateNotify(
        &mut notify,
        u64::from(ACL_NOTIFY_DEFAULT)
    ));
    let key = notify_key(notify, u64::from(ACL_RT_NOTIFY_EXPORT_FLAG_DEFAULT));
    let dev = malloc(64);
    let memory_key = export(
        dev,
        64,
        ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION as u64,
    );

    let mut peer = Peer::spawn();
    let mut pid = peer.pid();
    assert_eq!(
        peer.code(&format!("notify-import {key}")),
        ACL_ERROR_RT_NO_PERMISSION
    );
    acl!(aclrtNotifySetImportPid(notify, &mut pid, 1));
    // A memory key is no notify, nor the other way round.
    assert_eq!(
        peer.code(&format!("notify-import {memory_key}")),
        ACL_ERROR_RT_PARAM_INVALID
    );
    assert_eq!(
        peer.code(&format!("import {key} 0")),
        ACL_ERROR_RT_PARAM_INVALID
    );
    // Memory's close does not withdraw a notify's key.
    assert_eq!(
        code!(aclrtIpcMemClose(c_string(&key).as_ptr())),
        ACL_ERROR_RT_PARAM_INVALID
    );
    assert_eq!(peer.code(&format!("notify-import {key}")), 0);

    // This process waits; only the peer's record can release it.
    let stream = create_stream();
    let after = create_event();
    acl!(aclrtWaitAndResetNotify(notify, stream, 0));
    acl!(aclrtRecordEvent(after, stream));
    let mut status = ACL_EVENT_RECORDED_STATUS_COMPLETE;
    acl!(aclrtQueryEventStatus(after, &mut status));
    assert_eq!(status, ACL_EVENT_RECORDED_STATUS_NOT_READY);
    assert_eq!(peer.code("notify-record"), 0);
    acl!(aclrtSynchronizeStreamWithTimeout(stream, 120_000));
    acl!(aclrtQueryEventStatus(after, &mut status));
    assert_eq!(status, ACL_EVENT_RECORDED_STATUS_COMPLETE);

    // And the other way: this process records, the peer's wait is satisfied.
    acl!(aclrtRecordNotify(notify, stream));
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(peer.code("notify-wait"), 0);
    assert_eq!(peer.code("notify-destroy"), 0);

    acl!(aclrtDestroyNotify(notify));
    assert_eq!(
        peer.code(&format!("notify-import {key}")),
        ACL_ERROR_RT_PARAM_INVALID
    );
    let gone = peer.ask("notify-export");
    peer.exit();
    let mut imported = ptr::null_mut();
    assert_eq!(
        code!(aclrtNotifyImportByKey(
            &mut imported,
            c_string(&gone).as_ptr(),
            0
        )),
        ACL_ERROR_RT_IPC_ERROR
    );
    assert!(imported.is_null());
    acl!(aclrtDestroyEvent(after));
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtIpcMemClose(c_string(&memory_key).as_ptr()));
    acl!(aclrtFree(dev));
}

/// Every parameter check of the IPC notify functions.
#[test]
fn every_ipc_notify_error_path() {
    set_device(0);
    let mut notify = ptr::null_mut();
    acl!(aclrtCreateNotify(
        &mut notify,
        u64::from(ACL_NOTIFY_DEFAULT)
    ));
    let mut unexported = ptr::null_mut();
    acl!(aclrtCreateNotify(
        &mut unexported,
        u64::from(ACL_NOTIFY_DEFAULT)
    ));
    let mut stale = ptr::null_mut();
    acl!(aclrtCreateNotify(&mut stale, u64::from(ACL_NOTIFY_DEFAULT)));
    acl!(aclrtDestroyNotify(stale));
    let own = c_string(&notify_key(notify, 0));
    let mut key = [0 as c_char; KEY_LEN];
    let k = key.as_mut_ptr();
    let mut pid = [1];
    let p = pid.as_mut_ptr();
    let mut out = ptr::null_mut();
    let junk = c_string("not-a-key");
    let cases: [(&str, aclError, aclError); 24] = [
        (
            "export NULL notify",
            code!(aclrtNotifyGetExportKey(ptr::null_mut(), k, KEY_LEN, 0)),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "export stale notify",
            code!(aclrtNotifyGetExportKey(stale, k, KEY_LEN, 0)),
            ACL_ERROR_RT_INVALID_HANDLE,
        ),
        (
            "export NULL key",
            code!(aclrtNotifyGetExportKey(notify, ptr::null_mut(), KEY_LEN, 0)),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "export stale notify into NULL key: the pointer is checked first",
            code!(aclrtNotifyGetExportKey(stale, ptr::null_mut(), KEY_LEN, 0)),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "export short len",
            code!(aclrtNotifyGetExportKey(notify, k, KEY_LEN - 1, 0)),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "export memory's flag",
            code!(aclrtNotifyGetExportKey(notify, k, KEY_LEN, 1)),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "export stale notify with a short len: the len is checked first",
            code!(aclrtNotifyGetExportKey(stale, k, KEY_LEN - 1, 0)),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "export stale notify with memory's flag: the flags are checked first",
            code!(aclrtNotifyGetExportKey(stale, k, KEY_LEN, 1)),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "set pid NULL notify",
            code!(aclrtNotifySetImportPid(ptr::null_mut(), p, 1)),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "set pid stale notify",
            code!(aclrtNotifySetImportPid(stale, p, 1)),
            ACL_ERROR_RT_INVALID_HANDLE,
        ),
        (
            "set pid NULL pid",
            code!(aclrtNotifySetImportPid(notify, ptr::null_mut(), 1)),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "set pid num 0",
            code!(aclrtNotifySetImportPid(notify, p, 0)),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "set NULL pid of a stale notify: the pointer is checked first",
            code!(aclrtNotifySetImportPid(stale, ptr::null_mut(), 1)),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "set pid num 0 of a stale notify: the count is checked first",
            code!(aclrtNotifySetImportPid(stale, p, 0)),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "set pid not exported",
            code!(aclrtNotifySetImportPid(unexported, p, 1)),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "set pid not a pid",
            code!(aclrtNotifySetImportPid(notify, [-5].as_mut_ptr(), 1)),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "import NULL notify",
            code!(aclrtNotifyImportByKey(ptr::null_mut(), own.as_ptr(), 0)),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "import NULL key",
            code!(aclrtNotifyImportByKey(&mut out, ptr::null(), 0)),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "import memory's flag",
            code!(aclrtNotifyImportByKey(&mut out, own.as_ptr(), 1)),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "import malformed key",
            code!(aclrtNotifyImportByKey(&mut out, junk.as_ptr(), 0)),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "import own key",
            code!(aclrtNotifyImportByKey(&mut out, own.as_ptr(), 0)),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "inter-server NULL notify",
            code!(aclrtNotifySetImportPidInterServer(
                ptr::null_mut(),
                ptr::null_mut(),
                0
            )),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "inter-server on an A2",
            code!(aclrtNotifySetImportPidInterServer(
                notify,
                ptr::null_mut(),
                0
            )),
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        ),
        (
            "inter-server NULL pids counted",
            code!(aclrtNotifySetImportPidInterServer(
                notify,
                ptr::null_mut(),
                1
            )),
            ACL_ERROR_INVALID_PARAM,
        ),
    ];
    for (case, got, want) in cases {
        assert_eq!(got, want, "{case}: {}", recent_message());
    }
    assert!(out.is_null());
    // A notify exported twice has two keys; both whitelists take the pids.
    let again = notify_key(notify, 0);
    assert_ne!(again, own.to_str().unwrap());
    acl!(aclrtNotifySetImportPid(notify, p, 1));
    acl!(aclrtDestroyNotify(notify));
    acl!(aclrtDestroyNotify(unexported));
}

/// Memory of a device this process's simulator does not have cannot be imported (the two
/// processes were configured with different device counts).
#[test]
fn memory_of_a_device_the_importer_lacks_is_refused() {
    set_device(0);
    let mut peer = Peer::spawn_with(r#"{"devices": 3}"#);
    let key = peer.ask("export 2 64 1");
    let mut dev = ptr::null_mut();
    assert_eq!(
        code!(aclrtIpcMemImportByKey(&mut dev, c_string(&key).as_ptr(), 0)),
        ACL_ERROR_RT_IPC_ERROR,
        "{}",
        recent_message()
    );
    assert!(dev.is_null());
    peer.exit();
}

const TWO_MIB: usize = 2 << 20;

fn physical_prop() -> aclrtPhysicalMemProp {
    aclrtPhysicalMemProp {
        handleType: ACL_MEM_HANDLE_TYPE_NONE,
        allocationType: ACL_MEM_ALLOCATION_TYPE_PINNED,
        memAttr: ACL_HBM_MEM_HUGE,
        location: aclrtMemLocation {
            id: 0,
            type_: ACL_MEM_LOCATION_TYPE_DEVICE,
        },
        reserve: 0,
    }
}

/// Reserves addresses for `handle`'s 2 MiB and maps it there.
fn map_physical(handle: aclrtDrvMemHandle) -> *mut c_void {
    let mut va = ptr::null_mut();
    acl!(aclrtReserveMemAddress(
        &mut va,
        TWO_MIB,
        0,
        ptr::null_mut(),
        0
    ));
    acl!(aclrtMapMem(va, TWO_MIB, 0, handle, 0));
    va
}

fn unmap_physical(va: *mut c_void) {
    acl!(aclrtUnmapMem(va));
    acl!(aclrtReleaseMemAddress(va));
}

/// Physical memory shared by a shareable handle: the importer maps it at its own address and
/// both processes see each other's writes; the whitelist decides who imports; freeing withdraws
/// the handle, and a handle of an exited exporter fails as an IPC error.
#[test]
fn physical_memory_shared_by_a_shareable_handle_is_one_memory_in_two_processes() {
    set_device(0);
    let mut pid = 0;
    acl!(aclrtDeviceGetBareTgid(&mut pid));
    let mut peer = Peer::spawn();
    let shareable: u64 = peer.ask("vmm-export 42").parse().unwrap();
    let mut handle = ptr::null_mut();
    assert_eq!(
        code!(aclrtMemImportFromShareableHandle(shareable, 0, &mut handle)),
        ACL_ERROR_RT_NO_PERMISSION
    );
    assert_eq!(peer.code(&format!("vmm-allow {shareable} {pid}")), 0);
    // Imported on device 1: the exporter's memory is reachable from every device.
    acl!(aclrtMemImportFromShareableHandle(shareable, 1, &mut handle));
    let mut again = ptr::null_mut();
    assert_eq!(
        code!(aclrtMemImportFromShareableHandle(shareable, 0, &mut again)),
        ACL_ERROR_RT_PARAM_INVALID
    );
    let mut prop = physical_prop();
    acl!(aclrtMemGetAllocationPropertiesFromHandle(handle, &mut prop));
    assert_eq!((prop.location.id, prop.memAttr), (1, ACL_HBM_MEM_HUGE));

    let va = map_physical(handle);
    assert_eq!(download::<u8>(va, 64), vec![42; 64]);
    upload(va.wrapping_add(TWO_MIB - 8), &[7u8; 8]);
    assert_eq!(peer.ask("vmm-read-tail"), hex(&[7u8; 8]));
    unmap_physical(va);
    acl!(aclrtFreePhysical(handle));
    // Freed, it may be imported again.
    acl!(aclrtMemImportFromShareableHandle(shareable, 0, &mut handle));
    let va = map_physical(handle);
    // Only memory this process allocated can be exported: an import cannot be passed on.
    let mut passed_on = 0u64;
    assert_eq!(
        code!(aclrtMemExportToShareableHandle(
            handle,
            ACL_MEM_HANDLE_TYPE_NONE,
            0,
            &mut passed_on
        )),
        ACL_ERROR_RT_PARAM_INVALID
    );
    assert!(recent_message().contains("imported from another process"));
    // One range cannot map both imported memory and this process's own physical memory.
    let mut mixed = ptr::null_mut();
    acl!(aclrtReserveMemAddress(
        &mut mixed,
        2 * TWO_MIB,
        0,
        ptr::null_mut(),
        0
    ));
    acl!(aclrtMapMem(mixed, TWO_MIB, 0, handle, 0));
    let mut own = ptr::null_mut();
    acl!(aclrtMallocPhysical(&mut own, TWO_MIB, &physical_prop(), 0));
    assert_eq!(
        code!(aclrtMapMem(mixed.wrapping_add(TWO_MIB), TWO_MIB, 0, own, 0)),
        ACL_ERROR_RT_PARAM_INVALID
    );
    assert!(recent_message().contains("imported from another process"));
    unmap_physical(mixed);
    acl!(aclrtFreePhysical(own));

    // The exporter frees its memory: the handle is withdrawn, what was mapped stays.
    assert_eq!(peer.code("vmm-free"), 0);
    assert_eq!(
        code!(aclrtMemImportFromShareableHandle(shareable, 0, &mut again)),
        ACL_ERROR_RT_PARAM_INVALID
    );
    assert_eq!(download::<u8>(va.wrapping_add(TWO_MIB - 8), 8), vec![7; 8]);
    let gone: u64 = peer.ask("vmm-export 1").parse().unwrap();
    peer.exit();
    assert_eq!(
        code!(aclrtMemImportFromShareableHandle(gone, 0, &mut again)),
        ACL_ERROR_RT_IPC_ERROR
    );
    assert!(again.is_null());
    unmap_physical(va);
    acl!(aclrtFreePhysical(handle));
}

/// Every parameter check of the shareable-handle functions.
#[test]
fn every_shareable_handle_error_path() {
    set_device(0);
    let mut physical = ptr::null_mut();
    acl!(aclrtMallocPhysical(
        &mut physical,
        TWO_MIB,
        &physical_prop(),
        0
    ));
    let mut freed = ptr::null_mut();
    acl!(aclrtMallocPhysical(
        &mut freed,
        TWO_MIB,
        &physical_prop(),
        0
    ));
    acl!(aclrtFreePhysical(freed));
    let mut shareable = 0u64;
    acl!(aclrtMemExportToShareableHandle(
        physical,
        ACL_MEM_HANDLE_TYPE_NONE,
        0,
        &mut shareable
    ));
    let mut out = 0u64;
    let mut pid = [1];
    let p = pid.as_mut_ptr();
    let mut handle = ptr::null_mut();
    let none = ACL_MEM_HANDLE_TYPE_NONE;
    let cases: [(&str, aclError, aclError); 15] = [
        (
            // The NULL output is the ACL layer's refusal, before the handle is looked up.
            "export freed handle into NULL",
            code!(aclrtMemExportToShareableHandle(
                freed,
                none,
                0,
                ptr::null_mut()
            )),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "export NULL handle",
            code!(aclrtMemExportToShareableHandle(
                ptr::null_mut(),
                none,
                0,
                &mut out
            )),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "export freed handle",
            code!(aclrtMemExportToShareableHandle(freed, none, 0, &mut out)),
            ACL_ERROR_RT_INVALID_HANDLE,
        ),
        (
            "export POSIX type",
            code!(aclrtMemExportToShareableHandle(
                physical,
                ACL_MEM_HANDLE_TYPE_POSIX,
                0,
                &mut out
            )),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "export unknown flag",
            code!(aclrtMemExportToShareableHandle(physical, none, 2, &mut out)),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "export into NULL",
            code!(aclrtMemExportToShareableHandle(
                physical,
                none,
                0,
                ptr::null_mut()
            )),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "export twice",
            code!(aclrtMemExportToShareableHandle(physical, none, 0, &mut out)),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "set pid NULL pid",
            code!(aclrtMemSetPidToShareableHandle(
                shareable,
                ptr::null_mut(),
                1
            )),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "set pid num 0",
            code!(aclrtMemSetPidToShareableHandle(shareable, p, 0)),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "set pid not exported",
            code!(aclrtMemSetPidToShareableHandle(shareable ^ 1, p, 1)),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "set pid not a pid",
            code!(aclrtMemSetPidToShareableHandle(
                shareable,
                [0].as_mut_ptr(),
                1
            )),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "import into NULL",
            code!(aclrtMemImportFromShareableHandle(
                shareable,
                0,
                ptr::null_mut()
            )),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "import on device 99",
            code!(aclrtMemImportFromShareableHandle(
                shareable,
                99,
                &mut handle
            )),
            ACL_ERROR_RT_INVALID_DEVICEID,
        ),
        (
            "import own handle",
            code!(aclrtMemImportFromShareableHandle(shareable, 0, &mut handle)),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "import handle of pid 0",
            code!(aclrtMemImportFromShareableHandle(7, 0, &mut handle)),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
    ];
    for (case, got, want) in cases {
        assert_eq!(got, want, "{case}: {}", recent_message());
    }
    assert!(handle.is_null());
    acl!(aclrtMemSetPidToShareableHandle(shareable, p, 1));
    acl!(aclrtFreePhysical(physical));
    // Freeing withdrew the shareable handle.
    assert_eq!(
        code!(aclrtMemSetPidToShareableHandle(shareable, p, 1)),
        ACL_ERROR_RT_PARAM_INVALID
    );
}

/// The V2 forms share the same way, the handle behind a pointer; the import makes a handle of
/// the current device.
#[test]
fn the_v2_shareable_handle_forms_share_physical_memory_too() {
    set_device(1);
    let mut peer = Peer::spawn();
    let mut shareable: u64 = peer.ask("vmm-export-v2 9").parse().unwrap();
    let mut handle = ptr::null_mut();
    acl!(aclrtMemImportFromShareableHandleV2(
        (&raw mut shareable).cast(),
        ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT,
        0,
        &mut handle
    ));
    let mut prop = physical_prop();
    acl!(aclrtMemGetAllocationPropertiesFromHandle(handle, &mut prop));
    assert_eq!(prop.location.id, 1);
    let va = map_physical(handle);
    assert_eq!(download::<u8>(va, 16), vec![9; 16]);
    unmap_physical(va);
    acl!(aclrtFreePhysical(handle));
    assert_eq!(peer.code("vmm-free"), 0);
    peer.exit();
}

/// Every parameter check the V2 forms add: the share type, the handle pointer, the flags.
#[test]
fn every_v2_shareable_handle_error_path() {
    set_device(0);
    let mut physical = ptr::null_mut();
    acl!(aclrtMallocPhysical(
        &mut physical,
        TWO_MIB,
        &physical_prop(),
        0
    ));
    let mut shareable = 0u64;
    let s = (&raw mut shareable).cast::<c_void>();
    let default = ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT;
    let fabric = ACL_MEM_SHARE_HANDLE_TYPE_FABRIC;
    let mut pid = [1];
    let p = pid.as_mut_ptr();
    let mut handle = ptr::null_mut();
    let cases: [(&str, aclError, aclError); 16] = [
        // The flags come before the share type, in the parameters' order.
        (
            "export FABRIC with flag 4",
            code!(aclrtMemExportToShareableHandleV2(physical, 4, fabric, s)),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "export FABRIC",
            code!(aclrtMemExportToShareableHandleV2(physical, 0, fabric, s)),
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        ),
        // A NULL pointer is the ACL layer's refusal, before the share type is checked.
        (
            "export FABRIC into NULL",
            code!(aclrtMemExportToShareableHandleV2(
                physical,
                0,
                fabric,
                ptr::null_mut()
            )),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "set NULL pid FABRIC",
            code!(aclrtMemSetPidToShareableHandleV2(
                s,
                fabric,
                ptr::null_mut(),
                1
            )),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "set pid num 0 FABRIC",
            code!(aclrtMemSetPidToShareableHandleV2(s, fabric, p, 0)),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "import FABRIC into NULL",
            code!(aclrtMemImportFromShareableHandleV2(
                s,
                fabric,
                0,
                ptr::null_mut()
            )),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "export unknown type",
            code!(aclrtMemExportToShareableHandleV2(physical, 0, 7, s)),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "export NULL handle",
            code!(aclrtMemExportToShareableHandleV2(
                ptr::null_mut(),
                0,
                default,
                s
            )),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "export into NULL",
            code!(aclrtMemExportToShareableHandleV2(
                physical,
                0,
                default,
                ptr::null_mut()
            )),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "export unknown flag",
            code!(aclrtMemExportToShareableHandleV2(physical, 4, default, s)),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "set pid NULL handle",
            code!(aclrtMemSetPidToShareableHandleV2(
                ptr::null_mut(),
                default,
                p,
                1
            )),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "set pid FABRIC",
            code!(aclrtMemSetPidToShareableHandleV2(s, fabric, p, 1)),
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        ),
        (
            "import NULL shareable",
            code!(aclrtMemImportFromShareableHandleV2(
                ptr::null_mut(),
                default,
                0,
                &mut handle
            )),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "import FABRIC",
            code!(aclrtMemImportFromShareableHandleV2(
                s,
                fabric,
                0,
                &mut handle
            )),
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        ),
        (
            "import flags 1",
            code!(aclrtMemImportFromShareableHandleV2(
                s,
                default,
                1,
                &mut handle
            )),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "import into NULL",
            code!(aclrtMemImportFromShareableHandleV2(
                s,
                default,
                0,
                ptr::null_mut()
            )),
            ACL_ERROR_INVALID_PARAM,
        ),
    ];
    for (case, got, want) in cases {
        assert_eq!(got, want, "{case}: {}", recent_message());
    }
    acl!(aclrtMemExportToShareableHandleV2(physical, 0, default, s));
    acl!(aclrtMemSetPidToShareableHandleV2(s, default, p, 1));
    let shareable_addr = s as usize;
    let without_context = std::thread::spawn(move || {
        let mut handle = ptr::null_mut();
        code!(aclrtMemImportFromShareableHandleV2(
            shareable_addr as *mut c_void,
            ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT,
            0,
            &mut handle
        ))
    })
    .join()
    .unwrap();
    assert_eq!(without_context, ACL_ERROR_RT_CONTEXT_NULL);
    assert!(handle.is_null());
    acl!(aclrtFreePhysical(physical));
}

/// An IPC event orders streams of two processes both ways: the peer's wait holds until this
/// process's record is reached, this process's wait until the peer's is; a record the peer's
/// stream drops fails the waits on it; destroying the exported event withdraws its handle.
#[test]
fn an_ipc_event_orders_streams_of_two_processes() {
    set_device(0);
    let mut event = ptr::null_mut();
    acl!(aclrtCreateEventExWithFlag(&mut event, ACL_EVENT_IPC));
    let handle = event_handle(event);
    assert_eq!(event_handle(event), handle, "one handle per event");
    let mut peer = Peer::spawn();
    assert_eq!(peer.code(&format!("event-open {handle}")), 0);
    // Opened before anything was recorded: an Ex event never recorded is complete.
    assert_eq!(
        peer.ask("event-status"),
        ACL_EVENT_RECORDED_STATUS_COMPLETE.to_string()
    );

    // This process records behind a notify only it can set, so the record stays pending.
    let mut gate = ptr::null_mut();
    acl!(aclrtCreateNotify(&mut gate, u64::from(ACL_NOTIFY_DEFAULT)));
    let stream = create_stream();
    acl!(aclrtWaitAndResetNotify(gate, stream, 0));
    acl!(aclrtRecordEvent(event, stream));
    assert_eq!(
        peer.ask("event-status"),
        ACL_EVENT_RECORDED_STATUS_NOT_READY.to_string()
    );
    assert_eq!(peer.code("event-wait"), 0);
    assert_eq!(
        peer.ask("stream-status"),
        ACL_STREAM_STATUS_NOT_READY.to_string()
    );
    let other = create_stream();
    acl!(aclrtRecordNotify(gate, other));
    assert_eq!(peer.code("stream-sync"), 0);
    assert_eq!(peer.code("event-sync"), 0);
    assert_eq!(
        peer.ask("event-status"),
        ACL_EVENT_RECORDED_STATUS_COMPLETE.to_string()
    );

    // The other way: the peer's record, held by its device's hold gate, holds this process's
    // wait and sync until the peer releases it.
    assert_eq!(peer.code("hold"), 0);
    assert_eq!(peer.code("event-record"), 0);
    let mut status = ACL_EVENT_RECORDED_STATUS_COMPLETE;
    acl!(aclrtQueryEventStatus(event, &mut status));
    assert_eq!(status, ACL_EVENT_RECORDED_STATUS_NOT_READY);
    assert_eq!(
        code!(aclrtSynchronizeEventWithTimeout(event, 50)),
        ACL_ERROR_RT_EVENT_SYNC_TIMEOUT
    );
    acl!(aclrtStreamWaitEvent(stream, event));
    let after = create_event();
    acl!(aclrtRecordEvent(after, stream));
    acl!(aclrtQueryEventStatus(after, &mut status));
    assert_eq!(status, ACL_EVENT_RECORDED_STATUS_NOT_READY);
    assert_eq!(peer.code("release"), 0);
    acl!(aclrtSynchronizeStreamWithTimeout(stream, 120_000));
    acl!(aclrtSynchronizeEventWithTimeout(event, 120_000));
    acl!(aclrtQueryEventStatus(event, &mut status));
    assert_eq!(status, ACL_EVENT_RECORDED_STATUS_COMPLETE);

    // A record the peer's stream drops unreached fails the waits on it.
    assert_eq!(peer.code("hold"), 0);
    assert_eq!(peer.code("event-record"), 0);
    assert_eq!(peer.code("stream-abort"), 0);
    assert_eq!(peer.code("release"), 0);
    assert_eq!(
        code!(aclrtSynchronizeEventWithTimeout(event, 120_000)),
        ACL_ERROR_RT_STREAM_ABORT
    );
    acl!(aclrtStreamWaitEvent(stream, event));
    assert_eq!(
        code!(aclrtSynchronizeStreamWithTimeout(stream, 120_000)),
        ACL_ERROR_RT_STREAM_ABORT
    );
    // A later record completes again.
    acl!(aclrtRecordEvent(event, stream));
    assert_eq!(peer.code("event-sync"), 0);

    // Destroying the exported event withdraws its handle; the peer's event lives on.
    acl!(aclrtDestroyEvent(event));
    assert_eq!(
        peer.code(&format!("event-open {handle}")),
        ACL_ERROR_RT_PARAM_INVALID
    );
    assert_eq!(peer.code("event-destroy"), 0);

    // An exporter that has exited cannot be asked for its event.
    assert_eq!(peer.code("event-destroy"), ACL_ERROR_RT_INVALID_HANDLE);
    let gone = peer.ask("event-export");
    peer.exit();
    let mut opened = ptr::null_mut();
    assert_eq!(
        code!(aclrtIpcOpenEventHandle(ipc_handle(&gone), &mut opened)),
        ACL_ERROR_RT_IPC_ERROR
    );
    assert!(opened.is_null());
    for stream in [stream, other] {
        acl!(aclrtDestroyStream(stream));
    }
    acl!(aclrtDestroyEvent(after));
    acl!(aclrtDestroyNotify(gate));
}

/// Every parameter check of the IPC event functions, and the uses an IPC event refuses.
#[test]
fn every_ipc_event_error_path() {
    set_device(0);
    let mut ipc = ptr::null_mut();
    acl!(aclrtCreateEventExWithFlag(&mut ipc, ACL_EVENT_IPC));
    let mut sync = ptr::null_mut();
    acl!(aclrtCreateEventExWithFlag(&mut sync, ACL_EVENT_SYNC));
    let legacy = create_event();
    let stale = create_event();
    acl!(aclrtDestroyEvent(stale));
    let own = ipc_handle(&event_handle(ipc));
    let mut handle = aclrtIpcEventHandle::default();
    let mut out = ptr::null_mut();
    let no_nul = aclrtIpcEventHandle {
        reserved: [b'a' as c_char; ACL_IPC_EVENT_HANDLE_SIZE as usize],
    };
    let dev = malloc(64);
    let memory_key = export(dev, 64, 0);
    let mut memory = aclrtIpcEventHandle::default();
    for (slot, byte) in memory.reserved.iter_mut().zip(memory_key.bytes()) {
        *slot = byte as c_char;
    }
    let no_context = std::thread::spawn(move || {
        let mut out = ptr::null_mut();
        code!(aclrtIpcOpenEventHandle(own, &mut out))
    })
    .join()
    .unwrap();
    let stream = create_stream();
    let capturing = create_stream();
    acl!(aclmdlRICaptureBegin(
        capturing,
        ACL_MODEL_RI_CAPTURE_MODE_RELAXED
    ));
    let mut id = 0;
    let mut ts = 0;
    let mut ms = 0.0f32;
    let mut status = ACL_EVENT_STATUS_COMPLETE;
    let mut wait_status = ACL_EVENT_WAIT_STATUS_COMPLETE;
    let cases: [(&str, aclError, aclError); 18] = [
        (
            "handle of NULL",
            code!(aclrtIpcGetEventHandle(ptr::null_mut(), &mut handle)),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "handle into NULL",
            code!(aclrtIpcGetEventHandle(ipc, ptr::null_mut())),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "handle of a stale event",
            code!(aclrtIpcGetEventHandle(stale, &mut handle)),
            ACL_ERROR_RT_INVALID_HANDLE,
        ),
        (
            "handle of a legacy event",
            code!(aclrtIpcGetEventHandle(legacy, &mut handle)),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "handle of an Ex event without ACL_EVENT_IPC",
            code!(aclrtIpcGetEventHandle(sync, &mut handle)),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "open into NULL",
            code!(aclrtIpcOpenEventHandle(own, ptr::null_mut())),
            ACL_ERROR_INVALID_PARAM,
        ),
        (
            "open a zeroed handle",
            code!(aclrtIpcOpenEventHandle(
                aclrtIpcEventHandle::default(),
                &mut out
            )),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "open a handle without a NUL",
            code!(aclrtIpcOpenEventHandle(no_nul, &mut out)),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "open this process's handle",
            code!(aclrtIpcOpenEventHandle(own, &mut out)),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "open a memory key",
            code!(aclrtIpcOpenEventHandle(memory, &mut out)),
            ACL_ERROR_RT_PARAM_INVALID,
        ),
        (
            "open without a context",
            no_context,
            ACL_ERROR_RT_CONTEXT_NULL,
        ),
        (
            "id of an IPC event",
            code!(aclrtGetEventId(ipc, &mut id)),
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        ),
        (
            "timestamp of an IPC event",
            code!(aclrtEventGetTimestamp(ipc, &mut ts)),
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        ),
        (
            "elapsed time of an IPC event",
            code!(aclrtEventElapsedTime(&mut ms, ipc, ipc)),
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        ),
        (
            "reset an IPC event",
            code!(aclrtResetEvent(ipc, stream)),
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        ),
        (
            "deprecated query of an IPC event",
            code!(aclrtQueryEvent(ipc, &mut status)),
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        ),
        (
            "wait status of an IPC event",
            code!(aclrtQueryEventWaitStatus(ipc, &mut wait_status)),
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        ),
        (
            "record an IPC event in a capture",
            code!(aclrtRecordEvent(ipc, capturing)),
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        ),
    ];
    for (case, got, want) in cases {
        assert_eq!(got, want, "{case}: {}", recent_message());
    }
    assert_eq!(
        code!(aclrtStreamWaitEvent(capturing, ipc)),
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "wait on an IPC event in a capture: {}",
        recent_message()
    );
    assert!(out.is_null());
    let mut model = ptr::null_mut();
    acl!(aclmdlRICaptureEnd(capturing, &mut model));
    acl!(aclmdlRIDestroy(model));
    // Recorded and waited on outside captures, in the exporting process itself.
    acl!(aclrtRecordEvent(ipc, stream));
    acl!(aclrtStreamWaitEvent(stream, ipc));
    acl!(aclrtSynchronizeStream(stream));
    acl!(aclrtSynchronizeEvent(ipc));
    for stream in [stream, capturing] {
        acl!(aclrtDestroyStream(stream));
    }
    for event in [ipc, sync, legacy] {
        acl!(aclrtDestroyEvent(event));
    }
    acl!(aclrtIpcMemClose(c_string(&memory_key).as_ptr()));
    acl!(aclrtFree(dev));
}

/// ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS stands for aclrtDeviceEnablePeerAccess: memory
/// of another device imported without it cannot be copied on the importer's device's streams
/// (207006), with it it can, as after the call itself.
#[test]
fn an_import_with_peer_access_reaches_memory_of_another_device() {
    set_device(1);
    let mut peer = Peer::spawn();
    let (without, with) = (peer.ask("export 0 4096 5"), peer.ask("export 0 4096 6"));
    let (stream, local) = (create_stream(), malloc(4096));
    let import = |key: &str, flags: u32| {
        let mut dev = ptr::null_mut();
        let key = c_string(key);
        acl!(aclrtIpcMemImportByKey(
            &mut dev,
            key.as_ptr(),
            u64::from(flags)
        ));
        dev
    };
    let copy = |from: *mut c_void| {
        code!(aclrtMemcpyAsync(
            local,
            4096,
            from,
            4096,
            ACL_MEMCPY_DEVICE_TO_DEVICE,
            stream
        ))
    };
    let plain = import(&without, ACL_RT_IPC_MEM_IMPORT_FLAG_DEFAULT);
    assert_eq!(copy(plain), ACL_ERROR_RT_NO_PERMISSION);
    assert!(recent_message().contains("peer access"));
    let shared = import(&with, ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS);
    assert_eq!(copy(shared), ACL_SUCCESS);
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(download::<u8>(local, 4096), vec![6; 4096]);
    // Access is the device's, as aclrtDeviceEnablePeerAccess gives it.
    assert_eq!(copy(plain), ACL_SUCCESS);
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(download::<u8>(local, 4096), vec![5; 4096]);
    acl!(aclrtDeviceDisablePeerAccess(0));
    for key in [&without, &with] {
        acl!(aclrtIpcMemClose(c_string(key).as_ptr()));
    }
    // Closed, an import is no host memory of this process's: a copy there fails with a code.
    let data = [1u8; 64];
    assert_eq!(
        code!(aclrtMemcpy(shared, 64, data.as_ptr().cast(), 64, 0)),
        ACL_ERROR_RT_PARAM_INVALID
    );
    assert!(recent_message().contains("no longer holds"));
    acl!(aclrtFree(local));
    acl!(aclrtDestroyStream(stream));
    peer.exit();
}

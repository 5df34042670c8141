//! Host callbacks (subscribe / launch / process report, keyed by pthread_self) and host
//! functions on runtime-owned threads.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;

use common::*;
use npu_sim::abi::*;
use npu_sys::*;

/// What a callback saw: the thread it ran on, and a label.
struct Log {
    entries: Mutex<Vec<(u64, u32)>>,
}

/// A callback's data: where to log and what.
struct Note {
    log: Arc<Log>,
    label: u32,
}

unsafe extern "C" fn note(data: *mut c_void) {
    // SAFETY: the tests pass a pointer to a Note they keep alive until the callback has run.
    let note = unsafe { &*data.cast::<Note>() };
    note.log
        .entries
        .lock()
        .unwrap()
        .push((this_thread(), note.label));
}

fn note_ptr(note: &Note) -> *mut c_void {
    ptr::from_ref(note).cast_mut().cast()
}

/// A report thread: processes one callback per message received, then reports back.
struct Reporter {
    id: u64,
    go: mpsc::Sender<bool>,
    done: mpsc::Receiver<aclError>,
    handle: thread::JoinHandle<()>,
}

impl Reporter {
    fn start() -> Reporter {
        let (id_tx, id_rx) = mpsc::channel();
        let (go, go_rx) = mpsc::channel::<bool>();
        let (done_tx, done) = mpsc::channel();
        let handle = thread::spawn(move || {
            id_tx.send(this_thread()).unwrap();
            while go_rx.recv().unwrap() {
                done_tx.send(code!(aclrtProcessReport(-1))).unwrap();
            }
        });
        Reporter {
            id: id_rx.recv().unwrap(),
            go,
            done,
            handle,
        }
    }

    /// Runs one callback on the report thread.
    fn process_one(&self) {
        self.go.send(true).unwrap();
        assert_eq!(self.done.recv().unwrap(), 0);
    }

    fn stop(self) {
        self.go.send(false).unwrap();
        self.handle.join().unwrap();
    }
}

#[test]
fn callbacks_run_once_each_on_the_subscribed_thread() {
    set_device(0);
    let stream = create_stream();
    let reporter = Reporter::start();
    acl!(aclrtSubscribeReport(reporter.id, stream));
    let log = Arc::new(Log {
        entries: Mutex::default(),
    });
    let notes: Vec<Note> = (1..=3)
        .map(|label| Note {
            log: log.clone(),
            label,
        })
        .collect();
    for note in &notes {
        acl!(aclrtLaunchCallback(
            Some(self::note),
            note_ptr(note),
            ACL_CALLBACK_BLOCK,
            stream
        ));
    }
    for _ in &notes {
        reporter.process_one();
    }
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(
        *log.entries.lock().unwrap(),
        vec![(reporter.id, 1), (reporter.id, 2), (reporter.id, 3)]
    );
    acl!(aclrtUnSubscribeReport(reporter.id, stream));
    reporter.stop();
}

#[test]
fn a_blocking_callback_holds_the_stream_and_a_non_blocking_one_does_not() {
    set_device(0);
    let stream = create_stream();
    let reporter = Reporter::start();
    acl!(aclrtSubscribeReport(reporter.id, stream));
    let dev = malloc(64);
    let log = Arc::new(Log {
        entries: Mutex::default(),
    });
    let (blocking, free) = (
        Note {
            log: log.clone(),
            label: 1,
        },
        Note {
            log: log.clone(),
            label: 2,
        },
    );

    // NO_BLOCK: the memset behind it completes although nobody processed the callback yet.
    acl!(aclrtLaunchCallback(
        Some(note),
        note_ptr(&free),
        ACL_CALLBACK_NO_BLOCK,
        stream
    ));
    acl!(aclrtMemsetAsync(dev, 64, 1, 64, stream));
    acl!(aclrtSynchronizeStream(stream));
    assert!(log.entries.lock().unwrap().is_empty());
    assert!(download::<u8>(dev, 64).iter().all(|&b| b == 1));
    reporter.process_one();

    // BLOCK: the memset behind it waits until the callback has run.
    acl!(aclrtLaunchCallback(
        Some(note),
        note_ptr(&blocking),
        ACL_CALLBACK_BLOCK,
        stream
    ));
    acl!(aclrtMemsetAsync(dev, 64, 2, 64, stream));
    assert_eq!(
        code!(aclrtSynchronizeStreamWithTimeout(stream, 20)),
        ACL_ERROR_RT_STREAM_SYNC_TIMEOUT
    );
    assert!(download::<u8>(dev, 64).iter().all(|&b| b == 1));
    reporter.process_one();
    acl!(aclrtSynchronizeStream(stream));
    assert!(download::<u8>(dev, 64).iter().all(|&b| b == 2));
    assert_eq!(
        log.entries
            .lock()
            .unwrap()
            .iter()
            .map(|e| e.1)
            .collect::<Vec<_>>(),
        [2, 1]
    );
    acl!(aclrtUnSubscribeReport(reporter.id, stream));
    reporter.stop();
}

#[test]
fn unsubscribing_releases_a_stream_blocked_on_a_callback() {
    set_device(1);
    let stream = create_stream();
    acl!(aclrtSubscribeReport(0xfeed, stream));
    let log = Arc::new(Log {
        entries: Mutex::default(),
    });
    let pending = Note {
        log: log.clone(),
        label: 1,
    };
    acl!(aclrtLaunchCallback(
        Some(note),
        note_ptr(&pending),
        ACL_CALLBACK_BLOCK,
        stream
    ));
    acl!(aclrtUnSubscribeReport(0xfeed, stream));
    acl!(aclrtSynchronizeStream(stream));
    assert!(
        log.entries.lock().unwrap().is_empty(),
        "the dropped callback never ran"
    );
    assert_eq!(
        code!(aclrtUnSubscribeReport(0xfeed, stream)),
        ACL_ERROR_RT_STREAM_SUBSCRIBE
    );
}

struct Ordered {
    seen: Mutex<Vec<u32>>,
    thread: AtomicU64,
    label: u32,
}

unsafe extern "C" fn host_func(data: *mut c_void) {
    // SAFETY: the test passes pointers to Ordered values it keeps alive until the stream is done.
    let me = unsafe { &*data.cast::<Ordered>() };
    me.seen.lock().unwrap().push(me.label);
    me.thread.store(this_thread(), Ordering::Relaxed);
}

#[test]
fn host_functions_run_in_order_on_a_runtime_thread() {
    set_device(1);
    let stream = create_stream();
    let funcs: Vec<Ordered> = (1..=5)
        .map(|label| Ordered {
            seen: Mutex::default(),
            thread: AtomicU64::new(0),
            label,
        })
        .collect();
    let shared = Arc::new(Mutex::new(Vec::new()));
    for f in &funcs {
        acl!(aclrtLaunchHostFunc(
            stream,
            Some(host_func),
            ptr::from_ref(f).cast_mut().cast()
        ));
    }
    acl!(aclrtSynchronizeStream(stream));
    for f in &funcs {
        shared
            .lock()
            .unwrap()
            .extend(f.seen.lock().unwrap().iter().copied());
        let thread = f.thread.load(Ordering::Relaxed);
        assert!(
            thread != 0 && thread != this_thread(),
            "ran on the runtime's thread"
        );
    }
    assert_eq!(*shared.lock().unwrap(), [1, 2, 3, 4, 5]);
}

static FLAG: AtomicBool = AtomicBool::new(false);

unsafe extern "C" fn set_flag(_: *mut c_void) {
    FLAG.store(true, Ordering::SeqCst);
}

#[test]
fn a_host_function_runs_after_the_work_before_it() {
    set_device(1);
    let stream = create_stream();
    let dev = malloc(1 << 20);
    acl!(aclrtMemsetAsync(dev, 1 << 20, 9, 1 << 20, stream));
    acl!(aclrtLaunchHostFunc(stream, Some(set_flag), ptr::null_mut()));
    acl!(aclrtSynchronizeStream(stream));
    assert!(FLAG.load(Ordering::SeqCst));
    assert!(download::<u8>(dev, 1 << 20).iter().all(|&b| b == 9));
}

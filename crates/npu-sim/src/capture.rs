//! Stream capture (aclmdlRICaptureBegin .. aclmdlRICaptureEnd): the tasks submitted to a
//! capturing stream, and to the streams that join its capture by waiting on an event recorded
//! in it, go into a model runtime instance instead of their queues.
//!
//! Also the capture modes: while a capture that restricts them is going on, the functions
//! CANN calls unsafe (synchronous copies and memsets, asynchronous copies that fall back to
//! synchronous ones for pageable memory) are refused on the threads the modes name.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::ThreadId;

use npu_sys::*;

use crate::error::{Res, SimError, ensure, fail};
use crate::event::{Event, Record};
use crate::model_ri::ModelRi;
use crate::stream::Stream;
use crate::sync::lock;

/// A capture in progress.
pub(crate) struct Capture {
    /// The instance the captured tasks go into.
    pub(crate) model: Arc<ModelRi>,
    /// The stream aclmdlRICaptureBegin was called on (only it can end the capture).
    pub(crate) origin: Arc<Stream>,
    pub(crate) mode: aclmdlRICaptureMode,
    /// The thread that began it: a capture not in RELAXED mode ends on it.
    pub(crate) thread: ThreadId,
    active: AtomicBool,
    /// Why the capture became invalid (the first reason), if it did.
    invalidated: Mutex<Option<SimError>>,
    /// The streams capturing into it, the origin first.
    members: Mutex<Vec<Arc<Stream>>>,
    /// The events (device, event id) recorded or waited with an EXTERNAL flag in it.
    external: Mutex<Vec<(i32, u32)>>,
    /// Whether a stream left it still recording a task group (aclmdlRICaptureEnd fails).
    group_left_open: AtomicBool,
}

/// Captures in progress, for the capture-mode checks.
static ACTIVE: Mutex<Vec<Arc<Capture>>> = Mutex::new(Vec::new());
/// How many captures are in progress, so that the checks cost one load when none is.
static ACTIVE_COUNT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// The calling thread's capture mode (aclmdlRICaptureThreadExchangeMode); GLOBAL until
    /// changed.
    static THREAD_MODE: Cell<aclmdlRICaptureMode> =
        const { Cell::new(ACL_MODEL_RI_CAPTURE_MODE_GLOBAL) };
}

/// The task the calling thread submitted last, when it went into an instance being captured or
/// built (what aclrtCacheLastTaskOpInfo and aclrtCacheLastTaskExtendInfo attach to).
#[derive(Clone)]
pub(crate) struct LastCaptured {
    pub(crate) model: Weak<ModelRi>,
    /// Its index in the instance.
    pub(crate) index: usize,
    /// The capture it went into (`None`: a built instance's bound stream).
    pub(crate) capture: Option<Weak<Capture>>,
}

thread_local! {
    static LAST_CAPTURED: RefCell<Option<LastCaptured>> = const { RefCell::new(None) };
}

/// Notes the calling thread's latest submission: `Some` when it went into an instance.
///
/// `try_with`: a submission from a thread-exit destructor, after the thread's locals are gone,
/// notes nothing; it panicked, and the call returned 507000 for a task it had queued.
pub(crate) fn note_submission(task: Option<LastCaptured>) {
    let _ = LAST_CAPTURED.try_with(|last| {
        let mut last = last.borrow_mut();
        // Most submissions are not captured: leave a `None` alone.
        if last.is_some() || task.is_some() {
            *last = task;
        }
    });
}

/// The calling thread's latest submission, if it went into an instance (none once the
/// thread's locals are gone).
pub(crate) fn last_captured() -> Option<LastCaptured> {
    LAST_CAPTURED
        .try_with(|last| last.borrow().clone())
        .ok()
        .flatten()
}

/// Checks a capture mode is one of aclmdlRICaptureMode's (ACL_ERROR_INVALID_PARAM otherwise).
pub(crate) fn check_mode(mode: aclmdlRICaptureMode) -> Res<()> {
    ensure!(
        matches!(
            mode,
            ACL_MODEL_RI_CAPTURE_MODE_GLOBAL
                | ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL
                | ACL_MODEL_RI_CAPTURE_MODE_RELAXED
        ),
        ACL_ERROR_INVALID_PARAM,
        "capture mode {mode} is not an aclmdlRICaptureMode"
    );
    Ok(())
}

/// aclmdlRICaptureThreadExchangeMode: sets the calling thread's mode, returns the previous one.
pub(crate) fn exchange_mode(mode: aclmdlRICaptureMode) -> aclmdlRICaptureMode {
    THREAD_MODE.replace(mode)
}

/// Fails with `code` if a capture in progress forbids the calling thread the unsafe function
/// `what`: any GLOBAL capture while the thread's mode is GLOBAL, or a GLOBAL or THREAD_LOCAL
/// capture the thread began itself while its mode is not RELAXED.
pub(crate) fn check_unsafe_call(code: aclError, what: &str) -> Res<()> {
    if ACTIVE_COUNT.load(Ordering::Acquire) == 0 {
        return Ok(());
    }
    let mode = THREAD_MODE.get();
    let me = std::thread::current().id();
    let forbidding = lock(&ACTIVE).iter().find_map(|capture| {
        let global = capture.mode == ACL_MODEL_RI_CAPTURE_MODE_GLOBAL
            && mode == ACL_MODEL_RI_CAPTURE_MODE_GLOBAL;
        let own = capture.thread == me
            && capture.mode != ACL_MODEL_RI_CAPTURE_MODE_RELAXED
            && mode != ACL_MODEL_RI_CAPTURE_MODE_RELAXED;
        (global || own).then(|| (capture.origin.id, capture.mode))
    });
    match forbidding {
        Some((stream, capture_mode)) => fail!(
            code,
            "{what} is not allowed while stream {stream} is captured in mode {} and this \
             thread's capture mode is {} (switch it with aclmdlRICaptureThreadExchangeMode)",
            mode_name(capture_mode),
            mode_name(mode)
        ),
        None => Ok(()),
    }
}

fn mode_name(mode: aclmdlRICaptureMode) -> &'static str {
    match mode {
        ACL_MODEL_RI_CAPTURE_MODE_GLOBAL => "GLOBAL",
        ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL => "THREAD_LOCAL",
        _ => "RELAXED",
    }
}

impl Capture {
    /// Starts capturing `origin`'s tasks into `model` (a stream capturing already →
    /// ACL_ERROR_RT_STREAM_CAPTURED).
    pub(crate) fn begin(
        origin: &Arc<Stream>,
        model: Arc<ModelRi>,
        mode: aclmdlRICaptureMode,
    ) -> Res<Arc<Capture>> {
        let capture = Arc::new(Capture {
            model,
            origin: origin.clone(),
            mode,
            thread: std::thread::current().id(),
            active: AtomicBool::new(true),
            invalidated: Mutex::new(None),
            members: Mutex::new(vec![origin.clone()]),
            external: Mutex::new(Vec::new()),
            group_left_open: AtomicBool::new(false),
        });
        origin.enter_capture(&capture)?;
        capture.model.add_stream(origin);
        lock(&ACTIVE).push(capture.clone());
        ACTIVE_COUNT.fetch_add(1, Ordering::AcqRel);
        Ok(capture)
    }

    /// Whether the capture is still going on.
    pub(crate) fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    /// Whether operator information is cached on its tasks (aclrtCacheLastTaskOpInfo), as
    /// aclrtGetStreamAttribute(ACL_STREAM_ATTR_CACHE_OP_INFO) reports on its streams: while it
    /// goes on and the stream that began it has the switch on (the streams joining it share
    /// that stream's switch, as the reference says).
    pub(crate) fn caches_op_info(&self) -> bool {
        self.is_active() && lock(&self.origin.attributes).cache_op_info == 1
    }

    /// Makes the capture invalid: later submissions into it are refused and its end fails.
    pub(crate) fn invalidate(&self, why: &SimError) {
        lock(&self.invalidated).get_or_insert_with(|| why.clone());
    }

    /// Refuses an operation the capture cannot take with `error`, which also invalidates the
    /// capture (its end then fails), as CANN does.
    pub(crate) fn refuse<T>(&self, error: SimError) -> Res<T> {
        self.invalidate(&error);
        Err(error)
    }

    /// Fails with ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED if the capture was invalidated.
    pub(crate) fn check_valid(&self) -> Res<()> {
        match &*lock(&self.invalidated) {
            Some(why) => fail!(
                ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED,
                "the capture of stream {} was invalidated: {}",
                self.origin.id,
                why.msg
            ),
            None => Ok(()),
        }
    }

    /// Whether the capture was invalidated.
    pub(crate) fn is_invalidated(&self) -> bool {
        lock(&self.invalidated).is_some()
    }

    /// An EXTERNAL record or wait of `event` in this capture: once per event and capture
    /// (ACL_ERROR_RT_PARAM_INVALID again).
    pub(crate) fn claim_external(&self, event: &Event) -> Res<()> {
        let key = (event.device.id, event.id);
        let mut external = lock(&self.external);
        ensure!(
            !external.contains(&key),
            ACL_ERROR_RT_PARAM_INVALID,
            "event {} was recorded or waited with an EXTERNAL flag in this capture already",
            event.id
        );
        external.push(key);
        Ok(())
    }

    /// `stream` waits on an event recorded in this capture: it captures into it from now on.
    /// A default stream cannot (ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT).
    pub(crate) fn join(self: &Arc<Self>, stream: &Arc<Stream>) -> Res<()> {
        ensure!(
            !stream.is_default,
            ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT,
            "the default stream cannot take part in a capture (it waits on an event recorded \
             while stream {} is captured)",
            self.origin.id
        );
        stream.enter_capture(self)?;
        lock(&self.members).push(stream.clone());
        self.model.add_stream(stream);
        Ok(())
    }

    /// Ends the capture: every stream in it goes back to running its tasks.
    pub(crate) fn end(self: &Arc<Self>) {
        if !self.active.swap(false, Ordering::AcqRel) {
            return;
        }
        for stream in lock(&self.members).drain(..) {
            stream.leave_capture();
        }
        lock(&ACTIVE).retain(|capture| !Arc::ptr_eq(capture, self));
        ACTIVE_COUNT.fetch_sub(1, Ordering::AcqRel);
        self.model.close();
    }

    /// A stream left the capture while recording a task group (under its state lock, where
    /// the recording was counted): the instance no longer counts it, and the capture cannot
    /// end well.
    pub(crate) fn group_left_open(&self) {
        self.model.group_recording(false);
        self.group_left_open.store(true, Ordering::Release);
    }

    /// Whether a stream left it still recording a task group.
    pub(crate) fn left_a_group_open(&self) -> bool {
        self.group_left_open.load(Ordering::Acquire)
    }

    /// `stream` leaves the capture (it is being destroyed with its context): the capture is
    /// invalid from then on, and over if `stream` began it.
    pub(crate) fn leave(self: &Arc<Self>, stream: &Stream) {
        lock(&self.members).retain(|member| member.handle != stream.handle);
        self.invalidate(&SimError::new(
            ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED,
            format!("stream {} was destroyed while captured", stream.id),
        ));
        if stream.handle == self.origin.handle {
            self.end();
        }
    }
}

/// `stream` is to wait on `record`, and one of them takes part in a capture. Returns whether
/// the wait is queued (into the capture, or as an ordinary wait) or imposes nothing:
///
/// - a stream outside captures waiting on a record of a capture joins that capture (the
///   cross-stream capture of CANN: work forked to another stream through an event);
/// - a capturing stream may wait only on records of its own capture: one of another capture
///   → ACL_ERROR_STREAM_CAPTURE_CONFLICT, one recorded outside → ACL_ERROR_RT_CAPTURE_DEPENDENCY,
///   and either invalidates the waiting stream's capture;
/// - a record of a capture that is over runs only in its replays: no wait.
pub(crate) fn wait_dependency(stream: &Arc<Stream>, record: &Record) -> Res<bool> {
    match (stream.capture(), record.active_capture()) {
        (None, None) => Ok(!record.is_captured()),
        (None, Some(theirs)) => {
            theirs.check_valid()?;
            match theirs.join(stream) {
                Ok(()) => Ok(true),
                Err(error) => theirs.refuse(error),
            }
        }
        (Some(mine), Some(theirs)) if Arc::ptr_eq(&mine, &theirs) => Ok(true),
        (Some(mine), Some(theirs)) => mine.refuse(SimError::new(
            ACL_ERROR_STREAM_CAPTURE_CONFLICT,
            format!(
                "stream {} (captured with stream {}) waits on an event recorded in the capture of stream {}",
                stream.id, mine.origin.id, theirs.origin.id
            ),
        )),
        (Some(mine), None) => mine.refuse(SimError::new(
            ACL_ERROR_RT_CAPTURE_DEPENDENCY,
            format!(
                "stream {} is being captured and waits on an event that was not recorded in its capture",
                stream.id
            ),
        )),
    }
}

/// The capture an EXTERNAL record or wait of `event` on `stream` goes into: the event must be
/// an aclrtCreateEventExWithFlag(ACL_EVENT_SYNC) event (ACL_ERROR_RT_PARAM_INVALID), the
/// stream being captured (ACL_ERROR_RT_STREAM_NOT_CAPTURED) into an instance that is not a
/// conditional task's branch (ACL_ERROR_RT_PARAM_INVALID), the event not used EXTERNAL in the
/// capture before.
pub(crate) fn external_capture(stream: &Stream, event: &Event) -> Res<Arc<Capture>> {
    ensure!(
        event.ex && event.flags == ACL_EVENT_SYNC,
        ACL_ERROR_RT_PARAM_INVALID,
        "an EXTERNAL record or wait needs an event of aclrtCreateEventExWithFlag(ACL_EVENT_SYNC)"
    );
    let Some(capture) = stream.capture() else {
        fail!(
            ACL_ERROR_RT_STREAM_NOT_CAPTURED,
            "an EXTERNAL record or wait needs a stream being captured, and stream {} is not",
            stream.id
        );
    };
    capture.check_valid()?;
    // The reference: neither is supported in a sub-graph, a branch of a conditional task
    // (captured with aclmdlRICaptureToModelRIBegin).
    ensure!(
        !capture.model.is_branch(),
        ACL_ERROR_RT_PARAM_INVALID,
        "stream {} captures a branch of a conditional task (a sub-graph), which takes no \
         EXTERNAL record or wait",
        stream.id
    );
    capture.claim_external(event)?;
    Ok(capture)
}

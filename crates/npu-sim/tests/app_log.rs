//! aclAppLog called from Rust (which can call C-variadic functions) with a `tracing`
//! subscriber recording what the simulator logs: one event per record, target
//! `npu_sim::app_log`, the level mapped, `func`, `file` and `line` fields and the formatted,
//! truncated message. The C side (ACL_APP_LOG, stdout) is in `tests/c_programs.rs`.

// Links the library that exports aclAppLog.
use ascendcl as _;

#[path = "../../npu/tests/common/every_callsite.rs"]
mod every_callsite;

use std::collections::BTreeMap;
use std::ffi::c_char;
use std::sync::{Arc, Mutex};

use npu_sys::{ACL_DEBUG, ACL_ERROR, ACL_INFO, ACL_WARNING, aclLogLevel};
use tracing::field::{Field, Visit};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};

// SAFETY: npu-sim exports aclAppLog with CANN's prototype (this one).
unsafe extern "C" {
    fn aclAppLog(
        logLevel: aclLogLevel,
        func: *const c_char,
        file: *const c_char,
        line: u32,
        fmt: *const c_char,
        ...
    );
}

/// One event: its level, target and fields (the message as `message`).
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    level: tracing::Level,
    target: String,
    fields: BTreeMap<String, String>,
}

struct FieldText<'a>(&'a mut BTreeMap<String, String>);

impl Visit for FieldText<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
}

/// Records every event.
struct Recorder(Arc<Mutex<Vec<Seen>>>);

impl<S: tracing::Subscriber> Layer<S> for Recorder {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        event.record(&mut FieldText(&mut fields));
        self.0.lock().unwrap().push(Seen {
            level: *event.metadata().level(),
            target: event.metadata().target().to_owned(),
            fields,
        });
    }
}

/// The app-log events `body` produced on this thread.
fn app_log_events(body: impl FnOnce()) -> Vec<Seen> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let subscriber = tracing_subscriber::registry().with(Recorder(seen.clone()));
    every_callsite::see_every_callsite();
    tracing::subscriber::with_default(subscriber, body);
    let seen = seen.lock().unwrap().clone();
    seen.into_iter()
        .filter(|event| event.target == "npu_sim::app_log")
        .collect()
}

fn event(level: tracing::Level, func: &str, file: &str, line: u32, message: &str) -> Seen {
    let fields = [
        ("func", func),
        ("file", file),
        ("line", &line.to_string()),
        ("message", message),
    ];
    Seen {
        level,
        target: "npu_sim::app_log".into(),
        fields: fields
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    }
}

#[test]
fn each_level_becomes_a_tracing_event_with_the_callers_place() {
    let events = app_log_events(|| {
        // SAFETY: valid strings, and formats that match their arguments (C's promotions: int,
        // double, pointers).
        unsafe {
            let (func, file) = (c"rust_caller".as_ptr(), c"app_log.rs".as_ptr());
            aclAppLog(ACL_DEBUG, func, file, 1, c"debug %d".as_ptr(), 1i32);
            aclAppLog(
                ACL_INFO,
                func,
                file,
                2,
                c"info %s".as_ptr(),
                c"two".as_ptr(),
            );
            aclAppLog(
                ACL_WARNING,
                func,
                file,
                3,
                c"warning %.3f".as_ptr(),
                3.25f64,
            );
            aclAppLog(
                ACL_ERROR,
                func,
                file,
                4,
                c"error %d %s %.1f %.1f %u".as_ptr(),
                -4i32,
                c"four".as_ptr(),
                0.5f64,
                1.5f64,
                4u32,
            );
            aclAppLog(ACL_INFO, func, file, 5, c"no arguments".as_ptr());
        }
    });
    use tracing::Level;
    assert_eq!(
        events,
        [
            event(Level::DEBUG, "rust_caller", "app_log.rs", 1, "debug 1"),
            event(Level::INFO, "rust_caller", "app_log.rs", 2, "info two"),
            event(Level::WARN, "rust_caller", "app_log.rs", 3, "warning 3.250"),
            event(
                Level::ERROR,
                "rust_caller",
                "app_log.rs",
                4,
                "error -4 four 0.5 1.5 4"
            ),
            event(Level::INFO, "rust_caller", "app_log.rs", 5, "no arguments"),
        ]
    );
}

#[test]
fn a_long_record_is_cut_to_1023_bytes_ending_in_the_mark() {
    let fits = "a".repeat(1023);
    let long = "b".repeat(5000);
    let fits_c = std::ffi::CString::new(fits.clone()).unwrap();
    let long_c = std::ffi::CString::new(long).unwrap();
    let events = app_log_events(|| {
        // SAFETY: valid strings, and a format that matches its argument.
        unsafe {
            let (func, file) = (c"f".as_ptr(), c"g".as_ptr());
            aclAppLog(ACL_INFO, func, file, 1, c"%s".as_ptr(), fits_c.as_ptr());
            aclAppLog(ACL_INFO, func, file, 2, c"%s".as_ptr(), long_c.as_ptr());
        }
    });
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].fields["message"], fits);
    let cut = &events[1].fields["message"];
    assert_eq!(cut.len(), 1023);
    assert_eq!(*cut, format!("{}...[truncated]", "b".repeat(1009)));
}

#[test]
fn bad_levels_and_a_null_format_write_nothing_and_null_places_read_as_empty() {
    let events = app_log_events(|| {
        // SAFETY: valid strings or NULL, and formats that match their arguments.
        unsafe {
            let (func, file) = (c"f".as_ptr(), c"g".as_ptr());
            aclAppLog(7, func, file, 1, c"seven %d".as_ptr(), 7i32);
            aclAppLog(-1i32 as aclLogLevel, func, file, 2, c"minus one".as_ptr());
            aclAppLog(4, func, file, 3, c"four".as_ptr());
            aclAppLog(ACL_ERROR, func, file, 4, std::ptr::null());
            aclAppLog(
                ACL_ERROR,
                std::ptr::null(),
                std::ptr::null(),
                5,
                c"anonymous".as_ptr(),
            );
        }
    });
    assert_eq!(
        events,
        [event(tracing::Level::ERROR, "", "", 5, "anonymous")]
    );
}

/// A subscriber that panics on every event.
struct Panics;

impl<S: tracing::Subscriber> Layer<S> for Panics {
    fn on_event(&self, _: &tracing::Event<'_>, _: Context<'_, S>) {
        panic!("a hostile subscriber");
    }
}

#[test]
fn a_panicking_subscriber_does_not_unwind_into_the_caller() {
    let subscriber = tracing_subscriber::registry().with(Panics);
    every_callsite::see_every_callsite();
    tracing::subscriber::with_default(subscriber, || {
        // SAFETY: valid strings, and a format that matches its argument.
        unsafe {
            aclAppLog(
                ACL_ERROR,
                c"f".as_ptr(),
                c"g".as_ptr(),
                1,
                c"%d".as_ptr(),
                1i32,
            )
        };
    });
}

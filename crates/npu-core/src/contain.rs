//! Containment of user code that npu-rs runs on threads it shares: wakers, their drops, and
//! the tracing subscriber that receives npu-rs's own log events.
//!
//! A subscriber's layers are user code like any other, and npu-rs logs from the reactor, the
//! reaper, the sentinel, the callback workers, ACL's callback threads and `Drop` impls. An
//! unwinding log call would take a shared thread down (every operation it watches with it), or
//! abort the process when it happens in a destructor during unwinding. So every event npu-rs
//! emits goes through [`log!`](crate::log): a subscriber that panics loses that event, and
//! nothing else.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};

#[doc(hidden)]
pub use tracing;

/// Runs `f`, containing a panic; returns whether it panicked.
///
/// The panic's payload is user data too (`std::panic::panic_any` takes any value), and its drop
/// may panic in turn: it is dropped inside a containment of its own, and forgotten if that
/// panics as well, so nothing ever unwinds out of here.
///
/// ```
/// assert!(npu_core::contain::contained(|| panic!("user code")));
/// assert!(!npu_core::contain::contained(|| ()));
/// ```
#[doc(hidden)]
pub fn contained(f: impl FnOnce()) -> bool {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(()) => false,
        Err(payload) => {
            drop_payload(payload);
            true
        }
    }
}

fn drop_payload(payload: Box<dyn Any + Send>) {
    if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        std::mem::forget(again);
    }
}

/// Emits a tracing event at `$level` (`error`, `warn`, `info`, `debug`, `trace`), with
/// `tracing`'s syntax after the level, and contains a panic of the subscriber: what every
/// npu-rs crate logs with (see [`contain`](crate::contain)).
///
/// ```
/// let err = "an example";
/// npu_core::log!(warn, %err, stream = 3, "something failed");
/// ```
#[doc(hidden)]
#[macro_export]
macro_rules! log {
    ($level:ident, $($event:tt)+) => {{
        $crate::contain::contained(|| $crate::contain::tracing::$level!($($event)+));
    }};
}

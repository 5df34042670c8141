//! Attacks of the twenty-seventh session's third helper, through the `npu` facade: runtimes,
//! devices, contexts, modules and the errors they return. Runtimes of their own built again
//! after being finalised, and after another component initialised ACL; and the angles listed
//! with each test.
//!
//! Each test names the promise it attacks. npu-sim's cdylib is one library of the process, so
//! its tests take turns (`LIBRARY`); every wait is bounded, so a hang fails its test.

mod common;

use std::sync::Mutex;

use common::*;
use npu::Error;
use npu::prelude::*;

/// npu-sim's cdylib is initialised and finalised by its tests: they take turns.
static LIBRARY: Mutex<()> = Mutex::new(());

fn library_turn() -> std::sync::MutexGuard<'static, ()> {
    LIBRARY.lock().unwrap_or_else(|e| e.into_inner())
}

// ---- The runtime's message. ----

/// The runtime message of an error `rt` reports on this thread: a module load that fails
/// with its own message, and a code checked by hand, to which no message belongs.
fn assert_no_stale_message(rt: &npu::Runtime, what: &str) {
    let ctx = rt.device(0).unwrap().primary_context().clone();
    // SAFETY: nothing is loaded: the file does not exist.
    let missing = unsafe { Module::from_file(&ctx, "/nonexistent/attack27c.so") }.unwrap_err();
    let Error::Acl(acl) = &missing else {
        panic!("{what}: {missing:?}")
    };
    let message = acl.detail().unwrap_or_default();
    assert!(
        message.starts_with("cannot open kernel binary") && !message.contains('\n'),
        "{what}: the load's error carries another call's message: {missing}"
    );
    let checked = rt.check("aclrtProbe", 107000).unwrap_err();
    let Error::Acl(acl) = &checked else {
        panic!("{what}: {checked:?}")
    };
    assert_eq!(
        acl.message, None,
        "{what}: a code checked by hand carries another call's message: {checked}"
    );
}

/// `AclError::message` is "the text of `aclGetRecentErrMsg` right after the failure": the
/// runtime's account of that failure, not of another. docs/ascend.md allows a runtime of its
/// own to be dropped (ACL finalised) and built again, and ACL initialised by another component
/// first (`aclInit` then answers `ACL_ERROR_REPEAT_INITIALIZE`, which npu-rs takes for
/// success). Both times the runtime explained, on the thread making the runtime, a call npu-rs
/// took for success or only logged (the repeated `aclInit`; the stream-state callback
/// registered again, which the runtime still had from the first initialisation), and the next
/// error npu-rs reported on that thread carried those explanations as its own: "(runtime:
/// cannot open kernel binary ... \n a stream state callback is already registered ... \n
/// aclInit failed with 100002 ...)".
#[test]
fn a_runtime_initialised_again_leaves_no_stale_message_for_the_next_error() {
    let _turn = library_turn();
    let own = OwnRuntime::new("attack27c-messages");
    let first = own.build();
    let api = first.api();
    assert_no_stale_message(&first, "the first initialisation");
    drop(first);
    own.when_finalised("the first runtime", |again| {
        assert_no_stale_message(&again, "initialised again after it was finalised");
    });
    own.when_finalised("the runtime initialised again", drop);
    // Another component of the process initialises ACL first (docs/ascend.md).
    // SAFETY: NULL is no configuration file; ACL is finalised (checked just above).
    assert_eq!(unsafe { (api.aclInit)(std::ptr::null()) }, 0);
    let borrowed = own.build();
    assert_no_stale_message(&borrowed, "initialised by another component first");
    drop(borrowed);
    // SAFETY: the other component's reference, released as that component would.
    assert_eq!(unsafe { (api.aclFinalize)() }, 0);
    own.when_finalised("the borrowed runtime", drop);
}

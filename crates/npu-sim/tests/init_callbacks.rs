//! aclInitCallbackRegister / aclFinalizeCallbackRegister and their UnRegister forms: when the
//! callbacks run, with what, what their failures do, and every error path, through the
//! exported C ABI. aclInit and aclFinalize are process-wide, so the life-cycle runs in one
//! test of a process of its own.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::{CStr, c_char, c_void};
use std::ptr;
use std::sync::Mutex;

use common::*;
use npu_sim::abi::*;
use npu_sys::*;

/// What the callbacks saw, in order: (tag, configuration text) for init callbacks, (tag,
/// "finalize") for finalize callbacks.
static CALLS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

fn take_calls() -> Vec<(String, String)> {
    std::mem::take(&mut *CALLS.lock().unwrap())
}

/// The tag a callback's userData points at.
fn tag(user_data: *mut c_void) -> String {
    // SAFETY: the tests pass NUL-terminated static strings as userData.
    unsafe { CStr::from_ptr(user_data.cast::<c_char>()) }
        .to_string_lossy()
        .into_owned()
}

fn user_data(tag: &'static CStr) -> *mut c_void {
    tag.as_ptr().cast_mut().cast()
}

unsafe extern "C" fn on_init(config: *const c_char, len: usize, user: *mut c_void) -> aclError {
    // SAFETY: aclInit passes `len` readable bytes (NUL-terminated as well).
    let text = unsafe { std::slice::from_raw_parts(config.cast::<u8>(), len) };
    // SAFETY: and the NUL after them.
    assert_eq!(unsafe { *config.add(len) }, 0);
    let text = String::from_utf8(text.to_vec()).unwrap();
    CALLS.lock().unwrap().push((tag(user), text));
    ACL_SUCCESS
}

unsafe extern "C" fn other_on_init(
    config: *const c_char,
    len: usize,
    user: *mut c_void,
) -> aclError {
    // SAFETY: as on_init.
    unsafe { on_init(config, len, user) }
}

unsafe extern "C" fn failing_init(_: *const c_char, _: usize, user: *mut c_void) -> aclError {
    CALLS.lock().unwrap().push((tag(user), "failed".into()));
    ACL_ERROR_INTERNAL_ERROR
}

unsafe extern "C" fn on_finalize(user: *mut c_void) -> aclError {
    CALLS.lock().unwrap().push((tag(user), "finalize".into()));
    ACL_SUCCESS
}

unsafe extern "C" fn failing_finalize(user: *mut c_void) -> aclError {
    CALLS
        .lock()
        .unwrap()
        .push((tag(user), "finalize failed".into()));
    ACL_ERROR_RT_INTERNAL_ERROR
}

fn calls(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|&(a, b)| (a.to_owned(), b.to_owned()))
        .collect()
}

const OTHER: aclRegisterCallbackType = ACL_REG_TYPE_OTHER;

#[test]
fn callbacks_follow_the_life_cycle() {
    let json = r#"{"err_msg_mode": "0"}"#;
    let path = config_file("init_callbacks.json", json);

    // Before aclInit: kept for it.
    acl!(aclInitCallbackRegister(
        OTHER,
        Some(on_init),
        user_data(c"a")
    ));
    acl!(aclFinalizeCallbackRegister(
        ACL_REG_TYPE_ACL_MODEL,
        Some(on_finalize),
        user_data(c"f")
    ));
    assert_eq!(take_calls(), []);
    acl!(aclInit(path.as_ptr()));
    assert_eq!(take_calls(), calls(&[("a", json)]), "with the file's text");

    // While initialised: called at once; again for the same (type, function) replaces the
    // user data; a repeated aclInit calls nothing.
    acl!(aclInitCallbackRegister(
        OTHER,
        Some(other_on_init),
        user_data(c"b")
    ));
    acl!(aclInitCallbackRegister(
        OTHER,
        Some(on_init),
        user_data(c"a2")
    ));
    assert_eq!(take_calls(), calls(&[("b", json), ("a2", json)]));
    assert_eq!(code!(aclInit(path.as_ptr())), ACL_ERROR_REPEAT_INITIALIZE);
    assert_eq!(take_calls(), []);

    acl!(aclFinalize());
    assert_eq!(take_calls(), calls(&[("f", "finalize")]));

    // Without a file: "" and 0; registration order, the replaced user data in its place.
    acl!(aclInit(ptr::null()));
    assert_eq!(take_calls(), calls(&[("a2", ""), ("b", "")]));
    let mut left = u64::MAX;
    acl!(aclFinalizeReference(&mut left));
    assert_eq!(left, 0);
    assert_eq!(
        take_calls(),
        calls(&[("f", "finalize")]),
        "the count reached zero"
    );

    // Unregistered callbacks are not called; unregistering twice (or for another type) is fine.
    acl!(aclInitCallbackUnRegister(OTHER, Some(on_init)));
    acl!(aclInitCallbackUnRegister(OTHER, Some(on_init)));
    acl!(aclInitCallbackUnRegister(
        ACL_REG_TYPE_ACL_DVPP,
        Some(other_on_init)
    ));
    acl!(aclFinalizeCallbackUnRegister(
        ACL_REG_TYPE_ACL_MODEL,
        Some(on_finalize)
    ));
    acl!(aclInit(ptr::null()));
    acl!(aclFinalize());
    assert_eq!(take_calls(), calls(&[("b", "")]));

    // A failing init callback fails aclInit, stops the later ones and leaves AscendCL
    // uninitialised (so aclFinalize has nothing to finalise).
    acl!(aclInitCallbackUnRegister(OTHER, Some(other_on_init)));
    acl!(aclInitCallbackRegister(
        ACL_REG_TYPE_ACL_OP_EXECUTOR,
        Some(failing_init),
        user_data(c"x")
    ));
    acl!(aclInitCallbackRegister(
        OTHER,
        Some(on_init),
        user_data(c"a")
    ));
    assert_eq!(code!(aclInit(ptr::null())), ACL_ERROR_INTERNAL_ERROR);
    assert!(recent_message().contains("aclInit failed with 500000"));
    assert_eq!(take_calls(), calls(&[("x", "failed")]));
    assert_eq!(code!(aclFinalize()), ACL_ERROR_REPEAT_FINALIZE);
    acl!(aclInitCallbackUnRegister(
        ACL_REG_TYPE_ACL_OP_EXECUTOR,
        Some(failing_init)
    ));
    acl!(aclInit(ptr::null()));
    assert_eq!(take_calls(), calls(&[("a", "")]));

    // Registered while initialised, a failing callback fails the registration and stays out.
    assert_eq!(
        code!(aclInitCallbackRegister(
            OTHER,
            Some(failing_init),
            user_data(c"y")
        )),
        ACL_ERROR_INTERNAL_ERROR
    );
    assert!(recent_message().contains("aclInitCallbackRegister"));
    assert_eq!(take_calls(), calls(&[("y", "failed")]));

    // Every finalize callback runs; the finalisation happens and returns the first failure.
    acl!(aclFinalizeCallbackRegister(
        OTHER,
        Some(failing_finalize),
        user_data(c"g")
    ));
    acl!(aclFinalizeCallbackRegister(
        OTHER,
        Some(on_finalize),
        user_data(c"h")
    ));
    assert_eq!(code!(aclFinalize()), ACL_ERROR_RT_INTERNAL_ERROR);
    assert_eq!(
        take_calls(),
        calls(&[("g", "finalize failed"), ("h", "finalize")])
    );
    acl!(aclInit(ptr::null()));
    assert_eq!(take_calls(), calls(&[("a", "")]), "initialised afresh");
    // aclFinalizeReference reaching zero fails the same way, and, failing, leaves its output
    // as it was (the finalisation has happened all the same).
    let mut left = u64::MAX;
    assert_eq!(
        code!(aclFinalizeReference(&mut left)),
        ACL_ERROR_RT_INTERNAL_ERROR
    );
    assert_eq!(left, u64::MAX);
    assert_eq!(
        take_calls(),
        calls(&[("g", "finalize failed"), ("h", "finalize")])
    );
    assert_eq!(code!(aclFinalize()), ACL_ERROR_REPEAT_FINALIZE);
    acl!(aclInit(ptr::null()));
    assert_eq!(take_calls(), calls(&[("a", "")]), "initialised afresh");
    acl!(aclFinalizeCallbackUnRegister(OTHER, Some(failing_finalize)));
    acl!(aclFinalize());
    assert_eq!(take_calls(), calls(&[("h", "finalize")]));
}

/// Each of the four refuses a NULL callback and a type outside `aclRegisterCallbackType` with
/// 100000, the NULL callback first (a pointer before a value), whatever the type.
#[test]
fn bad_arguments_are_parameter_errors() {
    let refused = |api: &str, code: aclError, why: &str| {
        let message = recent_message();
        assert_eq!(code, ACL_ERROR_INVALID_PARAM, "{api}");
        assert!(
            message.contains(api) && message.contains(why),
            "{api}: {message}"
        );
    };
    let null = "cbFunc is NULL";
    let init: aclInitCallbackFunc = Some(on_init);
    let finalize: aclFinalizeCallbackFunc = Some(on_finalize);
    for (type_, why) in [(OTHER, null), (8, null)] {
        refused(
            "aclInitCallbackRegister",
            code!(aclInitCallbackRegister(type_, None, ptr::null_mut())),
            why,
        );
        refused(
            "aclInitCallbackUnRegister",
            code!(aclInitCallbackUnRegister(type_, None)),
            why,
        );
        refused(
            "aclFinalizeCallbackRegister",
            code!(aclFinalizeCallbackRegister(type_, None, ptr::null_mut())),
            why,
        );
        refused(
            "aclFinalizeCallbackUnRegister",
            code!(aclFinalizeCallbackUnRegister(type_, None)),
            why,
        );
    }
    let unknown = "is not an aclRegisterCallbackType";
    refused(
        "aclInitCallbackRegister",
        code!(aclInitCallbackRegister(8, init, ptr::null_mut())),
        unknown,
    );
    refused(
        "aclInitCallbackUnRegister",
        code!(aclInitCallbackUnRegister(0xFFFE, init)),
        unknown,
    );
    refused(
        "aclFinalizeCallbackRegister",
        code!(aclFinalizeCallbackRegister(
            u32::MAX,
            finalize,
            ptr::null_mut()
        )),
        unknown,
    );
    refused(
        "aclFinalizeCallbackUnRegister",
        code!(aclFinalizeCallbackUnRegister(9, finalize)),
        unknown,
    );
}

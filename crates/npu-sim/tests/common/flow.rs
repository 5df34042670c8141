//! Helpers for the tests of control flow in model runtime instances (labels, stream switches,
//! conditional tasks): building instances with branches and the kernels their bodies run.

use std::ffi::c_void;
use std::ptr;

use ascendcl::abi::*;
use npu_sys::*;

use super::{capture_end, create_stream, download, function, launch, malloc, registry_binary};

pub const RELAXED: aclmdlRICaptureMode = ACL_MODEL_RI_CAPTURE_MODE_RELAXED;
/// aclmdlRIBindStream's flags (CANN's headers do not define them).
pub const HEAD: u32 = 0;
pub const ACTIVATED: u32 = 0x7FFF_FFFF;

/// Registers `count_down_u64` (`*word -= 1` on the u64 its 8 bytes of arguments point at: a
/// WHILE loop's count down), besides the common test kernels.
pub fn register_flow_kernels() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        super::register_test_kernels();
        ascendcl::kernel::register("count_down_u64", |_, _, args: *mut c_void| {
            // SAFETY: launched with 8 bytes of arguments holding the address of a u64.
            unsafe {
                let word = args.cast::<u64>().read_unaligned() as *mut u64;
                *word -= 1;
            }
            0
        })
        .unwrap();
    });
}

/// Launches `add_one_u32` on the u32 at `target`.
pub fn add_one(stream: aclrtStream, target: *mut c_void) {
    let func = function(registry_binary(&["add_one_u32"]), "add_one_u32");
    assert_eq!(
        launch(func, 1, stream, &(target as u64), ptr::null_mut()),
        0,
        "{}",
        super::recent_message()
    );
}

/// Queues on `stream` a switch to `to` while the int32 at `value` is below the one at `limit`:
/// a loop's back edge, when `to` is `stream` (or a stream that comes back to it).
pub fn switch_while_less(
    stream: aclrtStream,
    value: *mut c_void,
    limit: *mut c_void,
    to: aclrtStream,
) {
    acl!(aclrtSwitchStream(
        value,
        ACL_RT_LESS,
        limit,
        ACL_RT_SWITCH_INT32,
        to,
        ptr::null_mut(),
        stream
    ));
}

/// Launches `count_down_u64` on the u64 at `word`.
pub fn count_down(stream: aclrtStream, word: *mut c_void) {
    let func = function(registry_binary(&["count_down_u64"]), "count_down_u64");
    assert_eq!(launch(func, 1, stream, &(word as u64), ptr::null_mut()), 0);
}

pub fn read_u32(dev: *const c_void) -> u32 {
    download::<u32>(dev, 1)[0]
}

/// Zeroed device memory.
pub fn zeroed(bytes: usize) -> *mut c_void {
    let dev = malloc(bytes);
    acl!(aclrtMemset(dev, bytes, 0, bytes));
    dev
}

pub fn label() -> aclrtLabel {
    let mut label = ptr::null_mut();
    acl!(aclrtCreateLabel(&mut label));
    label
}

pub fn label_list(labels: &[aclrtLabel]) -> aclrtLabelList {
    let mut labels = labels.to_vec();
    let mut list = ptr::null_mut();
    acl!(aclrtCreateLabelList(
        labels.as_mut_ptr(),
        labels.len(),
        &mut list
    ));
    list
}

/// A built instance whose HEAD streams are `heads`, being built.
pub fn build_on(heads: &[aclrtStream]) -> aclmdlRI {
    let mut model = ptr::null_mut();
    acl!(aclmdlRIBuildBegin(&mut model, 0));
    for &head in heads {
        acl!(aclmdlRIBindStream(model, head, HEAD));
    }
    model
}

/// Executes an instance once on device `device` and waits for it, on a thread of its own
/// ([`super::bounded`]: a hang aborts the process naming `what`).
pub fn execute_within(what: &str, device: i32, model: aclmdlRI) {
    let model = super::Raw::of(model);
    super::bounded(what, move || {
        super::set_device(device);
        super::execute(model.ptr());
    });
}

pub fn build_end(model: aclmdlRI) {
    acl!(aclmdlRIBuildEnd(model, ptr::null_mut()));
}

/// A captured instance whose stream is still capturing, with a condition handle and a
/// conditional task of `kind` with `size` branches; returns (stream, model, handle,
/// branches).
pub fn capture_cond(
    kind: aclmdlRICondTaskType,
    size: u32,
    default: u32,
    flag: aclmdlRICondHandleFlag,
) -> (aclrtStream, aclmdlRI, aclmdlRICondHandle, Vec<aclmdlRI>) {
    let stream = create_stream();
    acl!(aclmdlRICaptureBegin(stream, RELAXED));
    let (mut status, mut model) = (0, ptr::null_mut());
    acl!(aclmdlRICaptureGetInfo(stream, &mut status, &mut model));
    let (handle, branches) = cond_task(model, stream, kind, size, default, flag);
    (stream, model, handle, branches)
}

/// A condition handle made for `model` and a conditional task on it added to `stream` (which
/// is capturing `model`); returns the handle and the branches.
pub fn cond_task(
    model: aclmdlRI,
    stream: aclrtStream,
    kind: aclmdlRICondTaskType,
    size: u32,
    default: u32,
    flag: aclmdlRICondHandleFlag,
) -> (aclmdlRICondHandle, Vec<aclmdlRI>) {
    let mut handle = ptr::null_mut();
    acl!(aclmdlRICondHandleCreate(model, default, flag, &mut handle));
    let mut branches = vec![ptr::null_mut(); size as usize];
    let params = aclmdlRICondTaskParams {
        handle,
        type_: kind,
        size,
        modelRIArray: branches.as_mut_ptr(),
    };
    acl!(aclmdlRIAddCondTask(params, stream, 0));
    (handle, branches)
}

/// Captures `body` into a branch, on a stream of its own.
pub fn capture_branch(branch: aclmdlRI, body: impl FnOnce(aclrtStream)) {
    let stream = create_stream();
    acl!(aclmdlRICaptureToModelRIBegin(stream, branch, RELAXED));
    body(stream);
    assert_eq!(capture_end(stream), branch);
    acl!(aclrtDestroyStream(stream));
}

/// The device address of a condition handle's word.
pub fn cond_word(handle: aclmdlRICondHandle) -> *mut c_void {
    let mut word = ptr::null_mut();
    acl!(aclmdlRICondHandleGetCondPtr(handle, &mut word));
    word.cast()
}

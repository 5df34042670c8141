//! Tables of bad inputs: each case runs on a fresh thread and must fail with its code, set the
//! thread's last error to it and leave a message naming the API.

use ascendcl::abi::*;
use npu_sys::*;

use super::{recent_message, set_device};

/// One bad input: the API expected to fail, the code, and the call (run on a fresh thread bound
/// to `device`, or with no context when `device` is -1).
pub struct Case {
    pub name: &'static str,
    pub api: &'static str,
    pub code: aclError,
    pub device: i32,
    pub run: fn() -> aclError,
}

pub const fn case(
    name: &'static str,
    api: &'static str,
    code: aclError,
    device: i32,
    run: fn() -> aclError,
) -> Case {
    Case {
        name,
        api,
        code,
        device,
        run,
    }
}

/// Runs every case; checks the code, the thread's last error and that the message names the
/// API.
pub fn run_table(cases: &[Case]) {
    let mut failures = Vec::new();
    for case in cases {
        let (device, run) = (case.device, case.run);
        let (code, last, message) = std::thread::spawn(move || {
            if device >= 0 {
                set_device(device);
            }
            let code = run();
            // SAFETY: no preconditions.
            let last = unsafe { aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL) };
            (code, last, recent_message())
        })
        .join()
        .unwrap();
        if code != case.code || last != case.code || !message.contains(case.api) {
            failures.push(format!(
                "{}: expected {} from {}, got {code} (last error {last}, message {message:?})",
                case.name, case.code, case.api
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failing cases:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

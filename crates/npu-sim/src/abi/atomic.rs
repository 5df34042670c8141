//! Which atomic operations a device's kernels can apply to host memory and to another
//! device's memory (aclrtDeviceGetHostAtomicCapabilities, aclrtDeviceGetP2PAtomicCapabilities).

use npu_sys::*;

use super::check::array;
use crate::error::{Res, ensure, fail, guard, non_null};
use crate::hardware::atomic_capability;
use crate::sim::sim;

/// The ACL layer's checks of the arrays and the count (100000), made before the operations
/// and the devices are.
fn check_arrays(
    capabilities: *mut u32,
    operations: *const aclrtAtomicOperation,
    count: u32,
) -> Res<()> {
    non_null(capabilities, "capabilities")?;
    non_null(operations, "operations")?;
    ensure!(
        count > 0,
        ACL_ERROR_INVALID_PARAM,
        "count is 0: there is no operation to query"
    );
    ensure!(
        capabilities.is_aligned(),
        ACL_ERROR_INVALID_PARAM,
        "capabilities is not aligned for uint32_t"
    );
    Ok(())
}

/// Each operation's capability bits (arrays checked with [`check_arrays`]); an operation that
/// is no aclrtAtomicOperation → 107000. A value no lookup decides, so it is checked before
/// the devices are looked up, as aclrtHostMemMapCapabilities checks its engine type.
fn answers(operations: *const aclrtAtomicOperation, count: u32) -> Res<Vec<u32>> {
    let operations = array(operations, count as usize, "operations")?;
    let mut answers = Vec::with_capacity(operations.len());
    for (at, &operation) in operations.iter().enumerate() {
        match atomic_capability(operation) {
            Some(bits) => answers.push(bits),
            None => fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "operations[{at}] is {operation}, not an aclrtAtomicOperation"
            ),
        }
    }
    Ok(answers)
}

/// Writes the answers once every check has passed, so a failure leaves `capabilities`
/// untouched.
fn write(capabilities: *mut u32, answers: Vec<u32>) {
    for (at, bits) in answers.into_iter().enumerate() {
        // SAFETY: non-NULL and aligned ([`check_arrays`]); by the API contract the array
        // holds `count` entries, and `at` < count (one answer per operation).
        unsafe { capabilities.add(at).write(bits) };
    }
}

/// What a device's kernels can do atomically to host memory, one aclrtAtomicOperationCapability
/// mask per operation (see `hardware::atomic_capability`). NULL array or count 0 → 100000;
/// an operation that is no aclrtAtomicOperation → 107000; then an unknown device → 107001.
///
/// # Safety
/// `capabilities` and `operations` must be NULL or hold `count` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDeviceGetHostAtomicCapabilities(
    capabilities: *mut u32,
    operations: *const aclrtAtomicOperation,
    count: u32,
    deviceId: i32,
) -> aclError {
    guard("aclrtDeviceGetHostAtomicCapabilities", || {
        check_arrays(capabilities, operations, count)?;
        let answers = answers(operations, count)?;
        sim()?.device(deviceId.into())?;
        write(capabilities, answers);
        Ok(())
    })
}

/// What `srcDeviceId`'s kernels can do atomically to `dstDeviceId`'s memory (peer access need
/// not be enabled: this is what the link allows). The same device twice → 100000, with the
/// arrays' checks; otherwise as aclrtDeviceGetHostAtomicCapabilities, the source device
/// looked up before the destination.
///
/// # Safety
/// `capabilities` and `operations` must be NULL or hold `count` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDeviceGetP2PAtomicCapabilities(
    capabilities: *mut u32,
    operations: *const aclrtAtomicOperation,
    count: u32,
    srcDeviceId: i32,
    dstDeviceId: i32,
) -> aclError {
    guard("aclrtDeviceGetP2PAtomicCapabilities", || {
        check_arrays(capabilities, operations, count)?;
        ensure!(
            srcDeviceId != dstDeviceId,
            ACL_ERROR_INVALID_PARAM,
            "srcDeviceId and dstDeviceId are both {srcDeviceId}: a device is not its own peer"
        );
        let answers = answers(operations, count)?;
        let sim = sim()?;
        sim.device(srcDeviceId.into())?;
        sim.device(dstDeviceId.into())?;
        write(capabilities, answers);
        Ok(())
    })
}

//! The per-stage snapshot callbacks (aclrtSnapShotCallbackRegister/Unregister) and running
//! them at their stages.

use std::ffi::c_void;
use std::sync::Mutex;

use npu_sys::*;

use crate::error::{Res, ensure, fail};
use crate::sim::Sim;
use crate::sync::lock;

/// The callbacks, one per stage at most: (callback, user args as an address).
static CALLBACKS: Mutex<[Option<(aclrtSnapShotCallBack, usize)>; 6]> = Mutex::new([None; 6]);

/// The index of a valid stage, for a registration or unregistration of a non-NULL callback.
fn stage_index(stage: aclrtSnapShotStage, callback: aclrtSnapShotCallBack) -> Res<usize> {
    ensure!(
        stage <= ACL_RT_SNAPSHOT_UNLOCK_POST,
        ACL_ERROR_INVALID_PARAM,
        "stage {stage} is no aclrtSnapShotStage"
    );
    ensure!(
        callback.is_some(),
        ACL_ERROR_INVALID_PARAM,
        "callback is NULL"
    );
    Ok(stage as usize)
}

/// aclrtSnapShotCallbackRegister: one callback per stage (a second → 507913).
pub(crate) fn register(
    stage: aclrtSnapShotStage,
    callback: aclrtSnapShotCallBack,
    args: *mut c_void,
) -> Res<()> {
    let index = stage_index(stage, callback)?;
    let mut callbacks = lock(&CALLBACKS);
    ensure!(
        callbacks[index].is_none(),
        ACL_ERROR_SNAPSHOT_REGISTER_CALLBACK_FAILED,
        "stage {stage} already has a callback (repeated registration is not supported)"
    );
    callbacks[index] = Some((callback, args as usize));
    Ok(())
}

/// aclrtSnapShotCallbackUnregister: the stage's callback must be `callback` (else 507913).
pub(crate) fn unregister(stage: aclrtSnapShotStage, callback: aclrtSnapShotCallBack) -> Res<()> {
    let index = stage_index(stage, callback)?;
    let mut callbacks = lock(&CALLBACKS);
    match callbacks[index] {
        // Compared as addresses: the C caller passes the same pointer it registered.
        Some((registered, _)) if registered.map(|f| f as usize) == callback.map(|f| f as usize) => {
            callbacks[index] = None;
            Ok(())
        }
        Some(_) => fail!(
            ACL_ERROR_SNAPSHOT_REGISTER_CALLBACK_FAILED,
            "stage {stage} has a different callback registered"
        ),
        None => fail!(
            ACL_ERROR_SNAPSHOT_REGISTER_CALLBACK_FAILED,
            "stage {stage} has no callback registered"
        ),
    }
}

/// The devices in use: those with a live context, in id order.
fn devices_in_use(sim: &Sim) -> Vec<i32> {
    let mut ids: Vec<i32> = sim.contexts.live().iter().map(|c| c.device.id).collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Calls the stage's callback once per device in use, outside every simulator lock, so that
/// it may call the runtime (the gate lets a thread running callbacks through, whichever thread
/// called the step). The first non-zero return → 507912 (the others still run).
pub(super) fn run_stage(sim: &Sim, stage: aclrtSnapShotStage) -> Res<()> {
    let entry = lock(&CALLBACKS)[stage as usize];
    let Some((Some(callback), args)) = entry else {
        return Ok(());
    };
    let mut failed = None;
    let _stepping = super::gate::stepping();
    for device in devices_in_use(sim) {
        // SAFETY: the user registered a function of this type and is responsible for `args`.
        let code = unsafe { callback(device, args as *mut c_void) };
        if code != 0 && failed.is_none() {
            failed = Some((device, code));
        }
    }
    match failed {
        Some((device, code)) => fail!(
            ACL_ERROR_SNAPSHOT_CALLBACK_FAILED,
            "the callback of stage {stage} returned {code} for device {device}"
        ),
        None => Ok(()),
    }
}

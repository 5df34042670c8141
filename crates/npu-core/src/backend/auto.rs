//! `NPU_BACKEND=auto`: CANN when it can really run work here, otherwise the simulator.

use std::path::Path;

use super::reason::{BackendReason, Fallback};
use super::{load_installed, simulator};
use crate::error::{LoadError, Result};
use crate::runtime::Runtime;

/// Uses an installed AscendCL runtime when its `aclInit` succeeds and it sees at least one
/// device; otherwise the simulator, with a warning that says why. A build machine with the
/// toolkit but no NPU (or no driver) thus still runs on the simulator.
pub(crate) fn choose(config: Option<&Path>) -> Result<Runtime> {
    let Ok(sim) = simulator() else {
        // Nothing to fall back to: `auto` is `acl`.
        let loaded = load_installed().map_err(|tried| LoadError::NotFound { tried })?;
        return Runtime::start(loaded, config, BackendReason::NoSimulator);
    };
    match probe(config) {
        Ok(runtime) => Ok(runtime),
        Err(why) => {
            crate::log!(warn, reason = %why, "NPU_BACKEND=auto is using the simulator");
            Runtime::start(sim, config, BackendReason::Fallback(why))
        }
    }
}

/// Loads and initialises CANN's runtime and counts its devices, or says why it is not usable.
fn probe(config: Option<&Path>) -> std::result::Result<Runtime, Fallback> {
    let loaded = load_installed().map_err(|tried| Fallback::NotInstalled { tried })?;
    let library = loaded.backend.clone();
    // The probe's reason is never seen: it is dropped here, or replaced below.
    let runtime = Runtime::start(loaded, config, BackendReason::Detected { devices: 0 }).map_err(
        |error| Fallback::InitFailed {
            library: library.clone(),
            error,
        },
    )?;
    match runtime.device_count() {
        Ok(0) => Err(Fallback::NoDevice {
            library,
            visible_devices: std::env::var("ASCEND_RT_VISIBLE_DEVICES").ok(),
        }),
        Ok(devices) => {
            crate::log!(info, backend = %library, devices, "NPU_BACKEND=auto chose a real runtime");
            // A second reference on the initialised library (no second aclInit), carrying the
            // final reason; the probe's reference is dropped on return.
            Runtime::start(loaded, config, BackendReason::Detected { devices })
                .map_err(|error| Fallback::InitFailed { library, error })
        }
        Err(error) => Err(Fallback::DeviceCountFailed { library, error }),
    }
}

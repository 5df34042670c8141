//! Process-level configuration of the simulator: device count, memory per device, SoC name, the
//! CANN package versions it reports and the optional timing model.
//!
//! The same options come from three places, all with the same JSON shape:
//! - Rust: [`SimConfig`]'s builder and [`SimConfig::install`];
//! - the environment: `NPU_SIM_CONFIG` holding the JSON object;
//! - `aclInit`'s JSON file, under the key `"npu_sim"`.
//!
//! They are fixed when the simulator first initialises (the first ACL call, an `install`, or
//! an `aclInit` carrying `"npu_sim"`). A later attempt to set a *different* configuration fails;
//! per-device runtime controls live in [`crate::control`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Default number of simulated devices.
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use npu_sim::{SimConfig, config::DEFAULT_DEVICES};
///
/// assert_eq!(SimConfig::default().devices, DEFAULT_DEVICES);
/// let mut count = 0u32;
/// // SAFETY: a valid out pointer.
/// assert_eq!(unsafe { npu_sim::abi::aclrtGetDeviceCount(&mut count) }, 0);
/// assert_eq!(count, DEFAULT_DEVICES); // without NPU_SIM_CONFIG or an installed configuration
/// ```
pub const DEFAULT_DEVICES: u32 = 2;
/// Default memory capacity of each simulated device: 16 GiB.
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use npu_sim::{config::DEFAULT_MEMORY_PER_DEVICE, control};
///
/// assert_eq!(DEFAULT_MEMORY_PER_DEVICE, 16 << 30);
/// assert_eq!(control::device_stats(0).unwrap().capacity, DEFAULT_MEMORY_PER_DEVICE);
/// ```
pub const DEFAULT_MEMORY_PER_DEVICE: u64 = 16 << 30;
/// Default SoC name reported by `aclrtGetSocName`.
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use std::ffi::CStr;
/// use npu_sim::config::DEFAULT_SOC_NAME;
///
/// // SAFETY: aclrtGetSocName returns NULL or a NUL-terminated static string.
/// let name = unsafe { CStr::from_ptr(npu_sim::abi::aclrtGetSocName()) };
/// assert_eq!(name.to_str(), Ok(DEFAULT_SOC_NAME));
/// ```
pub const DEFAULT_SOC_NAME: &str = "Ascend910B3";
/// Default step of operator execute timeouts (aclrtGetOpTimeOutInterval), in µs: an Atlas A2
/// sets timeouts in multiples 1 to 254 of it, and 254 steps are its documented default and
/// longest timeout, 1091 s (254 × 4,294,967 µs = 1,090.92 s).
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use npu_sim::{SimConfig, config::DEFAULT_OP_TIMEOUT_INTERVAL_US};
///
/// assert_eq!(SimConfig::default().op_timeout_interval_us, DEFAULT_OP_TIMEOUT_INTERVAL_US);
/// assert_eq!((254 * DEFAULT_OP_TIMEOUT_INTERVAL_US + 500_000) / 1_000_000, 1091);
/// ```
pub const DEFAULT_OP_TIMEOUT_INTERVAL_US: u64 = 4_294_967;
/// The CANN package version the simulator reports by default, for every CANN package in
/// [`DEFAULT_PACKAGES`] (the CANN release of the ACL 1.17 header).
pub const DEFAULT_CANN_VERSION: &str = "8.5.0";
/// The packages `aclsysGetVersionStr` / `aclsysGetVersionNum` know by default, with their
/// versions: the CANN packages (named as the directories of a CANN installation's
/// `share/info`), the driver and the firmware.
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use std::ffi::{CStr, c_char};
/// use npu_sim::config::{DEFAULT_CANN_VERSION, DEFAULT_PACKAGES};
///
/// assert!(DEFAULT_PACKAGES.contains(&("runtime", DEFAULT_CANN_VERSION)));
/// let mut text = [0 as c_char; 128];
/// // SAFETY: a NUL-terminated name and ACL_PKG_VERSION_MAX_SIZE writable bytes.
/// let code = unsafe { npu_sim::abi::aclsysGetVersionStr(c"runtime".as_ptr().cast_mut(), text.as_mut_ptr()) };
/// assert_eq!(code, 0);
/// // SAFETY: the call NUL-terminated the buffer.
/// assert_eq!(unsafe { CStr::from_ptr(text.as_ptr()) }.to_str(), Ok(DEFAULT_CANN_VERSION));
/// ```
pub const DEFAULT_PACKAGES: &[(&str, &str)] = &[
    ("cann", DEFAULT_CANN_VERSION),
    ("runtime", DEFAULT_CANN_VERSION),
    ("compiler", DEFAULT_CANN_VERSION),
    ("opp", DEFAULT_CANN_VERSION),
    ("toolkit", DEFAULT_CANN_VERSION),
    ("driver", "25.5.0"),
    ("firmware", "7.8.0"),
];
/// The environment variable holding a JSON [`SimConfig`].
///
/// ```standalone_crate
/// # extern crate ascendcl as npu_sim;
///
/// use npu_sim::{SimConfig, config::CONFIG_ENV};
///
/// // As a test runner would set it, before the simulator starts:
/// // SAFETY: no other thread of this program reads or writes the environment.
/// unsafe { std::env::set_var(CONFIG_ENV, r#"{"devices": 3, "soc_name": "Ascend910B4"}"#) };
/// let mut count = 0u32;
/// // SAFETY: a valid out pointer. The first ACL call starts the simulator.
/// assert_eq!(unsafe { npu_sim::abi::aclrtGetDeviceCount(&mut count) }, 0);
/// assert_eq!(count, 3);
/// assert_eq!(SimConfig::current().unwrap().soc_name, "Ascend910B4");
/// ```
pub const CONFIG_ENV: &str = "NPU_SIM_CONFIG";
/// Most devices a simulator may have (peer-access masks are 64 bits wide).
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use npu_sim::{SimConfig, config::MAX_DEVICES};
///
/// assert!(SimConfig::default().devices(MAX_DEVICES).validate().is_ok());
/// assert!(SimConfig::default().devices(MAX_DEVICES + 1).validate().is_err());
/// ```
pub const MAX_DEVICES: u32 = 64;

/// Process-level simulator configuration.
///
/// ```
/// # extern crate ascendcl as npu_sim;
/// use npu_sim::{SimConfig, TimingModel};
///
/// let config = SimConfig::default()
///     .devices(4)
///     .memory_per_device(1 << 30)
///     .timing(TimingModel::default().h2d_bandwidth(25_000_000_000).launch_latency_ns(5_000));
/// config.clone().install().unwrap();
/// // Installing the same configuration again is fine; a different one is refused.
/// config.install().unwrap();
/// assert!(SimConfig::default().install().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimConfig {
    /// Number of devices (`aclrtGetDeviceCount`), 0 to [`MAX_DEVICES`]. 0 simulates a host with
    /// the toolkit but no NPU: `aclInit` succeeds, the count is 0 and every device id is
    /// invalid (how npu-core's `auto` is tested to fall back).
    pub devices: u32,
    /// Memory capacity of each device in bytes (`aclrtGetMemInfo`'s total).
    pub memory_per_device: u64,
    /// SoC name (`aclrtGetSocName`).
    pub soc_name: String,
    /// Package name → version (`aclsysGetVersionStr`; `aclsysGetVersionNum` reports its weighted
    /// number, see [`crate::version`]). Given in JSON, the map replaces the defaults whole.
    pub packages: BTreeMap<String, String>,
    /// Timing model applied to every device at start-up; `None` runs as fast as the host can.
    pub timing: Option<TimingModel>,
    /// Most pinned host memory (aclrtMallocHost) live at once, in bytes; `None`: the machine's
    /// physical memory. A request beyond it fails with ACL_ERROR_RT_MEMORY_ALLOCATION.
    pub pinned_host_limit: Option<u64>,
    /// The step of operator execute timeouts in µs (aclrtGetOpTimeOutInterval), 1 to
    /// [`MAX_OP_TIMEOUT_INTERVAL_US`]; below 100,000 µs, a timeout of 0 means "never", as on
    /// the hardware.
    pub op_timeout_interval_us: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            devices: DEFAULT_DEVICES,
            memory_per_device: DEFAULT_MEMORY_PER_DEVICE,
            soc_name: DEFAULT_SOC_NAME.to_owned(),
            packages: DEFAULT_PACKAGES
                .iter()
                .map(|&(name, version)| (name.to_owned(), version.to_owned()))
                .collect(),
            timing: None,
            pinned_host_limit: None,
            op_timeout_interval_us: DEFAULT_OP_TIMEOUT_INTERVAL_US,
        }
    }
}

/// The longest step of operator execute timeouts a configuration may set: 254 steps in ms
/// still fit aclrtGetOpExecuteTimeout's `uint32_t`.
pub const MAX_OP_TIMEOUT_INTERVAL_US: u64 = u32::MAX as u64 / 254 * 1000;

/// Why a configuration was refused.
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use npu_sim::{ConfigError, SimConfig};
///
/// let out_of_range = SimConfig::from_json(r#"{"devices": 65}"#).unwrap_err();
/// assert!(matches!(out_of_range, ConfigError::Invalid(_)));
/// let Err(ConfigError::Json(json)) = SimConfig::from_json(r#"{"device": 2}"#) else {
///     panic!("unknown keys are refused")
/// };
/// assert_eq!((json.line(), json.column()), (1, 9));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The simulator already runs with another configuration (process-level options are fixed
    /// at first initialisation).
    #[error("the simulator is already initialised with a different configuration: {current:?}")]
    AlreadyInitialised {
        /// The configuration in force.
        current: Box<SimConfig>,
    },
    /// A value is out of range.
    #[error("invalid simulator configuration: {0}")]
    Invalid(String),
    /// The JSON text does not describe a configuration.
    #[error("invalid simulator configuration JSON: {0}")]
    Json(#[source] JsonError),
    /// The simulator could not start with the configuration from the environment.
    #[error("the simulator failed to initialise: {0}")]
    Startup(String),
}

/// Why a JSON text is not a configuration: its message says what is wrong and where, and
/// [`line`](JsonError::line) and [`column`](JsonError::column) locate it.
///
/// Opaque so that the JSON parser npu-sim uses is not part of its API: a parser upgrade is not
/// a breaking change here.
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use npu_sim::{ConfigError, SimConfig};
///
/// let Err(ConfigError::Json(json)) = SimConfig::from_json("{\n  \"devices\": true\n}") else {
///     panic!("not a device count")
/// };
/// assert_eq!(json.line(), 2);
/// assert!(json.to_string().contains("expected u32"), "{json}");
/// ```
#[derive(Debug)]
pub struct JsonError(serde_json::Error);

impl JsonError {
    /// The line of the error, from 1; 0 when the error is not tied to a place in the text.
    pub fn line(&self) -> usize {
        self.0.line()
    }

    /// The column of the error, from 1; 0 when the error is not tied to a place in the text.
    pub fn column(&self) -> usize {
        self.0.column()
    }
}

impl std::fmt::Display for JsonError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for JsonError {
    // Forwarded rather than `Some(&self.0)`: the parser's error would be nameable by
    // downcasting, and its own source (an I/O error, when there is one) is what is useful.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.0)
    }
}

impl SimConfig {
    /// Sets the device count.
    ///
    /// ```
    /// # extern crate ascendcl as npu_sim;
    ///
    /// use npu_sim::SimConfig;
    ///
    /// let config = SimConfig::default().devices(8);
    /// assert_eq!(config, SimConfig::from_json(r#"{"devices": 8}"#).unwrap()); // the JSON form
    /// ```
    pub fn devices(mut self, devices: u32) -> Self {
        self.devices = devices;
        self
    }

    /// Sets each device's memory capacity in bytes.
    ///
    /// ```standalone_crate
    /// # extern crate ascendcl as npu_sim;
    ///
    /// use std::ptr;
    /// use npu_sim::{SimConfig, abi::*};
    ///
    /// SimConfig::default().memory_per_device(1 << 20).install().unwrap(); // 1 MiB devices
    /// // SAFETY: valid out pointers.
    /// unsafe {
    ///     assert_eq!(aclrtSetDevice(0), 0);
    ///     let mut dev = ptr::null_mut();
    ///     assert_eq!(aclrtMalloc(&mut dev, 2 << 20, 0), 207001, "more than the device holds");
    /// }
    /// ```
    pub fn memory_per_device(mut self, bytes: u64) -> Self {
        self.memory_per_device = bytes;
        self
    }

    /// Sets the SoC name.
    ///
    /// ```
    /// # extern crate ascendcl as npu_sim;
    ///
    /// use npu_sim::SimConfig;
    ///
    /// let config = SimConfig::default().soc_name("Ascend310P3");
    /// assert_eq!(config, SimConfig::from_json(r#"{"soc_name": "Ascend310P3"}"#).unwrap());
    /// assert!(SimConfig::default().soc_name("").validate().is_err());
    /// ```
    pub fn soc_name(mut self, name: impl Into<String>) -> Self {
        self.soc_name = name.into();
        self
    }

    /// Sets the version reported for a package (adding the package if it is new).
    ///
    /// ```
    /// # extern crate ascendcl as npu_sim;
    ///
    /// use npu_sim::SimConfig;
    ///
    /// let config = SimConfig::default().package_version("runtime", "9.0.0-rc.1");
    /// assert_eq!(config.packages["runtime"], "9.0.0-rc.1");
    /// assert!(SimConfig::default().package_version("runtime", "nine").validate().is_err());
    /// ```
    pub fn package_version(
        mut self,
        package: impl Into<String>,
        version: impl Into<String>,
    ) -> Self {
        self.packages.insert(package.into(), version.into());
        self
    }

    /// Sets the timing model every device starts with.
    ///
    /// ```
    /// # extern crate ascendcl as npu_sim;
    ///
    /// use npu_sim::{SimConfig, TimingModel};
    ///
    /// let config = SimConfig::default().timing(TimingModel::default().launch_latency_ns(2_000));
    /// let json = r#"{"timing": {"launch_latency_ns": 2000}}"#;
    /// assert_eq!(config, SimConfig::from_json(json).unwrap());
    /// ```
    pub fn timing(mut self, timing: TimingModel) -> Self {
        self.timing = Some(timing);
        self
    }

    /// Caps the pinned host memory live at once (the default is the machine's physical memory).
    ///
    /// ```standalone_crate
    /// # extern crate ascendcl as npu_sim;
    ///
    /// use std::ptr;
    /// use npu_sim::{SimConfig, abi::*};
    ///
    /// SimConfig::default().pinned_host_limit(1 << 20).install().unwrap();
    /// // SAFETY: valid out pointers; the block is freed once.
    /// unsafe {
    ///     assert_eq!(aclrtSetDevice(0), 0);
    ///     let (mut a, mut b) = (ptr::null_mut(), ptr::null_mut());
    ///     assert_eq!(aclrtMallocHost(&mut a, 1 << 20), 0);
    ///     assert_eq!(aclrtMallocHost(&mut b, 1), 207001, "over the limit");
    ///     assert_eq!(aclrtFreeHost(a), 0);
    ///     assert_eq!(aclrtMallocHost(&mut b, 1), 0);
    ///     assert_eq!(aclrtFreeHost(b), 0);
    /// }
    /// ```
    pub fn pinned_host_limit(mut self, bytes: u64) -> Self {
        self.pinned_host_limit = Some(bytes);
        self
    }

    /// Sets the step of operator execute timeouts, in µs.
    ///
    /// ```
    /// # extern crate ascendcl as npu_sim;
    /// use npu_sim::SimConfig;
    ///
    /// let config = SimConfig::default().op_timeout_interval_us(1_000);
    /// assert_eq!(config, SimConfig::from_json(r#"{"op_timeout_interval_us": 1000}"#).unwrap());
    /// assert!(SimConfig::default().op_timeout_interval_us(0).validate().is_err());
    /// ```
    pub fn op_timeout_interval_us(mut self, us: u64) -> Self {
        self.op_timeout_interval_us = us;
        self
    }

    /// Parses a configuration from JSON; absent keys keep their defaults.
    ///
    /// ```
    /// # extern crate ascendcl as npu_sim;
    /// let config = npu_sim::SimConfig::from_json(r#"{"devices": 3, "timing": {"launch_latency_ns": 1000}}"#).unwrap();
    /// assert_eq!(config.devices, 3);
    /// assert_eq!(config.timing.unwrap().launch_latency_ns, 1000);
    /// ```
    pub fn from_json(text: &str) -> Result<Self, ConfigError> {
        let config: Self =
            serde_json::from_str(text).map_err(|e| ConfigError::Json(JsonError(e)))?;
        config.validate()?;
        Ok(config)
    }

    /// Checks the values are in range.
    ///
    /// ```
    /// # extern crate ascendcl as npu_sim;
    ///
    /// use npu_sim::SimConfig;
    ///
    /// assert!(SimConfig::default().validate().is_ok());
    /// let mut config = SimConfig::default();
    /// config.memory_per_device = 0; // the fields are public: validate before installing
    /// assert!(config.validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.devices > MAX_DEVICES {
            return Err(ConfigError::Invalid(format!(
                "devices must be 0 to {MAX_DEVICES}, not {}",
                self.devices
            )));
        }
        if self.memory_per_device == 0 {
            return Err(ConfigError::Invalid(
                "memory_per_device must not be 0".into(),
            ));
        }
        if self.soc_name.is_empty() || self.soc_name.contains('\0') {
            return Err(ConfigError::Invalid(
                "soc_name must be non-empty text without NUL".into(),
            ));
        }
        if !(1..=MAX_OP_TIMEOUT_INTERVAL_US).contains(&self.op_timeout_interval_us) {
            return Err(ConfigError::Invalid(format!(
                "op_timeout_interval_us must be 1 to {MAX_OP_TIMEOUT_INTERVAL_US}, not {}",
                self.op_timeout_interval_us
            )));
        }
        for (package, version) in &self.packages {
            if package.is_empty() || package.contains('\0') {
                return Err(ConfigError::Invalid(format!(
                    "package name {package:?} must be non-empty text without NUL"
                )));
            }
            if crate::version::package_version_number(version).is_none() {
                return Err(ConfigError::Invalid(format!(
                    "version {version:?} of package {package:?} is not MAJOR.MINOR.PATCH with an \
                     optional -alpha.N, -beta.N or -rc.N (see npu_sim::version)"
                )));
            }
        }
        Ok(())
    }

    /// Makes this the simulator's configuration.
    ///
    /// Succeeds if the simulator is not initialised yet (it initialises now) or already runs
    /// with an equal configuration; fails with [`ConfigError::AlreadyInitialised`] otherwise.
    ///
    /// ```
    /// # extern crate ascendcl as npu_sim;
    ///
    /// use npu_sim::{ConfigError, SimConfig};
    ///
    /// let mut count = 0u32;
    /// // SAFETY: a valid out pointer. The first ACL call starts the simulator.
    /// assert_eq!(unsafe { npu_sim::abi::aclrtGetDeviceCount(&mut count) }, 0);
    /// let running = SimConfig::current().unwrap();
    /// assert!(running.clone().install().is_ok(), "the configuration in force");
    /// let other = running.devices(count + 1).install();
    /// assert!(matches!(other, Err(ConfigError::AlreadyInitialised { .. })));
    /// ```
    pub fn install(self) -> Result<(), ConfigError> {
        self.validate()?;
        crate::sim::install(self)
    }

    /// The configuration in force, if the simulator is initialised.
    ///
    /// ```
    /// # extern crate ascendcl as npu_sim;
    ///
    /// use npu_sim::SimConfig;
    ///
    /// let mut count = 0u32;
    /// // SAFETY: a valid out pointer. The first ACL call starts the simulator.
    /// assert_eq!(unsafe { npu_sim::abi::aclrtGetDeviceCount(&mut count) }, 0);
    /// assert_eq!(SimConfig::current().unwrap().devices, count);
    /// ```
    pub fn current() -> Option<SimConfig> {
        crate::sim::current_config()
    }
}

/// How long simulated device tasks take.
///
/// A task's duration is the launch latency plus its bytes divided by the bandwidth of its
/// direction (copies and memsets) or its kernel's configured duration (kernels), and at least
/// `min_task_ns`. A bandwidth of 0 means "infinitely fast". Event records and waits take no time.
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use npu_sim::{SimConfig, TimingModel};
///
/// // 25 GB/s host-to-device, 3 µs per launch, vector_add_f32 takes 50 µs, the rest is free:
/// let model = TimingModel::default()
///     .h2d_bandwidth(25_000_000_000)
///     .launch_latency_ns(3_000)
///     .kernel("vector_add_f32", 50_000);
/// let json = r#"{"timing": {"h2d_bytes_per_sec": 25000000000, "launch_latency_ns": 3000,
///                           "kernel_ns": {"vector_add_f32": 50000}}}"#;
/// assert_eq!(SimConfig::from_json(json).unwrap().timing, Some(model));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TimingModel {
    /// Host-to-device copy bandwidth in bytes per second (0 = instantaneous).
    pub h2d_bytes_per_sec: u64,
    /// Device-to-host copy bandwidth in bytes per second (0 = instantaneous).
    pub d2h_bytes_per_sec: u64,
    /// Device-to-device copy and memset bandwidth in bytes per second (0 = instantaneous).
    pub d2d_bytes_per_sec: u64,
    /// Fixed cost added to every copy, memset, kernel and host task, in ns.
    pub launch_latency_ns: u64,
    /// Lower bound of every copy, memset, kernel and host task, in ns.
    pub min_task_ns: u64,
    /// Duration of kernels by name, in ns (kernels not listed take only the launch latency).
    pub kernel_ns: BTreeMap<String, u64>,
}

impl TimingModel {
    /// Sets the host-to-device bandwidth (bytes per second).
    ///
    /// ```
    /// # extern crate ascendcl as npu_sim;
    ///
    /// use npu_sim::{SimConfig, TimingModel};
    ///
    /// let model = TimingModel::default().h2d_bandwidth(25_000_000_000);
    /// // The same in NPU_SIM_CONFIG, or under "npu_sim" in aclInit's file:
    /// let json = r#"{"timing": {"h2d_bytes_per_sec": 25000000000}}"#;
    /// assert_eq!(SimConfig::from_json(json).unwrap().timing, Some(model));
    /// ```
    pub fn h2d_bandwidth(mut self, bytes_per_sec: u64) -> Self {
        self.h2d_bytes_per_sec = bytes_per_sec;
        self
    }

    /// Sets the device-to-host bandwidth (bytes per second).
    ///
    /// ```
    /// # extern crate ascendcl as npu_sim;
    ///
    /// use npu_sim::{SimConfig, TimingModel};
    ///
    /// let model = TimingModel::default().d2h_bandwidth(20_000_000_000);
    /// // The same in NPU_SIM_CONFIG, or under "npu_sim" in aclInit's file:
    /// let json = r#"{"timing": {"d2h_bytes_per_sec": 20000000000}}"#;
    /// assert_eq!(SimConfig::from_json(json).unwrap().timing, Some(model));
    /// ```
    pub fn d2h_bandwidth(mut self, bytes_per_sec: u64) -> Self {
        self.d2h_bytes_per_sec = bytes_per_sec;
        self
    }

    /// Sets the device-to-device bandwidth (bytes per second).
    ///
    /// ```
    /// # extern crate ascendcl as npu_sim;
    ///
    /// use npu_sim::{SimConfig, TimingModel};
    ///
    /// let model = TimingModel::default().d2d_bandwidth(800_000_000_000);
    /// // The same in NPU_SIM_CONFIG, or under "npu_sim" in aclInit's file:
    /// let json = r#"{"timing": {"d2d_bytes_per_sec": 800000000000}}"#;
    /// assert_eq!(SimConfig::from_json(json).unwrap().timing, Some(model));
    /// ```
    pub fn d2d_bandwidth(mut self, bytes_per_sec: u64) -> Self {
        self.d2d_bytes_per_sec = bytes_per_sec;
        self
    }

    /// Sets the launch latency (ns).
    ///
    /// ```
    /// # extern crate ascendcl as npu_sim;
    ///
    /// use npu_sim::{SimConfig, TimingModel};
    ///
    /// let model = TimingModel::default().launch_latency_ns(5_000);
    /// let json = r#"{"timing": {"launch_latency_ns": 5000}}"#; // the same in NPU_SIM_CONFIG
    /// assert_eq!(SimConfig::from_json(json).unwrap().timing, Some(model));
    /// ```
    pub fn launch_latency_ns(mut self, ns: u64) -> Self {
        self.launch_latency_ns = ns;
        self
    }

    /// Sets the per-task minimum duration (ns).
    ///
    /// ```
    /// # extern crate ascendcl as npu_sim;
    ///
    /// use npu_sim::{SimConfig, TimingModel};
    ///
    /// let model = TimingModel::default().min_task_ns(1_000);
    /// let json = r#"{"timing": {"min_task_ns": 1000}}"#; // the same in NPU_SIM_CONFIG
    /// assert_eq!(SimConfig::from_json(json).unwrap().timing, Some(model));
    /// ```
    pub fn min_task_ns(mut self, ns: u64) -> Self {
        self.min_task_ns = ns;
        self
    }

    /// Sets the duration of the kernel `name` (ns).
    ///
    /// ```
    /// # extern crate ascendcl as npu_sim;
    ///
    /// use npu_sim::TimingModel;
    ///
    /// let model = TimingModel::default()
    ///     .kernel("vector_add_f32", 40_000)
    ///     .kernel("scale_f32", 10_000);
    /// assert_eq!(model.kernel_ns["vector_add_f32"], 40_000);
    /// assert_eq!(model.kernel_ns.len(), 2);
    /// ```
    pub fn kernel(mut self, name: impl Into<String>, ns: u64) -> Self {
        self.kernel_ns.insert(name.into(), ns);
        self
    }

    /// The duration of a task moving `bytes` at `bytes_per_sec` (0 = no transfer time).
    pub(crate) fn transfer_ns(&self, bytes: u64, bytes_per_sec: u64) -> u64 {
        let transfer = if bytes_per_sec == 0 {
            0
        } else {
            (u128::from(bytes) * 1_000_000_000 / u128::from(bytes_per_sec))
                .min(u128::from(u64::MAX)) as u64
        };
        self.work_ns(transfer)
    }

    /// Applies the launch latency and the minimum to a task's own work time.
    pub(crate) fn work_ns(&self, work: u64) -> u64 {
        self.launch_latency_ns
            .saturating_add(work)
            .max(self.min_task_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_follow_the_model() {
        let model = TimingModel::default()
            .h2d_bandwidth(1_000_000_000)
            .launch_latency_ns(500)
            .min_task_ns(2_000);
        assert_eq!(
            model.transfer_ns(1_000_000, model.h2d_bytes_per_sec),
            1_000_500
        );
        assert_eq!(
            model.transfer_ns(10, model.h2d_bytes_per_sec),
            2_000,
            "the minimum wins"
        );
        assert_eq!(model.transfer_ns(10, 0), 2_000);
    }

    #[test]
    fn json_round_trips_and_rejects_unknown_keys() {
        let config = SimConfig::default()
            .devices(3)
            .timing(TimingModel::default().kernel("k", 7));
        let text = serde_json::to_string(&config).unwrap();
        assert_eq!(SimConfig::from_json(&text).unwrap(), config);
        assert!(SimConfig::from_json(r#"{"device": 3}"#).is_err());
        assert!(SimConfig::from_json(r#"{"devices": 65}"#).is_err());
        assert_eq!(
            SimConfig::from_json(r#"{"devices": 0}"#).unwrap().devices,
            0
        );
    }
}

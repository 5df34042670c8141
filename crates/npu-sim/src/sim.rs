//! The process-wide simulator: configuration, devices, handle tables and memory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use npu_sys::*;

use crate::advice::Advice;
use crate::allocator::Allocators;
use crate::config::{CONFIG_ENV, ConfigError, SimConfig};
use crate::context::Context;
use crate::control_flow::{CondHandle, Label, LabelList};
use crate::data_buffer::DataBuffer;
use crate::device::Device;
use crate::error::{Res, fail};
use crate::event::Event;
use crate::handle::{Handle, HandleTable, Kind};
use crate::kernel::{ArgsBuilder, Binary, BinaryData, Function, ParamRef};
use crate::memory::MemoryMap;
use crate::model_ri::{ModelRi, TaskGroup, TaskRef};
use crate::notify::Notify;
use crate::pool::Pools;
use crate::report::Reports;
use crate::stream::Stream;
use crate::vmm::Vmm;

pub(crate) struct Sim {
    pub(crate) config: SimConfig,
    pub(crate) devices: Vec<Arc<Device>>,
    pub(crate) contexts: HandleTable<Context>,
    pub(crate) streams: HandleTable<Stream>,
    pub(crate) events: HandleTable<Event>,
    pub(crate) binaries: HandleTable<Binary>,
    pub(crate) binary_data: HandleTable<BinaryData>,
    pub(crate) functions: HandleTable<Function>,
    pub(crate) args: HandleTable<ArgsBuilder>,
    pub(crate) params: HandleTable<ParamRef>,
    /// Caller memory used as args handles (aclrtKernelArgsInitByUserMem): address → token.
    pub(crate) user_args: Mutex<HashMap<usize, Handle>>,
    pub(crate) notifies: HandleTable<Notify>,
    pub(crate) data_buffers: HandleTable<DataBuffer>,
    pub(crate) models: HandleTable<ModelRi>,
    pub(crate) model_tasks: HandleTable<TaskRef>,
    pub(crate) task_groups: HandleTable<TaskGroup>,
    pub(crate) labels: HandleTable<Label>,
    pub(crate) label_lists: HandleTable<LabelList>,
    pub(crate) cond_handles: HandleTable<CondHandle>,
    pub(crate) memory: MemoryMap,
    pub(crate) pools: Pools,
    pub(crate) vmm: Vmm,
    /// Advice and prefetch requests about managed memory.
    pub(crate) advice: Advice,
    pub(crate) allocators: Allocators,
    pub(crate) reports: Reports,
    pub(crate) ipc: crate::ipc::Ipc,
}

impl Sim {
    fn new(config: SimConfig) -> Sim {
        let epoch = Instant::now();
        let devices = (0..config.devices)
            .map(|id| {
                Arc::new(Device::new(
                    id as i32,
                    config.memory_per_device,
                    epoch,
                    config.timing.clone(),
                ))
            })
            .collect();
        let pinned_limit = config.pinned_host_limit.unwrap_or_else(physical_memory);
        crate::trace::enable_from_env();
        Sim {
            config,
            devices,
            contexts: HandleTable::new(Kind::Context),
            streams: HandleTable::new(Kind::Stream),
            events: HandleTable::new(Kind::Event),
            binaries: HandleTable::new(Kind::Binary),
            binary_data: HandleTable::new(Kind::BinaryData),
            functions: HandleTable::new(Kind::Function),
            args: HandleTable::new(Kind::Args),
            params: HandleTable::new(Kind::Param),
            user_args: Mutex::default(),
            notifies: HandleTable::new(Kind::Notify),
            data_buffers: HandleTable::new(Kind::DataBuffer),
            models: HandleTable::new(Kind::ModelRi),
            model_tasks: HandleTable::new(Kind::ModelTask),
            task_groups: HandleTable::new(Kind::TaskGroup),
            labels: HandleTable::new(Kind::Label),
            label_lists: HandleTable::new(Kind::LabelList),
            cond_handles: HandleTable::new(Kind::CondHandle),
            memory: MemoryMap::new(pinned_limit),
            pools: Pools::new(),
            vmm: Vmm::new(),
            advice: Advice::default(),
            allocators: Allocators::new(),
            reports: Reports::default(),
            ipc: crate::ipc::Ipc::default(),
        }
    }

    /// The live streams of device `device_id`, in every context of it.
    pub(crate) fn streams_of(&self, device_id: i32) -> Vec<Arc<Stream>> {
        let mut streams = self.streams.live();
        streams.retain(|stream| stream.device.id == device_id);
        streams
    }

    /// A device by id, or ACL_ERROR_RT_INVALID_DEVICEID.
    pub(crate) fn device(&self, id: i64) -> Res<&Arc<Device>> {
        match usize::try_from(id).ok().and_then(|i| self.devices.get(i)) {
            Some(device) => Ok(device),
            None => fail!(
                ACL_ERROR_RT_INVALID_DEVICEID,
                "device {id} does not exist (the simulator has {} devices)",
                self.devices.len()
            ),
        }
    }
}

/// The machine's physical memory in bytes (`u64::MAX` if the OS does not say).
fn physical_memory() -> u64 {
    // SAFETY: sysconf has no preconditions; it returns -1 for a value it does not know.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    match (u64::try_from(pages), u64::try_from(page)) {
        (Ok(pages), Ok(page)) => pages.saturating_mul(page),
        _ => u64::MAX,
    }
}

static SIM: OnceLock<Result<Sim, String>> = OnceLock::new();

fn from_env() -> Result<Sim, String> {
    let config = match std::env::var(CONFIG_ENV) {
        Ok(text) => SimConfig::from_json(&text).map_err(|e| format!("{CONFIG_ENV}: {e}"))?,
        // Set, but not UTF-8: an invalid value like any other, not an unset one (which
        // started the simulator silently with the defaults).
        Err(std::env::VarError::NotUnicode(_)) => {
            return Err(format!("{CONFIG_ENV}: the value is not valid UTF-8"));
        }
        Err(std::env::VarError::NotPresent) => SimConfig::default(),
    };
    Ok(Sim::new(config))
}

/// Logs the simulator's start, once it is in [`SIM`]: the subscriber is the program's code and
/// may call the simulator back, which inside `get_or_init` would wait for its own
/// initialisation for ever.
fn announce(started: &Result<Sim, String>) {
    if let Ok(sim) = started {
        let config = &sim.config;
        crate::error::log!(debug, target: "npu_sim", ?config, "simulator initialised");
    }
}

/// The simulator, initialised from `NPU_SIM_CONFIG` (or defaults) on first use.
pub(crate) fn sim() -> Res<&'static Sim> {
    let mut fresh = false;
    let started = SIM.get_or_init(|| {
        fresh = true;
        from_env()
    });
    if fresh {
        announce(started);
    }
    match started {
        Ok(sim) => Ok(sim),
        Err(error) => fail!(
            ACL_ERROR_INVALID_PARAM,
            "the simulator cannot start: {error}"
        ),
    }
}

/// Initialises the simulator with `config`, or checks it already runs with an equal one.
pub(crate) fn install(config: SimConfig) -> Result<(), ConfigError> {
    let mut fresh = false;
    let installed = SIM.get_or_init(|| {
        fresh = true;
        Ok(Sim::new(config.clone()))
    });
    if fresh {
        announce(installed);
    }
    match installed {
        Ok(_) if fresh => Ok(()),
        Ok(sim) if sim.config == config => Ok(()),
        Ok(sim) => Err(ConfigError::AlreadyInitialised {
            current: Box::new(sim.config.clone()),
        }),
        Err(error) => Err(ConfigError::Startup(error.clone())),
    }
}

pub(crate) fn current_config() -> Option<SimConfig> {
    SIM.get()
        .and_then(|sim| sim.as_ref().ok())
        .map(|sim| sim.config.clone())
}

//! Contexts, the thread's current context, and the stream lookups every stream-taking API uses.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};

use npu_sys::*;

use crate::device::Device;
use crate::error::{Res, ensure, fail};
use crate::handle::{self, Handle};
use crate::sim::Sim;
use crate::stream::{Kind, Stream};
use crate::sync::{Bell, lock};

/// Whether a context stopped on a task failure (ACL_STOP_ON_FAILURE): shared by its streams.
#[derive(Default)]
pub(crate) struct Health {
    stopped: AtomicI32,
    /// Whether a stream of the context chose ACL_STOP_ON_FAILURE: the reference says its
    /// other streams then stop on failure too, for the rest of the context's life.
    stops_on_failure: AtomicBool,
    /// Rung when the context stops.
    pub(crate) bell: Bell,
}

impl Health {
    /// Stops the context with the failing task's code (the first failure wins).
    pub(crate) fn stop(&self, code: aclError) {
        let first = self
            .stopped
            .compare_exchange(0, code, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        if first {
            self.bell.ring();
        }
    }

    /// Makes every stream of the context stop it on a failure.
    pub(crate) fn stop_on_failure(&self) {
        self.stops_on_failure.store(true, Ordering::Release);
    }

    pub(crate) fn stops_on_failure(&self) -> bool {
        self.stops_on_failure.load(Ordering::Acquire)
    }

    pub(crate) fn stopped(&self) -> Option<aclError> {
        match self.stopped.load(Ordering::SeqCst) {
            0 => None,
            code => Some(code),
        }
    }
}

pub(crate) struct Context {
    pub(crate) handle: Handle,
    pub(crate) device: Arc<Device>,
    /// The device's primary context (aclrtSetDevice), as opposed to aclrtCreateContext's.
    pub(crate) primary: bool,
    pub(crate) health: Arc<Health>,
    pub(crate) default_stream: Arc<Stream>,
    /// The explicit streams; `None` once the context is destroyed, so a stream created
    /// meanwhile is refused rather than left in a context nobody will destroy again.
    streams: Mutex<Option<Vec<Arc<Stream>>>>,
    /// aclrtCtxSetSysParamOpt's parameters.
    pub(crate) sys_params: crate::sys_param::SysParams,
    /// The device memory of the context's workspaces, allocated when first asked for.
    workspaces: Mutex<[Option<usize>; Workspace::COUNT]>,
}

/// Device memory the runtime keeps for a context and hands out by address.
#[derive(Clone, Copy)]
pub(crate) enum Workspace {
    /// The float overflow flags (aclrtCtxGetFloatOverflowAddr).
    OverflowFlags,
    /// The words Cube and Vector cores synchronise through (aclrtGetHardwareSyncAddr).
    HardwareSync,
}

impl Workspace {
    const COUNT: usize = 2;
}

impl Context {
    /// Creates a context with its default stream on `device`.
    pub(crate) fn create(sim: &Sim, device: &Arc<Device>, primary: bool) -> Res<Arc<Context>> {
        let handle = sim.contexts.reserve()?;
        let health = Arc::new(Health::default());
        let kind = if primary {
            Kind::DeviceDefault
        } else {
            Kind::ContextDefault
        };
        let default_stream = match Stream::create(sim, handle, device, &health, 0, 0, kind) {
            Ok(stream) => stream,
            Err(error) => {
                sim.contexts.remove(handle);
                return Err(error);
            }
        };
        let ctx = Arc::new(Context {
            handle,
            device: device.clone(),
            primary,
            health,
            default_stream,
            streams: Mutex::new(Some(Vec::new())),
            sys_params: Default::default(),
            workspaces: Mutex::new([None; Workspace::COUNT]),
        });
        sim.contexts.fill(handle, ctx.clone());
        device.live_contexts.fetch_add(1, Ordering::AcqRel);
        Ok(ctx)
    }

    /// Tells the stream state callbacks that the context's default stream was created; called
    /// by the context's creator once it holds no lock (the callbacks may call the runtime).
    pub(crate) fn announce_default_stream(&self) {
        crate::stream_state::notify(self.default_stream.handle, ACL_RT_STREAM_STATE_CREATE_POST);
    }

    /// Creates an explicit stream of the context. A context destroyed meanwhile refuses it:
    /// the stream is destroyed again and the creation fails (107002), so no stream outlives
    /// its context unseen.
    pub(crate) fn create_stream(&self, sim: &Sim, priority: u32, flags: u32) -> Res<Arc<Stream>> {
        let stream = Stream::create(
            sim,
            self.handle,
            &self.device,
            &self.health,
            priority,
            flags,
            Kind::Created,
        )?;
        if let Err(error) = self.add_stream(stream.clone()) {
            stream.destroy(sim, false);
            return Err(error);
        }
        Ok(stream)
    }

    /// Adds a stream just created in the context; fails if the context was destroyed since.
    fn add_stream(&self, stream: Arc<Stream>) -> Res<()> {
        match lock(&self.streams).as_mut() {
            Some(streams) => {
                streams.push(stream);
                Ok(())
            }
            None => fail!(
                ACL_ERROR_RT_CONTEXT_NULL,
                "the current context (of device {}) was destroyed while the stream was created",
                self.device.id
            ),
        }
    }

    pub(crate) fn remove_stream(&self, handle: Handle) {
        if let Some(streams) = lock(&self.streams).as_mut() {
            streams.retain(|s| s.handle != handle);
        }
    }

    /// The default stream and every explicit stream.
    pub(crate) fn all_streams(&self) -> Vec<Arc<Stream>> {
        let mut all = vec![self.default_stream.clone()];
        all.extend(lock(&self.streams).iter().flatten().cloned());
        all
    }

    /// Fails (207000) if destroying the context would wait for the calling thread itself: it
    /// runs a host task of one of the context's streams, or is the report thread a BLOCK
    /// callback queued on one of them waits for. The destruction waits for every stream in
    /// turn, and one of them may wait for an event recorded behind that task.
    pub(crate) fn refuse_self_wait(&self) -> Res<()> {
        for stream in self.all_streams() {
            stream.refuse_self_wait(u64::MAX)?;
        }
        Ok(())
    }

    /// Destroys the context: waits for its streams' work (unless it can never complete),
    /// destroys them and retires the handle. Fails (107017) if another call retired it first.
    pub(crate) fn destroy(&self, sim: &Sim) -> Res<()> {
        sim.contexts.remove_live(self.handle)?;
        self.device.live_contexts.fetch_sub(1, Ordering::AcqRel);
        let streams = lock(&self.streams).take().unwrap_or_default();
        for stream in std::iter::once(self.default_stream.clone()).chain(streams) {
            stream.destroy(sim, false);
        }
        for address in lock(&self.workspaces).iter_mut().filter_map(Option::take) {
            // The runtime's own allocation, made by `workspace`: it is live.
            let _ = sim.memory.free(address, false);
        }
        Ok(())
    }

    /// The device memory of one of the context's workspaces, `bytes` of zeros (no task of the
    /// simulator overflows or synchronises cores through it), allocated on first use and freed
    /// with the context. It is the runtime's memory, not counted as an allocation of the
    /// program's.
    pub(crate) fn workspace(&self, sim: &Sim, which: Workspace, bytes: usize) -> Res<usize> {
        let mut workspaces = lock(&self.workspaces);
        let slot = &mut workspaces[which as usize];
        if let Some(address) = *slot {
            return Ok(address);
        }
        let kind = crate::memory::AllocKind::Device {
            device: self.device.id,
            accounted: 0,
            page_size: crate::memory::PAGE as u32,
        };
        let address = sim.memory.allocate(bytes, kind)?;
        *slot = Some(address);
        Ok(address)
    }

    /// Fails if work can no longer be submitted in this context (device lost, or stopped on a
    /// failure in STOP mode).
    pub(crate) fn check_usable(&self) -> Res<()> {
        self.device.check_alive()?;
        if let Some(code) = self.health.stopped() {
            fail!(
                code,
                "the context of device {} stopped after a task failed ({code}) in ACL_STOP_ON_FAILURE mode; no more work is accepted",
                self.device.id
            );
        }
        Ok(())
    }
}

/// The calling thread's context binding (thread-local, as on CANN).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Binding {
    None,
    /// aclrtSetCurrentContext / aclrtCreateContext.
    Explicit(Handle),
    /// aclrtSetDevice: the device's primary context, whichever that is now.
    Primary(i32),
}

thread_local! {
    static CURRENT: Cell<Binding> = const { Cell::new(Binding::None) };
}

/// aclInit's `"defaultDevice"`: the device a thread that never set a device or context uses
/// (-1: none).
static DEFAULT_DEVICE: AtomicI32 = AtomicI32::new(-1);

/// Sets (or with `None` clears) the device of threads without a binding.
pub(crate) fn set_default_device(device: Option<i32>) {
    DEFAULT_DEVICE.store(device.unwrap_or(-1), Ordering::Release);
}

/// aclrtSetDevice: binds the calling thread to a device's primary context, creating it on
/// first use (shared by all threads, reference-counted) and clearing any explicit context of
/// the thread.
pub(crate) fn set_device(sim: &Sim, device_id: i32) -> Res<()> {
    let device = sim.device(device_id.into())?;
    device.check_alive()?;
    let mut primary = lock(&device.primary);
    let created = match primary.ctx {
        Some(_) => None,
        None => {
            let ctx = Context::create(sim, device, true)?;
            primary.ctx = Some(ctx.handle);
            primary.refs = 0;
            Some(ctx)
        }
    };
    primary.refs += 1;
    drop(primary);
    bind_primary(device_id);
    // Outside the device's lock: a stream state callback that asks for the current device
    // (or sets one) takes it, and would otherwise wait for itself.
    if let Some(ctx) = created {
        ctx.announce_default_stream();
    }
    Ok(())
}

pub(crate) fn bind_explicit(handle: Handle) {
    CURRENT.set(Binding::Explicit(handle));
}

fn bind_primary(device: i32) {
    CURRENT.set(Binding::Primary(device));
}

/// The calling thread's current context, if any (and alive).
fn current_opt(sim: &Sim) -> Option<Arc<Context>> {
    match CURRENT.get() {
        Binding::None => None,
        Binding::Explicit(handle) => sim.contexts.get(handle),
        Binding::Primary(device) => {
            let device = sim.devices.get(usize::try_from(device).ok()?)?;
            let primary = lock(&device.primary).ctx?;
            sim.contexts.get(primary)
        }
    }
}

/// The calling thread's current context, or ACL_ERROR_RT_CONTEXT_NULL. A thread that never
/// set a device or context, in a process whose aclInit configured a default device, first
/// sets that device, as an aclrtSetDevice of its own.
pub(crate) fn current(sim: &Sim) -> Res<Arc<Context>> {
    if CURRENT.get() == Binding::None {
        let default = DEFAULT_DEVICE.load(Ordering::Acquire);
        if default >= 0 {
            set_device(sim, default)?;
        }
    }
    match current_opt(sim) {
        Some(ctx) => Ok(ctx),
        None => fail!(
            ACL_ERROR_RT_CONTEXT_NULL,
            "the calling thread has no current context (call aclrtSetDevice or aclrtSetCurrentContext first)"
        ),
    }
}

/// Resolves a stream argument for APIs without an ownership check (synchronize, query):
/// NULL is the current context's default stream.
pub(crate) fn any_stream(sim: &Sim, stream: aclrtStream) -> Res<Arc<Stream>> {
    if stream.is_null() {
        return Ok(current(sim)?.default_stream.clone());
    }
    sim.streams.resolve(handle::from_ptr(stream))
}

/// Resolves a stream argument for APIs that require the stream to belong to the current
/// context (ACL_ERROR_RT_STREAM_CONTEXT otherwise).
pub(crate) fn owned_stream(sim: &Sim, stream: aclrtStream) -> Res<(Arc<Context>, Arc<Stream>)> {
    if stream.is_null() {
        let ctx = current(sim)?;
        let stream = ctx.default_stream.clone();
        return Ok((ctx, stream));
    }
    let resolved = sim.streams.resolve(handle::from_ptr(stream))?;
    let ctx = current(sim)?;
    ensure!(
        resolved.ctx == ctx.handle,
        ACL_ERROR_RT_STREAM_CONTEXT,
        "stream {} (device {}) does not belong to the current context (device {})",
        resolved.id,
        resolved.device.id,
        ctx.device.id
    );
    Ok((ctx, resolved))
}

/// Like [`owned_stream`], and also checks new work can be submitted to it.
pub(crate) fn submit_stream(sim: &Sim, stream: aclrtStream) -> Res<Arc<Stream>> {
    let (ctx, stream) = owned_stream(sim, stream)?;
    ctx.check_usable()?;
    Ok(stream)
}

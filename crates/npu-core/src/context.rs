//! ACL contexts, and binding them to whichever thread runs the task.

use std::cell::RefCell;
use std::fmt;
use std::mem::ManuallyDrop;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::device::Device;
use crate::error::Result;
use crate::ffi;
use crate::runtime::Runtime;

/// An ACL context: the device's primary context or an explicit one.
///
/// Every object that needs a context (streams, events, buffers, modules) holds a `Context`,
/// and npu-rs calls [`Context::bind`] before each context-dependent ACL call. ACL's current
/// context is thread-local while Tokio moves tasks between threads; binding per call means no
/// API ever asks you to "set the device first".
///
/// `Context` is `Send + Sync` (ACL lets threads share a context) and cheap to clone. The
/// context is destroyed when the last clone, and everything created in it, is gone; an explicit
/// context keeps its device's primary context alive, so the device is reset last.
///
/// Equality and hashing are by identity, as [`same`](Context::same): two `Context`s are equal
/// when they are handles of one context (clones, or the primary context reached through two
/// `Device` handles), never because two contexts look alike. A context in a `HashMap` keeps
/// itself alive, so its identity is not reused while it is a key.
///
/// ```
/// use npu_core::Device;
///
/// let device = Device::open(0)?;
/// let ctx = device.create_context()?;
/// ctx.bind()?;
/// assert_eq!(ctx.device().id(), 0);
/// assert!(!ctx.is_primary());
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

pub(crate) struct ContextInner {
    /// Taken out only by the drop, which hands it to the context's release.
    runtime: ManuallyDrop<Runtime>,
    device_id: i32,
    handle: ffi::aclrtContext,
    /// Process-unique, never reused: thread caches compare ids, never handles, because ACL
    /// may hand out a destroyed context's address again.
    id: u64,
    /// For explicit contexts: the device's primary context, which must outlive them.
    primary: Option<Arc<ContextInner>>,
}

// SAFETY: an aclrtContext is an opaque handle that ACL allows any thread to use (contexts can
// be shared by threads); npu-rs binds it on the using thread before every call.
unsafe impl Send for ContextInner {}
// SAFETY: as above; `ContextInner` has no interior mutability.
unsafe impl Sync for ContextInner {}
// The impls above vouch for `handle` alone: every other field is `Send + Sync` of its own, checked
// here, and a field added later breaks this pattern until it is checked too.
const _: fn(&ContextInner) = |fields| {
    let ContextInner {
        runtime,
        device_id,
        handle: _,
        id,
        primary,
    } = fields;
    let _: [&(dyn Send + Sync); 4] = [runtime, device_id, id, primary];
};

fn next_context_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

thread_local! {
    /// The context npu-rs last made current on this thread, per loaded library.
    static BOUND: RefCell<Vec<(usize, u64)>> = const { RefCell::new(Vec::new()) };
}

// Both reach the cache with `try_with`: npu-rs's values may be dropped by the thread's own
// TLS destructors (a buffer, a stream or a context a user keeps in a `thread_local!`), after
// this cache was destroyed, and `with` would panic there, which aborts the process. Without
// the cache nothing is known to be bound, so every `bind` sets the context again.

fn bound(library: usize) -> Option<u64> {
    BOUND
        .try_with(|b| {
            b.borrow()
                .iter()
                .find(|(lib, _)| *lib == library)
                .map(|(_, ctx)| *ctx)
        })
        .ok()
        .flatten()
}

fn set_bound(library: usize, context: Option<u64>) {
    let _ = BOUND.try_with(|b| {
        let mut b = b.borrow_mut();
        b.retain(|(lib, _)| *lib != library);
        if let Some(context) = context {
            b.push((library, context));
        }
    });
}

impl Context {
    /// Retains device `device_id`'s primary context (`aclrtSetDevice`) on the calling thread;
    /// a refusal names `api`, the call the caller made.
    pub(crate) fn retain_primary(
        runtime: &Runtime,
        device_id: i32,
        api: &'static str,
    ) -> Result<Context> {
        let retained = runtime.with_shared(|shared| {
            if let Some(inner) = shared.primaries.get(&device_id).and_then(|w| w.upgrade()) {
                return Ok(Context { inner });
            }
            // SAFETY: plain integer argument; ACL validates the id.
            unsafe { crate::acl_call!(runtime, aclrtSetDevice(device_id)) }?;
            let mut handle: ffi::aclrtContext = std::ptr::null_mut();
            // SAFETY: `handle` is a valid out-pointer; SetDevice just made a context current.
            let got = unsafe { crate::acl_call!(runtime, aclrtGetCurrentContext(&mut handle)) };
            if let Err(err) = got {
                // SAFETY: undoes the SetDevice above. Checked only to take a failure's
                // message off this thread: the error returned is the first one.
                let _ = unsafe { crate::acl_call!(runtime, aclrtResetDevice(device_id)) };
                set_bound(runtime.library_id(crate::SEAL), None);
                return Err(err);
            }
            let inner = Arc::new(ContextInner {
                runtime: ManuallyDrop::new(runtime.clone()),
                device_id,
                handle,
                id: next_context_id(),
                primary: None,
            });
            set_bound(runtime.library_id(crate::SEAL), Some(inner.id));
            shared.primaries.insert(device_id, Arc::downgrade(&inner));
            Ok(Context { inner })
        });
        retained.unwrap_or_else(|| Err(Runtime::reentered(api)))
    }

    /// Creates an explicit context on `device` (`aclrtCreateContext`).
    pub(crate) fn create(device: &Device) -> Result<Context> {
        let primary = device.primary_context().inner.clone();
        let runtime: &Runtime = &primary.runtime;
        let mut handle: ffi::aclrtContext = std::ptr::null_mut();
        // SAFETY: `handle` is a valid out-pointer; ACL validates the device id.
        unsafe { crate::acl_call!(runtime, aclrtCreateContext(&mut handle, primary.device_id)) }?;
        let inner = Arc::new(ContextInner {
            runtime: ManuallyDrop::new(runtime.clone()),
            device_id: primary.device_id,
            handle,
            id: next_context_id(),
            primary: Some(primary.clone()),
        });
        // aclrtCreateContext makes the new context current on this thread.
        set_bound(runtime.library_id(crate::SEAL), Some(inner.id));
        Ok(Context { inner })
    }

    /// Makes this context current on the calling thread, unless npu-rs already did.
    ///
    /// Call it before any raw ACL call that depends on the current context; npu-rs's own
    /// types do so themselves.
    ///
    /// ```
    /// use npu_core::Device;
    ///
    /// let device = Device::open(0)?;
    /// let _explicit = device.create_context()?; // creating a context makes it current
    /// device.primary_context().bind()?;
    /// let (rt, mut current) = (device.runtime(), std::ptr::null_mut());
    /// // SAFETY: `current` is a valid out-pointer.
    /// let code = unsafe { (rt.api().aclrtGetCurrentContext)(&mut current) };
    /// rt.check("aclrtGetCurrentContext", code)?;
    /// assert_eq!(current, device.primary_context().as_raw());
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn bind(&self) -> Result<()> {
        let inner = &self.inner;
        let library = inner.runtime.library_id(crate::SEAL);
        if bound(library) == Some(inner.id) {
            return Ok(());
        }
        // SAFETY: the handle is a live context: `self` keeps it from being destroyed.
        unsafe { crate::acl_call!(&inner.runtime, aclrtSetCurrentContext(inner.handle)) }?;
        set_bound(library, Some(inner.id));
        Ok(())
    }

    /// Forgets which context npu-rs believes is current on this thread.
    ///
    /// Needed only after changing the current context through the raw API; the next
    /// [`bind`](Context::bind) then calls `aclrtSetCurrentContext` again.
    ///
    /// ```
    /// use npu_core::{Context, Device};
    ///
    /// let device = Device::open(0)?;
    /// let (a, b) = (device.create_context()?, device.create_context()?);
    /// a.bind()?;
    /// let api = device.runtime().api();
    /// // SAFETY: `b` is a live context. This switch bypasses npu-rs ...
    /// unsafe { (api.aclrtSetCurrentContext)(b.as_raw()) };
    /// Context::forget_binding(device.runtime()); // ... so npu-rs must forget what it bound
    /// a.bind()?; // sets `a` again instead of assuming it is still current
    /// let mut current = std::ptr::null_mut();
    /// // SAFETY: `current` is a valid out-pointer.
    /// unsafe { (api.aclrtGetCurrentContext)(&mut current) };
    /// assert_eq!(current, a.as_raw());
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn forget_binding(runtime: &Runtime) {
        set_bound(runtime.library_id(crate::SEAL), None);
    }

    /// The runtime this context belongs to.
    ///
    /// ```
    /// use npu_core::{Device, Runtime};
    ///
    /// let ctx = Device::open(0)?.create_context()?;
    /// assert!(ctx.runtime().same_library(&Runtime::global()?));
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn runtime(&self) -> &Runtime {
        &self.inner.runtime
    }

    /// The device this context runs on.
    ///
    /// ```
    /// use npu_core::Device;
    ///
    /// let device = Device::open(1)?;
    /// let ctx = device.create_context()?;
    /// assert_eq!(ctx.device(), device);
    /// assert_eq!(device.primary_context().device(), device);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn device(&self) -> Device {
        let primary = self
            .inner
            .primary
            .clone()
            .unwrap_or_else(|| self.inner.clone());
        Device::from_primary(Context { inner: primary })
    }

    /// The device id.
    ///
    /// ```
    /// use npu_core::Device;
    ///
    /// let ctx = Device::open(1)?.create_context()?;
    /// assert_eq!(ctx.device_id(), 1);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn device_id(&self) -> u32 {
        self.inner.device_id as u32
    }

    /// Whether this is the device's primary context.
    ///
    /// ```
    /// use npu_core::Device;
    ///
    /// let device = Device::open(0)?;
    /// assert!(device.primary_context().is_primary());
    /// assert!(!device.create_context()?.is_primary());
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn is_primary(&self) -> bool {
        self.inner.primary.is_none()
    }

    /// A process-unique id for this context (never reused).
    ///
    /// ```
    /// use npu_core::Device;
    ///
    /// let device = Device::open(0)?;
    /// let (a, b) = (device.create_context()?, device.create_context()?);
    /// assert_eq!(a.id(), a.clone().id());
    /// assert_ne!(a.id(), b.id());
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// The raw handle. Using it is `unsafe`; `self` must outlive every use.
    ///
    /// ```
    /// use npu_core::Device;
    ///
    /// let device = Device::open(0)?;
    /// let ctx = device.create_context()?;
    /// assert_eq!(ctx.clone().as_raw(), ctx.as_raw(), "clones share the ACL context");
    /// assert_ne!(ctx.as_raw(), device.primary_context().as_raw());
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn as_raw(&self) -> ffi::aclrtContext {
        self.inner.handle
    }

    /// Whether two handles refer to the same context.
    ///
    /// ```
    /// use npu_core::Device;
    ///
    /// let device = Device::open(0)?;
    /// // Every handle of a device shares its primary context.
    /// assert!(Device::open(0)?.primary_context().same(device.primary_context()));
    /// assert!(!device.create_context()?.same(device.primary_context()));
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn same(&self, other: &Context) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Blocks the calling thread until all streams of this context are idle
    /// (`aclrtSynchronizeDevice`, with this context bound), returning the first task error.
    ///
    /// It may be called inside a Tokio runtime (it never waits on the runtime, so it cannot
    /// deadlock it), but it holds a worker meanwhile: in async code, await a stream's
    /// `synchronize()` from npu-stream instead (docs/architecture.md, "Blocking calls inside
    /// a Tokio runtime"). As `Completion::wait_blocking`, it is refused with
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) (argument `thread`) on
    /// npu-rs's own threads and under its locks (a waker, a completion's release, a tracing
    /// subscriber's callback from inside an ACL call npu-rs makes under one of its locks),
    /// where the thread may be the one that would let the work finish; in a forked child it is
    /// [`Error::Forked`](crate::Error::Forked) naming `aclrtSynchronizeDevice`, on any thread.
    ///
    /// ```
    /// use npu_core::{AclCode, Device};
    ///
    /// let ctx = Device::open(1)?.create_context()?;
    /// let (rt, api) = (ctx.runtime(), ctx.runtime().api());
    /// let mut dev = std::ptr::null_mut();
    /// ctx.bind()?;
    /// // SAFETY: `dev` is a valid out-pointer; `ctx` is current.
    /// rt.check("aclrtMalloc", unsafe { (api.aclrtMalloc)(&mut dev, 64, 0) })?;
    /// // npu-sim: the next task on the context's default stream fails with 507015.
    /// npu_sim::control::fail_task(std::ptr::null_mut(), 1, 507015).unwrap();
    /// // SAFETY: `dev` holds 64 bytes; NULL is the current context's default stream.
    /// let code = unsafe { (api.aclrtMemsetAsync)(dev, 64, 0, 64, std::ptr::null_mut()) };
    /// rt.check("aclrtMemsetAsync", code)?;
    /// assert_eq!(ctx.synchronize_blocking().unwrap_err().acl_code(), Some(AclCode(507015)));
    /// # unsafe { (api.aclrtFree)(dev) };
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn synchronize_blocking(&self) -> Result<()> {
        const API: &str = "Context::synchronize_blocking";
        // Before the thread's refusal, as every wait answers a forked child: a child forked
        // from a waker or a subscriber's callback is on a thread that served npu-rs in the
        // parent, and is told it was forked (naming the ACL call, as the call's own refusal
        // there always has).
        crate::teardown::refuse_blocking(crate::SEAL, "aclrtSynchronizeDevice", API)?;
        self.bind()?;
        // SAFETY: no arguments; the context is bound on this thread.
        unsafe { crate::acl_call!(self.runtime(), aclrtSynchronizeDevice()) }
    }
}

impl Drop for ContextInner {
    fn drop(&mut self) {
        let library = self.runtime.library_id(crate::SEAL);
        if bound(library) == Some(self.id) {
            set_bound(library, None);
        }
        // SAFETY: taken once, here, as the context goes; nothing reads the field after it.
        let runtime = unsafe { ManuallyDrop::take(&mut self.runtime) };
        let release = Release {
            runtime,
            device_id: self.device_id,
            handle: self.handle,
            primary: self.primary.take(),
        };
        // The last context of a device (and often of its runtime) goes with the last object
        // made in it, which a deferred release drops on the reaper. Resetting the device waits
        // for work still queued in it, and finalising ACL after it takes up to 2 s while the
        // device's logs reach the host (and runs the finalize callbacks of every component):
        // neither may hold up the reaper, which runs every release of the process, nor a
        // shared thread (a waker run as an operation completes may drop the last handle).
        crate::reaper::off_shared_threads(library, move || release.run());
    }
}

/// What releasing a context needs, moved off the thread that dropped it when that is the
/// reaper or a shared thread (`reaper::as_shared_thread`): the runtime and, for an explicit
/// context, the primary context, are dropped after the ACL call, so that ACL is finalised
/// (and the primary reset) only after it.
struct Release {
    runtime: Runtime,
    device_id: i32,
    handle: ffi::aclrtContext,
    primary: Option<Arc<ContextInner>>,
}

// SAFETY: an aclrtContext is an opaque handle that ACL allows any thread to use; the rest is
// `Send`.
unsafe impl Send for Release {}
// The impl above vouches for `handle` alone: every other field is `Send` of its own, checked here,
// and a field added later breaks this pattern until it is checked too.
const _: fn(&Release) = |fields| {
    let Release {
        runtime,
        device_id,
        handle: _,
        primary,
    } = fields;
    let _: [&dyn Send; 3] = [runtime, device_id, primary];
};

impl Release {
    fn run(self) {
        if crate::fork::forked() {
            // The context is the parent's: ACL is not the child's to call, and the runtime's
            // lock, which the tidying below takes, may belong to a thread of the parent that
            // held it at the fork (it never lets it go here).
            return;
        }
        let runtime = &self.runtime;
        let result = match self.primary {
            None => {
                // Only tidying: a dead entry is replaced when the device is next opened, so a
                // drop on a thread that holds the lock already (a tracing subscriber's, called
                // from an ACL call made under it) leaves it.
                let _ = runtime.with_shared(|shared| {
                    if shared
                        .primaries
                        .get(&self.device_id)
                        .is_some_and(|w| w.strong_count() == 0)
                    {
                        shared.primaries.remove(&self.device_id);
                    }
                });
                // SAFETY: releases the reference `retain_primary` took with aclrtSetDevice.
                unsafe { crate::acl_call!(runtime, aclrtResetDevice(self.device_id)) }
            }
            // SAFETY: the context is explicit and nothing created in it is alive any more
            // (every such object holds a clone of its Context).
            Some(_) => unsafe { crate::acl_call!(runtime, aclrtDestroyContext(self.handle)) },
        };
        if let Err(err) = result {
            crate::log!(warn, %err, device = self.device_id, "releasing an ACL context failed");
        }
    }
}

impl PartialEq for Context {
    fn eq(&self, other: &Context) -> bool {
        self.same(other)
    }
}

impl Eq for Context {}

impl std::hash::Hash for Context {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        std::ptr::hash(Arc::as_ptr(&self.inner), state)
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("device", &self.inner.device_id)
            .field("primary", &self.is_primary())
            .field("id", &self.inner.id)
            .finish()
    }
}

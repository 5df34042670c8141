//! The process's handle on one loaded ACL runtime.

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock, Weak};
use std::thread::LocalKey;

use crate::backend::{self, Backend, BackendChoice, BackendReason, Loaded};
use crate::code::AclCode;
use crate::context::ContextInner;
use crate::device::Device;
use crate::error::{AclError, Error, Result};
use crate::ffi;

/// A loaded AscendCL runtime (real or simulated), initialised with `aclInit`.
///
/// `Runtime` is `Send + Sync` and cheap to clone. ACL is initialised once per loaded library
/// and finalised when the last `Runtime` of that library (and everything holding one: devices,
/// contexts, streams, buffers) is gone. [`Runtime::global`] is the shared process-wide runtime
/// chosen by `NPU_BACKEND`; it is never finalised.
///
/// `Runtime` is not `PartialEq`: runtimes built apart for one library share its ACL instance
/// and devices yet are separate handles, so whether they are "the same runtime" has no single
/// answer. Compare [`backend`](Runtime::backend)s, or the devices and contexts, which compare
/// by identity.
///
/// ```
/// use npu_core::{Backend, BackendChoice, Runtime};
///
/// let rt = Runtime::builder().backend(BackendChoice::Sim).build()?;
/// assert_eq!(rt.backend(), &Backend::Simulator);
/// assert!(rt.device_count()? >= 1);
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<RuntimeInner>,
}

struct RuntimeInner {
    loaded: &'static Loaded,
    reason: BackendReason,
}

/// Per loaded library: primary contexts, shared by every `Device` handle of a device, and peer
/// access reference counts, so nested enables do not undo each other.
#[derive(Default)]
pub(crate) struct SharedState {
    pub(crate) primaries: HashMap<i32, Weak<ContextInner>>,
    /// Per direction (from, peer): the guards keeping it enabled. An entry exists while the
    /// access is enabled in ACL; it may stay at 0 guards while a submission that may rely on
    /// it is in progress (see below).
    pub(crate) peer_access: HashMap<(i32, i32), usize>,
    /// Per direction: the cross-device submissions in progress (`Device::with_steady_peer_access`),
    /// whose ACL call may have been accepted under the access. The last guard dropped
    /// meanwhile leaves the disabling to the last of them, which takes a guard if it can.
    pub(crate) peer_submitting: HashMap<(i32, i32), usize>,
}

/// Configures and builds a [`Runtime`].
///
/// ```
/// use npu_core::{BackendChoice, Runtime};
///
/// let builder = Runtime::builder().backend(BackendChoice::Sim);
/// let rt = builder.build()?;
/// assert_eq!(rt.device(0)?.id(), 0);
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
#[must_use = "a builder does nothing until built"]
pub struct RuntimeBuilder {
    choice: Option<BackendChoice>,
    config: Option<PathBuf>,
}

impl RuntimeBuilder {
    /// Selects the backend; without this, `NPU_BACKEND` decides (default `auto`).
    ///
    /// ```
    /// use npu_core::{Backend, BackendChoice, Runtime};
    ///
    /// let rt = Runtime::builder().backend(BackendChoice::Sim).build()?;
    /// assert_eq!(rt.backend(), &Backend::Simulator);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn backend(mut self, choice: BackendChoice) -> Self {
        self.choice = Some(choice);
        self
    }

    /// Uses the AscendCL runtime library at `path` (for example npu-sim's `libascendcl.so`):
    /// [`BackendChoice::Library`]. A path naming something other than a regular file is
    /// refused by [`build`](RuntimeBuilder::build)
    /// ([`LoadFailure::NotARegularFile`](crate::LoadFailure)), without opening it.
    ///
    /// # Safety
    ///
    /// As for [`RuntimeLibrary::new`](crate::RuntimeLibrary::new): `path`, if it loads, must
    /// be an AscendCL runtime (CANN's, or npu-sim's build), since npu-rs runs its
    /// initialisers and calls its `acl*` functions with ACL's prototypes.
    ///
    /// ```
    /// use npu_core::Runtime;
    ///
    /// // npu-sim's cdylib or CANN's lib64/libascendcl.so; a missing file is named in the error.
    /// // SAFETY: the path names CANN's runtime library, if the file exists at all.
    /// let builder = unsafe { Runtime::builder().library("/nonexistent/libascendcl.so") };
    /// let err = builder.build().unwrap_err();
    /// assert!(err.to_string().contains("/nonexistent/libascendcl.so: no such file"), "{err}");
    /// ```
    pub unsafe fn library(self, path: impl Into<PathBuf>) -> Self {
        // SAFETY: the caller vouches for the library, as this function's contract asks.
        self.backend(BackendChoice::Library(unsafe {
            crate::RuntimeLibrary::new(path)
        }))
    }

    /// Passes a JSON configuration file to `aclInit` when this runtime initialises ACL.
    ///
    /// ACL applies a configuration only when it is initialised, which npu-rs does once per
    /// loaded library while any [`Runtime`] of it lives. So [`build`](RuntimeBuilder::build)
    /// refuses (argument `acl_config`) a path other than the one ACL was initialised with by a
    /// runtime still alive (the process-wide [`Runtime::global`] included, which uses none),
    /// rather than run with a configuration the caller did not ask for; the same path is
    /// accepted. A runtime of the library whose last handle went on one of npu-rs's own
    /// threads is torn down on a thread of its own (see
    /// [`wait_for_teardowns`](crate::wait_for_teardowns)): a build asking for another path
    /// waits for such teardowns of its library to end before it decides (on the caller's
    /// thread, which `aclInit` blocks anyway), and fails with
    /// [`Error::TeardownsRunning`] if they have not within 10 s (stuck in the runtime). A
    /// stream of the library whose last handle the program dropped counts among them until
    /// npu-rs has released it (after the work in flight on it), so a build asking for another
    /// path right after such a drop waits for that too, and ends with
    /// [`Error::TeardownsRunning`] after 10 s if that work has not ended, even when a runtime
    /// the program still holds would have it refused anyway. On one of npu-rs's own threads it
    /// does not wait, and decides at once.
    /// If another component of the process initialised ACL itself, ACL keeps that
    /// component's configuration, and npu-rs logs a warning. A path naming something other
    /// than a regular file (a directory, a FIFO, a device) is refused too (argument
    /// `acl_config`): reading a FIFO would wait for a writer, and `/dev/zero` would never end.
    ///
    /// ```standalone_crate
    /// use npu_core::{BackendChoice, Runtime};
    ///
    /// // npu-sim reads its own configuration from the "npu_sim" key of aclInit's file.
    /// let path = std::env::temp_dir().join(format!("npu-doc-acl-{}.json", std::process::id()));
    /// std::fs::write(&path, r#"{"npu_sim": {"devices": 3}}"#).unwrap();
    /// let rt = Runtime::builder().backend(BackendChoice::Sim).acl_config(&path).build()?;
    /// assert_eq!(rt.device_count()?, 3);
    /// // While `rt` lives, ACL keeps this configuration: the same file is accepted, another not.
    /// let _again = Runtime::builder().backend(BackendChoice::Sim).acl_config(&path).build()?;
    /// let other = Runtime::builder().backend(BackendChoice::Sim).acl_config("other.json").build();
    /// assert!(other.unwrap_err().to_string().contains("other.json cannot apply"));
    /// # std::fs::remove_file(&path).ok();
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn acl_config(mut self, path: impl Into<PathBuf>) -> Self {
        self.config = Some(path.into());
        self
    }

    /// Loads the runtime and takes an `aclInit` reference on it.
    ///
    /// Refused with [`Error::InvalidArgument`] (argument `thread`) on a thread that is
    /// initialising or finalising AscendCL already (a tracing subscriber called back from
    /// there), which would otherwise wait for itself. With an explicit backend, a library
    /// that cannot be loaded is [`Error::Load`] and a failed `aclInit` is [`Error::Acl`]
    /// naming `aclInit`; `auto` in a build with the simulator falls back to it instead, and
    /// [`Runtime::backend_reason`] says why. An [`acl_config`](RuntimeBuilder::acl_config)
    /// other than the one ACL runs with waits for the library's teardowns still running (at
    /// most 10 s, then [`Error::TeardownsRunning`]) before it is refused or applied. In a
    /// forked child ([`forked`](crate::forked): forked after a runtime or one of npu-rs's
    /// threads started, or while another thread of the parent was making one, this build or
    /// `Runtime::global`, from loading its library to its `aclInit`, or starting one of
    /// npu-rs's threads) it is [`Error::Forked`] before anything is loaded, rather than a wait
    /// for the parent's thread, which the child does not have. A child forked outside those,
    /// of a process where no runtime and none of npu-rs's threads started (every build failed,
    /// or none was made), builds its own.
    ///
    /// ```
    /// use npu_core::{BackendChoice, Runtime};
    ///
    /// let rt = Runtime::builder().backend(BackendChoice::Sim).build()?;
    /// assert!(rt.device_count()? >= 1);
    /// // SAFETY: the path names CANN's runtime library, if the file exists at all.
    /// let no_runtime = unsafe { Runtime::builder().library("/nonexistent/libascendcl.so") }.build();
    /// assert!(no_runtime.is_err());
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn build(self) -> Result<Runtime> {
        // Before loading, whose lock a thread of the parent may have held at the fork (it is
        // held across the library's load) and never lets go of in the child.
        crate::fork::refuse(crate::SEAL, "RuntimeBuilder::build")?;
        crate::fork::report_unwatched();
        // From the library's load (under the loaded-libraries lock, or the simulator's
        // one-time making) to its `aclInit` (under the library's `aclInit` lock): a child
        // forked meanwhile would wait for a thread it does not have, so it is a forked child.
        let _window = crate::fork::Window::open();
        let choice = match self.choice {
            Some(choice) => choice,
            None => BackendChoice::from_env()?,
        };
        let config = self.config.as_deref();
        match choice {
            BackendChoice::Auto => backend::auto::choose(config),
            explicit => {
                let loaded = backend::load(&explicit)?;
                Runtime::start(loaded, config, BackendReason::Requested(explicit))
            }
        }
    }
}

thread_local! {
    /// Set while this thread holds a library's `init_users` lock, across `aclInit`,
    /// registering the runtime callbacks or `aclFinalize`.
    ///
    /// The calls made under that lock log (the simulator reports its start and each failed
    /// call through `tracing`, npu-core what it could not register), and the subscriber is
    /// user code that may make a runtime itself: on this thread that would wait for the lock
    /// it holds for ever, and every other thread making or dropping a runtime after it.
    /// [`refuse_while_initialising`] refuses it instead.
    static INITIALISING: Cell<bool> = const { Cell::new(false) };
}

/// A thread-local flag raised until the guard goes (also when unwinding), then put back as it
/// was.
struct Raised {
    flag: &'static LocalKey<Cell<bool>>,
    /// Whether it was raised already (by an outer guard on this thread).
    outer: bool,
}

impl Raised {
    fn raise(flag: &'static LocalKey<Cell<bool>>) -> Raised {
        Raised {
            flag,
            outer: flag.with(|raised| raised.replace(true)),
        }
    }
}

impl Drop for Raised {
    fn drop(&mut self) {
        self.flag.with(|raised| raised.set(self.outer));
    }
}

/// Whether this thread is initialising or finalising AscendCL ([`INITIALISING`]): it holds a
/// library's `aclInit` lock, which a teardown takes to drop its reference.
pub(crate) fn initialising_here() -> bool {
    INITIALISING.with(Cell::get)
}

/// Refuses `api` on a thread that is initialising or finalising AscendCL ([`INITIALISING`]).
fn refuse_while_initialising(api: &'static str) -> Result<()> {
    if initialising_here() {
        return Err(Error::invalid(
            api,
            "thread",
            "is initialising or finalising AscendCL: called back from inside (by a tracing \
             subscriber?)",
        ));
    }
    Ok(())
}

fn acquire(loaded: &'static Loaded, config: Option<&std::path::Path>) -> Result<()> {
    const API: &str = "RuntimeBuilder::build";
    refuse_while_initialising(API)?;
    crate::fork::refuse(crate::SEAL, API)?;
    // aclInit reads the file under the library's lock: a FIFO would hold every runtime of the
    // library until a writer came, and a device that never ends would be read until memory ran
    // out. A missing file is left to aclInit, which names it.
    if let Some(path) = config
        && crate::backend::names_no_regular_file(path)
    {
        return Err(Error::invalid(
            API,
            "acl_config",
            format!(
                "{} is not a regular file (a directory, a FIFO or a device): ACL reads its \
                 configuration from a JSON file",
                path.display()
            ),
        ));
    }
    let c_config = config
        .map(|p| {
            CString::new(p.as_os_str().as_encoded_bytes())
                .map_err(|_| Error::invalid(API, "acl_config", "path contains a NUL byte"))
        })
        .transpose()?;
    let mut users = settled_users(loaded, config)?;
    let _initialising = Raised::raise(&INITIALISING);
    if users.count == 0 {
        let path = c_config.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        // Another component of the process may have initialised ACL first; aclInit then
        // counts our reference and says so, which is success for us. A failed aclInit
        // started nothing: a child forked after it (outside any other making of a runtime)
        // is no forked child (`crate::fork`).
        // SAFETY: `path` is NULL or a NUL-terminated string that outlives the call.
        let code = unsafe { (loaded.api.aclInit)(path) };
        if code != ffi::ACL_SUCCESS && code != ffi::ACL_ERROR_REPEAT_INITIALIZE {
            return Err(AclError::new("aclInit", AclCode(code), recent_message(loaded)).into());
        }
        crate::fork::started();
        users.borrowed = code == ffi::ACL_ERROR_REPEAT_INITIALIZE;
        if users.borrowed {
            // The runtime explains the repeat like a failure: taken off this thread, or the
            // next error npu-rs reports here would carry it as its own runtime message.
            let _ = recent_message(loaded);
        }
        users.config = config.map(std::path::Path::to_path_buf);
        if let Some(path) = config.filter(|_| users.borrowed) {
            // ACL kept the configuration it was first given; the other component owns it.
            crate::log!(
                warn,
                path = %path.display(),
                "AscendCL was already initialised by another component of the process: \
                 the acl_config file was not applied"
            );
        }
        crate::fault::register(loaded);
        crate::device_abort::register(loaded);
    } else if let Some(asked) = config.filter(|asked| users.config.as_deref() != Some(*asked)) {
        // Silently running with another configuration than the caller asked for would be
        // worse than refusing: ACL applies one only when it is initialised.
        let current = match &users.config {
            Some(path) => format!("with {}", path.display()),
            None => "without a configuration file".to_string(),
        };
        return Err(Error::invalid(
            API,
            "acl_config",
            format!(
                "{} cannot apply: AscendCL is initialised already in this process {current}, \
                 and a configuration applies only when it is (drop every Runtime of this \
                 library first)",
                asked.display()
            ),
        ));
    }
    users.count += 1;
    Ok(())
}

/// `loaded`'s `aclInit` users, once no teardown of the library that could change whether
/// `config` applies is running any more.
///
/// A configuration other than the one ACL was initialised with is refused while a runtime of
/// the library lives; one whose last handle went on a shared thread is still being torn down
/// on `npu-teardown` (the reset of its devices, then `aclFinalize`), and a program has no way
/// to know when that ends. So a build that would refuse first waits for those teardowns, and
/// for the releases already queued on the reaper (one may hand off another), then decides
/// again: bounded by [`BUILD_WAITS`](crate::teardown::BUILD_WAITS), past which a teardown is
/// taken as stuck in the runtime ([`Error::TeardownsRunning`]). Not where it may not wait
/// ([`may_wait_here`](crate::teardown::may_wait_here): a shared thread, a teardown's, or one
/// holding a lock a teardown takes): there it decides at once.
fn settled_users(
    loaded: &'static Loaded,
    config: Option<&std::path::Path>,
) -> Result<std::sync::MutexGuard<'static, backend::InitUsers>> {
    let deadline = std::time::Instant::now() + crate::teardown::BUILD_WAITS;
    let mut settled = false;
    loop {
        let users = loaded.init_users.lock().unwrap_or_else(|e| e.into_inner());
        let refused =
            users.count > 0 && config.is_some_and(|asked| users.config.as_deref() != Some(asked));
        // Settled once with nothing of the library's running since: a runtime lives.
        let decided = settled && !crate::teardown::running_for(loaded.id);
        if !refused || decided || !crate::teardown::may_wait_here() {
            return Ok(users);
        }
        // The teardown takes this lock to drop its reference.
        drop(users);
        settled = true;
        crate::teardown::wait_until_settled(Some(loaded.id), deadline).map_err(
            |(running, waiting_for)| Error::TeardownsRunning {
                api: "RuntimeBuilder::build",
                running,
                waiting_for,
                waited: crate::teardown::BUILD_WAITS,
            },
        )?;
    }
}

impl Drop for RuntimeInner {
    fn drop(&mut self) {
        let loaded = self.loaded;
        // Finalising takes up to 2 s while the device's logs reach the host, and runs every
        // component's finalize callbacks: never on the reaper, where the last object of a
        // runtime is often released, nor on another shared thread (an operation's wakers
        // may drop the last handle as it completes).
        crate::reaper::off_shared_threads(loaded.id, move || release_reference(loaded));
    }
}

/// Drops one `aclInit` reference of `loaded`, finalising ACL with the last.
fn release_reference(loaded: &'static Loaded) {
    if crate::fork::forked() {
        // In a forked child ACL is not ours to finalise: it was the parent's, and it does
        // not survive the fork. Nor is the lock ours to take: a thread of the parent may have
        // held it at the fork (building or dropping a runtime), and it never lets it go here.
        return;
    }
    let mut users = loaded.init_users.lock().unwrap_or_else(|e| e.into_inner());
    let _finalising = Raised::raise(&INITIALISING);
    users.count -= 1;
    if users.count > 0 {
        return;
    }
    let api = &loaded.api;
    // aclFinalize drops every reference at once, so prefer releasing only ours.
    let code = match api.aclFinalizeReference {
        // SAFETY: a NULL count pointer is allowed; ACL was initialised by `acquire`.
        Some(finalize_reference) => unsafe { finalize_reference(std::ptr::null_mut()) },
        // ACL was initialised by another component of the process before us: finalising
        // it would pull it from under that component, which finalises it itself.
        None if users.borrowed => ffi::ACL_SUCCESS,
        // SAFETY: ACL was initialised by `acquire` and nothing of ours still uses it.
        None => unsafe { (api.aclFinalize)() },
    };
    if code != ffi::ACL_SUCCESS {
        // Taken off this thread whatever happens, as for every failure npu-rs reports.
        let message = recent_message(loaded).unwrap_or_default();
        crate::log!(warn, code = %AclCode(code), message, "finalising AscendCL failed");
    }
}

/// Copies a string ACL returned: `None` for NULL.
///
/// # Safety
/// `text` must be NULL or point at a NUL-terminated string that stays valid for the call.
unsafe fn owned_c_str(text: *const std::ffi::c_char) -> Option<String> {
    (!text.is_null()).then(|| {
        // SAFETY: not NULL (checked), so a live C string by the caller's guarantee.
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    })
}

pub(crate) fn recent_message(loaded: &Loaded) -> Option<String> {
    // SAFETY: aclGetRecentErrMsg takes no arguments and returns NULL or a NUL-terminated string
    // that stays valid until the next call on this thread; it is copied out at once.
    unsafe { owned_c_str((loaded.api.aclGetRecentErrMsg)()) }
}

impl Runtime {
    /// Takes an `aclInit` reference on `loaded` (initialising ACL if it is the first).
    pub(crate) fn start(
        loaded: &'static Loaded,
        config: Option<&std::path::Path>,
        reason: BackendReason,
    ) -> Result<Runtime> {
        acquire(loaded, config)?;
        Ok(Runtime {
            inner: Arc::new(RuntimeInner { loaded, reason }),
        })
    }

    /// A builder for a runtime with an explicit backend or `aclInit` configuration.
    ///
    /// ```
    /// use npu_core::{BackendChoice, Runtime};
    ///
    /// let rt = Runtime::builder().backend(BackendChoice::Sim).build()?;
    /// assert!(rt.same_library(&Runtime::builder().backend(BackendChoice::Sim).build()?));
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    /// The shared process-wide runtime, selected by `NPU_BACKEND` on first use.
    ///
    /// Every later call returns the same runtime (or the same error). A call made before it
    /// exists on a thread that is making it, or that is initialising or finalising AscendCL
    /// for another runtime (a tracing subscriber calling back from there), is refused with
    /// [`Error::InvalidArgument`] (argument `thread`) instead of waiting for itself; that
    /// refusal is not kept as the runtime's result. In a forked child
    /// ([`forked`](crate::forked): forked after a runtime or one of npu-rs's threads started
    /// in its parent, or while a thread of the parent was making a runtime, from loading its
    /// library to its `aclInit`, or starting one of npu-rs's threads), a runtime made before
    /// the fork is returned (its every ACL call is then refused), and otherwise the call is
    /// [`Error::Forked`] at once rather than a wait for a thread of the parent that was making
    /// it. A child forked outside those, of a process where no runtime and none of npu-rs's
    /// threads started, makes its own.
    ///
    /// ```
    /// use npu_core::{Device, Runtime};
    ///
    /// let rt = Runtime::global()?;
    /// assert!(rt.same_library(&Runtime::global()?));
    /// assert!(rt.same_library(Device::open(0)?.runtime()), "Device::open uses it");
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn global() -> Result<Runtime> {
        Runtime::global_for("Runtime::global")
    }

    /// [`global`](Runtime::global), its refusals naming `api`: the call the caller made
    /// (`Device::open` asks for the runtime on the caller's behalf).
    pub(crate) fn global_for(api: &'static str) -> Result<Runtime> {
        static GLOBAL: OnceLock<Result<Runtime, Error>> = OnceLock::new();
        thread_local! {
            /// Set while this thread makes the global runtime.
            static MAKING: Cell<bool> = const { Cell::new(false) };
        }
        if let Some(global) = GLOBAL.get() {
            return global.clone();
        }
        // Making the runtime logs (`auto` falling back to the simulator, the simulator
        // starting), and the subscriber is user code that may ask for the runtime again
        // (`Device::open`): on this thread that would wait for its own initialisation for
        // ever, and every other thread after it. It is refused instead.
        let making = Raised::raise(&MAKING);
        if making.outer {
            return Err(Error::invalid(
                api,
                "thread",
                "is making the process-wide runtime: called back from inside (by a tracing \
                 subscriber?) before it exists",
            ));
        }
        // A thread that is initialising or finalising AscendCL for another runtime (a
        // subscriber called from there) would have its build refused by `acquire`, and that
        // refusal kept as the process-wide runtime's result for ever; or it would wait here
        // for another thread making the runtime, which waits for the lock this one holds.
        refuse_while_initialising(api)?;
        // A thread of the parent may have been making it at the fork: the child would wait
        // for it for ever. A child refuses ACL anyway, and gets one made before the fork.
        crate::fork::refuse(crate::SEAL, api)?;
        // A child forked while a thread makes it (or waits for it) is a forked child.
        let _window = crate::fork::Window::open();
        GLOBAL.get_or_init(|| Runtime::builder().build()).clone()
    }

    /// The fault behind a device-side failure with `code` on stream `stream_id` (its
    /// `aclrtStreamGetId` id, as npu-stream's `Stream::id`) of device `device`, as the
    /// runtime's exception callback reported it; `None` if the runtime reported none (no
    /// exception callback, or a failure that was no task's fault).
    ///
    /// Each task failure goes to one caller: the oldest fault not claimed yet is returned and
    /// marked claimed; once all are, the latest one is returned again (a stream a fault
    /// stopped fails all its later work with the same code). npu-stream attaches the fault to
    /// the failed operation's error ([`Error::fault`]). Shared with npu-stream; not part of
    /// the API.
    ///
    /// # Safety
    ///
    /// The stream must be one the caller created and drives itself: claiming a fault of a
    /// stream npu-stream owns takes the detail its failed operation should carry.
    ///
    /// ```
    /// use npu_core::{AclCode, Device};
    ///
    /// let ctx = Device::open(1)?.create_context()?;
    /// let (rt, api) = (ctx.runtime(), ctx.runtime().api());
    /// let (mut stream, mut dev, mut id) = (std::ptr::null_mut(), std::ptr::null_mut(), 0);
    /// ctx.bind()?;
    /// // SAFETY: valid out-pointers; `ctx` is current.
    /// unsafe {
    ///     rt.check("aclrtCreateStreamWithConfig", (api.aclrtCreateStreamWithConfig)(&mut stream, 0, 0))?;
    ///     rt.check("aclrtStreamGetId", (api.aclrtStreamGetId.unwrap())(stream, &mut id))?;
    ///     rt.check("aclrtMalloc", (api.aclrtMalloc)(&mut dev, 64, 0))?;
    /// }
    /// npu_sim::control::fail_task(stream, 1, 507015).unwrap(); // npu-sim: the next task fails
    /// // SAFETY: `dev` holds 64 bytes; the stream belongs to the current context.
    /// unsafe {
    ///     rt.check("aclrtMemsetAsync", (api.aclrtMemsetAsync)(dev, 64, 0, 64, stream))?;
    ///     assert!(rt.check("aclrtSynchronizeStream", (api.aclrtSynchronizeStream)(stream)).is_err());
    /// }
    /// // SAFETY: the stream is this example's own.
    /// let fault = unsafe { rt.claim_fault(1, id as u64, AclCode(507015)) };
    /// let fault = fault.expect("the callback recorded it");
    /// assert_eq!((fault.task_id, fault.device_id, fault.stream_id), (1, 1, id as u64));
    /// // SAFETY: as above.
    /// let none = unsafe { rt.claim_fault(1, id as u64, AclCode(100000)) };
    /// assert_eq!(none, None, "no fault has that code");
    /// # unsafe { (api.aclrtFree)(dev); (api.aclrtDestroyStream)(stream) };
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    #[doc(hidden)]
    pub unsafe fn claim_fault(
        &self,
        device: u32,
        stream_id: u64,
        code: AclCode,
    ) -> Option<crate::DeviceFault> {
        self.inner.loaded.faults.claim(device, stream_id, code)
    }

    /// The latest fault the exception callback recorded on `device`, if its code is `code`.
    ///
    /// In STOP mode one fault stops the whole context, and the runtime then refuses work on
    /// every stream of it with that fault's code: a refused submission on a stream with no
    /// fault of its own carries this one. Shared with npu-stream; not part of the API.
    #[doc(hidden)]
    pub fn latest_fault(
        &self,
        _: crate::seal::Seal,
        device: u32,
        code: AclCode,
    ) -> Option<crate::DeviceFault> {
        self.inner.loaded.faults.latest(device, code)
    }

    /// Calls `on_fault` whenever the runtime's exception callback reports a task failure on
    /// stream `stream_id` of device `device`, whose handle is `stream`, until the returned
    /// watch is dropped (a newer watch of the same stream id replaces it). Faults recorded
    /// under that id before are dropped: they belong to an earlier stream with the same id.
    ///
    /// npu-stream uses it to make the reactor look at the failed stream at once. Shared with
    /// npu-stream; not part of the API.
    ///
    /// # Safety
    ///
    /// `on_fault` runs on a runtime thread inside the exception callback: it must return
    /// quickly, never block and never call ACL. The stream must be one the caller created and
    /// drives itself: a watch of a stream npu-stream owns would replace npu-stream's, which
    /// then no longer hears of its faults.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use npu_core::Device;
    ///
    /// let ctx = Device::open(1)?.create_context()?;
    /// let (rt, api) = (ctx.runtime(), ctx.runtime().api());
    /// let (mut stream, mut dev, mut id) = (std::ptr::null_mut(), std::ptr::null_mut(), 0);
    /// ctx.bind()?;
    /// // SAFETY: valid out-pointers; `ctx` is current.
    /// unsafe {
    ///     rt.check("aclrtCreateStreamWithConfig", (api.aclrtCreateStreamWithConfig)(&mut stream, 0, 0))?;
    ///     rt.check("aclrtStreamGetId", (api.aclrtStreamGetId.unwrap())(stream, &mut id))?;
    ///     rt.check("aclrtMalloc", (api.aclrtMalloc)(&mut dev, 64, 0))?;
    /// }
    /// let heard = Arc::new(AtomicBool::new(false));
    /// let flag = heard.clone();
    /// // SAFETY: the closure only stores a flag; the stream is this example's own.
    /// let _watch = unsafe {
    ///     rt.watch_faults(1, id as u64, stream, move || flag.store(true, Ordering::Release))
    /// };
    /// npu_sim::control::fail_task(stream, 1, 507015).unwrap();
    /// // SAFETY: as above.
    /// unsafe {
    ///     rt.check("aclrtMemsetAsync", (api.aclrtMemsetAsync)(dev, 64, 0, 64, stream))?;
    ///     let _ = (api.aclrtSynchronizeStream)(stream); // the callback ran before it returned
    /// }
    /// assert!(heard.load(Ordering::Acquire));
    /// # unsafe { (api.aclrtFree)(dev); (api.aclrtDestroyStream)(stream) };
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    #[doc(hidden)]
    pub unsafe fn watch_faults(
        &self,
        device: u32,
        stream_id: u64,
        stream: ffi::aclrtStream,
        on_fault: impl Fn() + Send + Sync + 'static,
    ) -> crate::FaultWatch {
        let faults: &'static crate::fault::FaultTable = &self.inner.loaded.faults;
        let on_fault = std::sync::Arc::new(on_fault);
        faults.watch(device, stream_id, stream as usize, on_fault)
    }

    /// Tells `watcher` of every `aclrtDeviceTaskAbort` of `device` made through this runtime,
    /// until it is dropped, if the runtime has `aclrtSetDeviceTaskAbortCallback` (see
    /// [`DeviceAbortWatch`](crate::DeviceAbortWatch)); npu-stream's streams watch their
    /// device so.
    #[doc(hidden)]
    pub fn watch_device_aborts(
        &self,
        _: crate::seal::Seal,
        device: u32,
        watcher: std::sync::Weak<dyn crate::DeviceAbortWatch>,
    ) {
        self.inner.loaded.device_aborts.watch(device, watcher);
    }

    /// The runtime that was loaded.
    ///
    /// ```
    /// use npu_core::{Backend, BackendChoice, Runtime};
    ///
    /// let rt = Runtime::builder().backend(BackendChoice::Sim).build()?;
    /// assert_eq!(rt.backend(), &Backend::Simulator);
    /// assert_eq!(rt.backend().to_string(), "npu-sim (in-process)");
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn backend(&self) -> &Backend {
        &self.inner.loaded.backend
    }

    /// Why this runtime uses [`backend`](Self::backend): requested explicitly, or what `auto`
    /// found (and, when it fell back to the simulator, why). `auto` also logs this.
    ///
    /// ```
    /// use npu_core::{Backend, BackendChoice, BackendReason, Runtime};
    ///
    /// let rt = Runtime::builder().backend(BackendChoice::Auto).build()?;
    /// match rt.backend_reason() {
    ///     BackendReason::Detected { devices } => assert!(*devices >= 1), // a CANN host
    ///     BackendReason::Fallback(why) => {
    ///         assert_eq!(rt.backend(), &Backend::Simulator);
    ///         println!("simulator: {why}"); // e.g. "no usable AscendCL runtime was found; ..."
    ///     }
    ///     other => panic!("auto cannot give {other}"),
    /// }
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn backend_reason(&self) -> &BackendReason {
        &self.inner.reason
    }

    /// The raw function table.
    ///
    /// Obtaining it is safe; calling through it is `unsafe` and bypasses every guarantee npu-rs
    /// gives. If you change the current context through it, call
    /// [`Context::forget_binding`](crate::Context::forget_binding) afterwards.
    ///
    /// ```
    /// use npu_core::Runtime;
    ///
    /// let rt = Runtime::global()?;
    /// let mut count = 0u32;
    /// // SAFETY: `count` is a valid out-pointer.
    /// rt.check("aclrtGetDeviceCount", unsafe { (rt.api().aclrtGetDeviceCount)(&mut count) })?;
    /// assert_eq!(count, rt.device_count()?);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn api(&self) -> &'static ffi::AclApi {
        &self.inner.loaded.api
    }

    /// Turns an ACL return code into a `Result`, attaching `aclGetRecentErrMsg` on failure.
    ///
    /// ```
    /// use npu_core::{AclCode, Runtime};
    ///
    /// let rt = Runtime::global()?;
    /// assert!(rt.check("aclrtMalloc", 0).is_ok());
    /// let err = rt.check("aclrtMalloc", 207001).unwrap_err();
    /// assert_eq!(err.acl_code(), Some(AclCode(207001)));
    /// assert!(err.to_string().starts_with("aclrtMalloc failed: ACL_ERROR_RT_MEMORY_ALLOCATION"));
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn check(&self, api: &'static str, code: ffi::aclError) -> Result<()> {
        if code == ffi::ACL_SUCCESS {
            return Ok(());
        }
        Err(AclError::new(api, AclCode(code), recent_message(self.inner.loaded)).into())
    }

    /// Identifies the loaded library: ACL's global and thread-local state is per library, so
    /// caches of that state (per device, per thread) are keyed by it. Shared with npu-stream,
    /// not part of the API: [`same_library`](Runtime::same_library) is what users compare.
    ///
    /// ```
    /// use npu_core::{BackendChoice, Runtime};
    ///
    /// // SAFETY: this example is one of npu-rs's tests.
    /// let seal = unsafe { npu_core::seal::Seal::npu_rs() };
    /// let sim = || Runtime::builder().backend(BackendChoice::Sim).build();
    /// assert_eq!(sim()?.library_id(seal), sim()?.library_id(seal), "one simulator per process");
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    #[doc(hidden)]
    pub fn library_id(&self, _: crate::seal::Seal) -> usize {
        self.inner.loaded.id
    }

    /// Runs `f` on this library's shared primary-context and peer-access state; `None` if this
    /// thread holds it already, or holds another library's and this one is held by another
    /// thread (see [`lock_here`](crate::contain::lock_here)).
    ///
    /// `f` makes ACL calls under the lock (setting a device, enabling and disabling peer
    /// access), which the simulator reports through `tracing` when they fail, and a subscriber
    /// may call npu-rs back from there (`Device::open`): every path that takes the lock again
    /// on the same thread refuses (or hands its work to the reaper) instead of waiting for
    /// itself, and every thread after it, the reaper included.
    pub(crate) fn with_shared<R>(&self, f: impl FnOnce(&mut SharedState) -> R) -> Option<R> {
        let mut shared = crate::contain::lock_here(
            crate::SEAL,
            &self.inner.loaded.shared,
            crate::contain::Rank::Runtime,
        )?;
        Some(f(&mut shared))
    }

    /// The error of a call refused because this thread holds the runtime's lock already
    /// ([`with_shared`](Self::with_shared) returned `None`).
    pub(crate) fn reentered(api: &'static str) -> Error {
        Error::invalid(
            api,
            "thread",
            "holds the runtime's device and peer-access lock already (or another runtime's, \
             which another thread holds): called back from inside an ACL call made under it \
             (by a tracing subscriber?)",
        )
    }

    /// Whether both handles use the same loaded library.
    ///
    /// ```
    /// use npu_core::{BackendChoice, Runtime};
    ///
    /// let a = Runtime::builder().backend(BackendChoice::Sim).build()?;
    /// let b = Runtime::builder().backend(BackendChoice::Sim).build()?;
    /// assert!(a.same_library(&b), "both use the in-process simulator");
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn same_library(&self, other: &Runtime) -> bool {
        self.library_id(crate::SEAL) == other.library_id(crate::SEAL)
    }

    /// The number of visible devices (`aclrtGetDeviceCount`).
    ///
    /// ```
    /// use npu_core::Runtime;
    ///
    /// let count = Runtime::global()?.device_count()?;
    /// assert_eq!(count, npu_sim::SimConfig::current().unwrap().devices);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn device_count(&self) -> Result<u32> {
        let mut count = 0u32;
        // SAFETY: `count` is a valid out-pointer for the duration of the call.
        unsafe { crate::acl_call!(self, aclrtGetDeviceCount(&mut count)) }?;
        Ok(count)
    }

    /// Opens device `id` on this runtime (see [`Device::open`]).
    ///
    /// ```
    /// use npu_core::Runtime;
    ///
    /// let rt = Runtime::global()?;
    /// assert_eq!(rt.device(1)?.id(), 1);
    /// assert!(rt.device(rt.device_count()?).is_err());
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn device(&self, id: u32) -> Result<Device> {
        Device::open_on(self, id, "Runtime::device")
    }

    /// The SoC name (`aclrtGetSocName`), e.g. `Ascend910B3`.
    ///
    /// ```
    /// use npu_core::Runtime;
    ///
    /// let name = Runtime::global()?.soc_name();
    /// assert_eq!(name.as_deref(), Some("Ascend910B3")); // npu-sim's default
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn soc_name(&self) -> Option<String> {
        // SAFETY: no arguments; the result is NULL or a NUL-terminated static string.
        unsafe { owned_c_str((self.api().aclrtGetSocName)()) }
    }

    /// The version string of a CANN package (`aclsysGetVersionStr`), e.g. for `"runtime"`.
    ///
    /// A `package` with a NUL byte is an [`Error::InvalidArgument`] of
    /// `Runtime::package_version`; a package the runtime does not know is its ACL error.
    ///
    /// ```
    /// use npu_core::Runtime;
    ///
    /// let version = Runtime::global()?.package_version("runtime")?;
    /// assert_eq!(version.split('.').count(), 3, "{version}"); // e.g. npu-sim's "8.5.0"
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn package_version(&self, package: &str) -> Result<String> {
        let mut name = CString::new(package)
            .map_err(|_| {
                Error::invalid("Runtime::package_version", "package", "contains a NUL byte")
            })?
            .into_bytes_with_nul();
        let mut version = vec![0u8; ffi::ACL_PKG_VERSION_MAX_SIZE as usize];
        let name_ptr = name.as_mut_ptr().cast();
        let version_ptr = version.as_mut_ptr().cast();
        // SAFETY: `name` is NUL-terminated; `version` has the documented maximum size.
        unsafe { crate::acl_call_opt!(self, aclsysGetVersionStr(name_ptr, version_ptr)) }?;
        let text = CStr::from_bytes_until_nul(&version).map_or(&version[..], CStr::to_bytes);
        Ok(String::from_utf8_lossy(text).into_owned())
    }

    /// The optional ACL functions the loaded runtime does not export.
    ///
    /// ```
    /// use npu_core::Runtime;
    ///
    /// let rt = Runtime::global()?;
    /// assert!(rt.unsupported_functions().is_empty(), "npu-sim exports every function");
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn unsupported_functions(&self) -> Vec<&'static str> {
        self.api().unsupported()
    }
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("backend", self.backend())
            .field("reason", self.backend_reason())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// "A forked child never waits on a lock a parent thread held", for the library's `aclInit`
    /// lock: a thread holds it (as one building or dropping a runtime of the library does,
    /// across `aclInit` or `aclFinalize`) while this thread forks, and the child drops the last
    /// handle of a runtime of that library. No public control holds a thread there while a
    /// runtime of the library lives (the lock is held across an ACL call only by the first
    /// build and the last drop, and npu-sim logs nothing from either), so the test takes the
    /// lock itself and forks for real.
    ///
    /// The break: the child's drop took the lock to count its reference down before asking
    /// whether it is a forked child, and waited for ever (killed by its alarm).
    #[test]
    fn a_child_forked_while_another_thread_holds_the_init_lock_drops_its_runtime() {
        let runtime = Runtime::builder()
            .backend(BackendChoice::Sim)
            .build()
            .unwrap();
        let loaded = runtime.inner.loaded;
        let (held, is_held) = std::sync::mpsc::channel();
        let (go, may_go) = std::sync::mpsc::channel::<()>();
        let holder = std::thread::spawn(move || {
            let _users = loaded.init_users.lock().unwrap();
            held.send(()).unwrap();
            let _ = may_go.recv();
        });
        is_held.recv().unwrap();
        // SAFETY: the child only drops the runtime, under an alarm, and ends with `_exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            // SAFETY: an alarm turns a hang of the child into its death by SIGALRM.
            unsafe { libc::alarm(10) };
            drop(runtime);
            // SAFETY: ends the child at once, running no destructor of the parent's state.
            unsafe { libc::_exit(0) };
        }
        let mut status = 0;
        // SAFETY: `pid` is our child (bounded by its alarm); `status` a valid out-pointer.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        go.send(()).unwrap();
        holder.join().unwrap();
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child hung or failed dropping its runtime (status {status:#x})"
        );
    }
}

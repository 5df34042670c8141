//! Kernel binaries (`aclrtBinaryLoad*`) and the kernels in them (`aclrtBinaryGetFunction`).

use std::ffi::{CString, c_void};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::ffi;
use crate::launch::LaunchConfig;

/// A loaded kernel binary (`aclrtBinHandle`).
///
/// On CANN a binary is an Ascend C device binary (an `.o` built by bisheng); on npu-sim it is
/// a shared object exporting kernels with the simulator's C signature, or an in-process
/// registry image (see `docs/ascend.md`). [`Module::function`] looks a kernel up by name.
///
/// A `Module` holds its [`Context`] and binds it before every call, so it can be used from any
/// thread. It is `Send + Sync` and cheap to clone. The binary is unloaded
/// (`aclrtBinaryUnLoad`) when the last clone, the last [`Function`] from it and the last
/// launch of one of those functions are gone.
///
/// ```
/// use npu_core::{Device, Module};
///
/// let ctx = Device::open(0)?.primary_context().clone();
/// // SAFETY: npu-sim's shipped kernel library, built for the simulator's kernel ABI.
/// let module = unsafe { Module::from_file(&ctx, npu_sim::kernel::LIBRARY_PATH) }?;
/// let add = module.function("vector_add_f32")?;
/// assert_eq!(add.name(), "vector_add_f32");
/// assert!(module.function("no_such_kernel").is_err());
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Clone)]
pub struct Module {
    inner: Arc<ModuleInner>,
}

struct ModuleInner {
    context: Context,
    handle: ffi::aclrtBinHandle,
    source: Source,
}

/// Where a module came from (for `Debug`), and the bytes of an in-memory binary.
enum Source {
    File(PathBuf),
    /// ACL does not say whether it reads the caller's buffer after `aclrtBinaryLoadFromData`
    /// returns, so the module keeps its own copy until the binary is unloaded. A `Vec`, not a
    /// `Box`: the runtime keeps the address while the module moves, and moving a `Box`
    /// would assert that nothing else reaches its bytes.
    Data(Vec<u8>),
}

// SAFETY: an aclrtBinHandle is an opaque handle that ACL lets any thread use; every call binds
// the module's context first. The kept bytes are never written after loading.
unsafe impl Send for ModuleInner {}
// SAFETY: as above; nothing in `ModuleInner` is mutated after construction.
unsafe impl Sync for ModuleInner {}
// The impls above vouch for `handle` alone: every other field is `Send + Sync` of its own, checked
// here, and a field added later breaks this pattern until it is checked too.
const _: fn(&ModuleInner) = |fields| {
    let ModuleInner {
        context,
        handle: _,
        source,
    } = fields;
    let _: [&(dyn Send + Sync); 2] = [context, source];
};

/// Options for loading a binary (`aclrtBinaryLoadOptions`); start with [`Module::loader`].
///
/// ```
/// use npu_core::{BinaryMagic, Device, Module};
///
/// let ctx = Device::open(0)?.primary_context().clone();
/// let loader = Module::loader(&ctx).lazy_load(true).magic(BinaryMagic::VectorCore);
/// // SAFETY: npu-sim's shipped kernel library, built for the simulator's kernel ABI.
/// let module = unsafe { loader.file(npu_sim::kernel::LIBRARY_PATH) }?;
/// module.function("scale_f32")?;
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a loader does nothing until it loads"]
pub struct ModuleLoader {
    context: Context,
    lazy_load: Option<bool>,
    magic: Option<BinaryMagic>,
}

/// Which core a device ELF is built for (`ACL_RT_BINARY_LOAD_OPT_MAGIC`); CANN's Ascend C host
/// stubs pass it with in-memory binaries. The simulator accepts and ignores it.
///
/// ```
/// use npu_core::BinaryMagic;
///
/// assert_eq!(BinaryMagic::VectorCore.raw(), 0x4141_5246);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BinaryMagic {
    /// An AI Core (mixed cube/vector) ELF.
    AiCore,
    /// A vector-core (AIV) ELF.
    VectorCore,
    /// A cube-core (AIC) ELF.
    CubeCore,
}

impl BinaryMagic {
    /// The `ACL_RT_BINARY_MAGIC_ELF_*` value.
    ///
    /// ```
    /// use npu_core::{BinaryMagic, ffi};
    ///
    /// assert_eq!(BinaryMagic::AiCore.raw(), ffi::ACL_RT_BINARY_MAGIC_ELF_AICORE);
    /// assert_eq!(BinaryMagic::CubeCore.raw(), ffi::ACL_RT_BINARY_MAGIC_ELF_CUBE_CORE);
    /// ```
    pub fn raw(self) -> u32 {
        match self {
            BinaryMagic::AiCore => ffi::ACL_RT_BINARY_MAGIC_ELF_AICORE,
            BinaryMagic::VectorCore => ffi::ACL_RT_BINARY_MAGIC_ELF_VECTOR_CORE,
            BinaryMagic::CubeCore => ffi::ACL_RT_BINARY_MAGIC_ELF_CUBE_CORE,
        }
    }
}

impl ModuleLoader {
    /// Whether ACL may defer copying the binary to the device until a kernel is first looked
    /// up (`ACL_RT_BINARY_LOAD_OPT_LAZY_LOAD`).
    ///
    /// ```
    /// use npu_core::{Device, Module};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let loader = Module::loader(&ctx).lazy_load(true);
    /// // SAFETY: npu-sim's shipped kernel library, built for the simulator's kernel ABI.
    /// let module = unsafe { loader.file(npu_sim::kernel::LIBRARY_PATH) }?;
    /// assert_eq!(module.function("reduce_sum_f32")?.name(), "reduce_sum_f32");
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn lazy_load(mut self, lazy: bool) -> Self {
        self.lazy_load = Some(lazy);
        self
    }

    /// The kind of device ELF (`ACL_RT_BINARY_LOAD_OPT_MAGIC`).
    ///
    /// ```
    /// use npu_core::{BinaryMagic, Device, Module};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let image = npu_sim::kernel::registry_image(&["vector_add_f32"]);
    /// let loader = Module::loader(&ctx).magic(BinaryMagic::AiCore); // npu-sim ignores it
    /// // SAFETY: a registry image names in-process kernels; loading it runs no code.
    /// let module = unsafe { loader.data(&image) }?;
    /// module.function("vector_add_f32")?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn magic(mut self, magic: BinaryMagic) -> Self {
        self.magic = Some(magic);
        self
    }

    /// The options as ACL's array; empty when none was set.
    fn options(&self) -> Vec<ffi::aclrtBinaryLoadOption> {
        let lazy = self.lazy_load.map(|lazy| ffi::aclrtBinaryLoadOption {
            type_: ffi::ACL_RT_BINARY_LOAD_OPT_LAZY_LOAD,
            value: ffi::aclrtBinaryLoadOptionValue {
                isLazyLoad: u32::from(lazy),
            },
        });
        let magic = self.magic.map(|magic| ffi::aclrtBinaryLoadOption {
            type_: ffi::ACL_RT_BINARY_LOAD_OPT_MAGIC,
            value: ffi::aclrtBinaryLoadOptionValue { magic: magic.raw() },
        });
        lazy.into_iter().chain(magic).collect()
    }

    /// Loads the binary at `path` (`aclrtBinaryLoadFromFile`).
    ///
    /// ACL wants an absolute path; a relative one is made absolute against the current
    /// directory first. A path with a NUL byte is rejected before ACL is called; a missing or
    /// unreadable file is ACL's `ACL_ERROR_RT_FILE_OPEN` (107009).
    ///
    /// ```
    /// use std::path::Path;
    /// use npu_core::{AclCode, Device, Module};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// // SAFETY: npu-sim's shipped kernel library, built for the simulator's kernel ABI.
    /// let module = unsafe { Module::loader(&ctx).file(npu_sim::kernel::LIBRARY_PATH) }?;
    /// assert_eq!(module.path(), Some(Path::new(npu_sim::kernel::LIBRARY_PATH)));
    /// // SAFETY: nothing is loaded: the file does not exist.
    /// let missing = unsafe { Module::loader(&ctx).file("/nonexistent/kernels.so") }.unwrap_err();
    /// assert_eq!(missing.acl_code(), Some(AclCode(107009)));
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    ///
    /// # Safety
    ///
    /// The file must be a kernel binary for the loaded runtime. On CANN that is an Ascend C
    /// device binary. npu-sim `dlopen`s it, which runs the library's initialisers in this
    /// process, so there it must be a shared object built for the simulator's kernel ABI
    /// (`npusim/kernel.h`) whose initialisers are sound.
    pub unsafe fn file(self, path: impl AsRef<Path>) -> Result<Module> {
        // SAFETY: forwarded to the caller.
        unsafe { self.file_for("ModuleLoader::file", path.as_ref()) }
    }

    /// [`file`](ModuleLoader::file), its argument errors naming `api`, the call the caller made.
    ///
    /// # Safety
    ///
    /// As for [`file`](ModuleLoader::file).
    unsafe fn file_for(self, api: &'static str, path: &Path) -> Result<Module> {
        let path = std::path::absolute(path).map_err(|err| {
            Error::invalid(api, "path", format!("cannot be made absolute: {err}"))
        })?;
        let c_path = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| Error::invalid(api, "path", "must not contain a NUL byte"))?;
        let c_path_ptr = c_path.as_ptr();
        self.load(Source::File(path), |runtime, options, handle| {
            // SAFETY: `c_path` is NUL-terminated and outlives the call; `options` and `handle`
            // are as `load` documents. The caller vouches for the file's contents.
            unsafe {
                crate::acl_call_opt!(
                    runtime,
                    aclrtBinaryLoadFromFile(c_path_ptr, options, handle)
                )
            }
        })
    }

    /// Loads a binary from memory (`aclrtBinaryLoadFromData`). The bytes are copied and kept
    /// until the binary is unloaded. Empty data is rejected before ACL is called.
    ///
    /// ```
    /// use npu_core::{Device, Module};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let image = npu_sim::kernel::registry_image(&["scale_f32"]);
    /// // SAFETY: a registry image names in-process kernels; loading it runs no code.
    /// let module = unsafe { Module::loader(&ctx).data(&image) }?;
    /// assert_eq!(module.path(), None);
    /// // SAFETY: nothing is loaded: empty data is rejected first.
    /// assert!(unsafe { Module::loader(&ctx).data(&[]) }.is_err());
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    ///
    /// # Safety
    ///
    /// As for [`file`](ModuleLoader::file): the bytes must be a kernel binary for the loaded
    /// runtime. On npu-sim that is a kernel shared object (`dlopen`ed from memory, running its
    /// initialisers) or a registry image (`npu_sim::kernel::registry_image`), which runs no
    /// code.
    pub unsafe fn data(self, data: &[u8]) -> Result<Module> {
        // SAFETY: forwarded to the caller.
        unsafe { self.data_for("ModuleLoader::data", data) }
    }

    /// [`data`](ModuleLoader::data), its argument errors naming `api`, the call the caller made.
    ///
    /// # Safety
    ///
    /// As for [`data`](ModuleLoader::data).
    unsafe fn data_for(self, api: &'static str, data: &[u8]) -> Result<Module> {
        if data.is_empty() {
            return Err(Error::invalid(
                api,
                "data",
                "must not be empty: a binary has at least a header",
            ));
        }
        let data = data.to_vec();
        let (bytes, len) = (data.as_ptr().cast::<c_void>(), data.len());
        self.load(Source::Data(data), |runtime, options, handle| {
            // SAFETY: `bytes` points at `len` bytes on the heap, owned by the module's source
            // from now on and so alive as long as the binary; ACL only reads the options;
            // `options` and `handle` are as `load` documents. The caller vouches for the
            // contents.
            unsafe {
                crate::acl_call_opt!(
                    runtime,
                    aclrtBinaryLoadFromData(bytes, len, options.cast_const(), handle)
                )
            }
        })
    }

    /// Binds the context and runs `load` with ACL's option list (NULL when no option was set)
    /// and an out-pointer for the handle, which becomes the module's.
    fn load(
        self,
        source: Source,
        load: impl FnOnce(
            &crate::Runtime,
            *mut ffi::aclrtBinaryLoadOptions,
            *mut ffi::aclrtBinHandle,
        ) -> Result<()>,
    ) -> Result<Module> {
        let mut options = self.options();
        let mut list = ffi::aclrtBinaryLoadOptions {
            options: options.as_mut_ptr(),
            numOpt: options.len(),
        };
        let list_ptr = null_if_empty(options.len(), &mut list);
        self.context.bind()?;
        let mut handle: ffi::aclrtBinHandle = std::ptr::null_mut();
        load(self.context.runtime(), list_ptr, &mut handle)?;
        Ok(Module::adopt(self.context, handle, source))
    }
}

impl Module {
    /// A loader for binaries in `context`, to set load options.
    ///
    /// ```
    /// use npu_core::{Device, Module};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let image = npu_sim::kernel::registry_image(&[]); // every registered kernel
    /// // SAFETY: a registry image names in-process kernels; loading it runs no code.
    /// let module = unsafe { Module::loader(&ctx).lazy_load(false).data(&image) }?;
    /// assert!(module.context().same(&ctx));
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn loader(context: &Context) -> ModuleLoader {
        ModuleLoader {
            context: context.clone(),
            lazy_load: None,
            magic: None,
        }
    }

    /// Loads the binary at `path` in `context`; see [`ModuleLoader::file`].
    ///
    /// ```
    /// use npu_core::{Device, Module};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// // SAFETY: npu-sim's shipped kernel library, built for the simulator's kernel ABI.
    /// let module = unsafe { Module::from_file(&ctx, npu_sim::kernel::LIBRARY_PATH) }?;
    /// for kernel in ["vector_add_f32", "scale_f32", "reduce_sum_f32"] {
    ///     module.function(kernel)?;
    /// }
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    ///
    /// # Safety
    ///
    /// As for [`ModuleLoader::file`].
    pub unsafe fn from_file(context: &Context, path: impl AsRef<Path>) -> Result<Module> {
        // SAFETY: forwarded to the caller.
        unsafe { Module::loader(context).file_for("Module::from_file", path.as_ref()) }
    }

    /// Loads a binary from memory in `context`; see [`ModuleLoader::data`].
    ///
    /// ```
    /// use npu_core::{Device, Module};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let image = npu_sim::kernel::registry_image(&["vector_add_f32", "scale_f32"]);
    /// // SAFETY: a registry image names in-process kernels; loading it runs no code.
    /// let module = unsafe { Module::from_data(&ctx, &image) }?;
    /// module.function("scale_f32")?;
    /// assert!(module.function("reduce_sum_f32").is_err(), "not in the image");
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    ///
    /// # Safety
    ///
    /// As for [`ModuleLoader::data`].
    pub unsafe fn from_data(context: &Context, data: &[u8]) -> Result<Module> {
        // SAFETY: forwarded to the caller.
        unsafe { Module::loader(context).data_for("Module::from_data", data) }
    }

    fn adopt(context: Context, handle: ffi::aclrtBinHandle, source: Source) -> Module {
        Module {
            inner: Arc::new(ModuleInner {
                context,
                handle,
                source,
            }),
        }
    }

    /// Looks up the kernel `name` (`aclrtBinaryGetFunction`).
    ///
    /// An empty name or one with a NUL byte is rejected before ACL is called; a name the
    /// binary does not define is ACL's error (`ACL_ERROR_RT_SYMBOL_NOT_FOUND`, 107042, on
    /// npu-sim).
    ///
    /// ```
    /// use npu_core::{AclCode, Device, Module};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let image = npu_sim::kernel::registry_image(&["scale_f32"]);
    /// // SAFETY: a registry image names in-process kernels; loading it runs no code.
    /// let module = unsafe { Module::from_data(&ctx, &image) }?;
    /// assert_eq!(module.function("scale_f32")?.name(), "scale_f32");
    /// let missing = module.function("vector_add_f32").unwrap_err(); // not in the image
    /// assert_eq!(missing.acl_code(), Some(AclCode(107042)));
    /// assert!(module.function("").is_err());
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn function(&self, name: &str) -> Result<Function> {
        const API: &str = "Module::function";
        if name.is_empty() {
            return Err(Error::invalid(API, "name", "must not be empty"));
        }
        let c_name = CString::new(name)
            .map_err(|_| Error::invalid(API, "name", "must not contain a NUL byte"))?;
        let context = &self.inner.context;
        context.bind()?;
        let mut handle: ffi::aclrtFuncHandle = std::ptr::null_mut();
        // SAFETY: the binary is loaded (`self`), `c_name` is NUL-terminated and `handle` is a
        // valid out-pointer; the module's context is bound on this thread.
        unsafe {
            crate::acl_call_opt!(
                context.runtime(),
                aclrtBinaryGetFunction(self.inner.handle, c_name.as_ptr(), &mut handle)
            )
        }?;
        Ok(Function {
            inner: Arc::new(FunctionInner {
                module: self.clone(),
                handle,
                name: name.to_owned(),
            }),
        })
    }

    /// The context the binary was loaded in.
    ///
    /// ```
    /// use npu_core::{Device, Module};
    ///
    /// let ctx = Device::open(0)?.create_context()?;
    /// let image = npu_sim::kernel::registry_image(&[]);
    /// // SAFETY: a registry image names in-process kernels; loading it runs no code.
    /// let module = unsafe { Module::from_data(&ctx, &image) }?;
    /// assert!(module.context().same(&ctx));
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn context(&self) -> &Context {
        &self.inner.context
    }

    /// The path the binary was loaded from, if it came from a file.
    ///
    /// ```
    /// use std::path::Path;
    /// use npu_core::{Device, Module};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// // SAFETY: npu-sim's shipped kernel library, built for the simulator's kernel ABI.
    /// let module = unsafe { Module::from_file(&ctx, npu_sim::kernel::LIBRARY_PATH) }?;
    /// assert_eq!(module.path(), Some(Path::new(npu_sim::kernel::LIBRARY_PATH)));
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn path(&self) -> Option<&Path> {
        match &self.inner.source {
            Source::File(path) => Some(path),
            Source::Data(_) => None,
        }
    }

    /// The raw handle. Using it is `unsafe`; `self` must outlive every use.
    ///
    /// ```
    /// use npu_core::{Device, Module};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let image = npu_sim::kernel::registry_image(&["scale_f32"]);
    /// // SAFETY: a registry image names in-process kernels; loading it runs no code.
    /// let module = unsafe { Module::from_data(&ctx, &image) }?;
    /// let (rt, mut function) = (ctx.runtime(), std::ptr::null_mut());
    /// let get_function = rt.api().aclrtBinaryGetFunction.expect("an optional ACL function");
    /// ctx.bind()?;
    /// // SAFETY: the binary is loaded (`module` lives), the name is NUL-terminated and
    /// // `function` is a valid out-pointer.
    /// let code = unsafe { get_function(module.as_raw(), c"scale_f32".as_ptr(), &mut function) };
    /// rt.check("aclrtBinaryGetFunction", code)?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn as_raw(&self) -> ffi::aclrtBinHandle {
        self.inner.handle
    }
}

impl Drop for ModuleInner {
    fn drop(&mut self) {
        let runtime = self.context.runtime();
        let result = self.context.bind().and_then(|()| {
            // SAFETY: the binary is ours, and nothing uses it any more: every Function holds
            // the module, and every launch holds its Function until the launch completed.
            unsafe { crate::acl_call_opt!(runtime, aclrtBinaryUnLoad(self.handle)) }
        });
        if let Err(err) = result {
            crate::log!(warn, %err, "unloading a kernel binary failed");
        }
    }
}

impl fmt::Debug for Module {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("Module");
        s.field("device", &self.inner.context.device_id());
        match &self.inner.source {
            Source::File(path) => s.field("path", path),
            Source::Data(data) => s.field("bytes", &data.len()),
        };
        s.finish()
    }
}

/// A kernel in a loaded binary (`aclrtFuncHandle`), ready to launch.
///
/// Launch it with npu-stream's `Stream::launch`, which packs typed arguments and returns a
/// future, or with [`Function::launch_raw`]. A `Function` holds its [`Module`] (so the binary
/// stays loaded) and, through it, its [`Context`]. It is `Send + Sync` and cheap to clone.
///
/// ```
/// use npu_core::{Device, Module};
///
/// let ctx = Device::open(0)?.primary_context().clone();
/// let image = npu_sim::kernel::registry_image(&[]);
/// // SAFETY: a registry image names in-process kernels; loading it runs no code.
/// let function = unsafe { Module::from_data(&ctx, &image) }?.function("reduce_sum_f32")?;
/// // The module is kept loaded by the function.
/// assert_eq!(function.module().path(), None);
/// assert!(function.context().same(&ctx));
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Clone)]
pub struct Function {
    inner: Arc<FunctionInner>,
}

struct FunctionInner {
    module: Module,
    handle: ffi::aclrtFuncHandle,
    name: String,
}

// SAFETY: an aclrtFuncHandle is an opaque handle ACL lets any thread use; launches bind the
// module's context first. Nothing is mutated after construction.
unsafe impl Send for FunctionInner {}
// SAFETY: as above.
unsafe impl Sync for FunctionInner {}
// The impls above vouch for `handle` alone: every other field is `Send + Sync` of its own, checked
// here, and a field added later breaks this pattern until it is checked too.
const _: fn(&FunctionInner) = |fields| {
    let FunctionInner {
        module,
        handle: _,
        name,
    } = fields;
    let _: [&(dyn Send + Sync); 2] = [module, name];
};

impl Function {
    /// The kernel's name.
    ///
    /// ```
    /// use npu_core::{Device, Module};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// // SAFETY: npu-sim's shipped kernel library, built for the simulator's kernel ABI.
    /// let module = unsafe { Module::from_file(&ctx, npu_sim::kernel::LIBRARY_PATH) }?;
    /// assert_eq!(module.function("scale_f32")?.name(), "scale_f32");
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The binary the kernel belongs to.
    ///
    /// ```
    /// use npu_core::{Device, Module};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let function = {
    ///     // SAFETY: npu-sim's shipped kernel library, built for the simulator's kernel ABI.
    ///     let module = unsafe { Module::from_file(&ctx, npu_sim::kernel::LIBRARY_PATH) }?;
    ///     module.function("scale_f32")?
    /// }; // `module` is gone, but the function keeps the binary loaded:
    /// let add = function.module().function("vector_add_f32")?;
    /// assert_eq!(add.module().as_raw(), function.module().as_raw());
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn module(&self) -> &Module {
        &self.inner.module
    }

    /// The context the binary was loaded in: launches bind it.
    ///
    /// ```
    /// use npu_core::{Device, Module};
    ///
    /// let ctx = Device::open(1)?.create_context()?;
    /// let image = npu_sim::kernel::registry_image(&["scale_f32"]);
    /// // SAFETY: a registry image names in-process kernels; loading it runs no code.
    /// let scale = unsafe { Module::from_data(&ctx, &image) }?.function("scale_f32")?;
    /// assert!(scale.context().same(&ctx));
    /// assert_eq!(scale.context().device_id(), 1);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn context(&self) -> &Context {
        self.inner.module.context()
    }

    /// The raw handle. Using it is `unsafe`; `self` must outlive every use.
    ///
    /// ```
    /// use npu_core::{Device, Module};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let image = npu_sim::kernel::registry_image(&["scale_f32"]);
    /// // SAFETY: a registry image names in-process kernels; loading it runs no code.
    /// let scale = unsafe { Module::from_data(&ctx, &image) }?.function("scale_f32")?;
    /// let (rt, mut args) = (ctx.runtime(), std::ptr::null_mut());
    /// let args_init = rt.api().aclrtKernelArgsInit.expect("an optional ACL function");
    /// // SAFETY: the function is loaded (`scale` lives) and `args` is a valid out-pointer.
    /// rt.check("aclrtKernelArgsInit", unsafe { args_init(scale.as_raw(), &mut args) })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn as_raw(&self) -> ffi::aclrtFuncHandle {
        self.inner.handle
    }

    /// Enqueues the kernel on a raw stream with arguments packed in host memory
    /// (`aclrtLaunchKernelWithHostArgs`). This is the low-level call under npu-stream's
    /// `Stream::launch`; prefer that, which keeps the arguments and the memory they refer to
    /// alive until the kernel has run, and gives a future.
    ///
    /// Binds the function's context first, so a stream of another context is ACL's
    /// `ACL_ERROR_RT_STREAM_CONTEXT` (107003). A runtime without the function is
    /// [`Error::Unsupported`].
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use npu_core::{ArgPacker, Device, LaunchConfig, Module};
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let image = npu_sim::kernel::registry_image(&["scale_f32"]);
    /// // SAFETY: a registry image names in-process kernels; loading it runs no code.
    /// let scale = unsafe { Module::from_data(&ctx, &image) }?.function("scale_f32")?;
    /// // {float *x, uint64_t n, float alpha} over no elements: the kernel touches no memory.
    /// let mut args = ArgPacker::new("example");
    /// args.push(&0usize.to_ne_bytes(), 8)?;
    /// args.push(&0u64.to_ne_bytes(), 8)?;
    /// args.push(&1.0f32.to_ne_bytes(), 4)?;
    /// let config = LaunchConfig::new(NonZeroU32::MIN);
    /// // SAFETY: NULL is the default stream of the function's context; the arguments match
    /// // the kernel and refer to no memory.
    /// let mut bytes = args.into_bytes();
    /// unsafe { scale.launch_raw(std::ptr::null_mut(), &config, &mut bytes) }?;
    /// ctx.synchronize_blocking()?;
    /// drop(bytes); // the launch has completed
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    ///
    /// # Safety
    ///
    /// - `stream` must be a live stream of the same runtime, or NULL for the default stream
    ///   of the function's context.
    /// - `args` must stay allocated and unchanged until the launch has completed: the
    ///   reference does not say that the runtime has copied them when this call returns
    ///   (npu-sim has).
    /// - `args` must be laid out as the kernel expects, and everything the kernel accesses
    ///   through them must stay valid, and untouched by concurrent device work and host code
    ///   where the kernel writes (and unwritten by them where it reads), until the launch has
    ///   completed on the device.
    /// - Whoever unloads the binary must wait for the launch: keep a clone of `self` until
    ///   then.
    pub unsafe fn launch_raw(
        &self,
        stream: ffi::aclrtStream,
        config: &LaunchConfig,
        args: &mut [u8],
    ) -> Result<()> {
        let context = self.context();
        let mut attr = config.attr();
        let attrs = attr.as_mut_slice();
        let mut cfg = ffi::aclrtLaunchKernelCfg {
            attrs: attrs.as_mut_ptr(),
            numAttrs: attrs.len(),
        };
        let cfg_ptr = null_if_empty(attrs.len(), &mut cfg);
        let args_ptr = if args.is_empty() {
            std::ptr::null_mut()
        } else {
            args.as_mut_ptr().cast::<c_void>()
        };
        context.bind()?;
        // SAFETY: the function is loaded (`self`); `cfg_ptr` is NULL or points at `attrs`,
        // alive for the call, which reads them as it builds the task it queues (they decide
        // how the task is scheduled: engine, block offset, timeouts), and `args_ptr` at `args.len()` bytes (NULL when empty), which
        // the caller keeps until the launch completes, in case the runtime reads them after
        // returning (the reference neither names such a read nor rules one out); no
        // placeholders. The caller guarantees the stream and what the arguments refer to.
        unsafe {
            crate::acl_call_opt!(
                context.runtime(),
                aclrtLaunchKernelWithHostArgs(
                    self.inner.handle,
                    config.blocks().get(),
                    stream,
                    cfg_ptr,
                    args_ptr,
                    args.len(),
                    std::ptr::null_mut(),
                    0
                )
            )
        }
    }
}

/// A pointer to an ACL array descriptor, or NULL when it describes no items: NULL is ACL's
/// documented "no options", and an empty list's dangling pointer is never handed to C.
fn null_if_empty<L>(count: usize, list: &mut L) -> *mut L {
    if count == 0 {
        std::ptr::null_mut()
    } else {
        list
    }
}

impl fmt::Debug for Function {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Function")
            .field("name", &self.inner.name)
            .field("module", &self.inner.module)
            .finish()
    }
}

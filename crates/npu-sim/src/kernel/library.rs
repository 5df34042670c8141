//! Loaded binaries (aclrtBinaryLoad*) and their functions (aclrtBinaryGetFunction).

use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

use npu_sys::*;

use super::globals;
use super::image;
use super::registry::{self, KernelCode};
use super::{
    ARGS_SIZE_PREFIX, GLOBAL_SIZE_PREFIX, KernelEntry, MAX_PARAMS, PARAMS_PREFIX, param_offsets,
    valid_param_list,
};
use crate::error::{Res, ensure, fail};
use crate::handle::Handle;
use crate::memory::MemoryMap;
use crate::sync::lock;

/// Where a binary's kernels come from.
enum Source {
    /// A dlopen'ed shared object; kept alive by every function (and so every queued launch).
    Library(Arc<libloading::Library>),
    /// The in-process registry, restricted to these names (empty: any).
    Registry(Vec<String>),
}

/// The bytes an aclrtBinary describes (aclrtCreateBinary). They stay the caller's: CANN reads
/// them when the binary is loaded and never frees them, so they are referenced, not copied.
pub(crate) struct BinaryData {
    pub(crate) address: usize,
    pub(crate) len: usize,
}

/// A binary's exception callback (aclrtBinarySetExceptionCallback) and its user data.
#[derive(Clone, Copy)]
pub(crate) struct OpCallback {
    pub(crate) func: unsafe extern "C" fn(*mut aclrtExceptionInfo, *mut c_void),
    pub(crate) user_data: usize,
}

/// The callback slot a binary shares with its functions, so a launch queued before the
/// binary was unloaded still reports to it.
type CallbackSlot = Arc<Mutex<Option<OpCallback>>>;

pub(crate) struct Binary {
    source: Source,
    /// Functions resolved so far, by name and device; `None` once the binary is unloaded, so
    /// a function resolved while the unload runs cannot outlive it.
    functions: Mutex<Option<HashMap<(String, i32), Handle>>>,
    exception_callback: CallbackSlot,
    /// Addresses of the device globals it holds (see `super::globals`).
    globals: Mutex<Vec<usize>>,
    /// Where a library's image was mapped and its size (see `image::mapped_span`).
    image: Option<(usize, usize)>,
    /// Whether it was loaded lazily (ACL_RT_BINARY_LOAD_OPT_LAZY_LOAD).
    lazy: bool,
}

pub(crate) struct Function {
    pub(crate) name: String,
    /// The binary it was resolved from (aclrtFunctionGetBinary).
    pub(crate) binary: Handle,
    /// The device whose context was current when it was resolved: a function handle is valid
    /// on that device only, where the runtime put the binary's code.
    pub(crate) device: i32,
    pub(crate) code: KernelCode,
    /// The bytes of arguments the kernel declared it reads (0: none declared).
    pub(crate) args_size: usize,
    /// Its declared parameters' (offset, size), if it declared a parameter list.
    pub(crate) params: Option<Vec<(usize, usize)>>,
    /// Args handles created for this function (aclrtKernelArgsInit), retired with it; `None`
    /// once it is retired, so an args handle made meanwhile cannot outlive it.
    args: Mutex<Option<Vec<Handle>>>,
    exception_callback: CallbackSlot,
    _library: Option<Arc<libloading::Library>>,
}

impl Function {
    /// Records an args handle made for this function; fails once the function is retired
    /// (its binary unloaded), and the caller then retires the handle itself.
    pub(crate) fn adopt_args(&self, args: Handle) -> Res<()> {
        match lock(&self.args).as_mut() {
            Some(all) => {
                all.push(args);
                Ok(())
            }
            None => fail!(
                ACL_ERROR_RT_INVALID_HANDLE,
                "the function's binary was unloaded while its arguments were initialised"
            ),
        }
    }

    /// Marks the function retired; returns the args handles made for it.
    pub(crate) fn retire(&self) -> Vec<Handle> {
        lock(&self.args).take().unwrap_or_default()
    }

    /// Fails with ACL_ERROR_RT_PARAM_INVALID if a launch passes fewer bytes of arguments than
    /// the kernel declared it reads.
    pub(crate) fn check_args(&self, size: usize) -> Res<()> {
        ensure!(
            size >= self.args_size,
            ACL_ERROR_RT_PARAM_INVALID,
            "kernel {:?} reads {} bytes of arguments, the launch passes {size}",
            self.name,
            self.args_size
        );
        Ok(())
    }

    /// Its parameters' (offset, size); 107000 if it declared no parameter list.
    pub(crate) fn param_list(&self) -> Res<&[(usize, usize)]> {
        match &self.params {
            Some(params) => Ok(params),
            None => fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "kernel {:?} declares no parameter list (NPUSIM_KERNEL_PARAMS, \
                 kernel::register_with_params)",
                self.name
            ),
        }
    }

    /// The exception callback of its binary, if one is set.
    pub(crate) fn exception_callback(&self) -> Option<OpCallback> {
        *lock(&self.exception_callback)
    }

    /// Where its code starts (aclrtGetFunctionAddr): the entry point, or a Rust kernel's
    /// closure.
    pub(crate) fn code_address(&self) -> usize {
        match &self.code {
            KernelCode::Entry(entry) => *entry as usize,
            KernelCode::Closure(closure) => Arc::as_ptr(closure).cast::<()>() as usize,
        }
    }

    /// The size of its code (aclrtGetFunctionSize): the entry point's ELF symbol's; 0 for a
    /// Rust kernel's closure, or an entry the loader knows no symbol for.
    pub(crate) fn code_size(&self) -> usize {
        match &self.code {
            KernelCode::Entry(entry) => image::code_size(*entry as usize),
            KernelCode::Closure(_) => 0,
        }
    }
}

fn open(path: &std::path::Path) -> Result<libloading::Library, libloading::Error> {
    // SAFETY: loading runs the library's initialisers; the caller asked for exactly this file
    // to be loaded as kernel code, which is what the ACL call means.
    unsafe { libloading::Library::new(path) }
}

/// The argument size a kernel library declares for `kernel` with `NPUSIM_KERNEL_ARGS_SIZE`
/// (the `uint64_t` symbol `npusimArgsSize_<kernel>`), or 0.
fn declared_args_size(library: &libloading::Library, kernel: &str) -> usize {
    let Ok(symbol) = CString::new(format!("{ARGS_SIZE_PREFIX}{kernel}")) else {
        return 0;
    };
    // SAFETY: in a kernel library this symbol is the `const uint64_t` NPUSIM_KERNEL_ARGS_SIZE
    // defines; looking it up yields its address.
    let size = unsafe { library.get::<*const u64>(symbol.as_bytes_with_nul()) };
    match size {
        // SAFETY: the address of a `const uint64_t` of the loaded library, which `library`
        // keeps mapped.
        Ok(size) => usize::try_from(unsafe { size.read_unaligned() }).unwrap_or(usize::MAX),
        Err(_) => 0,
    }
}

/// Where the library's code finds its exported variable `name`: the definition in the global
/// scope if there is one (the program's copy of it, when the program links the library and
/// the linker copied the variable into the executable, or one that interposes), else its own.
/// That is the memory its kernels read and write.
fn variable_address(library: &libloading::Library, name: &CString) -> Option<usize> {
    // SAFETY: dlsym only reads the loader's tables; the name is NUL-terminated.
    let global = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    if !global.is_null() {
        return Some(global as usize);
    }
    // SAFETY: only the symbol's address is read, never what it points to.
    let own = unsafe { library.get::<*mut c_void>(name.as_bytes_with_nul()) };
    own.ok().map(|own| *own as usize)
}

/// The parameter list a kernel library declares for `kernel` with `NPUSIM_KERNEL_PARAMS` (the
/// zero-terminated `uint64_t` array `npusimParams_<kernel>`), if any; more than 128 entries or
/// a parameter above 1 MiB → 107000.
fn declared_params(library: &libloading::Library, kernel: &str) -> Res<Option<Vec<usize>>> {
    let Ok(symbol) = CString::new(format!("{PARAMS_PREFIX}{kernel}")) else {
        return Ok(None);
    };
    // SAFETY: in a kernel library this symbol is the `const uint64_t[]` NPUSIM_KERNEL_PARAMS
    // defines; looking it up yields its address.
    let Ok(array) = (unsafe { library.get::<*const u64>(symbol.as_bytes_with_nul()) }) else {
        return Ok(None);
    };
    let first = *array;
    let mut sizes = Vec::new();
    for index in 0..=MAX_PARAMS {
        // SAFETY: the array is zero-terminated, so every entry up to the terminator, which
        // this loop stops at, belongs to it; `library` keeps it mapped.
        let size = unsafe { first.add(index).read_unaligned() };
        if size == 0 {
            ensure!(
                valid_param_list(&sizes),
                ACL_ERROR_RT_PARAM_INVALID,
                "kernel {kernel:?} declares a parameter larger than 1 MiB"
            );
            return Ok(Some(sizes));
        }
        sizes.push(usize::try_from(size).unwrap_or(usize::MAX));
    }
    fail!(
        ACL_ERROR_RT_PARAM_INVALID,
        "kernel {kernel:?} declares more than {MAX_PARAMS} parameters"
    )
}

impl Binary {
    /// aclrtBinaryLoadFromFile: dlopens a kernel library. The reference asks for an absolute
    /// path; a relative one is taken from the current directory, the file the existence check
    /// looked at (given to dlopen as it is, a name without a slash would be searched for on the
    /// library path instead, and could load another library).
    pub(crate) fn from_file(path: &std::path::Path) -> Res<Binary> {
        // Any bytes but NUL, as Linux paths hold: a path that is not UTF-8 names a file all the
        // same.
        let Ok(path) = std::path::absolute(path) else {
            fail!(
                ACL_ERROR_RT_FILE_OPEN,
                "cannot open kernel binary {path:?}: no absolute path for it"
            );
        };
        let path = path.as_path();
        ensure!(
            std::fs::File::open(path).is_ok(),
            ACL_ERROR_RT_FILE_OPEN,
            "cannot open kernel binary {path:?}"
        );
        match open(path) {
            Ok(library) => Ok(Binary::library(library)),
            Err(error) => fail!(
                ACL_ERROR_INVALID_FILE,
                "{path:?} is not a loadable kernel library: {error}"
            ),
        }
    }

    /// aclrtBinaryLoadFromData: an ELF shared object (loaded through a memfd) or a registry
    /// image (see `registry_image`).
    pub(crate) fn from_data(data: &[u8]) -> Res<Binary> {
        if let Some(names) = registry::parse_image(data) {
            return Ok(Binary::new(Source::Registry(names), None));
        }
        ensure!(
            data.starts_with(b"\x7fELF"),
            ACL_ERROR_RT_PARAM_INVALID,
            "the data is neither an ELF shared object nor an npu-sim registry image"
        );
        let name = c"npu-sim-kernels";
        // SAFETY: memfd_create takes a NUL-terminated name and flags; it returns a new fd or -1.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        ensure!(
            fd >= 0,
            ACL_ERROR_RT_RESOURCE_ALLOC_FAIL,
            "memfd_create failed: {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: `fd` is a freshly created descriptor nobody else owns.
        let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        if let Err(error) = file.write_all(data) {
            fail!(
                ACL_ERROR_RT_RESOURCE_ALLOC_FAIL,
                "could not stage the binary in memory: {error}"
            );
        }
        match open(std::path::Path::new(&format!("/proc/self/fd/{fd}"))) {
            // The loader keeps its own mapping; the descriptor closes with `file`.
            Ok(library) => Ok(Binary::library(library)),
            Err(error) => fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "the ELF image is not a loadable shared object: {error}"
            ),
        }
    }

    fn new(source: Source, image: Option<(usize, usize)>) -> Binary {
        Binary {
            source,
            functions: Mutex::new(Some(HashMap::new())),
            exception_callback: CallbackSlot::default(),
            globals: Mutex::default(),
            image,
            lazy: false,
        }
    }

    fn library(library: libloading::Library) -> Binary {
        let (library, image) = image::mapped_span(library);
        Binary::new(Source::Library(Arc::new(library)), image)
    }

    /// The binary, marked as loaded lazily or not.
    pub(crate) fn loaded_lazily(self, lazy: bool) -> Binary {
        Binary { lazy, ..self }
    }

    /// aclrtBinaryGetDevAddress: where its image lies (NULL if it was loaded lazily) and its
    /// size; a registry image, whose kernels are the program's own code, has none (NULL, 0).
    pub(crate) fn image(&self) -> (usize, usize) {
        let (address, size) = self.image.unwrap_or((0, 0));
        (if self.lazy { 0 } else { address }, size)
    }

    /// aclrtBinarySetExceptionCallback: replaces the callback its kernels' failures report to.
    pub(crate) fn set_exception_callback(&self, callback: OpCallback) {
        *lock(&self.exception_callback) = Some(callback);
    }

    /// Resolves a kernel by name for `device`; `handle` is this binary's.
    pub(crate) fn function(&self, name: &str, handle: Handle, device: i32) -> Res<Function> {
        let (code, args_size, params, library) = match &self.source {
            Source::Library(library) => {
                let Ok(symbol) = CString::new(name) else {
                    fail!(ACL_ERROR_RT_PARAM_INVALID, "kernel name contains NUL");
                };
                // SAFETY: a kernel library exports kernels with the npusim/kernel.h signature;
                // that is the contract of loading it as a kernel binary.
                let entry = unsafe { library.get::<KernelEntry>(symbol.as_bytes_with_nul()) };
                match entry {
                    Ok(entry) => (
                        KernelCode::Entry(*entry),
                        declared_args_size(library, name),
                        declared_params(library, name)?,
                        Some(library.clone()),
                    ),
                    Err(_) => fail!(
                        ACL_ERROR_RT_SYMBOL_NOT_FOUND,
                        "the binary exports no kernel named {name:?}"
                    ),
                }
            }
            Source::Registry(names) => {
                let listed = names.is_empty() || names.iter().any(|n| n == name);
                match registry::lookup(name).filter(|_| listed) {
                    Some(registered) => (
                        registered.code,
                        registered.args_size,
                        registered.params,
                        None,
                    ),
                    None => fail!(
                        ACL_ERROR_RT_SYMBOL_NOT_FOUND,
                        "no registered kernel named {name:?} in this registry image"
                    ),
                }
            }
        };
        let params = params.map(|sizes| {
            let (offsets, _) = param_offsets(&sizes);
            offsets.into_iter().zip(sizes).collect::<Vec<_>>()
        });
        // A parameter list implies the bytes a launch must pass: up to its last parameter.
        let spanned = params
            .as_deref()
            .and_then(<[_]>::last)
            .map_or(0, |&(offset, size)| offset + size);
        Ok(Function {
            name: name.to_owned(),
            binary: handle,
            device,
            code,
            args_size: args_size.max(spanned),
            params,
            args: Mutex::new(Some(Vec::new())),
            exception_callback: self.exception_callback.clone(),
            _library: library,
        })
    }

    /// The handle of function `name` on `device`: the one resolved before if `live` still
    /// accepts it, otherwise a new one from `make`. Under the binary's lock, so callers racing
    /// for one name share a handle and the unload retires every handle given out. Fails once
    /// unloaded.
    pub(crate) fn function_handle(
        &self,
        name: &str,
        device: i32,
        live: impl Fn(Handle) -> bool,
        make: impl FnOnce() -> Res<Handle>,
    ) -> Res<Handle> {
        let mut functions = lock(&self.functions);
        let Some(functions) = functions.as_mut() else {
            fail!(
                ACL_ERROR_RT_INVALID_HANDLE,
                "the binary was unloaded while the function was resolved"
            );
        };
        let key = (name.to_owned(), device);
        if let Some(&handle) = functions.get(&key).filter(|&&h| live(h)) {
            return Ok(handle);
        }
        let handle = make()?;
        functions.insert(key, handle);
        Ok(handle)
    }

    /// The handles of the functions resolved from it so far (none once it is unloaded).
    pub(crate) fn function_handles(&self) -> Vec<Handle> {
        lock(&self.functions)
            .as_ref()
            .map(|functions| functions.values().copied().collect())
            .unwrap_or_default()
    }

    /// The device global `name` the library declares with NPUSIM_GLOBAL: its address and size.
    /// The binary holds it from now on (until [`Self::release_globals`]), as device memory of
    /// `device` if no other binary holds it. An undeclared name, or a registry image (which has
    /// no globals) → 107042.
    pub(crate) fn global(
        &self,
        memory: &MemoryMap,
        name: &str,
        device: i32,
    ) -> Res<(usize, usize)> {
        let Source::Library(library) = &self.source else {
            fail!(
                ACL_ERROR_RT_SYMBOL_NOT_FOUND,
                "a registry image has no globals (asked for {name:?})"
            );
        };
        let (Ok(symbol), Ok(size_symbol)) = (
            CString::new(name),
            CString::new(format!("{GLOBAL_SIZE_PREFIX}{name}")),
        ) else {
            fail!(ACL_ERROR_RT_PARAM_INVALID, "the global's name contains NUL");
        };
        // SAFETY: in a kernel library the size symbol is the `const uint64_t` NPUSIM_GLOBAL
        // defines; looking it up yields its address.
        let size = unsafe { library.get::<*const u64>(size_symbol.as_bytes_with_nul()) };
        let (Ok(size), Some(address)) = (size, variable_address(library, &symbol)) else {
            fail!(
                ACL_ERROR_RT_SYMBOL_NOT_FOUND,
                "the binary declares no global named {name:?} (NPUSIM_GLOBAL)"
            );
        };
        // SAFETY: the address of a `const uint64_t` of the loaded library, which `library`
        // keeps mapped.
        let len = usize::try_from(unsafe { size.read_unaligned() }).unwrap_or(usize::MAX);
        ensure!(
            len > 0 && address.checked_add(len).is_some(),
            ACL_ERROR_RT_PARAM_INVALID,
            "the binary declares the global {name:?} with an impossible size {len}"
        );
        let mut held = lock(&self.globals);
        if held.is_empty() {
            globals::keep(library);
        }
        if !held.contains(&address) {
            globals::hold(memory, address, len, device);
            held.push(address);
        }
        Ok((address, len))
    }

    /// Whether the binary is a library whose export `name` (a variable or a kernel) is where its
    /// code finds it, `address`.
    pub(crate) fn exports_at(&self, name: &str, address: usize) -> bool {
        let (Source::Library(library), Ok(symbol)) = (&self.source, CString::new(name)) else {
            return false;
        };
        variable_address(library, &symbol) == Some(address)
    }

    /// Lets go of the device globals this binary holds (it is being unloaded).
    pub(crate) fn release_globals(&self, memory: &MemoryMap) {
        let Source::Library(library) = &self.source else {
            return;
        };
        let key = globals::library_key(library);
        for address in std::mem::take(&mut *lock(&self.globals)) {
            globals::release(memory, address, key);
        }
    }

    /// Marks the binary unloaded; returns every function handle resolved from it.
    pub(crate) fn unload(&self) -> Vec<Handle> {
        lock(&self.functions)
            .take()
            .map(|functions| functions.into_values().collect())
            .unwrap_or_default()
    }
}

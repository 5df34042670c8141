//! The in-process kernel registry and the "registry image" that makes its kernels loadable
//! through aclrtBinaryLoadFromData.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};

use super::KernelEntry;
use super::builtin;
use crate::sync::lock;

/// Code of a kernel: a C function, or a Rust closure registered in-process.
#[derive(Clone)]
pub(crate) enum KernelCode {
    Entry(KernelEntry),
    Closure(Arc<dyn Fn(u32, u32, *mut c_void) -> i32 + Send + Sync>),
}

/// A registered kernel: its code, the bytes of arguments it declared it reads (0: none) and
/// its parameter list's sizes, if it declared one.
#[derive(Clone)]
pub(crate) struct Registered {
    pub(crate) code: KernelCode,
    pub(crate) args_size: usize,
    pub(crate) params: Option<Vec<usize>>,
}

/// Why a kernel could not be registered.
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use npu_sim::kernel::{self, KernelError};
///
/// let taken = kernel::register("vector_add_f32", |_, _, _| 0).unwrap_err(); // a shipped kernel
/// assert_eq!(taken, KernelError::AlreadyRegistered("vector_add_f32".into()));
/// assert!(matches!(kernel::register("", |_, _, _| 0), Err(KernelError::InvalidName(_))));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KernelError {
    /// A kernel with this name is already registered.
    #[error("a kernel named {0:?} is already registered")]
    AlreadyRegistered(String),
    /// Names must be non-empty and free of NUL bytes.
    #[error("invalid kernel name {0:?}")]
    InvalidName(String),
    /// A parameter list has at most 128 parameters of 1 byte to 1 MiB (the count given).
    #[error("invalid parameter list of {0} parameters (at most 128, each of 1 byte to 1 MiB)")]
    InvalidParams(usize),
}

fn registry() -> &'static Mutex<HashMap<String, Registered>> {
    static REGISTRY: OnceLock<Mutex<HashMap<String, Registered>>> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let builtins: [(&str, KernelEntry, usize, &[usize]); 3] = [
            (
                builtin::VECTOR_ADD_F32,
                builtin::vector_add_f32,
                size_of::<builtin::VectorAddArgs>(),
                &[8, 8, 8, 8],
            ),
            (
                builtin::SCALE_F32,
                builtin::scale_f32,
                size_of::<builtin::ScaleArgs>(),
                &[8, 8, 4, 4],
            ),
            (
                builtin::REDUCE_SUM_F32,
                builtin::reduce_sum_f32,
                size_of::<builtin::ReduceSumArgs>(),
                &[8, 8, 8],
            ),
        ];
        Mutex::new(
            builtins
                .into_iter()
                .map(|(name, entry, args_size, params)| {
                    let code = KernelCode::Entry(entry);
                    let params = Some(params.to_vec());
                    let registered = Registered {
                        code,
                        args_size,
                        params,
                    };
                    (name.to_owned(), registered)
                })
                .collect(),
        )
    })
}

fn insert(name: &str, registered: Registered) -> Result<(), KernelError> {
    if name.is_empty() || name.contains('\0') {
        return Err(KernelError::InvalidName(name.to_owned()));
    }
    let mut map = lock(registry());
    if map.contains_key(name) {
        return Err(KernelError::AlreadyRegistered(name.to_owned()));
    }
    map.insert(name.to_owned(), registered);
    Ok(())
}

/// Registers a Rust closure as the kernel `name`, declaring no argument size (see
/// [`register_with_args_size`]).
///
/// The closure gets `(block_idx, block_num, args)` and returns 0, or non-zero to trap. It runs
/// on the simulator's threads, once per block, concurrently for different blocks; `args` is the
/// launch's argument buffer (host-packed arguments, or device memory for aclrtLaunchKernel),
/// NULL when the launch passes none. A panic counts as a trap.
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use std::ptr;
/// use npu_sim::{abi::*, kernel};
///
/// // A kernel that traps in block 1: the launch fails with an AI Core exception.
/// kernel::register("trap_in_block_1", |block, _, _| i32::from(block == 1)).unwrap();
/// let image = kernel::registry_image(&["trap_in_block_1"]);
/// // SAFETY: every pointer passed is valid for the call's contract.
/// unsafe {
///     assert_eq!(aclrtSetDevice(0), 0);
///     let (mut bin, mut trap, null) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
///     assert_eq!(aclrtBinaryLoadFromData(image.as_ptr().cast(), image.len(), ptr::null(), &mut bin), 0);
///     assert_eq!(aclrtBinaryGetFunction(bin, c"trap_in_block_1".as_ptr(), &mut trap), 0);
///     let (cfg, holders) = (ptr::null_mut(), ptr::null_mut());
///     assert_eq!(aclrtLaunchKernelWithHostArgs(trap, 4, null, cfg, null, 0, holders, 0), 0);
///     assert_eq!(aclrtSynchronizeStream(null), 507015); // ACL_ERROR_RT_AICORE_EXCEPTION
/// }
/// ```
pub fn register<F>(name: &str, kernel: F) -> Result<(), KernelError>
where
    F: Fn(u32, u32, *mut c_void) -> i32 + Send + Sync + 'static,
{
    register_with_args_size(name, 0, kernel)
}

/// Registers a Rust closure as the kernel `name` that reads `args_size` bytes of arguments: a
/// launch passing fewer is refused with ACL_ERROR_RT_PARAM_INVALID (107000), so the kernel
/// never sees a NULL or short argument buffer.
///
/// ```
/// # extern crate ascendcl as npu_sim;
/// use std::ffi::c_void;
/// use std::ptr;
/// use npu_sim::abi::*;
///
/// // Reads the address of a u32 (8 bytes of arguments) and increments the u32.
/// npu_sim::kernel::register_with_args_size("increment_u32", 8, |_, _, args: *mut c_void| {
///     // SAFETY: the simulator passes at least 8 bytes of arguments, the address of a u32.
///     unsafe { *(args.cast::<u64>().read_unaligned() as *mut u32) += 1 };
///     0
/// })
/// .unwrap();
/// let image = npu_sim::kernel::registry_image(&["increment_u32"]);
/// // SAFETY: every pointer passed is valid for the call's contract.
/// unsafe {
///     assert_eq!(aclrtSetDevice(0), 0);
///     let (mut bin, mut func) = (ptr::null_mut(), ptr::null_mut());
///     assert_eq!(aclrtBinaryLoadFromData(image.as_ptr().cast(), image.len(), ptr::null(), &mut bin), 0);
///     assert_eq!(aclrtBinaryGetFunction(bin, c"increment_u32".as_ptr(), &mut func), 0);
///     let launch = |args: *mut c_void, size| {
///         aclrtLaunchKernelWithHostArgs(func, 1, ptr::null_mut(), ptr::null_mut(), args, size, ptr::null_mut(), 0)
///     };
///     // No arguments, or 4 bytes: refused before the kernel could read past them.
///     assert_eq!(launch(ptr::null_mut(), 0), 107000);
///     let mut short = 0u32;
///     assert_eq!(launch((&raw mut short).cast(), 4), 107000);
/// }
/// ```
pub fn register_with_args_size<F>(
    name: &str,
    args_size: usize,
    kernel: F,
) -> Result<(), KernelError>
where
    F: Fn(u32, u32, *mut c_void) -> i32 + Send + Sync + 'static,
{
    let code = KernelCode::Closure(Arc::new(kernel));
    let params = None;
    insert(
        name,
        Registered {
            code,
            args_size,
            params,
        },
    )
}

/// Registers a Rust closure as the kernel `name` with a parameter list: the sizes of its
/// parameters in order, laid out as the fields of a C struct (as `NPUSIM_KERNEL_PARAMS`
/// declares them for a kernel library). aclrtFunctionGetParamCount / aclrtFunctionGetParamInfo
/// report them, aclrtLaunchKernelWithArgsArray packs them, and a launch passing fewer bytes
/// than they span is refused with 107000. At most 128 parameters of 1 byte to 1 MiB each.
///
/// ```
/// # extern crate ascendcl as npu_sim;
/// use std::ffi::c_void;
/// use std::ptr;
/// use npu_sim::abi::*;
///
/// // (u32 *out, u8 value): stores the value.
/// npu_sim::kernel::register_with_params("store_u8_as_u32", &[8, 1], |_, _, args: *mut c_void| {
///     // SAFETY: the simulator passes the 9 bytes of the two parameters.
///     unsafe { *(args.cast::<u64>().read_unaligned() as *mut u32) = u32::from(*args.cast::<u8>().add(8)) };
///     0
/// })
/// .unwrap();
/// let image = npu_sim::kernel::registry_image(&["store_u8_as_u32"]);
/// // SAFETY: every pointer passed is valid for the call's contract.
/// unsafe {
///     assert_eq!(aclrtSetDevice(0), 0);
///     let (mut bin, mut func, mut count) = (ptr::null_mut(), ptr::null_mut(), 0);
///     assert_eq!(aclrtBinaryLoadFromData(image.as_ptr().cast(), image.len(), ptr::null(), &mut bin), 0);
///     assert_eq!(aclrtBinaryGetFunction(bin, c"store_u8_as_u32".as_ptr(), &mut func), 0);
///     assert_eq!(aclrtFunctionGetParamCount(func, &mut count), 0);
///     assert_eq!(count, 2);
/// }
/// ```
pub fn register_with_params<F>(name: &str, params: &[usize], kernel: F) -> Result<(), KernelError>
where
    F: Fn(u32, u32, *mut c_void) -> i32 + Send + Sync + 'static,
{
    if !super::valid_param_list(params) {
        return Err(KernelError::InvalidParams(params.len()));
    }
    let code = KernelCode::Closure(Arc::new(kernel));
    let registered = Registered {
        code,
        args_size: 0,
        params: Some(params.to_vec()),
    };
    insert(name, registered)
}

/// Registers a C-ABI function (e.g. from a statically linked C or Rust object) as the kernel
/// `name`, declaring no argument size.
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use std::ffi::c_void;
/// use npu_sim::kernel;
///
/// /// Does nothing, in every block.
/// unsafe extern "C" fn nop(_block: u32, _blocks: u32, _args: *mut c_void) -> i32 {
///     0
/// }
///
/// kernel::register_entry("nop", nop).unwrap();
/// assert!(kernel::register_entry("nop", nop).is_err(), "names are unique");
/// ```
pub fn register_entry(name: &str, entry: KernelEntry) -> Result<(), KernelError> {
    register_entry_with_args_size(name, entry, 0)
}

/// Registers a C-ABI function as the kernel `name` that reads `args_size` bytes of arguments
/// (see [`register_with_args_size`]).
///
/// ```
/// # extern crate ascendcl as npu_sim;
///
/// use std::{ffi::c_void, ptr};
/// use npu_sim::{abi::*, kernel};
///
/// /// Reads a u64 argument (and ignores it).
/// unsafe extern "C" fn takes_u64(_block: u32, _blocks: u32, _args: *mut c_void) -> i32 {
///     0
/// }
///
/// kernel::register_entry_with_args_size("takes_u64", takes_u64, 8).unwrap();
/// let image = kernel::registry_image(&["takes_u64"]);
/// // SAFETY: every pointer passed is valid for the call's contract.
/// unsafe {
///     assert_eq!(aclrtSetDevice(0), 0);
///     let (mut bin, mut function, null) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
///     assert_eq!(aclrtBinaryLoadFromData(image.as_ptr().cast(), image.len(), ptr::null(), &mut bin), 0);
///     assert_eq!(aclrtBinaryGetFunction(bin, c"takes_u64".as_ptr(), &mut function), 0);
///     let mut short = 0u32; // 4 bytes where the kernel reads 8: refused before it is queued
///     let args = (&raw mut short).cast();
///     let (cfg, holders) = (ptr::null_mut(), ptr::null_mut());
///     let code = aclrtLaunchKernelWithHostArgs(function, 1, null, cfg, args, 4, holders, 0);
///     assert_eq!(code, 107000);
/// }
/// ```
pub fn register_entry_with_args_size(
    name: &str,
    entry: KernelEntry,
    args_size: usize,
) -> Result<(), KernelError> {
    let code = KernelCode::Entry(entry);
    let params = None;
    insert(
        name,
        Registered {
            code,
            args_size,
            params,
        },
    )
}

pub(crate) fn lookup(name: &str) -> Option<Registered> {
    lock(registry()).get(name).cloned()
}

const IMAGE_MAGIC: &[u8; 8] = b"NPUSIMK\x01";

/// Builds an in-process registry image: pass it to `aclrtBinaryLoadFromData` to get a binary
/// whose functions are the named registered kernels (an empty list admits every registered
/// kernel). Format: the 8 bytes `NPUSIMK\x01`, a little-endian u32 count, then per name a
/// little-endian u32 length and the UTF-8 bytes.
///
/// ```
/// # extern crate ascendcl as npu_sim;
/// let image = npu_sim::kernel::registry_image(&["vector_add_f32"]);
/// assert!(image.starts_with(b"NPUSIMK\x01"));
/// ```
pub fn registry_image(names: &[&str]) -> Vec<u8> {
    let mut image = IMAGE_MAGIC.to_vec();
    image.extend_from_slice(&(names.len() as u32).to_le_bytes());
    for name in names {
        image.extend_from_slice(&(name.len() as u32).to_le_bytes());
        image.extend_from_slice(name.as_bytes());
    }
    image
}

/// Parses a registry image; `None` if `data` is not one.
pub(crate) fn parse_image(data: &[u8]) -> Option<Vec<String>> {
    let mut rest = data.strip_prefix(IMAGE_MAGIC.as_slice())?;
    let take_u32 = |rest: &mut &[u8]| -> Option<usize> {
        let (head, tail) = rest.split_first_chunk::<4>()?;
        *rest = tail;
        Some(u32::from_le_bytes(*head) as usize)
    };
    let count = take_u32(&mut rest)?;
    let mut names = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        let len = take_u32(&mut rest)?;
        let (name, tail) = rest.split_at_checked(len)?;
        names.push(String::from_utf8(name.to_vec()).ok()?);
        rest = tail;
    }
    rest.is_empty().then_some(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn images_round_trip_and_garbage_is_rejected() {
        assert_eq!(
            parse_image(&registry_image(&["a", "bc"])),
            Some(vec!["a".into(), "bc".into()])
        );
        assert_eq!(parse_image(&registry_image(&[])), Some(vec![]));
        assert_eq!(parse_image(b"NPUSIMK\x01\xff\xff\xff\xff"), None);
        assert_eq!(parse_image(b"\x7fELF"), None);
    }

    proptest! {
        #[test]
        fn parsing_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut data = IMAGE_MAGIC.to_vec();
            data.extend(bytes);
            let _ = parse_image(&data);
        }
    }

    #[test]
    fn parameter_lists_are_bounded() {
        let nop = |_, _, _: *mut c_void| 0;
        assert_eq!(
            register_with_params("zero_sized_param", &[8, 0], nop),
            Err(KernelError::InvalidParams(2))
        );
        assert_eq!(
            register_with_params("too_many_params", &[8; 129], nop),
            Err(KernelError::InvalidParams(129))
        );
    }

    #[test]
    fn names_are_unique_and_valid() {
        assert_eq!(
            register("", |_, _, _| 0),
            Err(KernelError::InvalidName(String::new()))
        );
        assert_eq!(
            register(builtin::VECTOR_ADD_F32, |_, _, _| 0),
            Err(KernelError::AlreadyRegistered(
                builtin::VECTOR_ADD_F32.into()
            ))
        );
    }
}

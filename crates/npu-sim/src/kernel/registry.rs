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

/// Why a kernel could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    /// A kernel with this name is already registered.
    #[error("a kernel named {0:?} is already registered")]
    AlreadyRegistered(String),
    /// Names must be non-empty and free of NUL bytes.
    #[error("invalid kernel name {0:?}")]
    InvalidName(String),
}

fn registry() -> &'static Mutex<HashMap<String, KernelCode>> {
    static REGISTRY: OnceLock<Mutex<HashMap<String, KernelCode>>> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let builtins: [(&str, KernelEntry); 3] = [
            (builtin::VECTOR_ADD_F32, builtin::vector_add_f32),
            (builtin::SCALE_F32, builtin::scale_f32),
            (builtin::REDUCE_SUM_F32, builtin::reduce_sum_f32),
        ];
        Mutex::new(
            builtins
                .into_iter()
                .map(|(name, entry)| (name.to_owned(), KernelCode::Entry(entry)))
                .collect(),
        )
    })
}

fn insert(name: &str, code: KernelCode) -> Result<(), KernelError> {
    if name.is_empty() || name.contains('\0') {
        return Err(KernelError::InvalidName(name.to_owned()));
    }
    let mut map = lock(registry());
    if map.contains_key(name) {
        return Err(KernelError::AlreadyRegistered(name.to_owned()));
    }
    map.insert(name.to_owned(), code);
    Ok(())
}

/// Registers a Rust closure as the kernel `name`.
///
/// The closure gets `(block_idx, block_num, args)` and returns 0, or non-zero to trap. It runs
/// on the simulator's threads, once per block, concurrently for different blocks; `args` is the
/// launch's argument buffer (host-packed arguments, or device memory for aclrtLaunchKernel). A
/// panic counts as a trap.
pub fn register<F>(name: &str, kernel: F) -> Result<(), KernelError>
where
    F: Fn(u32, u32, *mut c_void) -> i32 + Send + Sync + 'static,
{
    insert(name, KernelCode::Closure(Arc::new(kernel)))
}

/// Registers a C-ABI function (e.g. from a statically linked C or Rust object) as the kernel
/// `name`.
pub fn register_entry(name: &str, entry: KernelEntry) -> Result<(), KernelError> {
    insert(name, KernelCode::Entry(entry))
}

pub(crate) fn lookup(name: &str) -> Option<KernelCode> {
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

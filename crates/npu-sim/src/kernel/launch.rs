//! A kernel launch as a stream task: every block of the kernel, in parallel across blocks.

use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::sync::{Arc, OnceLock};

use npu_sys::*;
use rayon::prelude::*;

use super::Function;
use super::registry::KernelCode;
use crate::error::SimError;

/// Launch arguments owned by the task (host-packed arguments are copied at submission, so the
/// caller may reuse its buffer when the launch call returns). An empty blob owns no memory and
/// is passed to the kernel as NULL. Not `Clone`: a placeholder's slot holds the address of data
/// inside the blob, which a copy would still point back into.
///
/// Aligned for the struct the bytes are: a kernel reads them as its parameter struct
/// (`const Params *p = args;`), which is sound only if `args` is aligned for `Params`, and a
/// field the packer placed at a multiple of 64 is 64-byte aligned in memory only if the blob's
/// start is. The simulator does not know the struct, but a C struct's size is a multiple of its
/// alignment, so the blob starts at a multiple of the largest power of two dividing its
/// length, from 8 up to [`MAX_ALIGN`] (npu-rs's `ArgPacker::MAX_ALIGN`); the padding this
/// costs is less than the length. (An 8-byte aligned blob, as before, gave a 64-byte aligned
/// by-value parameter a misaligned address in about three launches of four.)
#[derive(Debug)]
pub(crate) struct ArgsBlob {
    /// Cells: a kernel gets a pointer to them and may write through it, as into a device
    /// argument buffer, while other executions sharing the blob read it. A `Vec`, not a
    /// `Box`: moving a `Box` would assert that nothing else reaches the cells, while those
    /// pointers do. The arguments start at word `start`, the first one aligned as above.
    words: Vec<UnsafeCell<u64>>,
    start: usize,
    len: usize,
}

/// The largest alignment an argument blob is given: a page.
pub(crate) const MAX_ALIGN: usize = 4096;

// SAFETY: once built (through `&mut self`), the words are reached only through raw pointers:
// by kernels, as device memory is, and by `to_bytes`; no reference to them is shared.
unsafe impl Sync for ArgsBlob {}
// The impl vouches for `words` alone: the other fields are `Sync` of their own, checked here,
// and a field added later breaks this pattern until it is checked too.
const _: fn(&ArgsBlob) = |fields| {
    let ArgsBlob {
        words: _,
        start,
        len,
    } = fields;
    let _: [&dyn Sync; 2] = [start, len];
};

impl ArgsBlob {
    /// `len` zero bytes; 207001 if the host cannot allocate them.
    pub(crate) fn zeroed(len: usize) -> Result<Self, SimError> {
        let words_needed = len.div_ceil(8);
        if words_needed == 0 {
            return Ok(Self {
                words: Vec::new(),
                start: 0,
                len,
            });
        }
        // The largest power of two dividing `len`, at least a word's 8 bytes, at most a page.
        let align = (1usize << len.trailing_zeros()).clamp(8, MAX_ALIGN);
        let slack = align / 8 - 1;
        let mut words = Vec::new();
        crate::error::reserve(&mut words, words_needed + slack, "kernel arguments")?;
        words.resize_with(words_needed + slack, || UnsafeCell::new(0u64));
        // The first word at a multiple of `align`; a `u64` is 8-aligned, so one is within
        // `slack` words of the allocation's start.
        let misalignment = (words.as_ptr() as usize % align) / 8;
        let start = (align / 8 - misalignment) % (align / 8);
        Ok(Self { words, start, len })
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The first byte of the arguments.
    fn first(&self) -> *mut u8 {
        UnsafeCell::raw_get(self.words.as_ptr().wrapping_add(self.start)).cast::<u8>()
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: `len` bytes from word `start` lie within the words (`zeroed` allocates `len`
        // rounded up to whole words after `start`); `UnsafeCell<u64>` has `u64`'s layout;
        // `&mut self` excludes every other access for the borrow's life. An empty blob gives
        // an empty slice of the vector's dangling, aligned pointer.
        unsafe { std::slice::from_raw_parts_mut(self.first(), self.len) }
    }

    /// The bytes as they are now (a kernel of a running execution may be writing them).
    fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = vec![0u8; self.len];
        // SAFETY: `len` bytes from word `start` lie within the words; the copy reads through
        // a raw pointer, as a copy from device memory does.
        unsafe {
            std::ptr::copy_nonoverlapping(self.first(), bytes.as_mut_ptr(), self.len);
        }
        bytes
    }

    /// The address of byte `offset`.
    pub(crate) fn address_of(&self, offset: usize) -> u64 {
        self.first() as u64 + offset as u64
    }

    /// The pointer the kernel gets: NULL for no arguments, so a kernel can tell.
    fn as_ptr(&self) -> *mut c_void {
        if self.len == 0 {
            std::ptr::null_mut()
        } else {
            self.first().cast()
        }
    }
}

#[derive(Clone)]
pub(crate) enum LaunchArgs {
    /// aclrtLaunchKernel: arguments already in device memory (address, bytes), read when the
    /// kernel runs.
    Device(usize, usize),
    /// Host-packed arguments, shared by every copy of the launch (each replay of a captured
    /// task): their placeholders point into this one blob, so it lives as long as any copy.
    Owned(Arc<ArgsBlob>),
}

#[derive(Clone)]
pub(crate) struct Launch {
    pub(crate) function: Arc<Function>,
    /// The function handle launched, for exception reports.
    pub(crate) handle: crate::handle::Handle,
    pub(crate) blocks: u32,
    pub(crate) args: LaunchArgs,
    /// Launched on the AIV (vector) engine: traps report VECTOR_CORE_EXCEPTION.
    pub(crate) vector_engine: bool,
    /// The launch's own execute timeout in µs (ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT or _US),
    /// [`op_timeout::NEVER`](crate::op_timeout::NEVER) for none; without one the
    /// process-wide execute timeout applies.
    pub(crate) timeout_us: Option<u64>,
    /// The attributes its launch configuration gave, as aclmdlRIKernelTaskGetAttribute reports
    /// them.
    pub(crate) attrs: LaunchAttrs,
}

/// The queryable attributes of a launch configuration, as given (0 for those not given).
/// DYN_UBUF_SIZE is not kept: a simulated kernel is no SIMT kernel, so the launch took only 0.
#[derive(Clone, Copy, Default)]
pub(crate) struct LaunchAttrs {
    /// ACL_RT_LAUNCH_KERNEL_ATTR_SCHEM_MODE.
    pub(crate) schem_mode: u8,
    /// ACL_RT_LAUNCH_KERNEL_ATTR_DATA_DUMP.
    pub(crate) data_dump: u8,
    /// ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT, in seconds.
    pub(crate) timeout_s: u16,
    /// ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT_US, in µs.
    pub(crate) timeout_us: u64,
    /// ACL_RT_LAUNCH_KERNEL_ATTR_ENABLE_PROFILING.
    pub(crate) profiling: u8,
}

/// The argument pointer, shared by the block invocations on rayon's threads.
struct ArgsPtr(*mut c_void);

// SAFETY: the pointer is only handed to kernel code, whose ABI contract is that blocks may run
// concurrently on any thread with the same argument pointer.
unsafe impl Send for ArgsPtr {}
// SAFETY: as above; the wrapper itself is never written through.
unsafe impl Sync for ArgsPtr {}

impl ArgsPtr {
    /// The pointer (a method, so closures capture the `Sync` wrapper, not the raw field).
    fn get(&self) -> *mut c_void {
        self.0
    }
}

impl Launch {
    pub(crate) fn name(&self) -> &str {
        &self.function.name
    }

    /// The argument pointer the kernel gets and its length in bytes.
    pub(crate) fn args(&self) -> (*mut c_void, usize) {
        match &self.args {
            LaunchArgs::Device(address, len) => (*address as *mut c_void, *len),
            LaunchArgs::Owned(blob) => (blob.as_ptr(), blob.len()),
        }
    }

    /// The arguments as a model's debug print shows them: the bytes of host-packed
    /// arguments in hex, or where device-memory arguments are.
    pub(crate) fn args_hex(&self) -> String {
        match &self.args {
            LaunchArgs::Device(address, len) => format!("device memory {address:#x}+{len}"),
            LaunchArgs::Owned(blob) => {
                let bytes = blob.to_bytes();
                bytes.iter().map(|byte| format!("{byte:02x}")).collect()
            }
        }
    }

    /// Runs every block; the first trapping block (lowest index) fails the launch.
    pub(crate) fn run(&self) -> Result<(), SimError> {
        let args = ArgsPtr(self.args().0);
        let blocks = self.blocks;
        let code = &self.function.code;
        let call = |block: u32| -> i32 {
            match code {
                // SAFETY: kernel ABI: a kernel function may be called with any block index
                // below the block count and the launch's argument pointer.
                KernelCode::Entry(entry) => unsafe { entry(block, blocks, args.get()) },
                KernelCode::Closure(kernel) => {
                    crate::error::contain(|| kernel(block, blocks, args.get())).unwrap_or(-1)
                }
            }
        };
        // Every block runs, as on the device, and the lowest trapping one is reported, however
        // the blocks are spread over threads.
        let sequential = || {
            (0..blocks)
                .map(|block| (block, call(block)))
                .filter(|&(_, status)| status != 0)
                .min_by_key(|&(block, _)| block)
        };
        let cores = if blocks > 1 {
            device_cores(self.function.device)
        } else {
            None
        };
        let trap = match cores {
            Some(cores) => cores.install(|| {
                (0..blocks)
                    .into_par_iter()
                    .map(|block| (block, call(block)))
                    .filter(|&(_, status)| status != 0)
                    .min_by_key(|&(block, _)| block)
            }),
            // One block, or no threads could be had for the device (tried again at its next
            // launch): the blocks run one after another on the stream's worker.
            None => sequential(),
        };
        match trap {
            None => Ok(()),
            Some((block, status)) => {
                let (code, engine) = if self.vector_engine {
                    (ACL_ERROR_RT_VECTOR_CORE_EXCEPTION, "vector core (AIV)")
                } else {
                    (ACL_ERROR_RT_AICORE_EXCEPTION, "AI core (AIC)")
                };
                Err(SimError::new(
                    code,
                    format!(
                        "kernel {:?} trapped on the {engine}: block {block} of {blocks} returned {status}",
                        self.function.name
                    ),
                ))
            }
        }
    }
}

/// The host threads that run the blocks of device `device`'s kernels, made at its first launch
/// of more than one block; `None` if the system refused them (not remembered: the next launch
/// tries again). As many threads as rayon's default: the host's cores, or
/// `RAYON_NUM_THREADS`.
///
/// One pool per device, as each NPU has AI cores of its own: with one pool for all devices, a
/// kernel whose blocks wait for another device's kernel (a collective waiting for its peer's
/// flag, a test holding a kernel) took every thread, and the kernel it waited for never ran.
/// Kernels of one device share its pool, as they share its cores.
fn device_cores(device: i32) -> Option<&'static rayon::ThreadPool> {
    static POOLS: [OnceLock<rayon::ThreadPool>; crate::config::MAX_DEVICES as usize] =
        [const { OnceLock::new() }; crate::config::MAX_DEVICES as usize];
    // A function's device is one the simulator made, below MAX_DEVICES.
    let slot = POOLS.get(usize::try_from(device).ok()?)?;
    if let Some(pool) = slot.get() {
        return Some(pool);
    }
    let built = rayon::ThreadPoolBuilder::new()
        .thread_name(move |core| format!("npusim-dev{device}-core{core}"))
        .build()
        .ok()?;
    // Another launch may have made the device's pool meanwhile: then this one is let go.
    Some(slot.get_or_init(|| built))
}

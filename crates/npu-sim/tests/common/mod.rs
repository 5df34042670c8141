//! Helpers shared by the integration tests (each test file is its own process with its own
//! simulator; tests inside a file run in parallel threads and share it).

// Not every test file uses every helper.
#![allow(dead_code, unused_macros, unreachable_pub)]

pub mod cases;

use std::ffi::{CStr, CString, c_void};
use std::ptr;

use ascendcl::abi::*;
use npu_sys::*;

/// Asserts an ACL call succeeded, showing the simulator's message otherwise.
macro_rules! acl {
    ($call:expr) => {{
        // SAFETY: the tests pass valid pointers and live handles unless a case says otherwise.
        let code = unsafe { $call };
        assert_eq!(
            code,
            0,
            "{} failed: {}",
            stringify!($call),
            $crate::common::recent_message()
        );
    }};
}

/// Calls an ACL function and returns its code.
macro_rules! code {
    ($call:expr) => {{
        // SAFETY: the tests pass valid pointers and live handles unless a case says otherwise;
        // invalid handles are opaque tokens the simulator checks, never dereferences.
        unsafe { $call }
    }};
}

// After the macros, which it uses.
pub mod flow;

/// The calling thread's pending error messages (cleared).
pub fn recent_message() -> String {
    // SAFETY: no preconditions.
    let text = unsafe { aclGetRecentErrMsg() };
    if text.is_null() {
        return String::new();
    }
    // SAFETY: non-NULL results are NUL-terminated and valid until the next call.
    unsafe { CStr::from_ptr(text) }
        .to_string_lossy()
        .into_owned()
}

/// Checks a failed call: its code, the thread's last error, and a recent message naming the
/// API and the code.
#[track_caller]
pub fn fails(code: aclError, expected: aclError, api: &str) {
    assert_eq!(code, expected, "{api}");
    // SAFETY: no preconditions.
    let last = unsafe { aclrtGetLastError(ACL_RT_THREAD_LEVEL) };
    assert_eq!(last, expected, "{api}");
    let message = recent_message();
    assert!(
        message.contains(&format!("{api} failed with {expected}")),
        "{message}"
    );
}

pub fn set_device(device: i32) {
    acl!(aclrtSetDevice(device));
}

pub fn create_stream() -> aclrtStream {
    let mut stream = ptr::null_mut();
    acl!(aclrtCreateStream(&mut stream));
    stream
}

/// A stream handle that was valid and is no longer (any lookup of it fails with 107017).
pub fn destroyed_stream() -> aclrtStream {
    let stream = create_stream();
    acl!(aclrtDestroyStream(stream));
    stream
}

/// An ACL_STREAM_PERSISTENT stream (one a model runtime instance can be built on).
pub fn persistent_stream() -> aclrtStream {
    let mut stream = ptr::null_mut();
    acl!(aclrtCreateStreamWithConfig(
        &mut stream,
        0,
        ACL_STREAM_PERSISTENT
    ));
    stream
}

pub fn create_event() -> aclrtEvent {
    let mut event = ptr::null_mut();
    acl!(aclrtCreateEvent(&mut event));
    event
}

pub fn malloc(bytes: usize) -> *mut c_void {
    let mut ptr = ptr::null_mut();
    acl!(aclrtMalloc(&mut ptr, bytes, ACL_MEM_MALLOC_HUGE_FIRST));
    ptr
}

/// A device address that was allocated and then freed. The simulator holds a freed range back
/// from reuse for its next 1,024 frees, so another test of the file, running in parallel,
/// cannot make the address live again before the caller uses it.
pub fn freed_device_address(bytes: usize) -> *mut c_void {
    let freed = malloc(bytes);
    acl!(aclrtFree(freed));
    freed
}

pub fn malloc_host(bytes: usize) -> *mut c_void {
    let mut ptr = ptr::null_mut();
    acl!(aclrtMallocHost(&mut ptr, bytes));
    ptr
}

/// A stream of `device`'s primary context, created on another thread (so it belongs to
/// another context than the caller's when the caller is bound to another device).
pub fn stream_of_device(device: i32) -> aclrtStream {
    let stream = std::thread::spawn(move || {
        set_device(device);
        create_stream() as usize
    })
    .join()
    .unwrap();
    stream as aclrtStream
}

/// Device memory of `device`, allocated on another thread (the caller's context stays as it is).
pub fn malloc_on(device: i32, bytes: usize) -> *mut c_void {
    let ptr = std::thread::spawn(move || {
        set_device(device);
        malloc(bytes) as usize
    })
    .join()
    .unwrap();
    ptr as *mut c_void
}

/// Copies host data to a device pointer synchronously.
pub fn upload<T: Copy>(dev: *mut c_void, data: &[T]) {
    let bytes = std::mem::size_of_val(data);
    acl!(aclrtMemcpy(
        dev,
        bytes,
        data.as_ptr().cast(),
        bytes,
        ACL_MEMCPY_HOST_TO_DEVICE
    ));
}

/// Copies `len` elements back from a device pointer.
pub fn download<T: Copy + Default>(dev: *const c_void, len: usize) -> Vec<T> {
    let mut out = vec![T::default(); len];
    let bytes = std::mem::size_of_val(out.as_slice());
    acl!(aclrtMemcpy(
        out.as_mut_ptr().cast(),
        bytes,
        dev,
        bytes,
        ACL_MEMCPY_DEVICE_TO_HOST
    ));
    out
}

pub fn c_string(text: &str) -> CString {
    CString::new(text).unwrap()
}

/// Loads the in-process registry kernels `names` as a binary.
pub fn registry_binary(names: &[&str]) -> aclrtBinHandle {
    load_image(&ascendcl::kernel::registry_image(names))
}

/// Loads a kernel binary image from memory.
pub fn load_image(bytes: &[u8]) -> aclrtBinHandle {
    let mut bin = ptr::null_mut();
    acl!(aclrtBinaryLoadFromData(
        bytes.as_ptr().cast(),
        bytes.len(),
        ptr::null(),
        &mut bin
    ));
    bin
}

/// A page-aligned, leaked heap buffer (pageable host memory).
pub fn pageable(bytes: usize) -> *mut c_void {
    let layout = std::alloc::Layout::from_size_align(bytes, 4096).unwrap();
    // SAFETY: non-zero size.
    unsafe { std::alloc::alloc_zeroed(layout) }.cast()
}

/// Writes `text` (bytes: a test may need a file that is not UTF-8) to `name` in the tests'
/// scratch directory; returns the path as a C string.
pub fn config_file(name: &str, text: impl AsRef<[u8]>) -> CString {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::write(&path, text).unwrap();
    c_string(path.to_str().unwrap())
}

/// The calling thread's id, as the callback APIs take it.
pub fn this_thread() -> u64 {
    // SAFETY: no preconditions.
    unsafe { libc::pthread_self() as u64 }
}

pub fn function(bin: aclrtBinHandle, name: &str) -> aclrtFuncHandle {
    let name = c_string(name);
    let mut func = ptr::null_mut();
    acl!(aclrtBinaryGetFunction(bin, name.as_ptr(), &mut func));
    func
}

/// Launches with host-packed arguments (the bytes of `args`).
pub fn launch<T: Copy>(
    func: aclrtFuncHandle,
    blocks: u32,
    stream: aclrtStream,
    args: &T,
    cfg: *mut aclrtLaunchKernelCfg,
) -> aclError {
    let mut args = *args;
    code!(aclrtLaunchKernelWithHostArgs(
        func,
        blocks,
        stream,
        cfg,
        (&raw mut args).cast(),
        std::mem::size_of::<T>(),
        ptr::null_mut(),
        0
    ))
}

/// Launches `func` on the default stream with arguments built by aclrtKernelArgs*.
pub fn launch_built(
    func: aclrtFuncHandle,
    blocks: u32,
    args: aclrtArgsHandle,
    reserve: *mut c_void,
) -> aclError {
    code!(aclrtLaunchKernelWithConfig(
        func,
        blocks,
        ptr::null_mut(),
        ptr::null_mut(),
        args,
        reserve
    ))
}

/// Queues a host-to-device copy of `bytes` on `stream`.
pub fn h2d_async(dev: *mut c_void, host: *const c_void, bytes: usize, stream: aclrtStream) {
    acl!(aclrtMemcpyAsync(
        dev,
        bytes,
        host,
        bytes,
        ACL_MEMCPY_HOST_TO_DEVICE,
        stream
    ));
}

/// Installs the 8-device configuration (1 GiB each) and the test kernels, once per process:
/// for test files that give each test a device of its own.
pub fn install_eight_devices() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        ascendcl::SimConfig::default()
            .devices(8)
            .memory_per_device(1 << 30)
            .install()
            .unwrap();
        register_test_kernels();
    });
}

/// Registers `add_one_u32` (args: one u64 address of a u32; adds 1) and `trap` (always
/// returns 1) once per process.
pub fn register_test_kernels() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        ascendcl::kernel::register("add_one_u32", |_, _, args: *mut c_void| {
            // SAFETY: launched with 8 bytes of arguments holding the address of a u32.
            unsafe {
                let target = args.cast::<u64>().read_unaligned() as *mut u32;
                *target += 1;
            }
            0
        })
        .unwrap();
        ascendcl::kernel::register("trap", |_, _, _| 1).unwrap();
    });
}

/// A launch configuration selecting the vector (AIV) engine. Keep the attribute alive while the
/// configuration is used.
pub fn aiv_attr() -> aclrtLaunchKernelAttr {
    aclrtLaunchKernelAttr {
        id: ACL_RT_LAUNCH_KERNEL_ATTR_ENGINE_TYPE,
        value: aclrtLaunchKernelAttrValue {
            engineType: ACL_RT_ENGINE_TYPE_AIV,
        },
    }
}

/// Asserts an ACL call failed with `code`, left it as the thread's last error, and named
/// `api` in its message.
macro_rules! fails {
    ($call:expr, $code:expr, $api:expr) => {{
        // SAFETY: the tests pass valid pointers and live handles unless a case says otherwise;
        // invalid handles are opaque tokens the simulator checks, never dereferences.
        let code = unsafe { $call };
        // SAFETY: no preconditions.
        let last = unsafe { aclrtPeekAtLastError(npu_sys::ACL_RT_THREAD_LEVEL) };
        let message = $crate::common::recent_message();
        assert_eq!(
            (code, last),
            ($code, $code),
            "{}: {message}",
            stringify!($call)
        );
        assert!(
            message.contains(concat!($api, " failed")),
            "{}: {message}",
            stringify!($call)
        );
    }};
}

/// The properties of a device memory pool on `device` with the default maximum size.
pub fn device_pool_props(device: u32) -> aclrtMemPoolProps {
    aclrtMemPoolProps {
        allocType: ACL_MEM_ALLOCATION_TYPE_PINNED,
        handleType: ACL_MEM_HANDLE_TYPE_NONE,
        location: aclrtMemLocation {
            id: device,
            type_: ACL_MEM_LOCATION_TYPE_DEVICE,
        },
        maxSize: 0,
        reserved: [0; 32],
    }
}

/// An aclrtMemSetAccess entry giving `device` the access `flags`.
pub fn device_access(device: u32, flags: aclrtMemAccessFlags) -> aclrtMemAccessDesc {
    aclrtMemAccessDesc {
        flags,
        location: aclrtMemLocation {
            id: device,
            type_: ACL_MEM_LOCATION_TYPE_DEVICE,
        },
        rsv: [0; 12],
    }
}

/// The properties of huge-page physical memory on `device`.
pub fn huge_physical_prop(device: u32) -> aclrtPhysicalMemProp {
    aclrtPhysicalMemProp {
        handleType: ACL_MEM_HANDLE_TYPE_NONE,
        allocationType: ACL_MEM_ALLOCATION_TYPE_PINNED,
        memAttr: ACL_MEM_HUGE,
        location: aclrtMemLocation {
            id: device,
            type_: ACL_MEM_LOCATION_TYPE_DEVICE,
        },
        reserve: 0,
    }
}

/// Ends the capture on `stream` and returns the instance it made.
pub fn capture_end(stream: aclrtStream) -> aclmdlRI {
    let mut model = ptr::null_mut();
    acl!(aclmdlRICaptureEnd(stream, &mut model));
    model
}

/// The streams of a model runtime instance.
pub fn instance_streams(model: aclmdlRI) -> Vec<aclrtStream> {
    let mut count = 0;
    acl!(aclmdlRIGetStreams(model, ptr::null_mut(), &mut count));
    let mut streams = vec![ptr::null_mut(); count as usize];
    acl!(aclmdlRIGetStreams(model, streams.as_mut_ptr(), &mut count));
    streams
}

/// The tasks an instance holds on one of its streams.
pub fn stream_tasks(stream: aclrtStream) -> Vec<aclmdlRITask> {
    let mut count = 0;
    acl!(aclmdlRIGetTasksByStream(
        stream,
        ptr::null_mut(),
        &mut count
    ));
    let mut tasks = vec![ptr::null_mut(); count as usize];
    acl!(aclmdlRIGetTasksByStream(
        stream,
        tasks.as_mut_ptr(),
        &mut count
    ));
    tasks
}

/// Runs `f` on a thread of its own and returns its result (re-raising its panic); aborts the
/// process, naming `what`, if it has not returned within 60 s: a hang is the failure the
/// attacks look for, and the test harness's capture would die with the process.
pub fn bounded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    use std::io::Write;
    use std::sync::mpsc;
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(std::time::Duration::from_secs(60)) {
        Ok(value) => {
            handle.join().unwrap();
            value
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            std::panic::resume_unwind(handle.join().unwrap_err())
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            let _ = writeln!(std::io::stderr(), "`{what}` hung (no return within 60 s)");
            std::process::abort();
        }
    }
}

/// Holds `turn` until the guard is dropped, so that the tests of a file that take the same
/// turn run one at a time. libtest runs a file's tests on parallel threads (as many as the
/// machine has cores, unless told otherwise), and they share the simulator's counters: a test
/// that compares a device's counts, or the process's host-memory counts, with a baseline takes
/// a turn with every other test of its file that changes them.
pub fn take_turn(turn: &'static std::sync::Mutex<()>) -> std::sync::MutexGuard<'static, ()> {
    // A failed test poisons the lock; the others still run one at a time.
    turn.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A handle or pointer sent to another thread (the simulator's handles are opaque tokens).
#[derive(Clone, Copy)]
pub struct Raw(usize);

impl Raw {
    pub fn of<T>(ptr: *mut T) -> Raw {
        Raw(ptr as usize)
    }
    pub fn ptr<T>(self) -> *mut T {
        self.0 as *mut T
    }
}

/// Synchronising `stream` reports a DMA fault (memory freed under a task), once.
pub fn sync_fails_with_dma(stream: aclrtStream) {
    assert_eq!(
        code!(aclrtSynchronizeStream(stream)),
        ACL_ERROR_RT_SYS_DMA,
        "{}",
        recent_message()
    );
    recent_message();
    acl!(aclrtSynchronizeStream(stream));
}

/// The first u64 at a device address.
pub fn read_u64(dev: *const c_void) -> u64 {
    download::<u64>(dev, 1)[0]
}

/// The tasks of an instance's first stream.
pub fn first_stream_tasks(model: aclmdlRI) -> Vec<aclmdlRITask> {
    stream_tasks(instance_streams(model)[0])
}

/// A task's parameters (aclmdlRITaskGetParams).
pub fn task_params(task: aclmdlRITask) -> aclmdlRITaskParams {
    // SAFETY: plain data, for which all-zero is valid.
    let mut params: aclmdlRITaskParams = unsafe { std::mem::zeroed() };
    acl!(aclmdlRITaskGetParams(task, &mut params));
    params
}

/// Executes an instance once on a stream of its own and waits for it.
pub fn execute(model: aclmdlRI) {
    let stream = create_stream();
    acl!(aclmdlRIExecuteAsync(model, stream));
    acl!(aclrtSynchronizeStream(stream));
    acl!(aclrtDestroyStream(stream));
}

/// The kernel `read_through`: 24 bytes of arguments, a u64 at 0, a pointer at 8 and a device
/// address at 16; it stores the u64 the pointer points at to the device address.
pub const READ_THROUGH: &str = "read_through";

/// `read_through`, registered once per process.
pub fn read_through() -> aclrtFuncHandle {
    register_read_through();
    function(registry_binary(&[READ_THROUGH]), READ_THROUGH)
}

/// Registers `read_through` (once per process), for a test that loads a binary of it itself:
/// a registry image names kernels registered before it is loaded.
pub fn register_read_through() {
    static REGISTER: std::sync::Once = std::sync::Once::new();
    REGISTER.call_once(|| {
        ascendcl::kernel::register_with_args_size(READ_THROUGH, 24, |_, _, args: *mut c_void| {
            // SAFETY: the simulator passes at least 24 bytes; the tests' launches put a valid
            // pointer to a u64 at 8 and a device address at 16.
            unsafe {
                let args = args.cast::<u64>();
                let from = args.add(1).read_unaligned() as *const u64;
                let to = args.add(2).read_unaligned() as *mut u64;
                to.write_unaligned(from.read_unaligned());
            }
            0
        })
        .unwrap();
    });
}

/// A random-number task parameter given as a value: its native bytes.
pub fn random_value(bytes: &[u8]) -> aclrtRandomParaInfo {
    let mut info = aclrtRandomParaInfo::default();
    info.valueOrAddr[..bytes.len()].copy_from_slice(bytes);
    info.size = bytes.len() as u8;
    info
}

/// A random-number task parameter given as the device address of its value.
pub fn random_at(addr: *mut c_void) -> aclrtRandomParaInfo {
    aclrtRandomParaInfo {
        isAddr: 1,
        valueOrAddr: (addr as u64).to_ne_bytes(),
        size: 8,
        rsv: [0; 6],
    }
}

/// The uncorrectable memory error ranges of `device`, in address order (aclrtGetMemUceInfo;
/// at most four).
pub fn uce_ranges(device: i32) -> Vec<(usize, usize)> {
    // SAFETY: aclrtMemUceInfo is plain integers and pointers.
    let mut infos: [aclrtMemUceInfo; 4] = unsafe { std::mem::zeroed() };
    let mut count = usize::MAX;
    acl!(aclrtGetMemUceInfo(
        device,
        infos.as_mut_ptr(),
        infos.len(),
        &mut count
    ));
    infos[..count]
        .iter()
        .map(|info| (info.addr as usize, info.len))
        .collect()
}

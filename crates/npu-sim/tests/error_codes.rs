//! Every error code the simulator returns, each reached through the exported C ABI from a table
//! of bad inputs. docs/simulator.md maps each code to the case names used here.
//!
//! Devices (this process has 8): 0 and 1 for the general tables, 2 is lost, 3 is held (hold
//! gate), 6 has its reference count exercised, 7 runs trapping kernels. Tests in this file run
//! in parallel, so none touches another's device. Process-wide limits (streams, subscribed
//! threads) are exhausted in tests/limits.rs, a process of their own.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;

use common::cases::{Case, case};
use common::install_eight_devices as install;
use common::*;
use npu_sim::abi::*;
use npu_sim::control;
use npu_sys::*;

/// Installs the simulator, then runs the cases.
fn run_table(cases: &[Case]) {
    install();
    common::cases::run_table(cases);
}

fn stream_of_other_context() -> aclrtStream {
    let stream = create_stream();
    let mut ctx = ptr::null_mut();
    acl!(aclrtCreateContext(&mut ctx, 0));
    stream
}

fn destroyed_event() -> aclrtEvent {
    let event = create_event();
    acl!(aclrtDestroyEvent(event));
    event
}

fn destroyed_notify() -> aclrtNotify {
    let mut notify = ptr::null_mut();
    acl!(aclrtCreateNotify(&mut notify, 0));
    acl!(aclrtDestroyNotify(notify));
    notify
}

fn finalized_args(func: aclrtFuncHandle) -> aclrtArgsHandle {
    let mut args = ptr::null_mut();
    acl!(aclrtKernelArgsInit(func, &mut args));
    acl!(aclrtKernelArgsFinalize(args));
    args
}

fn add_one() -> aclrtFuncHandle {
    function(registry_binary(&["add_one_u32", "trap"]), "add_one_u32")
}

/// A function handle whose binary has been unloaded (stale: 107017 once looked up).
fn unloaded_function() -> aclrtFuncHandle {
    let bin = registry_binary(&["add_one_u32"]);
    let func = function(bin, "add_one_u32");
    acl!(aclrtBinaryUnLoad(bin));
    func
}

/// A SIMT launch with an array of arguments (unsupported on an Atlas A2).
fn simt_args_array(func: aclrtFuncHandle, stream: aclrtStream) -> aclError {
    let shape = dim3 { x: 1, y: 1, z: 1 };
    let mut args = [ptr::null_mut::<c_void>()];
    code!(aclrtLaunchSIMTKernelWithArgsArray(
        func,
        shape,
        shape,
        0,
        stream,
        ptr::null_mut(),
        args.as_mut_ptr()
    ))
}

/// A SIMT launch with no host arguments (unsupported on an Atlas A2).
fn simt_host_args(func: aclrtFuncHandle, stream: aclrtStream) -> aclError {
    let shape = dim3 { x: 1, y: 1, z: 1 };
    code!(aclrtLaunchSIMTKernelWithHostArgs(
        func,
        shape,
        shape,
        0,
        stream,
        ptr::null_mut(),
        ptr::null_mut(),
        0,
        ptr::null_mut(),
        0
    ))
}

/// An asynchronous copy of kind HOST_TO_HOST between pinned buffers (unsupported on an
/// Ascend EP host).
fn async_host_to_host(stream: aclrtStream) -> aclError {
    let (a, b) = (malloc_host(64), malloc_host(64));
    code!(aclrtMemcpyAsync(
        a,
        64,
        b,
        64,
        ACL_MEMCPY_HOST_TO_HOST,
        stream
    ))
}

/// A size over `isize::MAX`, which no buffer can have.
const IMPOSSIBLE: usize = 1 << 63;

/// 1 TiB of address space this process may not touch (PROT_NONE, nothing committed): a buffer
/// as large as the size the call is given, which the call refuses before reading (a read would
/// fault). 1 TiB is more than any machine running this suite can allocate.
fn unreadable_tib() -> *mut c_void {
    const TIB: usize = 1 << 40;
    // SAFETY: a fresh anonymous mapping; nothing else uses its range, and it is never unmapped.
    let at = unsafe {
        libc::mmap(
            ptr::null_mut(),
            TIB,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    assert_ne!(at, libc::MAP_FAILED, "1 TiB of address space");
    at
}

/// aclrtLaunchKernelV2 of `add_one` with one attribute `id`, its value zeroed and then set by
/// `set`.
fn launch_v2_with(
    id: aclrtLaunchKernelAttrId,
    set: fn(&mut aclrtLaunchKernelAttrValue),
) -> aclError {
    let mut attr = aclrtLaunchKernelAttr {
        id,
        value: aclrtLaunchKernelAttrValue { rsv: [0; 4] },
    };
    set(&mut attr.value);
    let mut cfg = aclrtLaunchKernelCfg {
        attrs: &mut attr,
        numAttrs: 1,
    };
    let args = malloc(8);
    code!(aclrtLaunchKernelV2(
        add_one(),
        1,
        args,
        8,
        &mut cfg,
        ptr::null_mut()
    ))
}

/// Kernel arguments of `add_one` with one 8-byte value and one placeholder.
fn args_with_a_value_and_a_placeholder() -> (aclrtArgsHandle, aclrtParamHandle, aclrtParamHandle) {
    let mut args = ptr::null_mut();
    acl!(aclrtKernelArgsInit(add_one(), &mut args));
    let (mut value, mut param, mut holder) = (0u64, ptr::null_mut(), ptr::null_mut());
    acl!(aclrtKernelArgsAppend(
        args,
        (&raw mut value).cast(),
        8,
        &mut param
    ));
    acl!(aclrtKernelArgsAppendPlaceHolder(args, &mut holder));
    (args, param, holder)
}

/// The shipped vector add, which declares a parameter list.
fn vector_add() -> aclrtFuncHandle {
    function(registry_binary(&[]), npu_sim::kernel::VECTOR_ADD_F32)
}

/// A registry image of the test kernels, for the older load path.
fn registry_image() -> Vec<u8> {
    npu_sim::kernel::registry_image(&["add_one_u32"])
}

/// An aclrtBinary describing `data` (leaked with the case: the data must outlive the loads).
fn describe(data: &[u8]) -> aclrtBinary {
    let data: &'static [u8] = Vec::leak(data.to_vec());
    // SAFETY: `data` is leaked, so valid for as long as the description is used.
    let binary = unsafe { aclrtCreateBinary(data.as_ptr().cast(), data.len()) };
    assert!(!binary.is_null(), "{}", recent_message());
    binary
}

/// aclrtCreateBinary returns no code: a refused description is NULL with the code as the
/// thread's last error.
fn described_last_error(data: *const c_void, len: usize) -> aclError {
    // SAFETY: the function checks its arguments before reading anything.
    let binary = unsafe { aclrtCreateBinary(data, len) };
    assert!(binary.is_null());
    // SAFETY: no preconditions.
    unsafe { aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL) }
}

/// aclrtCheckMemType of one device allocation, with each argument valid or not.
fn check_mem_type(list: bool, size: u32, mem_type: u32, result: bool, reserve: u32) -> aclError {
    let mut addresses = [malloc(64)];
    let mut answer = 0;
    let list = if list {
        addresses.as_mut_ptr()
    } else {
        ptr::null_mut()
    };
    let result = if result {
        &raw mut answer
    } else {
        ptr::null_mut()
    };
    code!(aclrtCheckMemType(list, size, mem_type, result, reserve))
}

static INVALID_PARAM: &[Case] = &[
    case("null out pointer", "aclrtGetDevice", 100000, 0, || {
        code!(aclrtGetDevice(ptr::null_mut()))
    }),
    case("null devPtr", "aclrtMalloc", 100000, 0, || {
        code!(aclrtMalloc(ptr::null_mut(), 1, 0))
    }),
    case("size 0", "aclrtMalloc", 100000, 0, || {
        let mut p = ptr::null_mut();
        code!(aclrtMalloc(&mut p, 0, 0))
    }),
    case("host size 0", "aclrtMallocHost", 100000, 0, || {
        let mut p = ptr::null_mut();
        code!(aclrtMallocHost(&mut p, 0))
    }),
    case("cfg attrs NULL", "aclrtMallocWithCfg", 100000, 0, || {
        let mut p = ptr::null_mut();
        let mut cfg = aclrtMallocConfig {
            attrs: ptr::null_mut(),
            numAttrs: 1,
        };
        code!(aclrtMallocWithCfg(&mut p, 64, 0, &mut cfg))
    }),
    case(
        "NULL devPtr with an unknown cfg attribute: the pointer is checked first",
        "aclrtMallocWithCfg",
        100000,
        0,
        || {
            with_attribute(UNKNOWN_MALLOC_ATTRIBUTE, |cfg| {
                code!(aclrtMallocWithCfg(ptr::null_mut(), 64, 0, cfg))
            })
        },
    ),
    case(
        "size 0 with an unknown cfg attribute: the size is checked first",
        "aclrtMallocForTaskScheduler",
        100000,
        0,
        || {
            let mut p = ptr::null_mut();
            with_attribute(UNKNOWN_MALLOC_ATTRIBUTE, |cfg| {
                code!(aclrtMallocForTaskScheduler(&mut p, 0, 0, cfg))
            })
        },
    ),
    case(
        "NULL host pointer with an unknown cfg attribute: the pointer is checked first",
        "aclrtMallocHostWithCfg",
        100000,
        0,
        || {
            with_attribute(UNKNOWN_MALLOC_ATTRIBUTE, |cfg| {
                code!(aclrtMallocHostWithCfg(ptr::null_mut(), 64, cfg))
            })
        },
    ),
    case(
        "unknown cfg attribute",
        "aclrtMallocHostWithCfg",
        107000,
        0,
        || {
            let mut p = ptr::null_mut();
            with_attribute(UNKNOWN_MALLOC_ATTRIBUTE, |cfg| {
                code!(aclrtMallocHostWithCfg(&mut p, 64, cfg))
            })
        },
    ),
    case("null dst", "aclrtMemcpy", 100000, 0, || {
        let src = [0u8; 4];
        code!(aclrtMemcpy(
            ptr::null_mut(),
            4,
            src.as_ptr().cast(),
            4,
            ACL_MEMCPY_HOST_TO_HOST
        ))
    }),
    case("null dst of 0 bytes", "aclrtMemcpy", 100000, 0, || {
        let src = [0u8; 4];
        code!(aclrtMemcpy(
            ptr::null_mut(),
            0,
            src.as_ptr().cast(),
            0,
            ACL_MEMCPY_HOST_TO_HOST
        ))
    }),
    case("memcpy kind 8 of 0 bytes", "aclrtMemcpy", 100000, 0, || {
        let (mut a, b) = ([0u8; 4], [0u8; 4]);
        code!(aclrtMemcpy(
            a.as_mut_ptr().cast(),
            0,
            b.as_ptr().cast(),
            0,
            ACL_MEMCPY_INTER_DEVICE_TO_DEVICE + 1
        ))
    }),
    case("memcpy kind 8", "aclrtMemcpy", 100000, 0, || {
        let (mut a, b) = ([0u8; 4], [0u8; 4]);
        code!(aclrtMemcpy(
            a.as_mut_ptr().cast(),
            4,
            b.as_ptr().cast(),
            4,
            ACL_MEMCPY_INTER_DEVICE_TO_DEVICE + 1
        ))
    }),
    case("width > spitch", "aclrtMemcpy2d", 100000, 0, || {
        let d = malloc(4096);
        let h = malloc_host(4096);
        code!(aclrtMemcpy2d(
            d,
            64,
            h,
            16,
            32,
            4,
            ACL_MEMCPY_HOST_TO_DEVICE
        ))
    }),
    case("2D kind H2H", "aclrtMemcpy2d", 100000, 0, || {
        let h = malloc_host(4096);
        code!(aclrtMemcpy2d(h, 64, h, 64, 32, 4, ACL_MEMCPY_HOST_TO_HOST))
    }),
    case("sync 2D kind DEFAULT", "aclrtMemcpy2d", 100000, 0, || {
        let (d, h) = (malloc(4096), malloc_host(4096));
        code!(aclrtMemcpy2d(d, 64, h, 64, 32, 4, ACL_MEMCPY_DEFAULT))
    }),
    case(
        "async 2D kind DEFAULT",
        "aclrtMemcpy2dAsync",
        100000,
        0,
        || {
            let (d, h) = (malloc(4096), malloc_host(4096));
            code!(aclrtMemcpy2dAsync(
                d,
                64,
                h,
                64,
                32,
                4,
                ACL_MEMCPY_DEFAULT,
                create_stream()
            ))
        },
    ),
    case("null context", "aclrtSetCurrentContext", 100000, 0, || {
        code!(aclrtSetCurrentContext(ptr::null_mut()))
    }),
    case("null callback", "aclrtLaunchCallback", 100000, 0, || {
        code!(aclrtLaunchCallback(
            None,
            ptr::null_mut(),
            ACL_CALLBACK_BLOCK,
            ptr::null_mut()
        ))
    }),
    case("bad block type", "aclrtLaunchCallback", 100000, 0, || {
        unsafe extern "C" fn cb(_: *mut c_void) {}
        code!(aclrtLaunchCallback(
            Some(cb),
            ptr::null_mut(),
            2,
            ptr::null_mut()
        ))
    }),
    case("report timeout 0", "aclrtProcessReport", 100000, 0, || {
        code!(aclrtProcessReport(0))
    }),
    case("report timeout -2", "aclrtProcessReport", 100000, 0, || {
        code!(aclrtProcessReport(-2))
    }),
    case(
        "peer of itself",
        "aclrtDeviceCanAccessPeer",
        100000,
        0,
        || {
            let mut can = 0;
            code!(aclrtDeviceCanAccessPeer(&mut can, 1, 1))
        },
    ),
    case(
        "enable peer on itself",
        "aclrtDeviceEnablePeerAccess",
        100000,
        0,
        || code!(aclrtDeviceEnablePeerAccess(0, 0)),
    ),
    case(
        "disable peer on itself",
        "aclrtDeviceDisablePeerAccess",
        100000,
        0,
        || code!(aclrtDeviceDisablePeerAccess(0)),
    ),
    case(
        "device count into NULL",
        "aclrtGetDeviceCount",
        100000,
        -1,
        || code!(aclrtGetDeviceCount(ptr::null_mut())),
    ),
    case(
        "device status into NULL",
        "aclrtQueryDeviceStatus",
        100000,
        -1,
        || code!(aclrtQueryDeviceStatus(0, ptr::null_mut())),
    ),
    case(
        "least priority into NULL",
        "aclrtDeviceGetStreamPriorityRange",
        100000,
        -1,
        || {
            let mut greatest = 0;
            code!(aclrtDeviceGetStreamPriorityRange(
                ptr::null_mut(),
                &mut greatest
            ))
        },
    ),
    case(
        "greatest priority into NULL",
        "aclrtDeviceGetStreamPriorityRange",
        100000,
        -1,
        || {
            let mut least = 0;
            code!(aclrtDeviceGetStreamPriorityRange(
                &mut least,
                ptr::null_mut()
            ))
        },
    ),
    case(
        "current context into NULL",
        "aclrtGetCurrentContext",
        100000,
        0,
        || code!(aclrtGetCurrentContext(ptr::null_mut())),
    ),
    case(
        "default stream into NULL",
        "aclrtCtxGetCurrentDefaultStream",
        100000,
        0,
        || code!(aclrtCtxGetCurrentDefaultStream(ptr::null_mut())),
    ),
    case(
        "configured stream into NULL",
        "aclrtCreateStreamWithConfig",
        100000,
        0,
        || code!(aclrtCreateStreamWithConfig(ptr::null_mut(), 0, 0)),
    ),
    case("stream id into NULL", "aclrtStreamGetId", 100000, 0, || {
        code!(aclrtStreamGetId(ptr::null_mut(), ptr::null_mut()))
    }),
    case(
        "stream priority into NULL",
        "aclrtStreamGetPriority",
        100000,
        0,
        || code!(aclrtStreamGetPriority(ptr::null_mut(), ptr::null_mut())),
    ),
    case(
        "stream flags into NULL",
        "aclrtStreamGetFlags",
        100000,
        0,
        || code!(aclrtStreamGetFlags(ptr::null_mut(), ptr::null_mut())),
    ),
    case(
        "align32 NULL devPtr",
        "aclrtMallocAlign32",
        100000,
        0,
        || code!(aclrtMallocAlign32(ptr::null_mut(), 1, 0)),
    ),
    case("align32 size 0", "aclrtMallocAlign32", 100000, 0, || {
        let mut p = ptr::null_mut();
        code!(aclrtMallocAlign32(&mut p, 0, 0))
    }),
    case(
        "free with device sync NULL",
        "aclrtFreeWithDevSync",
        100000,
        0,
        || code!(aclrtFreeWithDevSync(ptr::null_mut())),
    ),
    case("free host NULL", "aclrtFreeHost", 100000, 0, || {
        code!(aclrtFreeHost(ptr::null_mut()))
    }),
    case(
        "free host with device sync NULL",
        "aclrtFreeHostWithDevSync",
        100000,
        0,
        || code!(aclrtFreeHostWithDevSync(ptr::null_mut())),
    ),
    case(
        "free memory into NULL",
        "aclrtGetMemInfo",
        100000,
        0,
        || {
            let mut total = 0;
            code!(aclrtGetMemInfo(ACL_HBM_MEM, ptr::null_mut(), &mut total))
        },
    ),
    case(
        "total memory into NULL",
        "aclrtGetMemInfo",
        100000,
        0,
        || {
            let mut free = 0;
            code!(aclrtGetMemInfo(ACL_HBM_MEM, &mut free, ptr::null_mut()))
        },
    ),
    case("memset NULL", "aclrtMemset", 100000, 0, || {
        code!(aclrtMemset(ptr::null_mut(), 4, 0, 4))
    }),
    case("async memset NULL", "aclrtMemsetAsync", 100000, 0, || {
        code!(aclrtMemsetAsync(ptr::null_mut(), 4, 0, 4, ptr::null_mut()))
    }),
    // A count of 0 does not skip the checks of the arguments before it.
    case("memset NULL of 0 bytes", "aclrtMemset", 100000, 0, || {
        code!(aclrtMemset(ptr::null_mut(), 0, 0, 0))
    }),
    case(
        "async memset NULL of 0 bytes",
        "aclrtMemsetAsync",
        100000,
        0,
        || code!(aclrtMemsetAsync(ptr::null_mut(), 0, 0, 0, ptr::null_mut())),
    ),
    case(
        "attributes of NULL",
        "aclrtPointerGetAttributes",
        100000,
        0,
        || {
            let mut attributes = aclrtPtrAttributes::default();
            code!(aclrtPointerGetAttributes(ptr::null(), &mut attributes))
        },
    ),
    case(
        "attributes into NULL",
        "aclrtPointerGetAttributes",
        100000,
        0,
        || code!(aclrtPointerGetAttributes(malloc(64), ptr::null_mut())),
    ),
    case(
        "bad failure mode",
        "aclrtSetStreamFailureMode",
        100000,
        0,
        || code!(aclrtSetStreamFailureMode(ptr::null_mut(), 2)),
    ),
    case("0 blocks", "aclrtLaunchKernelWithConfig", 100000, 0, || {
        let func = add_one();
        let args = finalized_args(func);
        launch_built(func, 0, args, ptr::null_mut())
    }),
    case(
        "reserve not NULL",
        "aclrtLaunchKernelWithConfig",
        100000,
        0,
        || {
            let func = add_one();
            let args = finalized_args(func);
            let mut reserve = 0u8;
            launch_built(func, 1, args, (&raw mut reserve).cast())
        },
    ),
    case("0 blocks", "aclrtLaunchKernel", 100000, 0, || {
        code!(aclrtLaunchKernel(
            add_one(),
            0,
            ptr::null(),
            0,
            ptr::null_mut()
        ))
    }),
    case(
        "device pointer flag",
        "aclrtHostGetDevicePointer",
        100000,
        0,
        || {
            let mut d = ptr::null_mut();
            code!(aclrtHostGetDevicePointer(pageable(1 << 16), &mut d, 1))
        },
    ),
    case("free NULL", "aclrtFree", 100000, 0, || {
        code!(aclrtFree(ptr::null_mut()))
    }),
    case(
        "destroy NULL stream",
        "aclrtDestroyStream",
        100000,
        0,
        || code!(aclrtDestroyStream(ptr::null_mut())),
    ),
    case("record NULL event", "aclrtRecordEvent", 100000, 0, || {
        code!(aclrtRecordEvent(ptr::null_mut(), ptr::null_mut()))
    }),
    // A NULL event is refused before the timeout is looked at (parameter order, and the ACL
    // layer before the runtime), so these are 100000 where a valid event gets 107000.
    case(
        "sync NULL event with timeout 0",
        "aclrtSynchronizeEventWithTimeout",
        100000,
        0,
        || code!(aclrtSynchronizeEventWithTimeout(ptr::null_mut(), 0)),
    ),
    case(
        "wait on NULL event with timeout -1",
        "aclrtStreamWaitEventWithTimeout",
        100000,
        0,
        || {
            code!(aclrtStreamWaitEventWithTimeout(
                ptr::null_mut(),
                ptr::null_mut(),
                -1
            ))
        },
    ),
    case("load 0 bytes", "aclrtBinaryLoadFromData", 100000, 0, || {
        let mut bin = ptr::null_mut();
        let data = [0u8; 4];
        code!(aclrtBinaryLoadFromData(
            data.as_ptr().cast(),
            0,
            ptr::null(),
            &mut bin
        ))
    }),
    case("describe NULL data", "aclrtCreateBinary", 100000, 0, || {
        described_last_error(ptr::null(), 4)
    }),
    case("describe 0 bytes", "aclrtCreateBinary", 100000, 0, || {
        let data = [0u8; 4];
        described_last_error(data.as_ptr().cast(), 0)
    }),
    case(
        "destroy NULL binary",
        "aclrtDestroyBinary",
        100000,
        0,
        || code!(aclrtDestroyBinary(ptr::null_mut())),
    ),
    case("load NULL binary", "aclrtBinaryLoad", 100000, 0, || {
        let mut bin = ptr::null_mut();
        code!(aclrtBinaryLoad(ptr::null_mut(), &mut bin))
    }),
    case("load into NULL", "aclrtBinaryLoad", 100000, 0, || {
        let image = registry_image();
        let binary = describe(&image);
        code!(aclrtBinaryLoad(binary, ptr::null_mut()))
    }),
    case(
        "binary of NULL function",
        "aclrtFunctionGetBinary",
        100000,
        0,
        || {
            let mut bin = ptr::null_mut();
            code!(aclrtFunctionGetBinary(ptr::null_mut(), &mut bin))
        },
    ),
    case("name into NULL", "aclrtGetFunctionName", 100000, 0, || {
        code!(aclrtGetFunctionName(add_one(), 64, ptr::null_mut()))
    }),
    case(
        "addresses into NULL",
        "aclrtGetFunctionAddr",
        100000,
        0,
        || {
            let mut aic = ptr::null_mut();
            code!(aclrtGetFunctionAddr(add_one(), &mut aic, ptr::null_mut()))
        },
    ),
    case("0 blocks", "aclrtLaunchKernelV2", 100000, 0, || {
        let cfg = ptr::null_mut();
        code!(aclrtLaunchKernelV2(
            add_one(),
            0,
            ptr::null(),
            0,
            cfg,
            ptr::null_mut()
        ))
    }),
    case("cached NULL devPtr", "aclrtMallocCached", 100000, 0, || {
        code!(aclrtMallocCached(ptr::null_mut(), 1, 0))
    }),
    case("cached size 0", "aclrtMallocCached", 100000, 0, || {
        let mut p = ptr::null_mut();
        code!(aclrtMallocCached(&mut p, 0, 0))
    }),
    case("flush NULL", "aclrtMemFlush", 100000, 0, || {
        code!(aclrtMemFlush(ptr::null_mut(), 64))
    }),
    case("flush 0 bytes", "aclrtMemFlush", 100000, 0, || {
        code!(aclrtMemFlush(malloc(64), 0))
    }),
    case("invalidate NULL", "aclrtMemInvalidate", 100000, 0, || {
        code!(aclrtMemInvalidate(ptr::null_mut(), 64))
    }),
    case(
        "invalidate 0 bytes",
        "aclrtMemInvalidate",
        100000,
        0,
        || code!(aclrtMemInvalidate(malloc(64), 0)),
    ),
    case("check NULL list", "aclrtCheckMemType", 100000, 0, || {
        check_mem_type(false, 1, ACL_RT_MEM_TYPE_DEV, true, 0)
    }),
    case("check 0 addresses", "aclrtCheckMemType", 100000, 0, || {
        check_mem_type(true, 0, ACL_RT_MEM_TYPE_DEV, true, 0)
    }),
    case("check type 0", "aclrtCheckMemType", 100000, 0, || {
        check_mem_type(true, 1, 0, true, 0)
    }),
    case(
        "check unknown type bit",
        "aclrtCheckMemType",
        100000,
        0,
        || check_mem_type(true, 1, ACL_RT_MEM_TYPE_DEV | 0x4, true, 0),
    ),
    case("check into NULL", "aclrtCheckMemType", 100000, 0, || {
        check_mem_type(true, 1, ACL_RT_MEM_TYPE_DEV, false, 0)
    }),
    case("check reserve 1", "aclrtCheckMemType", 100000, 0, || {
        check_mem_type(true, 1, ACL_RT_MEM_TYPE_DEV, true, 1)
    }),
    case(
        "handle size into NULL",
        "aclrtKernelArgsGetHandleMemSize",
        100000,
        0,
        || code!(aclrtKernelArgsGetHandleMemSize(add_one(), ptr::null_mut())),
    ),
    case(
        "args size into NULL",
        "aclrtKernelArgsGetMemSize",
        100000,
        0,
        || code!(aclrtKernelArgsGetMemSize(add_one(), 8, ptr::null_mut())),
    ),
    case(
        "init NULL handle memory",
        "aclrtKernelArgsInitByUserMem",
        100000,
        0,
        || {
            let mut memory = [0u64; 4];
            let args = memory.as_mut_ptr().cast();
            code!(aclrtKernelArgsInitByUserMem(
                add_one(),
                ptr::null_mut(),
                args,
                32
            ))
        },
    ),
    case(
        "init NULL args memory",
        "aclrtKernelArgsInitByUserMem",
        100000,
        0,
        || {
            let mut handle = 0u64;
            let handle = (&raw mut handle).cast();
            code!(aclrtKernelArgsInitByUserMem(
                add_one(),
                handle,
                ptr::null_mut(),
                32
            ))
        },
    ),
    case(
        "ubuf size into NULL",
        "aclrtFunctionGetAvailDynUbufPerBlock",
        100000,
        0,
        || {
            code!(aclrtFunctionGetAvailDynUbufPerBlock(
                add_one(),
                0,
                ptr::null_mut()
            ))
        },
    ),
    case(
        "CPU function named NULL",
        "aclrtRegisterCpuFunc",
        100000,
        0,
        || {
            let bin = registry_binary(&["add_one_u32"]);
            let (name, mut func) = (c_string("RunCpuKernel"), ptr::null_mut());
            code!(aclrtRegisterCpuFunc(
                bin,
                ptr::null(),
                name.as_ptr(),
                &mut func
            ))
        },
    ),
    case(
        "task scheduler memory into NULL",
        "aclrtMallocForTaskScheduler",
        100000,
        0,
        || {
            code!(aclrtMallocForTaskScheduler(
                ptr::null_mut(),
                64,
                0,
                ptr::null_mut()
            ))
        },
    ),
    case(
        "param count into NULL",
        "aclrtFunctionGetParamCount",
        100000,
        0,
        || code!(aclrtFunctionGetParamCount(vector_add(), ptr::null_mut())),
    ),
    case(
        "param info into NULL",
        "aclrtFunctionGetParamInfo",
        100000,
        0,
        || {
            let mut offset = 0;
            code!(aclrtFunctionGetParamInfo(
                vector_add(),
                0,
                &mut offset,
                ptr::null_mut()
            ))
        },
    ),
    case(
        "args array NULL",
        "aclrtLaunchKernelWithArgsArray",
        100000,
        0,
        || {
            let (stream, cfg) = (ptr::null_mut(), ptr::null_mut());
            code!(aclrtLaunchKernelWithArgsArray(
                vector_add(),
                1,
                stream,
                cfg,
                ptr::null_mut()
            ))
        },
    ),
    case(
        "args array NULL for a kernel without a parameter list",
        "aclrtLaunchKernelWithArgsArray",
        100000,
        0,
        || {
            let (stream, cfg) = (ptr::null_mut(), ptr::null_mut());
            code!(aclrtLaunchKernelWithArgsArray(
                add_one(),
                1,
                stream,
                cfg,
                ptr::null_mut()
            ))
        },
    ),
    case(
        "args array NULL for a destroyed function",
        "aclrtLaunchKernelWithArgsArray",
        100000,
        0,
        || {
            let (stream, cfg) = (ptr::null_mut(), ptr::null_mut());
            code!(aclrtLaunchKernelWithArgsArray(
                unloaded_function(),
                1,
                stream,
                cfg,
                ptr::null_mut()
            ))
        },
    ),
    case(
        "args array NULL entry",
        "aclrtLaunchKernelWithArgsArray",
        100000,
        0,
        || {
            let mut word = 0u64;
            let word: *mut c_void = (&raw mut word).cast();
            let mut args = [word, word, ptr::null_mut(), word];
            let (stream, cfg) = (ptr::null_mut(), ptr::null_mut());
            code!(aclrtLaunchKernelWithArgsArray(
                vector_add(),
                1,
                stream,
                cfg,
                args.as_mut_ptr()
            ))
        },
    ),
    case(
        "args array 0 blocks",
        "aclrtLaunchKernelWithArgsArray",
        100000,
        0,
        || {
            let (stream, cfg) = (ptr::null_mut(), ptr::null_mut());
            code!(aclrtLaunchKernelWithArgsArray(
                vector_add(),
                0,
                stream,
                cfg,
                ptr::null_mut()
            ))
        },
    ),
    // NULL pointers of the commonly used functions, each refused (100000) before a handle is
    // looked up or another argument checked: a stale handle or a bad value beside the NULL
    // shows the order.
    case(
        "info of device 99 into NULL",
        "aclrtGetDeviceInfo",
        100000,
        0,
        || {
            code!(aclrtGetDeviceInfo(
                99,
                ACL_DEV_ATTR_AICORE_CORE_NUM,
                ptr::null_mut()
            ))
        },
    ),
    case(
        "peer of device 99 into NULL",
        "aclrtDeviceCanAccessPeer",
        100000,
        0,
        || code!(aclrtDeviceCanAccessPeer(ptr::null_mut(), 0, 99)),
    ),
    case(
        "destroy NULL context",
        "aclrtDestroyContext",
        100000,
        0,
        || code!(aclrtDestroyContext(ptr::null_mut())),
    ),
    case(
        "status of a destroyed stream into NULL",
        "aclrtStreamQuery",
        100000,
        0,
        || code!(aclrtStreamQuery(destroyed_stream(), ptr::null_mut())),
    ),
    case(
        "create event into NULL",
        "aclrtCreateEvent",
        100000,
        0,
        || code!(aclrtCreateEvent(ptr::null_mut())),
    ),
    case(
        "create event with flag 0 into NULL",
        "aclrtCreateEventWithFlag",
        100000,
        0,
        || code!(aclrtCreateEventWithFlag(ptr::null_mut(), 0)),
    ),
    case(
        "create Ex event with unknown flags into NULL",
        "aclrtCreateEventExWithFlag",
        100000,
        0,
        || code!(aclrtCreateEventExWithFlag(ptr::null_mut(), 0x8000_0000)),
    ),
    case("query NULL event", "aclrtQueryEvent", 100000, 0, || {
        let mut status = 0;
        code!(aclrtQueryEvent(ptr::null_mut(), &mut status))
    }),
    case(
        "status of a destroyed event into NULL",
        "aclrtQueryEventStatus",
        100000,
        0,
        || code!(aclrtQueryEventStatus(destroyed_event(), ptr::null_mut())),
    ),
    case(
        "wait status of NULL event",
        "aclrtQueryEventWaitStatus",
        100000,
        0,
        || {
            let mut status = 0;
            code!(aclrtQueryEventWaitStatus(ptr::null_mut(), &mut status))
        },
    ),
    case(
        "elapsed time of destroyed events into NULL",
        "aclrtEventElapsedTime",
        100000,
        0,
        || {
            let (start, end) = (destroyed_event(), destroyed_event());
            code!(aclrtEventElapsedTime(ptr::null_mut(), start, end))
        },
    ),
    case(
        "elapsed time from NULL to a destroyed event",
        "aclrtEventElapsedTime",
        100000,
        0,
        || {
            let mut ms = 0.0;
            code!(aclrtEventElapsedTime(
                &mut ms,
                ptr::null_mut(),
                destroyed_event()
            ))
        },
    ),
    case(
        "elapsed time from a destroyed event to NULL",
        "aclrtEventElapsedTime",
        100000,
        0,
        || {
            let mut ms = 0.0;
            code!(aclrtEventElapsedTime(
                &mut ms,
                destroyed_event(),
                ptr::null_mut()
            ))
        },
    ),
    case(
        "timestamp of NULL event",
        "aclrtEventGetTimestamp",
        100000,
        0,
        || {
            let mut timestamp = 0;
            code!(aclrtEventGetTimestamp(ptr::null_mut(), &mut timestamp))
        },
    ),
    case(
        "timestamp of a destroyed event into NULL",
        "aclrtEventGetTimestamp",
        100000,
        0,
        || code!(aclrtEventGetTimestamp(destroyed_event(), ptr::null_mut())),
    ),
    case(
        "record NULL event with an unknown flag",
        "aclrtRecordEventWithFlag",
        100000,
        0,
        || {
            code!(aclrtRecordEventWithFlag(
                ptr::null_mut(),
                ptr::null_mut(),
                7
            ))
        },
    ),
    case(
        "wait on NULL event with an unknown flag",
        "aclrtStreamWaitEventWithFlag",
        100000,
        0,
        || {
            code!(aclrtStreamWaitEventWithFlag(
                ptr::null_mut(),
                ptr::null_mut(),
                0,
                7
            ))
        },
    ),
    case("register NULL", "aclrtHostRegister", 100000, 0, || {
        let mut dev = ptr::null_mut();
        code!(aclrtHostRegister(
            ptr::null_mut(),
            4096,
            ACL_HOST_REGISTER_MAPPED,
            &mut dev
        ))
    }),
    case(
        "register misaligned memory into NULL",
        "aclrtHostRegister",
        100000,
        0,
        || {
            let host = pageable(8192);
            code!(aclrtHostRegister(
                host.wrapping_byte_add(1),
                4096,
                ACL_HOST_REGISTER_MAPPED,
                ptr::null_mut()
            ))
        },
    ),
    case("register 0 bytes", "aclrtHostRegister", 100000, 0, || {
        let mut dev = ptr::null_mut();
        let host = pageable(8192).wrapping_byte_add(1);
        code!(aclrtHostRegister(
            host,
            0,
            ACL_HOST_REGISTER_MAPPED,
            &mut dev
        ))
    }),
    case("register V2 NULL", "aclrtHostRegisterV2", 100000, 0, || {
        code!(aclrtHostRegisterV2(ptr::null_mut(), 4096, 0))
    }),
    case(
        "register V2 0 bytes",
        "aclrtHostRegisterV2",
        100000,
        0,
        || code!(aclrtHostRegisterV2(pageable(64), 0, 0)),
    ),
    case(
        "device pointer of NULL with flag 1",
        "aclrtHostGetDevicePointer",
        100000,
        0,
        || {
            let mut dev = ptr::null_mut();
            code!(aclrtHostGetDevicePointer(ptr::null_mut(), &mut dev, 1))
        },
    ),
    case(
        "device pointer of unregistered memory into NULL",
        "aclrtHostGetDevicePointer",
        100000,
        0,
        || code!(aclrtHostGetDevicePointer(pageable(64), ptr::null_mut(), 0)),
    ),
    case("unregister NULL", "aclrtHostUnregister", 100000, 0, || {
        code!(aclrtHostUnregister(ptr::null_mut()))
    }),
    case(
        "capabilities of device 99 into NULL",
        "aclrtHostMemMapCapabilities",
        100000,
        0,
        || {
            code!(aclrtHostMemMapCapabilities(
                99,
                ACL_RT_HAC_TYPE_AIC,
                ptr::null_mut()
            ))
        },
    ),
    case(
        "P2P map of NULL to device 99",
        "aclrtMemP2PMap",
        100000,
        0,
        || code!(aclrtMemP2PMap(ptr::null_mut(), 64, 99, 0)),
    ),
    case("2D copy from NULL", "aclrtMemcpy2d", 100000, 0, || {
        code!(aclrtMemcpy2d(
            malloc(64),
            64,
            ptr::null(),
            64,
            8,
            1,
            ACL_MEMCPY_HOST_TO_DEVICE
        ))
    }),
    case("width > dpitch", "aclrtMemcpy2dAsync", 100000, 0, || {
        let (dst, src) = (malloc(64), malloc_host(64));
        code!(aclrtMemcpy2dAsync(
            dst,
            8,
            src,
            64,
            16,
            1,
            ACL_MEMCPY_HOST_TO_DEVICE,
            ptr::null_mut()
        ))
    }),
    case(
        "offset copy from NULL of kind 8",
        "aclrtMemcpyAsyncWithOffset",
        100000,
        0,
        || {
            let mut dst = malloc(64);
            code!(aclrtMemcpyAsyncWithOffset(
                &mut dst,
                64,
                0,
                ptr::null_mut(),
                8,
                0,
                8,
                ptr::null_mut()
            ))
        },
    ),
    case(
        "entry lookup of NULL binary",
        "aclrtBinaryGetFunctionByEntry",
        100000,
        0,
        || {
            let mut func = ptr::null_mut();
            code!(aclrtBinaryGetFunctionByEntry(ptr::null_mut(), 0, &mut func))
        },
    ),
    case(
        "entry lookup into NULL",
        "aclrtBinaryGetFunctionByEntry",
        100000,
        0,
        || {
            let bin = registry_binary(&[]);
            code!(aclrtBinaryGetFunctionByEntry(bin, 0, ptr::null_mut()))
        },
    ),
    case("unload NULL binary", "aclrtBinaryUnLoad", 100000, 0, || {
        code!(aclrtBinaryUnLoad(ptr::null_mut()))
    }),
    case(
        "name of NULL function",
        "aclrtGetFunctionName",
        100000,
        0,
        || {
            let mut name = [0 as std::ffi::c_char; 64];
            code!(aclrtGetFunctionName(ptr::null_mut(), 64, name.as_mut_ptr()))
        },
    ),
    case(
        "addresses of NULL function",
        "aclrtGetFunctionAddr",
        100000,
        0,
        || {
            let (mut aic, mut aiv) = (ptr::null_mut(), ptr::null_mut());
            code!(aclrtGetFunctionAddr(ptr::null_mut(), &mut aic, &mut aiv))
        },
    ),
    case(
        "param count of NULL function",
        "aclrtFunctionGetParamCount",
        100000,
        0,
        || {
            let mut count = 0;
            code!(aclrtFunctionGetParamCount(ptr::null_mut(), &mut count))
        },
    ),
    case(
        "param info of NULL function",
        "aclrtFunctionGetParamInfo",
        100000,
        0,
        || {
            let (mut offset, mut size) = (0, 0);
            code!(aclrtFunctionGetParamInfo(
                ptr::null_mut(),
                0,
                &mut offset,
                &mut size
            ))
        },
    ),
    case(
        "CPU function of NULL binary",
        "aclrtRegisterCpuFunc",
        100000,
        0,
        || {
            let name = c_string("f");
            let mut func = ptr::null_mut();
            code!(aclrtRegisterCpuFunc(
                ptr::null_mut(),
                name.as_ptr(),
                name.as_ptr(),
                &mut func
            ))
        },
    ),
    case(
        "CPU function of an unloaded binary into NULL",
        "aclrtRegisterCpuFunc",
        100000,
        0,
        || {
            let bin = registry_binary(&[]);
            acl!(aclrtBinaryUnLoad(bin));
            let name = c_string("f");
            code!(aclrtRegisterCpuFunc(
                bin,
                name.as_ptr(),
                name.as_ptr(),
                ptr::null_mut()
            ))
        },
    ),
    case(
        "args array launch of NULL function",
        "aclrtLaunchKernelWithArgsArray",
        100000,
        0,
        || {
            let mut word = 0u64;
            let mut args: [*mut c_void; 1] = [(&raw mut word).cast()];
            code!(aclrtLaunchKernelWithArgsArray(
                ptr::null_mut(),
                1,
                ptr::null_mut(),
                ptr::null_mut(),
                args.as_mut_ptr()
            ))
        },
    ),
    case(
        "config launch of NULL function",
        "aclrtLaunchKernelWithConfig",
        100000,
        0,
        || {
            let args = finalized_args(add_one());
            launch_built(ptr::null_mut(), 1, args, ptr::null_mut())
        },
    ),
    case(
        "append into NULL",
        "aclrtKernelArgsAppend",
        100000,
        0,
        || {
            let (args, _, _) = args_with_a_value_and_a_placeholder();
            let mut value = 0u64;
            code!(aclrtKernelArgsAppend(
                args,
                (&raw mut value).cast(),
                8,
                ptr::null_mut()
            ))
        },
    ),
    case("append 0 bytes", "aclrtKernelArgsAppend", 100000, 0, || {
        let (args, _, _) = args_with_a_value_and_a_placeholder();
        let (mut value, mut param) = (0u64, ptr::null_mut());
        code!(aclrtKernelArgsAppend(
            args,
            (&raw mut value).cast(),
            0,
            &mut param
        ))
    }),
    case(
        "placeholder of NULL args",
        "aclrtKernelArgsAppendPlaceHolder",
        100000,
        0,
        || {
            let mut param = ptr::null_mut();
            code!(aclrtKernelArgsAppendPlaceHolder(
                ptr::null_mut(),
                &mut param
            ))
        },
    ),
    case(
        "placeholder into NULL",
        "aclrtKernelArgsAppendPlaceHolder",
        100000,
        0,
        || {
            let (args, _, _) = args_with_a_value_and_a_placeholder();
            code!(aclrtKernelArgsAppendPlaceHolder(args, ptr::null_mut()))
        },
    ),
    case(
        "placeholder buffer of 0 bytes",
        "aclrtKernelArgsGetPlaceHolderBuffer",
        100000,
        0,
        || {
            let (args, _, holder) = args_with_a_value_and_a_placeholder();
            let mut buffer = ptr::null_mut();
            code!(aclrtKernelArgsGetPlaceHolderBuffer(
                args,
                holder,
                0,
                &mut buffer
            ))
        },
    ),
    case(
        "placeholder buffer of NULL args",
        "aclrtKernelArgsGetPlaceHolderBuffer",
        100000,
        0,
        || {
            let (_, _, holder) = args_with_a_value_and_a_placeholder();
            let mut buffer = ptr::null_mut();
            code!(aclrtKernelArgsGetPlaceHolderBuffer(
                ptr::null_mut(),
                holder,
                8,
                &mut buffer
            ))
        },
    ),
    case(
        "placeholder buffer of a NULL placeholder",
        "aclrtKernelArgsGetPlaceHolderBuffer",
        100000,
        0,
        || {
            let (args, _, _) = args_with_a_value_and_a_placeholder();
            let mut buffer = ptr::null_mut();
            code!(aclrtKernelArgsGetPlaceHolderBuffer(
                args,
                ptr::null_mut(),
                8,
                &mut buffer
            ))
        },
    ),
    case(
        "update to 0 bytes",
        "aclrtKernelArgsParaUpdate",
        100000,
        0,
        || {
            let (args, param, _) = args_with_a_value_and_a_placeholder();
            let mut value = 0u64;
            code!(aclrtKernelArgsParaUpdate(
                args,
                param,
                (&raw mut value).cast(),
                0
            ))
        },
    ),
    case(
        "update a NULL parameter",
        "aclrtKernelArgsParaUpdate",
        100000,
        0,
        || {
            let (args, _, _) = args_with_a_value_and_a_placeholder();
            let mut value = 0u64;
            code!(aclrtKernelArgsParaUpdate(
                args,
                ptr::null_mut(),
                (&raw mut value).cast(),
                8
            ))
        },
    ),
    case(
        "handle size of NULL function",
        "aclrtKernelArgsGetHandleMemSize",
        100000,
        0,
        || {
            let mut size = 0;
            code!(aclrtKernelArgsGetHandleMemSize(ptr::null_mut(), &mut size))
        },
    ),
    case(
        "args size of NULL function",
        "aclrtKernelArgsGetMemSize",
        100000,
        0,
        || {
            let mut size = 0;
            code!(aclrtKernelArgsGetMemSize(ptr::null_mut(), 8, &mut size))
        },
    ),
    case(
        "init for NULL function",
        "aclrtKernelArgsInitByUserMem",
        100000,
        0,
        || {
            let mut memory = [0u64; 16];
            let base: *mut c_void = memory.as_mut_ptr().cast();
            code!(aclrtKernelArgsInitByUserMem(
                ptr::null_mut(),
                base,
                base.wrapping_byte_add(8),
                64
            ))
        },
    ),
];

static PARAM_INVALID: &[Case] = &[
    case("count > destMax", "aclrtMemcpy", 107000, 0, || {
        let (d, h) = (malloc(16), malloc_host(16));
        code!(aclrtMemcpy(d, 8, h, 16, ACL_MEMCPY_HOST_TO_DEVICE))
    }),
    case("count > maxCount", "aclrtMemsetAsync", 107000, 0, || {
        code!(aclrtMemsetAsync(malloc(16), 8, 0, 16, ptr::null_mut()))
    }),
    case("count > maxCount", "aclrtMemset", 107000, 0, || {
        code!(aclrtMemset(malloc(16), 8, 0, 16))
    }),
    case("height over 5242880", "aclrtMemcpy2d", 107000, 0, || {
        let (d, h) = (malloc(64), malloc_host(64));
        code!(aclrtMemcpy2d(
            d,
            1,
            h,
            1,
            1,
            5 * 1024 * 1024 + 1,
            ACL_MEMCPY_HOST_TO_DEVICE
        ))
    }),
    case("width over 5000000", "aclrtMemcpy2d", 107000, 0, || {
        let (d, h) = (malloc(64), malloc_host(64));
        code!(aclrtMemcpy2d(
            d,
            5_000_001,
            h,
            5_000_001,
            5_000_001,
            1,
            ACL_MEMCPY_HOST_TO_DEVICE
        ))
    }),
    case(
        "stream timeout 0",
        "aclrtSynchronizeStreamWithTimeout",
        107000,
        0,
        || code!(aclrtSynchronizeStreamWithTimeout(ptr::null_mut(), 0)),
    ),
    case(
        "stream timeout -2",
        "aclrtSynchronizeStreamWithTimeout",
        107000,
        0,
        || code!(aclrtSynchronizeStreamWithTimeout(ptr::null_mut(), -2)),
    ),
    case(
        "event timeout 0",
        "aclrtSynchronizeEventWithTimeout",
        107000,
        0,
        || code!(aclrtSynchronizeEventWithTimeout(create_event(), 0)),
    ),
    case(
        "device timeout 0",
        "aclrtSynchronizeDeviceWithTimeout",
        107000,
        0,
        || code!(aclrtSynchronizeDeviceWithTimeout(0)),
    ),
    case(
        "event flag 0",
        "aclrtCreateEventWithFlag",
        107000,
        0,
        || {
            let mut e = ptr::null_mut();
            code!(aclrtCreateEventWithFlag(&mut e, 0))
        },
    ),
    case(
        "unknown event flag",
        "aclrtCreateEventWithFlag",
        107000,
        0,
        || {
            let mut e = ptr::null_mut();
            code!(aclrtCreateEventWithFlag(&mut e, 0x80))
        },
    ),
    case(
        "exclusive event flag combined",
        "aclrtCreateEventExWithFlag",
        107000,
        0,
        || {
            let mut e = ptr::null_mut();
            code!(aclrtCreateEventExWithFlag(
                &mut e,
                ACL_EVENT_IPC | ACL_EVENT_SYNC
            ))
        },
    ),
    case(
        "destroyed context",
        "aclrtSetCurrentContext",
        107017,
        0,
        || {
            let mut ctx = ptr::null_mut();
            acl!(aclrtCreateContext(&mut ctx, 0));
            acl!(aclrtDestroyContext(ctx));
            code!(aclrtSetCurrentContext(ctx))
        },
    ),
    case(
        "kind contradicts pageable pointers",
        "aclrtMemcpyAsync",
        107000,
        0,
        || {
            let (mut a, b) = ([0u8; 8], [0u8; 8]);
            code!(aclrtMemcpyAsync(
                a.as_mut_ptr().cast(),
                8,
                b.as_ptr().cast(),
                8,
                ACL_MEMCPY_HOST_TO_DEVICE,
                ptr::null_mut()
            ))
        },
    ),
    case("past the allocation", "aclrtMemcpy", 107000, 0, || {
        let d = malloc(64);
        let h = vec![0u8; 4096];
        code!(aclrtMemcpy(
            d,
            4096,
            h.as_ptr().cast(),
            4096,
            ACL_MEMCPY_HOST_TO_DEVICE
        ))
    }),
    case(
        "register misaligned",
        "aclrtHostRegister",
        107000,
        0,
        || {
            let mut d = ptr::null_mut();
            let p = pageable(1 << 16).cast::<u8>().wrapping_add(8).cast();
            code!(aclrtHostRegister(p, 4096, ACL_HOST_REGISTER_MAPPED, &mut d))
        },
    ),
    case(
        "register device memory",
        "aclrtHostRegister",
        107000,
        0,
        || {
            let mut d = ptr::null_mut();
            code!(aclrtHostRegister(
                malloc(8192),
                4096,
                ACL_HOST_REGISTER_MAPPED,
                &mut d
            ))
        },
    ),
    case(
        "register into device memory",
        "aclrtHostRegisterV2",
        107000,
        0,
        || {
            let inside = malloc(8192).cast::<u8>().wrapping_add(100).cast();
            code!(aclrtHostRegisterV2(inside, 4096, ACL_HOST_REG_MAPPED))
        },
    ),
    case(
        "register freed memory",
        "aclrtHostRegisterV2",
        107000,
        0,
        || {
            code!(aclrtHostRegisterV2(
                freed_device_address(64),
                64,
                ACL_HOST_REG_PINNED
            ))
        },
    ),
    // The range is an argument: checked before the type and before the (missing) context.
    case(
        "register past the address space with a reserved type",
        "aclrtHostRegister",
        107000,
        0,
        || {
            let mut d = ptr::null_mut();
            let size = (usize::MAX - 4095) as u64;
            code!(aclrtHostRegister(pageable(1 << 16), size, 0x1, &mut d))
        },
    ),
    case(
        "register past the address space without a context",
        "aclrtHostRegister",
        107000,
        -1,
        || {
            let mut d = ptr::null_mut();
            let size = (usize::MAX - 4095) as u64;
            let mapped = ACL_HOST_REGISTER_MAPPED;
            code!(aclrtHostRegister(pageable(1 << 16), size, mapped, &mut d))
        },
    ),
    case(
        "register over isize::MAX without a context",
        "aclrtHostRegisterV2",
        107000,
        -1,
        || {
            code!(aclrtHostRegisterV2(
                pageable(1 << 16),
                1 << 63,
                ACL_HOST_REG_MAPPED
            ))
        },
    ),
    case("register flag 0", "aclrtHostRegisterV2", 107000, 0, || {
        code!(aclrtHostRegisterV2(pageable(1 << 16), 4096, 0))
    }),
    case(
        "register unknown flag",
        "aclrtHostRegisterV2",
        107000,
        0,
        || code!(aclrtHostRegisterV2(pageable(1 << 16), 4096, 0x40)),
    ),
    case(
        "engine 10",
        "aclrtHostMemMapCapabilities",
        107000,
        0,
        || {
            let mut cap = 0;
            code!(aclrtHostMemMapCapabilities(0, 10, &mut cap))
        },
    ),
    case("unknown attribute", "aclrtGetDeviceInfo", 107000, 0, || {
        let mut v = 0;
        code!(aclrtGetDeviceInfo(0, 9999, &mut v))
    }),
    case(
        "args not device memory",
        "aclrtLaunchKernel",
        107000,
        0,
        || {
            let h = malloc_host(64);
            code!(aclrtLaunchKernel(add_one(), 1, h, 8, ptr::null_mut()))
        },
    ),
    case(
        "placeholder out of range",
        "aclrtLaunchKernelWithHostArgs",
        107000,
        0,
        || {
            let mut args = [0u64; 2];
            let mut holder = aclrtPlaceHolderInfo {
                addrOffset: 12,
                dataOffset: 0,
            };
            code!(aclrtLaunchKernelWithHostArgs(
                add_one(),
                1,
                ptr::null_mut(),
                ptr::null_mut(),
                args.as_mut_ptr().cast(),
                16,
                &mut holder,
                1
            ))
        },
    ),
    case(
        "args shorter than the kernel declares",
        "aclrtLaunchKernelWithHostArgs",
        107000,
        0,
        || {
            let add = function(registry_binary(&[]), npu_sim::kernel::VECTOR_ADD_F32);
            let mut args = [0u64; 2];
            code!(aclrtLaunchKernelWithHostArgs(
                add,
                1,
                ptr::null_mut(),
                ptr::null_mut(),
                args.as_mut_ptr().cast(),
                16,
                ptr::null_mut(),
                0
            ))
        },
    ),
    case(
        "args not finalized",
        "aclrtLaunchKernelWithConfig",
        107000,
        0,
        || {
            let func = add_one();
            let mut args = ptr::null_mut();
            acl!(aclrtKernelArgsInit(func, &mut args));
            launch_built(func, 1, args, ptr::null_mut())
        },
    ),
    case(
        "config launch with another function's args",
        "aclrtLaunchKernelWithConfig",
        107000,
        0,
        || {
            // add_one() resolves the kernel from a binary of its own each time: two functions.
            let args = finalized_args(add_one());
            launch_built(add_one(), 1, args, ptr::null_mut())
        },
    ),
    case(
        "placeholder buffer of a value",
        "aclrtKernelArgsGetPlaceHolderBuffer",
        107000,
        0,
        || {
            let (args, value, _) = args_with_a_value_and_a_placeholder();
            let mut buffer = ptr::null_mut();
            code!(aclrtKernelArgsGetPlaceHolderBuffer(
                args,
                value,
                8,
                &mut buffer
            ))
        },
    ),
    case(
        "update a placeholder",
        "aclrtKernelArgsParaUpdate",
        107000,
        0,
        || {
            let (args, _, holder) = args_with_a_value_and_a_placeholder();
            let mut value = 0u64;
            code!(aclrtKernelArgsParaUpdate(
                args,
                holder,
                (&raw mut value).cast(),
                8
            ))
        },
    ),
    case(
        "update a parameter of other args",
        "aclrtKernelArgsParaUpdate",
        107000,
        0,
        || {
            let (args, _, _) = args_with_a_value_and_a_placeholder();
            let (_, theirs, _) = args_with_a_value_and_a_placeholder();
            let mut value = 0u64;
            code!(aclrtKernelArgsParaUpdate(
                args,
                theirs,
                (&raw mut value).cast(),
                8
            ))
        },
    ),
    case(
        "update size mismatch",
        "aclrtKernelArgsParaUpdate",
        107000,
        0,
        || {
            let mut args = ptr::null_mut();
            acl!(aclrtKernelArgsInit(add_one(), &mut args));
            let (mut value, mut param) = (0u64, ptr::null_mut());
            acl!(aclrtKernelArgsAppend(
                args,
                (&raw mut value).cast(),
                8,
                &mut param
            ));
            let mut small = 0u32;
            code!(aclrtKernelArgsParaUpdate(
                args,
                param,
                (&raw mut small).cast(),
                4
            ))
        },
    ),
    case(
        "more than 128 params",
        "aclrtKernelArgsAppend",
        107000,
        0,
        || {
            let mut args = ptr::null_mut();
            acl!(aclrtKernelArgsInit(add_one(), &mut args));
            let (mut value, mut param) = (0u32, ptr::null_mut());
            for _ in 0..128 {
                acl!(aclrtKernelArgsAppend(
                    args,
                    (&raw mut value).cast(),
                    4,
                    &mut param
                ));
            }
            code!(aclrtKernelArgsAppend(
                args,
                (&raw mut value).cast(),
                4,
                &mut param
            ))
        },
    ),
    case(
        "destroy the default stream",
        "aclrtDestroyStream",
        107000,
        0,
        || {
            let mut s = ptr::null_mut();
            acl!(aclrtCtxGetCurrentDefaultStream(&mut s));
            code!(aclrtDestroyStream(s))
        },
    ),
    case(
        "garbage binary",
        "aclrtBinaryLoadFromData",
        107000,
        0,
        || {
            let mut bin = ptr::null_mut();
            let data = *b"not a kernel binary";
            code!(aclrtBinaryLoadFromData(
                data.as_ptr().cast(),
                data.len(),
                ptr::null(),
                &mut bin
            ))
        },
    ),
    case(
        "DEVICE_ID of another device",
        "aclrtMallocWithCfg",
        107000,
        0,
        || {
            with_another_device(|cfg| {
                let mut p = ptr::null_mut();
                code!(aclrtMallocWithCfg(&mut p, 64, 0, cfg))
            })
        },
    ),
    case(
        "host DEVICE_ID of another device",
        "aclrtMallocHostWithCfg",
        107000,
        0,
        || {
            with_another_device(|cfg| {
                let mut p = ptr::null_mut();
                code!(aclrtMallocHostWithCfg(&mut p, 64, cfg))
            })
        },
    ),
    case(
        "elapsed end before start",
        "aclrtEventElapsedTime",
        107007,
        0,
        || {
            let (end, start) = (create_event(), create_event());
            let d = malloc(1 << 20);
            acl!(aclrtRecordEvent(end, ptr::null_mut()));
            acl!(aclrtMemsetAsync(d, 1 << 20, 1, 1 << 20, ptr::null_mut()));
            acl!(aclrtRecordEvent(start, ptr::null_mut()));
            acl!(aclrtSynchronizeStream(ptr::null_mut()));
            let mut ms = 0.0;
            code!(aclrtEventElapsedTime(&mut ms, start, end))
        },
    ),
    case(
        "an ELF header and nothing loadable",
        "aclrtBinaryLoadFromData",
        107000,
        0,
        || {
            let mut bin = ptr::null_mut();
            let data = *b"\x7fELF and then no shared object";
            code!(aclrtBinaryLoadFromData(
                data.as_ptr().cast(),
                data.len(),
                ptr::null(),
                &mut bin
            ))
        },
    ),
    case(
        "load described garbage",
        "aclrtBinaryLoad",
        107000,
        0,
        || {
            let data = *b"not a kernel binary";
            let binary = describe(&data);
            let mut bin = ptr::null_mut();
            code!(aclrtBinaryLoad(binary, &mut bin))
        },
    ),
    case(
        "name longer than maxLen",
        "aclrtGetFunctionName",
        107000,
        0,
        || {
            // "add_one_u32" needs 12 bytes with its NUL.
            let mut name = [0 as core::ffi::c_char; 11];
            code!(aclrtGetFunctionName(add_one(), 11, name.as_mut_ptr()))
        },
    ),
    case(
        "V2 args not device memory",
        "aclrtLaunchKernelV2",
        107000,
        0,
        || {
            let (h, cfg) = (malloc_host(64), ptr::null_mut());
            code!(aclrtLaunchKernelV2(
                add_one(),
                1,
                h,
                8,
                cfg,
                ptr::null_mut()
            ))
        },
    ),
    case(
        "V2 schedule mode 2",
        "aclrtLaunchKernelV2",
        107000,
        0,
        || {
            launch_v2_with(ACL_RT_LAUNCH_KERNEL_ATTR_SCHEM_MODE, |value| {
                value.schemMode = 2
            })
        },
    ),
    case(
        "V2 prefetch switch 2",
        "aclrtLaunchKernelV2",
        107000,
        0,
        || {
            launch_v2_with(ACL_RT_LAUNCH_KERNEL_ATTR_BLOCK_TASK_PREFETCH, |value| {
                value.isBlockTaskPrefetch = 2;
            })
        },
    ),
    case("V2 dump switch 2", "aclrtLaunchKernelV2", 107000, 0, || {
        launch_v2_with(ACL_RT_LAUNCH_KERNEL_ATTR_DATA_DUMP, |value| {
            value.isDataDump = 2
        })
    }),
    case(
        "V2 dynamic UB of a SIMD kernel",
        "aclrtLaunchKernelV2",
        107000,
        0,
        || {
            launch_v2_with(ACL_RT_LAUNCH_KERNEL_ATTR_DYN_UBUF_SIZE, |value| {
                value.dynUBufSize = 1024;
            })
        },
    ),
    case("V2 engine 10", "aclrtLaunchKernelV2", 107000, 0, || {
        launch_v2_with(ACL_RT_LAUNCH_KERNEL_ATTR_ENGINE_TYPE, |value| {
            value.engineType = 10;
        })
    }),
    case(
        "ubuf flags 1",
        "aclrtFunctionGetAvailDynUbufPerBlock",
        107000,
        0,
        || {
            let mut size = 0;
            code!(aclrtFunctionGetAvailDynUbufPerBlock(
                add_one(),
                1,
                &mut size
            ))
        },
    ),
    case(
        "CPU function of a simulated binary",
        "aclrtRegisterCpuFunc",
        107000,
        0,
        || {
            let bin = registry_binary(&["add_one_u32"]);
            let (entry, op) = (c_string("RunCpuKernel"), c_string("AddOne"));
            let mut func = ptr::null_mut();
            code!(aclrtRegisterCpuFunc(
                bin,
                entry.as_ptr(),
                op.as_ptr(),
                &mut func
            ))
        },
    ),
    case(
        "args array without a parameter list",
        "aclrtLaunchKernelWithArgsArray",
        107000,
        0,
        || {
            let mut word = 0u64;
            let mut args: [*mut c_void; 1] = [(&raw mut word).cast()];
            let (stream, cfg) = (ptr::null_mut(), ptr::null_mut());
            code!(aclrtLaunchKernelWithArgsArray(
                add_one(),
                1,
                stream,
                cfg,
                args.as_mut_ptr()
            ))
        },
    ),
    case(
        "a value's size over isize::MAX",
        "aclrtKernelArgsAppend",
        107000,
        0,
        || {
            let (args, _, _) = args_with_a_value_and_a_placeholder();
            let (mut value, mut param) = (0u64, ptr::null_mut());
            code!(aclrtKernelArgsAppend(
                args,
                (&raw mut value).cast(),
                IMPOSSIBLE,
                &mut param
            ))
        },
    ),
    case(
        "an update's size over isize::MAX",
        "aclrtKernelArgsParaUpdate",
        107000,
        0,
        || {
            let (args, param, _) = args_with_a_value_and_a_placeholder();
            let mut value = 0u64;
            code!(aclrtKernelArgsParaUpdate(
                args,
                param,
                (&raw mut value).cast(),
                IMPOSSIBLE
            ))
        },
    ),
    case(
        "a binary's length over isize::MAX",
        "aclrtBinaryLoadFromData",
        107000,
        0,
        || {
            let (mut bin, data) = (ptr::null_mut(), [0u8; 8]);
            code!(aclrtBinaryLoadFromData(
                data.as_ptr().cast(),
                IMPOSSIBLE,
                ptr::null(),
                &mut bin
            ))
        },
    ),
];

static CONTEXTS_AND_HANDLES: &[Case] = &[
    case("device 99", "aclrtSetDevice", 107001, -1, || {
        code!(aclrtSetDevice(99))
    }),
    case("device -1", "aclrtCreateContext", 107001, -1, || {
        let mut ctx = ptr::null_mut();
        code!(aclrtCreateContext(&mut ctx, -1))
    }),
    case(
        "info of device 99",
        "aclrtGetDeviceInfo",
        107001,
        -1,
        || {
            let mut v = 0;
            code!(aclrtGetDeviceInfo(99, ACL_DEV_ATTR_AICORE_CORE_NUM, &mut v))
        },
    ),
    case("no context", "aclrtGetDevice", 107002, -1, || {
        let mut d = 0;
        code!(aclrtGetDevice(&mut d))
    }),
    case("no context", "aclrtMalloc", 107002, -1, || {
        let mut p = ptr::null_mut();
        code!(aclrtMalloc(&mut p, 64, 0))
    }),
    case("no context", "aclrtCreateStream", 107002, -1, || {
        let mut s = ptr::null_mut();
        code!(aclrtCreateStream(&mut s))
    }),
    case("no context", "aclrtSynchronizeStream", 107002, -1, || {
        code!(aclrtSynchronizeStream(ptr::null_mut()))
    }),
    case(
        "status of device 99",
        "aclrtQueryDeviceStatus",
        107001,
        -1,
        || {
            let mut status = ACL_RT_DEVICE_STATUS_NORMAL;
            code!(aclrtQueryDeviceStatus(99, &mut status))
        },
    ),
    case(
        "disable peer 99",
        "aclrtDeviceDisablePeerAccess",
        107001,
        0,
        || code!(aclrtDeviceDisablePeerAccess(99)),
    ),
    case(
        "no context",
        "aclrtDeviceDisablePeerAccess",
        107002,
        -1,
        || code!(aclrtDeviceDisablePeerAccess(1)),
    ),
    case("no context", "aclrtGetCurrentContext", 107002, -1, || {
        let mut ctx = ptr::null_mut();
        code!(aclrtGetCurrentContext(&mut ctx))
    }),
    case(
        "no context",
        "aclrtCtxGetCurrentDefaultStream",
        107002,
        -1,
        || {
            let mut s = ptr::null_mut();
            code!(aclrtCtxGetCurrentDefaultStream(&mut s))
        },
    ),
    case(
        "no context",
        "aclrtCreateStreamWithConfig",
        107002,
        -1,
        || {
            let mut s = ptr::null_mut();
            code!(aclrtCreateStreamWithConfig(
                &mut s,
                0,
                ACL_STREAM_FAST_LAUNCH
            ))
        },
    ),
    case("no context", "aclrtGetMemInfo", 107002, -1, || {
        let (mut free, mut total) = (0, 0);
        code!(aclrtGetMemInfo(ACL_HBM_MEM, &mut free, &mut total))
    }),
    case("no context", "aclrtMallocAlign32", 107002, -1, || {
        let mut p = ptr::null_mut();
        code!(aclrtMallocAlign32(&mut p, 64, 0))
    }),
    case(
        "priority of a stale stream",
        "aclrtStreamGetPriority",
        107017,
        0,
        || {
            let mut priority = 0;
            code!(aclrtStreamGetPriority(destroyed_stream(), &mut priority))
        },
    ),
    case(
        "flags of a stale stream",
        "aclrtStreamGetFlags",
        107017,
        0,
        || {
            let mut flags = 0;
            code!(aclrtStreamGetFlags(destroyed_stream(), &mut flags))
        },
    ),
    case(
        "id of a stale stream",
        "aclrtStreamGetId",
        107017,
        0,
        || {
            let mut id = 0;
            code!(aclrtStreamGetId(destroyed_stream(), &mut id))
        },
    ),
    case(
        "destroy the primary context",
        "aclrtDestroyContext",
        107002,
        0,
        || {
            let mut ctx = ptr::null_mut();
            acl!(aclrtGetCurrentContext(&mut ctx));
            code!(aclrtDestroyContext(ctx))
        },
    ),
    case(
        "wrong stream context",
        "aclrtMemcpyAsync",
        107003,
        0,
        || {
            let s = stream_of_other_context();
            let (d, h) = (malloc(64), malloc_host(64));
            code!(aclrtMemcpyAsync(d, 64, h, 64, ACL_MEMCPY_HOST_TO_DEVICE, s))
        },
    ),
    case(
        "wrong stream context",
        "aclrtLaunchKernel",
        107003,
        0,
        || {
            let func = add_one();
            let s = stream_of_other_context();
            code!(aclrtLaunchKernel(func, 1, ptr::null(), 0, s))
        },
    ),
    case(
        "wrong stream context",
        "aclrtDestroyStream",
        107003,
        0,
        || code!(aclrtDestroyStream(stream_of_other_context())),
    ),
    case(
        "wrong stream context",
        "aclrtLaunchHostFunc",
        107003,
        0,
        || {
            unsafe extern "C" fn f(_: *mut c_void) {}
            code!(aclrtLaunchHostFunc(
                stream_of_other_context(),
                Some(f),
                ptr::null_mut()
            ))
        },
    ),
    case(
        "event of another device",
        "aclrtRecordEvent",
        107003,
        0,
        || {
            set_device(1);
            let event = create_event();
            set_device(0);
            code!(aclrtRecordEvent(event, ptr::null_mut()))
        },
    ),
    // Two handles are looked up in the order the parameters name them: the event first for a
    // record or reset, the stream first for a wait.
    case(
        "record a destroyed event on a foreign stream",
        "aclrtRecordEvent",
        107017,
        0,
        || {
            code!(aclrtRecordEvent(
                destroyed_event(),
                stream_of_other_context()
            ))
        },
    ),
    case(
        "flagged record of a destroyed event on a foreign stream",
        "aclrtRecordEventWithFlag",
        107017,
        0,
        || {
            code!(aclrtRecordEventWithFlag(
                destroyed_event(),
                stream_of_other_context(),
                ACL_EVENT_RECORD_DEFAULT
            ))
        },
    ),
    case(
        "reset a destroyed event on a foreign stream",
        "aclrtResetEvent",
        107017,
        0,
        || {
            code!(aclrtResetEvent(
                destroyed_event(),
                stream_of_other_context()
            ))
        },
    ),
    case(
        "a foreign stream waits for a destroyed event",
        "aclrtStreamWaitEvent",
        107003,
        0,
        || {
            code!(aclrtStreamWaitEvent(
                stream_of_other_context(),
                destroyed_event()
            ))
        },
    ),
    case(
        "a foreign stream waits with a timeout for a destroyed event",
        "aclrtStreamWaitEventWithTimeout",
        107003,
        0,
        || {
            code!(aclrtStreamWaitEventWithTimeout(
                stream_of_other_context(),
                destroyed_event(),
                0
            ))
        },
    ),
    case(
        "a foreign stream's flagged wait for a destroyed event",
        "aclrtStreamWaitEventWithFlag",
        107003,
        0,
        || {
            code!(aclrtStreamWaitEventWithFlag(
                stream_of_other_context(),
                destroyed_event(),
                0,
                ACL_EVENT_WAIT_DEFAULT
            ))
        },
    ),
    case(
        "record a destroyed notify on a foreign stream",
        "aclrtRecordNotify",
        107017,
        0,
        || {
            code!(aclrtRecordNotify(
                destroyed_notify(),
                stream_of_other_context()
            ))
        },
    ),
    case(
        "wait for a destroyed notify on a foreign stream",
        "aclrtWaitAndResetNotify",
        107017,
        0,
        || {
            code!(aclrtWaitAndResetNotify(
                destroyed_notify(),
                stream_of_other_context(),
                0
            ))
        },
    ),
    case("stale stream", "aclrtMemsetAsync", 107017, 0, || {
        code!(aclrtMemsetAsync(malloc(64), 64, 0, 64, destroyed_stream()))
    }),
    // Nothing to do does not excuse a stale stream: every stream function refuses it (these
    // returned 0 before the stream was looked up).
    case(
        "0 bytes on a stale stream",
        "aclrtMemsetAsync",
        107017,
        0,
        || code!(aclrtMemsetAsync(malloc(64), 64, 0, 0, destroyed_stream())),
    ),
    case(
        "0 words on a stale stream",
        "aclrtMemsetD32Async",
        107017,
        0,
        || {
            code!(aclrtMemsetD32Async(
                malloc(64),
                64,
                0,
                0,
                destroyed_stream()
            ))
        },
    ),
    case(
        "0 bytes on a stale stream",
        "aclrtMemcpyAsync",
        107017,
        0,
        || {
            let dev = malloc(64);
            code!(aclrtMemcpyAsync(
                dev,
                64,
                malloc(64),
                0,
                ACL_MEMCPY_DEVICE_TO_DEVICE,
                destroyed_stream()
            ))
        },
    ),
    case(
        "0 rows on a stale stream",
        "aclrtMemcpy2dAsync",
        107017,
        0,
        || {
            let dev = malloc(64);
            code!(aclrtMemcpy2dAsync(
                dev,
                64,
                malloc(64),
                64,
                64,
                0,
                ACL_MEMCPY_DEVICE_TO_DEVICE,
                destroyed_stream()
            ))
        },
    ),
    case(
        "0 bytes by offset on a stale stream",
        "aclrtMemcpyAsyncWithOffset",
        107017,
        0,
        || {
            let (dst, src) = (malloc(8), malloc(8));
            code!(aclrtMemcpyAsyncWithOffset(
                dst.cast(),
                64,
                0,
                src.cast(),
                0,
                0,
                ACL_MEMCPY_INNER_DEVICE_TO_DEVICE,
                destroyed_stream()
            ))
        },
    ),
    case(
        "0 bytes on another context's stream",
        "aclrtMemsetAsync",
        107003,
        0,
        || {
            code!(aclrtMemsetAsync(
                malloc(64),
                64,
                0,
                0,
                stream_of_other_context()
            ))
        },
    ),
    case("stale stream", "aclrtSynchronizeStream", 107017, 0, || {
        code!(aclrtSynchronizeStream(destroyed_stream()))
    }),
    case("garbage event", "aclrtQueryEventStatus", 107017, 0, || {
        let mut st = 0;
        code!(aclrtQueryEventStatus(0x1234 as aclrtEvent, &mut st))
    }),
    case(
        "event passed as stream",
        "aclrtStreamQuery",
        107017,
        0,
        || {
            let mut st = 0;
            code!(aclrtStreamQuery(create_event(), &mut st))
        },
    ),
    case("stale context", "aclrtDestroyContext", 107017, 0, || {
        let mut ctx = ptr::null_mut();
        acl!(aclrtCreateContext(&mut ctx, 0));
        acl!(aclrtDestroyContext(ctx));
        code!(aclrtDestroyContext(ctx))
    }),
    case(
        "function of an unloaded binary",
        "aclrtLaunchKernel",
        107017,
        0,
        || {
            let bin = registry_binary(&["add_one_u32"]);
            let func = function(bin, "add_one_u32");
            acl!(aclrtBinaryUnLoad(bin));
            code!(aclrtLaunchKernel(func, 1, ptr::null(), 0, ptr::null_mut()))
        },
    ),
    case("stale event", "aclrtDestroyEvent", 107017, 0, || {
        let e = create_event();
        acl!(aclrtDestroyEvent(e));
        code!(aclrtDestroyEvent(e))
    }),
    case(
        "destroy a binary twice",
        "aclrtDestroyBinary",
        107017,
        0,
        || {
            let image = registry_image();
            let binary = describe(&image);
            acl!(aclrtDestroyBinary(binary));
            code!(aclrtDestroyBinary(binary))
        },
    ),
    case(
        "load a destroyed binary",
        "aclrtBinaryLoad",
        107017,
        0,
        || {
            let image = registry_image();
            let binary = describe(&image);
            acl!(aclrtDestroyBinary(binary));
            let mut bin = ptr::null_mut();
            code!(aclrtBinaryLoad(binary, &mut bin))
        },
    ),
    case(
        "load without context",
        "aclrtBinaryLoad",
        107002,
        -1,
        || {
            let image = registry_image();
            let binary = describe(&image);
            let mut bin = ptr::null_mut();
            code!(aclrtBinaryLoad(binary, &mut bin))
        },
    ),
    case(
        "name of a function of an unloaded binary",
        "aclrtGetFunctionName",
        107017,
        0,
        || {
            let bin = registry_binary(&["add_one_u32"]);
            let func = function(bin, "add_one_u32");
            acl!(aclrtBinaryUnLoad(bin));
            let mut name = [0 as core::ffi::c_char; 64];
            code!(aclrtGetFunctionName(func, 64, name.as_mut_ptr()))
        },
    ),
    case(
        "address of a binary handle",
        "aclrtGetFunctionAddr",
        107017,
        0,
        || {
            let bin = registry_binary(&["add_one_u32"]);
            let (mut aic, mut aiv) = (ptr::null_mut(), ptr::null_mut());
            code!(aclrtGetFunctionAddr(bin, &mut aic, &mut aiv))
        },
    ),
    case(
        "args handle size of an unloaded function",
        "aclrtKernelArgsGetHandleMemSize",
        107017,
        0,
        || {
            let bin = registry_binary(&["add_one_u32"]);
            let func = function(bin, "add_one_u32");
            acl!(aclrtBinaryUnLoad(bin));
            let mut size = 0;
            code!(aclrtKernelArgsGetHandleMemSize(func, &mut size))
        },
    ),
    case(
        "init args of an unloaded function",
        "aclrtKernelArgsInitByUserMem",
        107017,
        0,
        || {
            let bin = registry_binary(&["add_one_u32"]);
            let func = function(bin, "add_one_u32");
            acl!(aclrtBinaryUnLoad(bin));
            let (mut handle, mut memory) = (0u64, [0u64; 4]);
            let handle = (&raw mut handle).cast();
            code!(aclrtKernelArgsInitByUserMem(
                func,
                handle,
                memory.as_mut_ptr().cast(),
                32
            ))
        },
    ),
    case(
        "CPU function of an unloaded binary",
        "aclrtRegisterCpuFunc",
        107017,
        0,
        || {
            let bin = registry_binary(&["add_one_u32"]);
            acl!(aclrtBinaryUnLoad(bin));
            let (entry, op) = (c_string("RunCpuKernel"), c_string("AddOne"));
            let mut func = ptr::null_mut();
            code!(aclrtRegisterCpuFunc(
                bin,
                entry.as_ptr(),
                op.as_ptr(),
                &mut func
            ))
        },
    ),
    // Functions refusing a feature look their handles up first, as every call does.
    case(
        "kernel by entry of an unloaded binary",
        "aclrtBinaryGetFunctionByEntry",
        107017,
        0,
        || {
            let bin = registry_binary(&["add_one_u32"]);
            acl!(aclrtBinaryUnLoad(bin));
            let mut func = ptr::null_mut();
            code!(aclrtBinaryGetFunctionByEntry(bin, 0, &mut func))
        },
    ),
    case(
        "SIMT args array of an unloaded function",
        "aclrtLaunchSIMTKernelWithArgsArray",
        107017,
        0,
        || simt_args_array(unloaded_function(), ptr::null_mut()),
    ),
    case(
        "SIMT args array on a destroyed stream",
        "aclrtLaunchSIMTKernelWithArgsArray",
        107017,
        0,
        || simt_args_array(add_one(), destroyed_stream()),
    ),
    case(
        "SIMT args array on another context's stream",
        "aclrtLaunchSIMTKernelWithArgsArray",
        107003,
        0,
        || simt_args_array(add_one(), stream_of_other_context()),
    ),
    case(
        "SIMT host args of an unloaded function",
        "aclrtLaunchSIMTKernelWithHostArgs",
        107017,
        0,
        || simt_host_args(unloaded_function(), ptr::null_mut()),
    ),
    case(
        "SIMT host args on a destroyed stream",
        "aclrtLaunchSIMTKernelWithHostArgs",
        107017,
        0,
        || simt_host_args(add_one(), destroyed_stream()),
    ),
    case(
        "SIMT host args on another context's stream",
        "aclrtLaunchSIMTKernelWithHostArgs",
        107003,
        0,
        || simt_host_args(add_one(), stream_of_other_context()),
    ),
    case(
        "async host to host on a destroyed stream",
        "aclrtMemcpyAsync",
        107017,
        0,
        || async_host_to_host(destroyed_stream()),
    ),
    case(
        "async host to host on another context's stream",
        "aclrtMemcpyAsync",
        107003,
        0,
        || async_host_to_host(stream_of_other_context()),
    ),
];

static RESOURCES: &[Case] = &[
    case(
        "unreadable file",
        "aclrtBinaryLoadFromFile",
        107009,
        0,
        || {
            let mut bin = ptr::null_mut();
            let path = c_string("/nonexistent/kernels.so");
            code!(aclrtBinaryLoadFromFile(
                path.as_ptr(),
                ptr::null_mut(),
                &mut bin
            ))
        },
    ),
    case(
        "not a shared object",
        "aclrtBinaryLoadFromFile",
        100003,
        0,
        || {
            let mut bin = ptr::null_mut();
            let path = c_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"));
            code!(aclrtBinaryLoadFromFile(
                path.as_ptr(),
                ptr::null_mut(),
                &mut bin
            ))
        },
    ),
    case(
        "unknown kernel",
        "aclrtBinaryGetFunction",
        107042,
        0,
        || {
            let bin = registry_binary(&[]);
            let name = c_string("no_such_kernel");
            let mut func = ptr::null_mut();
            code!(aclrtBinaryGetFunction(bin, name.as_ptr(), &mut func))
        },
    ),
    case("subscribe twice", "aclrtSubscribeReport", 107011, 0, || {
        let s = create_stream();
        acl!(aclrtSubscribeReport(11, s));
        code!(aclrtSubscribeReport(12, s))
    }),
    case(
        "thread serves another device",
        "aclrtSubscribeReport",
        107012,
        0,
        || {
            acl!(aclrtSubscribeReport(21, create_stream()));
            set_device(1);
            code!(aclrtSubscribeReport(21, create_stream()))
        },
    ),
    case(
        "unsubscribed thread",
        "aclrtProcessReport",
        107012,
        0,
        || code!(aclrtProcessReport(10)),
    ),
    case(
        "unsubscribed callback stream",
        "aclrtLaunchCallback",
        107015,
        0,
        || {
            unsafe extern "C" fn cb(_: *mut c_void) {}
            code!(aclrtLaunchCallback(
                Some(cb),
                ptr::null_mut(),
                ACL_CALLBACK_NO_BLOCK,
                create_stream()
            ))
        },
    ),
    case(
        "unsubscribe a stream never subscribed",
        "aclrtUnSubscribeReport",
        107011,
        0,
        || code!(aclrtUnSubscribeReport(31, create_stream())),
    ),
    case(
        "nothing to process",
        "aclrtProcessReport",
        507012,
        0,
        || {
            acl!(aclrtSubscribeReport(this_thread(), create_stream()));
            code!(aclrtProcessReport(5))
        },
    ),
    case("async host to host", "aclrtMemcpyAsync", 207000, 0, || {
        let (a, b) = (malloc_host(64), malloc_host(64));
        code!(aclrtMemcpyAsync(
            a,
            64,
            b,
            64,
            ACL_MEMCPY_HOST_TO_HOST,
            ptr::null_mut()
        ))
    }),
    case(
        "sync 2D kind device to device",
        "aclrtMemcpy2d",
        100000,
        0,
        || sync_2d_between_device_pointers(ACL_MEMCPY_DEVICE_TO_DEVICE),
    ),
    case(
        "sync 2D between device pointers",
        "aclrtMemcpy2d",
        207000,
        0,
        || sync_2d_between_device_pointers(ACL_MEMCPY_HOST_TO_DEVICE),
    ),
    case(
        "wait on a TIME_LINE event",
        "aclrtStreamWaitEvent",
        207000,
        0,
        || {
            let mut e = ptr::null_mut();
            acl!(aclrtCreateEventWithFlag(&mut e, ACL_EVENT_TIME_LINE));
            code!(aclrtStreamWaitEvent(ptr::null_mut(), e))
        },
    ),
    case("reset an Ex event", "aclrtResetEvent", 207000, 0, || {
        let mut e = ptr::null_mut();
        acl!(aclrtCreateEventExWithFlag(&mut e, ACL_EVENT_SYNC));
        code!(aclrtResetEvent(e, ptr::null_mut()))
    }),
    case(
        "deprecated query of an Ex event",
        "aclrtQueryEvent",
        207000,
        0,
        || {
            let mut e = ptr::null_mut();
            acl!(aclrtCreateEventExWithFlag(&mut e, ACL_EVENT_SYNC));
            let mut st = 0;
            code!(aclrtQueryEvent(e, &mut st))
        },
    ),
    case(
        "register misaligned with a reserved type: the address is checked first",
        "aclrtHostRegister",
        107000,
        0,
        || {
            let mut d = ptr::null_mut();
            let p = pageable(1 << 16).cast::<u8>().wrapping_add(8).cast();
            code!(aclrtHostRegister(
                p,
                4096,
                ACL_HOST_REGISTER_IOMEMORY,
                &mut d
            ))
        },
    ),
    case("register type 0x1", "aclrtHostRegister", 207000, 0, || {
        let mut d = ptr::null_mut();
        code!(aclrtHostRegister(pageable(1 << 16), 4096, 0x1, &mut d))
    }),
    // The reserved registration options, which the reference says are not supported yet.
    case(
        "register type IOMEMORY",
        "aclrtHostRegister",
        207000,
        0,
        || {
            let mut d = ptr::null_mut();
            code!(aclrtHostRegister(
                pageable(1 << 16),
                4096,
                ACL_HOST_REGISTER_IOMEMORY,
                &mut d
            ))
        },
    ),
    case(
        "register type READONLY",
        "aclrtHostRegister",
        207000,
        0,
        || {
            let mut d = ptr::null_mut();
            code!(aclrtHostRegister(
                pageable(1 << 16),
                4096,
                ACL_HOST_REGISTER_READONLY,
                &mut d
            ))
        },
    ),
    case(
        "register flag MAPPED | IOMEMORY",
        "aclrtHostRegisterV2",
        207000,
        0,
        || {
            code!(aclrtHostRegisterV2(
                pageable(1 << 16),
                4096,
                ACL_HOST_REG_MAPPED | ACL_HOST_REG_IOMEMORY
            ))
        },
    ),
    case(
        "register flag READONLY",
        "aclrtHostRegisterV2",
        207000,
        0,
        || {
            code!(aclrtHostRegisterV2(
                pageable(1 << 16),
                4096,
                ACL_HOST_REG_READONLY
            ))
        },
    ),
    case("more than the capacity", "aclrtMalloc", 207001, 0, || {
        let mut p = ptr::null_mut();
        code!(aclrtMalloc(&mut p, 2 << 30, 0))
    }),
    case("free twice", "aclrtFree", 207002, 0, || {
        code!(aclrtFree(freed_device_address(64)))
    }),
    case(
        "pinned memory freed as device memory",
        "aclrtFree",
        207002,
        0,
        || code!(aclrtFree(malloc_host(64))),
    ),
    case(
        "cross-device copy without peer access",
        "aclrtMemcpy",
        207006,
        0,
        || {
            set_device(1);
            let remote = malloc(64);
            set_device(0);
            code!(aclrtMemcpy(
                remote,
                64,
                malloc(64),
                64,
                ACL_MEMCPY_DEVICE_TO_DEVICE
            ))
        },
    ),
    case(
        "peer flags",
        "aclrtDeviceEnablePeerAccess",
        200006,
        0,
        || code!(aclrtDeviceEnablePeerAccess(1, 1)),
    ),
    case(
        "elapsed time of unrecorded events",
        "aclrtEventElapsedTime",
        507000,
        0,
        || {
            let mut ms = 0.0;
            code!(aclrtEventElapsedTime(
                &mut ms,
                create_event(),
                create_event()
            ))
        },
    ),
    case(
        "timestamp of an unrecorded event",
        "aclrtEventGetTimestamp",
        507000,
        0,
        || {
            let mut ts = 0;
            code!(aclrtEventGetTimestamp(create_event(), &mut ts))
        },
    ),
    case("register twice", "aclrtHostRegisterV2", 507910, 0, || {
        let p = pageable(1 << 16);
        acl!(aclrtHostRegisterV2(p, 4096, ACL_HOST_REG_MAPPED));
        code!(aclrtHostRegisterV2(p, 4096, ACL_HOST_REG_PINNED))
    }),
    case(
        "pin aclrtMallocHost memory",
        "aclrtHostRegisterV2",
        507910,
        0,
        || {
            code!(aclrtHostRegisterV2(
                malloc_host(4096),
                4096,
                ACL_HOST_REG_PINNED
            ))
        },
    ),
    case(
        "unregister unregistered",
        "aclrtHostUnregister",
        507911,
        0,
        || code!(aclrtHostUnregister(pageable(1 << 16))),
    ),
    case(
        "device pointer of unregistered memory",
        "aclrtHostGetDevicePointer",
        507911,
        0,
        || {
            let mut d = ptr::null_mut();
            code!(aclrtHostGetDevicePointer(pageable(1 << 16), &mut d, 0))
        },
    ),
    case(
        "trace to an unwritable path",
        "npusimTraceFlush",
        107010,
        0,
        || {
            let path = c_string("/nonexistent-dir/trace.json");
            acl!(npusimTraceEnable(path.as_ptr()));
            let code = code!(npusimTraceFlush());
            npu_sim::trace::disable();
            // Written somewhere that exists, so that the exit hook does not try the bad path
            // again (and print its failure into the test output).
            let written = std::env::temp_dir()
                .join(format!("npu-sim-error-codes-{}.json", std::process::id()));
            npu_sim::trace::enable(&written);
            npu_sim::trace::disable();
            npu_sim::trace::flush().unwrap();
            std::fs::remove_file(&written).unwrap();
            code
        },
    ),
    case(
        "injected failure",
        "aclrtSynchronizeStream",
        507899,
        0,
        || {
            let s = create_stream();
            control::fail_task(s, 1, 507899).unwrap();
            acl!(aclrtMemsetAsync(malloc(64), 64, 0, 64, s));
            code!(aclrtSynchronizeStream(s))
        },
    ),
    // Sizes whose rounding to the runtime's granularity would overflow: no allocation fits.
    case(
        "device memory of SIZE_MAX bytes",
        "aclrtMalloc",
        207001,
        0,
        || {
            let mut p = ptr::null_mut();
            code!(aclrtMalloc(&mut p, usize::MAX, 0))
        },
    ),
    case(
        "host memory of SIZE_MAX bytes",
        "aclrtMallocHost",
        207001,
        0,
        || {
            let mut p = ptr::null_mut();
            code!(aclrtMallocHost(&mut p, usize::MAX))
        },
    ),
    case(
        "managed memory of UINT64_MAX bytes",
        "aclrtMemAllocManaged",
        207001,
        0,
        || {
            let mut p = ptr::null_mut();
            code!(aclrtMemAllocManaged(
                &mut p,
                u64::MAX,
                ACL_RT_MEM_ATTACH_GLOBAL
            ))
        },
    ),
    case(
        "injected allocation failure",
        "aclrtMalloc",
        207001,
        0,
        || {
            let mut p = ptr::null_mut();
            acl!(npusimFailNextAlloc(0));
            code!(aclrtMalloc(&mut p, 64, 0))
        },
    ),
    case(
        "reset a device never set",
        "aclrtResetDevice",
        507007,
        -1,
        || code!(aclrtResetDevice(6)),
    ),
    case(
        "kernel trap on the AI core",
        "aclrtSynchronizeStream",
        507015,
        7,
        || {
            let trap = function(registry_binary(&["trap"]), "trap");
            let s = create_stream();
            assert_eq!(launch(trap, 4, s, &0u64, ptr::null_mut()), 0);
            code!(aclrtSynchronizeStream(s))
        },
    ),
    case(
        "kernel trap on the vector core",
        "aclrtSynchronizeStream",
        507035,
        7,
        || {
            let trap = function(registry_binary(&["trap"]), "trap");
            let s = create_stream();
            let mut attr = aiv_attr();
            let mut cfg = aclrtLaunchKernelCfg {
                attrs: &mut attr,
                numAttrs: 1,
            };
            assert_eq!(launch(trap, 4, s, &0u64, &mut cfg), 0);
            code!(aclrtSynchronizeStream(s))
        },
    ),
    case(
        "kernel by entry",
        "aclrtBinaryGetFunctionByEntry",
        207000,
        0,
        || {
            let bin = registry_binary(&["add_one_u32"]);
            let mut func = ptr::null_mut();
            code!(aclrtBinaryGetFunctionByEntry(bin, 0, &mut func))
        },
    ),
    case(
        "SIMT args array on A2",
        "aclrtLaunchSIMTKernelWithArgsArray",
        207000,
        0,
        || {
            let shape = dim3 { x: 1, y: 1, z: 1 };
            let (stream, cfg) = (ptr::null_mut(), ptr::null_mut());
            let func = add_one();
            // Past the pointer checks (a NULL array is 100000 first), to the feature.
            let mut args = [ptr::null_mut::<c_void>()];
            code!(aclrtLaunchSIMTKernelWithArgsArray(
                func,
                shape,
                shape,
                0,
                stream,
                cfg,
                args.as_mut_ptr()
            ))
        },
    ),
    case(
        "SIMT host args on A2",
        "aclrtLaunchSIMTKernelWithHostArgs",
        207000,
        0,
        || {
            let shape = dim3 { x: 1, y: 1, z: 1 };
            let (stream, cfg) = (ptr::null_mut(), ptr::null_mut());
            let func = add_one();
            code!(aclrtLaunchSIMTKernelWithHostArgs(
                func,
                shape,
                shape,
                0,
                stream,
                cfg,
                ptr::null_mut(),
                0,
                ptr::null_mut(),
                0
            ))
        },
    ),
    case(
        "a value larger than host memory",
        "aclrtKernelArgsAppend",
        207001,
        0,
        || {
            let (args, _, _) = args_with_a_value_and_a_placeholder();
            let mut param = ptr::null_mut();
            code!(aclrtKernelArgsAppend(
                args,
                unreadable_tib(),
                1 << 40,
                &mut param
            ))
        },
    ),
    case(
        "a placeholder buffer larger than host memory",
        "aclrtKernelArgsGetPlaceHolderBuffer",
        207001,
        0,
        || {
            let (args, _, holder) = args_with_a_value_and_a_placeholder();
            let mut buffer = ptr::null_mut();
            code!(aclrtKernelArgsGetPlaceHolderBuffer(
                args,
                holder,
                1 << 40,
                &mut buffer
            ))
        },
    ),
    case(
        "host arguments larger than host memory",
        "aclrtLaunchKernelWithHostArgs",
        207001,
        0,
        || {
            code!(aclrtLaunchKernelWithHostArgs(
                add_one(),
                1,
                ptr::null_mut(),
                ptr::null_mut(),
                unreadable_tib(),
                1 << 40,
                ptr::null_mut(),
                0
            ))
        },
    ),
];

#[test]
fn invalid_parameters_are_rejected_by_the_acl_layer() {
    run_table(INVALID_PARAM);
}

#[test]
fn range_errors_are_rejected_by_the_runtime_layer() {
    run_table(PARAM_INVALID);
}

#[test]
fn device_context_and_handle_errors() {
    run_table(CONTEXTS_AND_HANDLES);
}

#[test]
fn resource_and_execution_errors() {
    run_table(RESOURCES);
}

#[test]
fn held_work_times_out_and_fails_with_the_documented_codes() {
    install();
    set_device(3);
    let stream = create_stream();
    let (dev, host) = (malloc(1 << 20), malloc_host(1 << 20));
    let (event, mut ms, mut ts) = (create_event(), 0.0f32, 0u64);
    control::hold(3).unwrap();
    h2d_async(dev, host, 1 << 20, stream);
    acl!(aclrtRecordEvent(event, stream));
    assert_eq!(
        code!(aclrtSynchronizeStreamWithTimeout(stream, 20)),
        ACL_ERROR_RT_STREAM_SYNC_TIMEOUT
    );
    assert!(recent_message().contains("aclrtSynchronizeStreamWithTimeout"));
    assert_eq!(
        code!(aclrtSynchronizeEventWithTimeout(event, 20)),
        ACL_ERROR_RT_EVENT_SYNC_TIMEOUT
    );
    assert_eq!(
        code!(aclrtSynchronizeDeviceWithTimeout(20)),
        ACL_ERROR_RT_STREAM_SYNC_TIMEOUT
    );
    assert_eq!(
        code!(aclrtEventGetTimestamp(event, &mut ts)),
        ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID
    );
    assert_eq!(
        code!(aclrtEventElapsedTime(&mut ms, event, event)),
        ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID
    );
    // A kernel whose device-memory arguments are freed before it runs.
    let kernel_stream = create_stream();
    let args = malloc(8);
    acl!(aclrtLaunchKernel(add_one(), 1, args, 8, kernel_stream));
    // Freeing memory a queued copy still targets: the copy faults instead of touching it.
    acl!(aclrtFree(dev));
    acl!(aclrtFree(args));
    control::release(3).unwrap();
    assert_eq!(code!(aclrtSynchronizeStream(stream)), ACL_ERROR_RT_SYS_DMA);
    assert!(recent_message().contains("freed before the task ran"));
    assert_eq!(
        code!(aclrtSynchronizeStream(kernel_stream)),
        ACL_ERROR_RT_SYS_DMA
    );

    // A record on a force-destroyed stream never completes: waiting on it reports the abort.
    control::hold(3).unwrap();
    let doomed = create_stream();
    let late = create_event();
    acl!(aclrtRecordEvent(late, doomed));
    acl!(aclrtDestroyStreamForce(doomed));
    assert_eq!(
        code!(aclrtSynchronizeEvent(late)),
        ACL_ERROR_RT_STREAM_ABORT
    );
    control::release(3).unwrap();
    acl!(aclrtResetDevice(3));
}

#[test]
fn a_lost_device_reports_lost_heartbeat_everywhere() {
    install();
    set_device(2);
    let stream = create_stream();
    let event = create_event();
    let dev = malloc(4096);
    acl!(aclrtRecordEvent(event, stream));
    acl!(npusimLoseDevice(2));
    let mut p = ptr::null_mut();
    let (mut status, mut recorded, mut device_status) = (0, 0, 0);
    assert_eq!(
        code!(aclrtMalloc(&mut p, 64, 0)),
        ACL_ERROR_RT_LOST_HEARTBEAT
    );
    assert!(recent_message().contains("aclrtMalloc failed with 507010"));
    assert_eq!(
        code!(aclrtMemsetAsync(dev, 4096, 0, 4096, stream)),
        ACL_ERROR_RT_LOST_HEARTBEAT
    );
    assert_eq!(
        code!(aclrtSynchronizeStream(stream)),
        ACL_ERROR_RT_LOST_HEARTBEAT
    );
    assert_eq!(
        code!(aclrtStreamQuery(stream, &mut status)),
        ACL_ERROR_RT_LOST_HEARTBEAT
    );
    assert_eq!(
        code!(aclrtQueryEventStatus(event, &mut recorded)),
        ACL_ERROR_RT_LOST_HEARTBEAT
    );
    assert_eq!(
        code!(aclrtSynchronizeEvent(event)),
        ACL_ERROR_RT_LOST_HEARTBEAT
    );
    assert_eq!(code!(aclrtSynchronizeDevice()), ACL_ERROR_RT_LOST_HEARTBEAT);
    assert_eq!(code!(aclrtSetDevice(2)), ACL_ERROR_RT_LOST_HEARTBEAT);
    acl!(aclrtQueryDeviceStatus(2, &mut device_status));
    assert_eq!(device_status, ACL_RT_DEVICE_STATUS_ABNORMAL);
    // Teardown still works, so owners can release what they hold.
    acl!(aclrtFree(dev));
    acl!(aclrtDestroyEvent(event));
    assert!(control::device_stats(2).unwrap().lost);
}

#[test]
fn init_and_finalize_reference_counting() {
    install();
    let missing = c_string("/nonexistent/acl.json");
    let broken = config_file("npu-sim-broken.json", "{ not json");
    let other = config_file("npu-sim-other.json", r#"{"npu_sim": {"devices": 3}}"#);
    let same = config_file(
        "npu-sim-same.json",
        r#"{"npu_sim": {"devices": 8, "memory_per_device": 1073741824}}"#,
    );
    let mut left = 7u64;
    assert_eq!(
        code!(aclFinalizeReference(&mut left)),
        ACL_ERROR_REPEAT_FINALIZE
    );
    assert_eq!(code!(aclInit(missing.as_ptr())), ACL_ERROR_INVALID_FILE);
    assert_eq!(code!(aclInit(broken.as_ptr())), ACL_ERROR_PARSE_FILE);
    let not_utf8 = config_file("npu-sim-not-utf8.json", b"{\"x\": \"\xff\"}");
    assert_eq!(code!(aclInit(not_utf8.as_ptr())), ACL_ERROR_PARSE_FILE);
    assert_eq!(code!(aclInit(other.as_ptr())), ACL_ERROR_INVALID_PARAM);
    assert!(recent_message().contains("aclInit failed with 100000"));
    acl!(aclInit(same.as_ptr()));
    assert_eq!(code!(aclInit(ptr::null())), ACL_ERROR_REPEAT_INITIALIZE);
    acl!(aclFinalizeReference(&mut left));
    assert_eq!(left, 1, "the repeated aclInit was counted");
    acl!(aclFinalize());
    assert_eq!(code!(aclFinalize()), ACL_ERROR_REPEAT_FINALIZE);
    assert!(recent_message().contains("aclFinalize failed with 100037"));
    // Re-initialising after aclFinalize with a file that differs from the first one.
    assert_eq!(code!(aclInit(other.as_ptr())), ACL_ERROR_INVALID_PARAM);
    assert!(recent_message().contains("differs from the first one"));
    acl!(aclInit(same.as_ptr()));
    acl!(aclFinalize());
    // An empty path is no file, as NULL is (and so is not compared with the first file).
    acl!(aclInit(c"".as_ptr()));
    acl!(aclFinalize());
}

/// A synchronous 2D copy between two device allocations under `kind`.
fn sync_2d_between_device_pointers(kind: aclrtMemcpyKind) -> aclError {
    let (a, b) = (malloc(4096), malloc(4096));
    code!(aclrtMemcpy2d(a, 64, b, 64, 64, 4, kind))
}

/// Runs `call` with an allocation configuration whose DEVICE_ID attribute names device 1
/// (the cases run on device 0).
fn with_another_device(call: impl FnOnce(*mut aclrtMallocConfig) -> aclError) -> aclError {
    with_attribute(ACL_RT_MEM_ATTR_DEVICE_ID, call)
}

/// Runs `call` with an allocation configuration of one attribute of type `attr`, valued 1.
fn with_attribute(
    attr: aclrtMallocAttrType,
    call: impl FnOnce(*mut aclrtMallocConfig) -> aclError,
) -> aclError {
    let mut attr = aclrtMallocAttribute {
        attr,
        value: aclrtMallocAttrValue { deviceId: 1 },
    };
    let mut cfg = aclrtMallocConfig {
        attrs: &mut attr,
        numAttrs: 1,
    };
    call(&mut cfg)
}

/// An attribute type no allocation configuration knows (107000 once the configuration is read).
const UNKNOWN_MALLOC_ATTRIBUTE: aclrtMallocAttrType = 99;

/// ACL_RT_THREAD_LEVEL is the only aclrtLastErrLevel: another level is refused with 100000,
/// and the thread's last error stays as it was.
#[test]
fn last_error_queries_refuse_other_levels() {
    install();
    std::thread::spawn(|| {
        set_device(0);
        let mut event = ptr::null_mut();
        assert_eq!(
            code!(aclrtCreateEventWithFlag(&mut event, 0)),
            ACL_ERROR_RT_PARAM_INVALID
        );
        recent_message();
        // SAFETY: no preconditions.
        unsafe {
            assert_eq!(aclrtGetLastError(1), ACL_ERROR_INVALID_PARAM);
            assert_eq!(aclrtPeekAtLastError(1), ACL_ERROR_INVALID_PARAM);
            assert_eq!(
                aclrtGetLastError(ACL_RT_THREAD_LEVEL),
                ACL_ERROR_RT_PARAM_INVALID
            );
        }
    })
    .join()
    .unwrap();
}

//! Project automation for npu-rs.
//!
//! `cargo run -p xtask -- bindgen` regenerates `crates/npu-sys/src/bindings.rs` from the ACL
//! headers npu-sim ships (`crates/npu-sim/include/acl/`). With `ASCEND_TOOLKIT_HOME` (or
//! `ASCEND_HOME_PATH`) set it reads the real CANN headers under `$ASCEND_TOOLKIT_HOME/include`
//! instead, restricted to the same subset of names, so the rest of the workspace builds
//! unchanged:
//! - a header the toolkit lacks (a runtime-only toolkit has no `acl_base_mdl.h`, `acl_mdl.h`
//!   or `acl_op.h`, which its `acl.h` and `acl_base.h` include) is taken from the project's
//!   include directory;
//! - an optional function, type or constant the toolkit's header does not declare (an older
//!   toolkit) is taken from the project's header and listed in the generated file's
//!   documentation; a missing *required* function is an error.
//!
//! `--out FILE` writes somewhere else than the committed file (CI builds the workspace against
//! the real headers that way). `--check` regenerates from the project's header in memory,
//! whatever the environment says, and fails if the committed file differs; `.ci/run` uses it
//! so stale bindings cannot land.
//!
//! `cargo run -p xtask -- parity <CANN dir>` checks our headers against CANN's real ones under
//! `<CANN dir>/include` (prototypes, enums, layouts, macros, deprecations, which header declares
//! what); see `parity.rs`. `.ci/run` runs it when the reference headers are present.
//!
//! bindgen loads libclang at run time (the `runtime` feature), so building this crate needs no
//! libclang; running the `bindgen` command does.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::{env, fs, io::Write as _};

mod parity;

use bindgen::callbacks::{IntKind, ParseCallbacks};
use syn::visit_mut::VisitMut;

/// Functions a runtime library may lack: those only newer CANN releases export, the deprecated
/// ones CANN says a later release removes, the model dump trio, and every other function
/// npu-rs's crates do not call unconditionally. They are bound as `Option` fields and probed at
/// load time, so a library without them still loads; see docs/ascend.md.
const OPTIONAL_FUNCTIONS: &[&str] = &[
    "aclrtSnapShotProcessLock",
    "aclrtSnapShotProcessUnlock",
    "aclrtSnapShotProcessBackup",
    "aclrtSnapShotProcessRestore",
    "aclrtSnapShotCallbackRegister",
    "aclrtSnapShotCallbackUnregister",
    "aclFinalizeReference",
    // Deprecated by CANN, which says a later release removes them (their replacements,
    // aclGetDataBufferSizeV2 and aclrtQueryEventStatus, are listed below): a runtime without
    // them must still load.
    "aclGetDataBufferSize",
    "aclrtQueryEvent",
    // The model dump trio: declared in acl_rt.h, but the API reference groups it with the
    // acldump* functions, whose library is libascend_dump.so, not the runtime's. npu-rs does
    // not call them, so a runtime library without them must still load.
    "aclmdlInitDump",
    "aclmdlSetDump",
    "aclmdlFinalizeDump",
    // Old functions of the header that npu-rs's crates never call: only a function npu-rs
    // calls unconditionally may keep a runtime from loading. The last four are experimental
    // in CANN's reference (their definition may change; a runtime need not export them).
    "aclFloat16ToFloat",
    "aclFloatToFloat16",
    "aclCreateDataBuffer",
    "aclDestroyDataBuffer",
    "aclGetDataBufferAddr",
    "aclDataTypeSize",
    "aclrtGetRunMode",
    "aclrtSetTsDevice",
    "aclrtGetDevice",
    "aclrtCreateStream",
    "aclrtCreateEvent",
    "aclrtMemset",
    "aclrtMallocCached",
    "aclrtMemFlush",
    "aclrtMemInvalidate",
    "aclrtMemcpy2d",
    "aclrtResetEvent",
    "aclrtSwitchStream",
    "aclrtCreateLabel",
    "aclrtSetLabel",
    "aclrtDestroyLabel",
    "aclrtCreateLabelList",
    "aclrtDestroyLabelList",
    "aclrtSwitchLabelByIndex",
    "aclmdlRICondHandleCreate",
    "aclmdlRICondHandleGetCondPtr",
    "aclmdlRIAddCondTask",
    "aclmdlRICaptureToModelRIBegin",
    "aclUpdateDataBuffer",
    "aclGetDataBufferSizeV2",
    "aclsysGetVersionStr",
    "aclsysGetVersionNum",
    "aclrtGetLastError",
    "aclrtPeekAtLastError",
    "aclrtResetDeviceForce",
    "aclrtGetDeviceInfo",
    "aclrtQueryDeviceStatus",
    "aclrtSynchronizeDeviceWithTimeout",
    "aclrtCtxGetCurrentDefaultStream",
    "aclrtMallocAlign32",
    "aclrtMallocWithCfg",
    "aclrtFreeWithDevSync",
    "aclrtMallocHostWithCfg",
    "aclrtFreeHostWithDevSync",
    "aclrtHostRegister",
    "aclrtHostRegisterV2",
    "aclrtHostGetDevicePointer",
    "aclrtHostUnregister",
    "aclrtHostMemMapCapabilities",
    "aclrtPointerGetAttributes",
    "aclrtDestroyStreamForce",
    "aclrtSynchronizeStreamWithTimeout",
    "aclrtStreamQuery",
    "aclrtSetStreamFailureMode",
    "aclrtStreamGetId",
    "aclrtStreamGetPriority",
    "aclrtStreamGetFlags",
    "aclrtCreateEventExWithFlag",
    "aclrtQueryEventStatus",
    "aclrtQueryEventWaitStatus",
    "aclrtSynchronizeEventWithTimeout",
    "aclrtEventGetTimestamp",
    "aclrtLaunchHostFunc",
    "aclrtBinaryLoadFromFile",
    "aclrtBinaryLoadFromData",
    "aclrtBinaryUnLoad",
    "aclrtBinaryGetFunction",
    "aclrtLaunchKernel",
    "aclrtLaunchKernelWithHostArgs",
    "aclrtLaunchKernelWithConfig",
    "aclrtKernelArgsInit",
    "aclrtKernelArgsAppend",
    "aclrtKernelArgsAppendPlaceHolder",
    "aclrtKernelArgsGetPlaceHolderBuffer",
    "aclrtKernelArgsParaUpdate",
    "aclrtKernelArgsFinalize",
    // More kernel loading and launching
    "aclrtCreateBinary",
    "aclrtDestroyBinary",
    "aclrtBinaryLoad",
    "aclrtBinaryGetFunctionByEntry",
    "aclrtFunctionGetBinary",
    "aclrtGetFunctionName",
    "aclrtGetFunctionAddr",
    "aclrtGetFunctionSize",
    "aclrtGetFunctionAttribute",
    "aclrtLaunchKernelV2",
    "aclrtBinarySetExceptionCallback",
    "aclrtKernelArgsGetHandleMemSize",
    "aclrtKernelArgsGetMemSize",
    "aclrtKernelArgsInitByUserMem",
    "aclrtFunctionGetAvailDynUbufPerBlock",
    "aclrtFunctionGetParamCount",
    "aclrtFunctionGetParamInfo",
    "aclrtLaunchKernelWithArgsArray",
    "aclrtLaunchSIMTKernelWithArgsArray",
    "aclrtLaunchSIMTKernelWithHostArgs",
    "aclrtRegisterCpuFunc",
    // versions, device IDs, contexts, events, timeouts, init callbacks (breadth1)
    "aclsysGetCANNVersion",
    "aclrtGetVersion",
    "aclInitCallbackRegister",
    "aclInitCallbackUnRegister",
    "aclFinalizeCallbackRegister",
    "aclFinalizeCallbackUnRegister",
    "aclrtGetLogicDevIdByUserDevId",
    "aclrtGetUserDevIdByLogicDevId",
    "aclrtGetLogicDevIdByPhyDevId",
    "aclrtGetPhyDevIdByLogicDevId",
    "aclrtGetUserDevIdByPhyDevId",
    "aclrtGetPhyDevIdByUserDevId",
    "aclrtGetPrimaryCtxState",
    "aclrtGetEventId",
    "aclrtGetEventAvailNum",
    "aclrtSetOpWaitTimeout",
    "aclrtSetOpExecuteTimeOut",
    "aclrtSetOpExecuteTimeOutWithMs",
    "aclrtSetOpExecuteTimeOutV2",
    "aclrtGetOpTimeOutInterval",
    "aclrtGetOpExecuteTimeout",
    "aclrtDeviceGetBareTgid",
    "aclrtDeviceSetLimit",
    "aclrtDeviceGetLimit",
    "aclrtRegDeviceStateCallback",
    "aclrtCtxGetSysParamOpt",
    "aclrtCtxSetSysParamOpt",
    "aclrtGetSysParamOpt",
    "aclrtSetSysParamOpt",
    "aclrtSetStreamOverflowSwitch",
    "aclrtGetStreamOverflowSwitch",
    "aclrtSetDeviceSatMode",
    "aclrtGetDeviceSatMode",
    "aclrtGetOverflowStatus",
    "aclrtReduceAsync",
    "aclrtResetOverflowStatus",
    "aclrtGetStreamResLimit",
    "aclrtSetStreamResLimit",
    "aclrtResetStreamResLimit",
    "aclrtUseStreamResInCurrentThread",
    "aclrtUnuseStreamResInCurrentThread",
    // Devices and information
    "aclrtSetDeviceResLimit",
    "aclrtGetDeviceResLimit",
    "aclrtResetDeviceResLimit",
    "aclrtGetResInCurrentThread",
    "aclrtGetDeviceUtilizationRate",
    "aclrtGetDeviceCapability",
    "aclrtDeviceGetUuid",
    "aclrtDeviceGetPCIBusId",
    "aclrtDeviceGetByPCIBusId",
    "aclrtDevicePeerAccessStatus",
    "aclrtGetDevicesTopo",
    "aclrtCheckArchCompatibility",
    "aclGetCannAttributeList",
    "aclGetCannAttribute",
    "aclGetDeviceCapability",
    "aclrtDeviceGetHostAtomicCapabilities",
    "aclrtDeviceGetP2PAtomicCapabilities",
    // streams, notifies, stream memory operations, exceptions (simstream)
    "aclrtStreamStop",
    "aclrtStreamAbort",
    "aclrtRegStreamStateCallback",
    "aclrtGetStreamAvailableNum",
    "aclrtSetStreamAttribute",
    "aclrtGetStreamAttribute",
    "aclrtCreateStreamConfigHandle",
    "aclrtDestroyStreamConfigHandle",
    "aclrtSetStreamConfigOpt",
    "aclrtCreateStreamV2",
    "aclrtRecordEventWithFlag",
    "aclrtStreamWaitEventWithFlag",
    "aclrtStreamWaitEventWithTimeout",
    "aclrtCreateNotify",
    "aclrtDestroyNotify",
    "aclrtRecordNotify",
    "aclrtWaitAndResetNotify",
    "aclrtGetNotifyId",
    "aclrtValueWrite",
    "aclrtValueWait",
    "aclrtGetThreadLastTaskId",
    "aclrtSetExceptionInfoCallback",
    "aclrtExceptionInfoCallbackRegister",
    "aclrtExceptionInfoCallbackUnregister",
    "aclrtGetTaskIdFromExceptionInfo",
    "aclrtGetStreamIdFromExceptionInfo",
    "aclrtGetThreadIdFromExceptionInfo",
    "aclrtGetDeviceIdFromExceptionInfo",
    "aclrtGetErrorCodeFromExceptionInfo",
    "aclrtGetArgsFromExceptionInfo",
    "aclrtGetFuncHandleFromExceptionInfo",
    "aclrtGetErrorVerbose",
    "aclrtRepairError",
    "aclrtGetMemUceInfo",
    "aclrtMemUceRepair",
    "aclrtDeviceTaskAbort",
    "aclrtSetDeviceTaskAbortCallback",
    "aclrtPersistentTaskClean",
    "aclrtActiveStream",
    "aclrtCtxGetFloatOverflowAddr",
    "aclrtGetFloatOverflowStatus",
    "aclrtResetFloatOverflowStatus",
    "aclrtNpuGetFloatOverFlowStatus",
    "aclrtNpuClearFloatOverFlowStatus",
    "aclrtNotifyBatchReset",
    "aclrtProfTrace",
    "aclrtBinaryGetGlobal",
    "aclrtBinaryGetDevAddress",
    "aclrtGetFuncBySymbol",
    "aclrtGetSymbolAddress",
    "aclrtGetSymbolSize",
    "aclrtMemcpyFromSymbol",
    "aclrtMemcpyFromSymbolAsync",
    "aclrtMemcpyToSymbol",
    "aclrtMemcpyToSymbolAsync",
    "aclrtCntNotifyCreate",
    "aclrtCntNotifyDestroy",
    "aclrtCntNotifyRecord",
    "aclrtCntNotifyWaitWithTimeout",
    "aclrtCntNotifyReset",
    "aclrtCntNotifyGetId",
    "aclrtSetGroup",
    "aclrtGetGroupCount",
    "aclrtCreateGroupInfo",
    "aclrtDestroyGroupInfo",
    "aclrtGetAllGroupInfo",
    "aclrtGetGroupInfoDetail",
    "aclrtAllocBuf",
    "aclrtFreeBuf",
    "aclrtGetBufData",
    "aclrtSetBufUserData",
    "aclrtGetBufUserData",
    "aclrtGetBufDataLen",
    "aclrtSetBufDataLen",
    "aclrtCopyBufRef",
    "aclrtAppendBufChain",
    "aclrtGetBufFromChain",
    "aclrtGetBufChainNum",
    "aclrtGetHardwareSyncAddr",
    "aclrtRandomNumAsync",
    "aclrtTaskUpdateAsync",
    "aclrtSubscribeHostFunc",
    "aclrtProcessHostFunc",
    "aclrtUnSubscribeHostFunc",
    // Memory (simmem).
    "aclrtCheckMemType",
    "aclrtMemsetD32",
    "aclrtMemsetD32Async",
    "aclrtMemGetAddressRange",
    "aclrtGetMemUsageInfo",
    "aclrtMemcpyBatch",
    "aclrtMemcpyBatchAsync",
    "aclrtMemcpyBatchV2",
    "aclrtMemcpyBatchAsyncV2",
    // IPC memory sharing (simipc).
    "aclrtIpcMemGetExportKey",
    "aclrtIpcMemClose",
    "aclrtIpcMemImportByKey",
    "aclrtIpcMemSetImportPid",
    "aclrtIpcMemSetAttr",
    "aclrtIpcMemImportPidInterServer",
    "aclrtNotifyGetExportKey",
    "aclrtNotifyImportByKey",
    "aclrtNotifySetImportPid",
    "aclrtNotifySetImportPidInterServer",
    "aclrtIpcGetEventHandle",
    "aclrtIpcOpenEventHandle",
    "aclrtMemExportToShareableHandle",
    "aclrtMemImportFromShareableHandle",
    "aclrtMemSetPidToShareableHandle",
    "aclrtMemExportToShareableHandleV2",
    "aclrtMemImportFromShareableHandleV2",
    "aclrtMemSetPidToShareableHandleV2",
    "aclrtMemcpyAsyncWithCondition",
    "aclrtGetMemcpyDescSize",
    "aclrtSetMemcpyDesc",
    "aclrtMemcpyAsyncWithOffset",
    "aclrtMemcpyAsyncWithDesc",
    "aclrtMallocForTaskScheduler",
    "aclrtMemP2PMap",
    "aclrtMemMapNoAccess",
    "aclrtReserveMemAddressNoUCMemory",
    "aclrtMemMapSelectedLink",
    "aclrtMemMapSetLink",
    "aclrtDeviceL2CacheFlush",
    "aclrtMemManagedPrefetchBatchAsync",
    "aclrtMemManagedGetAttr",
    "aclrtMemManagedGetAttrs",
    "aclrtCmoAsync",
    "aclrtCmoAsyncWithBarrier",
    "aclrtCmoWaitBarrier",
    "aclrtCmoGetDescSize",
    "aclrtCmoSetDesc",
    "aclrtCmoAsyncWithDesc",
    "aclrtReserveMemAddress",
    "aclrtReleaseMemAddress",
    "aclrtMallocPhysical",
    "aclrtFreePhysical",
    "aclrtMapMem",
    "aclrtUnmapMem",
    "aclrtMemSetAccess",
    "aclrtMemGetAccess",
    "aclrtMemGetAllocationGranularity",
    "aclrtMemRetainAllocationHandle",
    "aclrtMemGetAllocationPropertiesFromHandle",
    "aclrtMemAllocManaged",
    "aclrtMemManagedAdvise",
    "aclrtMemManagedPrefetchAsync",
    "aclrtAllocatorCreateDesc",
    "aclrtAllocatorDestroyDesc",
    "aclrtAllocatorSetObjToDesc",
    "aclrtAllocatorSetAllocFuncToDesc",
    "aclrtAllocatorSetFreeFuncToDesc",
    "aclrtAllocatorSetAllocAdviseFuncToDesc",
    "aclrtAllocatorSetGetAddrFromBlockFuncToDesc",
    "aclrtAllocatorRegister",
    "aclrtAllocatorGetByStream",
    "aclrtAllocatorUnregister",
    "aclrtMemPoolCreate",
    "aclrtMemPoolDestroy",
    "aclrtMemPoolSetAttr",
    "aclrtMemPoolGetAttr",
    "aclrtMemPoolMallocAsync",
    "aclrtMemPoolFreeAsync",
    "aclrtMemPoolTrimTo",
    "aclmdlRICaptureBegin",
    "aclmdlRICaptureGetInfo",
    "aclmdlRICaptureEnd",
    "aclmdlRIDebugPrint",
    "aclmdlRIDebugJsonPrint",
    "aclmdlRICaptureThreadExchangeMode",
    "aclmdlRIExecuteAsync",
    "aclmdlRIExecute",
    "aclmdlRIDestroy",
    "aclmdlRICaptureTaskGrpBegin",
    "aclmdlRICaptureTaskGrpEnd",
    "aclmdlRICaptureTaskUpdateBegin",
    "aclmdlRICaptureTaskUpdateEnd",
    "aclmdlRIBuildBegin",
    "aclmdlRIBindStream",
    "aclmdlRIEndTask",
    "aclmdlRIBuildEnd",
    "aclmdlRIUnbindStream",
    "aclmdlRISetName",
    "aclmdlRIGetName",
    "aclmdlRIGetId",
    "aclmdlRIDestroyRegisterCallback",
    "aclmdlRIDestroyUnregisterCallback",
    "aclmdlRIGetStreams",
    "aclmdlRIGetTasksByStream",
    "aclmdlRITaskGetType",
    "aclmdlRITaskGetSeqId",
    "aclmdlRIKernelTaskGetAttribute",
    "aclmdlRITaskGetParams",
    "aclmdlRITaskSetParams",
    "aclmdlRIUpdate",
    "aclmdlRITaskDisable",
    "aclmdlRIAbort",
    "aclrtCacheLastTaskOpInfo",
    "aclrtCacheLastTaskExtendInfo",
    // The platform queries (acl_platform.h), which CANN documents among its other functions
    // but ships in a header of their own.
    "aclplatformGetDeviceInfo",
    "aclplatformGetInstructionInfo",
];

/// The enum style of the bindings: each enumerator a constant of the enum's integer type.
const CONSTS: bindgen::EnumVariation = bindgen::EnumVariation::Consts;

const OUTPUT: &str = "crates/npu-sys/src/bindings.rs";
const PROJECT_INCLUDE: &str = "crates/npu-sim/include";
/// The headers a program includes to reach every function we bind: acl.h gathers the
/// runtime, but (as on CANN) the stream-ordered pools and the platform queries have headers
/// of their own.
const ENTRY_HEADERS: &[&str] = &[
    "acl/acl.h",
    "acl/acl_rt_memory_soma.h",
    "acl/acl_platform.h",
];

const USAGE: &str = "\
usage: cargo run -p xtask -- bindgen [--check | --out FILE]
       cargo run -p xtask -- parity <CANN dir>

  bindgen       regenerate crates/npu-sys/src/bindings.rs from the ACL headers (CANN's
                when ASCEND_TOOLKIT_HOME or ASCEND_HOME_PATH is set, else the project's)
  --check       fail if the committed bindings differ from the project's header
  --out FILE    write the bindings to FILE instead of the committed file
  parity        check our ACL headers against CANN's under <CANN dir>/include";

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let result = match args.split_first() {
        Some((command, rest)) if command == "bindgen" => {
            parse_bindgen(rest).and_then(|mode| bindgen_command(&mode))
        }
        Some((command, [cann])) if command == "parity" => parity::parity_command(Path::new(cann)),
        _ => Err(USAGE.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

/// What `bindgen` was asked to do.
#[derive(Debug, PartialEq, Eq)]
enum Mode {
    /// Compare a generation from the project's header with the committed file.
    Check,
    /// Generate (from the toolkit's headers when the environment names a toolkit) into a file.
    Write(PathBuf),
}

fn parse_bindgen(args: &[String]) -> Result<Mode, String> {
    match args {
        [] => Ok(Mode::Write(workspace_root().join(OUTPUT))),
        [flag] if flag == "--check" => Ok(Mode::Check),
        [flag, file] if flag == "--out" => Ok(Mode::Write(PathBuf::from(file))),
        _ => Err(format!("unexpected arguments {args:?}\n{USAGE}")),
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

fn bindgen_command(mode: &Mode) -> Result<(), String> {
    let root = workspace_root();
    match mode {
        Mode::Check => {
            // Always the project's header: the answer must not depend on whether the shell
            // sourced CANN's set_env.sh.
            let generated = generate(&root, None)?;
            let output = root.join(OUTPUT);
            let committed = fs::read_to_string(&output)
                .map_err(|e| format!("cannot read {}: {e}", output.display()))?;
            if committed != generated {
                return Err(format!(
                    "{OUTPUT} is stale: the ACL header changed without regenerating the \
                     bindings.\nRun `cargo run -p xtask -- bindgen` (without a toolkit in the \
                     environment) and commit the result."
                ));
            }
            println!("{OUTPUT} is up to date");
        }
        Mode::Write(output) => {
            let toolkit = toolkit_include();
            let generated = generate(&root, toolkit.as_deref())?;
            fs::write(output, generated)
                .map_err(|e| format!("cannot write {}: {e}", output.display()))?;
            println!("wrote {}", output.display());
            if let Some(include) = toolkit {
                println!(
                    "(from the CANN headers in {}: for checking that toolkit, not for \
                     committing; CI checks the committed file against the project's header)",
                    include.display()
                );
            }
        }
    }
    Ok(())
}

/// The CANN toolkit's include directory, when the environment names one.
fn toolkit_include() -> Option<PathBuf> {
    ["ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH"]
        .iter()
        .find_map(|var| env::var_os(var).filter(|v| !v.is_empty()))
        .map(|home| PathBuf::from(home).join("include"))
}

fn generate(root: &Path, toolkit: Option<&Path>) -> Result<String, String> {
    let project_include = root.join(PROJECT_INCLUDE);
    let ours = run_bindgen(&project_include, ENTRY_HEADERS, None, CONSTS)?;
    let (file, source, absent) = match toolkit {
        Some(include) => {
            let theirs = toolkit_bindings(include, &project_include, &ours)?;
            let (file, absent) = complete(theirs, &ours)?;
            if !absent.is_empty() {
                eprintln!(
                    "xtask: the toolkit's header does not declare {absent:?}; they are taken \
                     from the project's header (a runtime without them reports the functions \
                     unsupported)"
                );
            }
            let source = format!("the CANN headers in {}", include.display());
            (file, source, absent)
        }
        None => (ours, format!("{PROJECT_INCLUDE}/acl"), Vec::new()),
    };
    let text = render(&file, &source, &absent)?;
    rustfmt(root, &text)
}

/// Runs bindgen on the toolkit's `acl/acl.h`, restricted to the names of our header. Headers
/// the toolkit lacks are served from a scratch directory holding just those files copied from
/// the project, searched after the toolkit's own directories, so a copied header that includes
/// a sibling the toolkit has gets the toolkit's version.
fn toolkit_bindings(
    include: &Path,
    project_include: &Path,
    ours: &syn::File,
) -> Result<syn::File, String> {
    let scratch = env::temp_dir().join(format!("npu-xtask-headers-{}", std::process::id()));
    let _ = fs::remove_dir_all(&scratch);
    copy_missing(project_include, include, &scratch).map_err(|e| {
        format!(
            "cannot lay out the fallback headers in {}: {e}",
            scratch.display()
        )
    })?;
    let dirs = [
        include.to_path_buf(),
        include.join("acl"),
        scratch.clone(),
        scratch.join("acl"),
    ];
    let dirs: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
    let names = item_names(ours);
    let result = run_bindgen_in(&dirs, ENTRY_HEADERS, Some(&names), CONSTS);
    let _ = fs::remove_dir_all(&scratch);
    result
}

/// Copies every file under `from` whose relative path does not exist under `present` to `to`.
fn copy_missing(from: &Path, present: &Path, to: &Path) -> std::io::Result<()> {
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        let (source, target, existing) = (entry.path(), to.join(&name), present.join(&name));
        if entry.file_type()?.is_dir() {
            copy_missing(&source, &existing, &target)?;
        } else if !existing.exists() {
            fs::create_dir_all(to)?;
            fs::copy(&source, &target)?;
        }
    }
    Ok(())
}

/// Adds to the toolkit's bindings what our header declares and the toolkit's does not
/// (optional functions, types, constants), returning the names added. A required function
/// the toolkit does not declare is an error: npu-rs cannot run without it.
fn complete(theirs: syn::File, ours: &syn::File) -> Result<(syn::File, Vec<String>), String> {
    let declared = item_names(&theirs);
    let mut file = theirs;
    let mut absent = Vec::new();
    let mut required_missing = Vec::new();
    for item in &ours.items {
        let mut missing = item.clone();
        if let syn::Item::ForeignMod(block) = &mut missing {
            block.items.retain(|f| match f {
                syn::ForeignItem::Fn(f) => !declared.contains(&f.sig.ident.to_string()),
                _ => false,
            });
            for f in &block.items {
                if let syn::ForeignItem::Fn(f) = f {
                    let name = f.sig.ident.to_string();
                    if OPTIONAL_FUNCTIONS.contains(&name.as_str()) {
                        absent.push(name);
                    } else {
                        required_missing.push(name);
                    }
                }
            }
            if !block.items.is_empty() {
                file.items.push(missing);
            }
        } else if let Some(name) = item_name(item).filter(|n| !declared.contains(n)) {
            absent.push(name);
            file.items.push(missing);
        }
    }
    if !required_missing.is_empty() {
        return Err(format!(
            "the toolkit's header does not declare these required functions: \
             {required_missing:?} (a toolkit too old for npu-rs?)"
        ));
    }
    Ok((file, absent))
}

/// Makes `#define`d error codes `c_int` like `aclError`, and flags `u32` as ACL passes them.
#[derive(Debug)]
struct IntKinds;

impl ParseCallbacks for IntKinds {
    fn int_macro(&self, name: &str, _value: i64) -> Option<IntKind> {
        if name.starts_with("ACL_ERROR_") || name == "ACL_RT_SUCCESS" {
            Some(IntKind::Int)
        } else {
            Some(IntKind::U32)
        }
    }
}

/// Runs bindgen on `headers` (relative to `include`), keeping only the names in `only` when
/// given (otherwise everything declared under an `acl/` directory). `enums` is how enums are
/// rendered: the bindings use plain constants; the parity check needs modules, which tell an
/// enum from a typedef of an integer.
fn run_bindgen(
    include: &Path,
    headers: &[&str],
    only: Option<&BTreeSet<String>>,
    enums: bindgen::EnumVariation,
) -> Result<syn::File, String> {
    run_bindgen_in(&[include], headers, only, enums)
}

/// [`run_bindgen`] over several include directories, searched in order: each of `headers` is
/// taken from the first directory that has it, and every directory is on the include path.
fn run_bindgen_in(
    includes: &[&Path],
    headers: &[&str],
    only: Option<&BTreeSet<String>>,
    enums: bindgen::EnumVariation,
) -> Result<syn::File, String> {
    let mut builder = bindgen::Builder::default();
    for entry in headers {
        let header = includes
            .iter()
            .map(|dir| dir.join(entry))
            .find(|path| path.is_file())
            .ok_or_else(|| format!("no ACL header {entry} in {includes:?}"))?;
        builder = builder.header(header.to_string_lossy());
    }
    builder = builder
        .clang_args(includes.iter().map(|dir| format!("-I{}", dir.display())))
        .default_enum_style(enums)
        .prepend_enum_name(false)
        .derive_default(true)
        .derive_debug(true)
        .layout_tests(true)
        .generate_comments(false)
        .merge_extern_blocks(true)
        .size_t_is_usize(true)
        // No leading `::`, so the function list reads cleanly inside `macro_rules!`.
        .ctypes_prefix("core::ffi")
        .formatter(bindgen::Formatter::None)
        .parse_callbacks(Box::new(IntKinds));
    builder = match only {
        None => builder.allowlist_file(r".*[/\\]acl[/\\].*\.h"),
        Some(names) => names.iter().fold(builder, |b, name| {
            let exact = format!("^{name}$");
            b.allowlist_function(&exact)
                .allowlist_type(&exact)
                .allowlist_var(&exact)
        }),
    };
    let bindings = builder
        .generate()
        .map_err(|e| format!("bindgen failed on the headers in {includes:?}: {e}"))?;
    syn::parse_file(&bindings.to_string()).map_err(|e| format!("bindgen output: {e}"))
}

/// Every item name in a generated file: functions, types and constants.
fn item_names(file: &syn::File) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for item in &file.items {
        if let syn::Item::ForeignMod(block) = item {
            for f in &block.items {
                if let syn::ForeignItem::Fn(f) = f {
                    names.insert(f.sig.ident.to_string());
                }
            }
        } else {
            names.extend(item_name(item));
        }
    }
    names
}

/// The name of a generated type or constant.
fn item_name(item: &syn::Item) -> Option<String> {
    match item {
        syn::Item::Type(t) => Some(t.ident.to_string()),
        syn::Item::Struct(s) => Some(s.ident.to_string()),
        syn::Item::Union(u) => Some(u.ident.to_string()),
        syn::Item::Const(c) => Some(c.ident.to_string()),
        _ => None,
    }
}

/// Prefixes every generated type name in a signature with `$crate` (spelled `__CRATE__` until
/// the text is assembled), so the function list can be expanded in other crates.
struct QualifyTypes<'a>(&'a BTreeSet<String>);

impl VisitMut for QualifyTypes<'_> {
    fn visit_type_path_mut(&mut self, path: &mut syn::TypePath) {
        if path.qself.is_none() && path.path.segments.len() == 1 {
            let ident = path.path.segments[0].ident.to_string();
            if self.0.contains(&ident) {
                path.path = syn::parse_str(&format!("__CRATE__::{ident}")).expect("valid path");
            }
        }
        syn::visit_mut::visit_type_path_mut(self, path);
    }
}

/// Undoes the token spacing `quote` prints, so the function list reads like hand-written Rust.
fn tidy(tokens: &str) -> String {
    tokens
        .replace("* const ", "*const ")
        .replace("* mut ", "*mut ")
        .replace(" :: ", "::")
        .replace(" : ", ": ")
        .replace("__CRATE__", "$crate")
}

/// The bindings' text. `absent` lists what the toolkit's header did not declare (taken from the
/// project's header): it is written into the module documentation.
fn render(file: &syn::File, source: &str, absent: &[String]) -> Result<String, String> {
    let types: BTreeSet<String> = file
        .items
        .iter()
        .filter_map(|item| match item {
            syn::Item::Type(t) => Some(t.ident.to_string()),
            syn::Item::Struct(s) => Some(s.ident.to_string()),
            syn::Item::Union(u) => Some(u.ident.to_string()),
            _ => None,
        })
        .collect();

    let mut items = String::new();
    let mut required = String::new();
    let mut optional = String::new();
    let mut seen_optional = BTreeSet::new();
    for item in &file.items {
        let syn::Item::ForeignMod(block) = item else {
            writeln!(items, "{}", quote::quote!(#item)).expect("writing to a String");
            continue;
        };
        for f in &block.items {
            let syn::ForeignItem::Fn(f) = f else {
                return Err("unexpected non-function item in an extern block".into());
            };
            // A C-variadic function (aclAppLog) has no place in the pointer table: npu-sim
            // fills the table from its own Rust functions, and stable Rust cannot define a
            // C-variadic one (npu-sim exports aclAppLog as a trampoline into C, see
            // crates/npu-sim/src/abi/app_log.rs). npu-rs itself logs through `tracing`.
            if f.sig.variadic.is_some() {
                continue;
            }
            let mut sig = f.sig.clone();
            QualifyTypes(&types).visit_signature_mut(&mut sig);
            let name = sig.ident.to_string();
            let args: Vec<String> = sig
                .inputs
                .iter()
                .map(|arg| tidy(&quote::quote!(#arg).to_string()))
                .collect();
            let output = match &sig.output {
                syn::ReturnType::Default => "()".to_string(),
                syn::ReturnType::Type(_, ty) => tidy(&quote::quote!(#ty).to_string()),
            };
            let line = format!("fn {name}({}) -> {output};", args.join(", "));
            let target = if OPTIONAL_FUNCTIONS.contains(&name.as_str()) {
                seen_optional.insert(name);
                &mut optional
            } else {
                &mut required
            };
            writeln!(target, "                {line}").expect("writing to a String");
        }
    }
    let missing: Vec<_> = OPTIONAL_FUNCTIONS
        .iter()
        .filter(|n| !seen_optional.contains(**n))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "OPTIONAL_FUNCTIONS names functions the project's header does not declare: \
             {missing:?}"
        ));
    }
    let absent_note = if absent.is_empty() {
        String::new()
    } else {
        format!(
            "//!\n//! Not declared by that header, so taken from npu-rs's own (a runtime \
             without these\n//! functions reports them unsupported): {}.\n",
            absent.join(", ")
        )
    };

    Ok(format!(
        "//! Raw ACL types, constants and the function list, generated by bindgen from \
         {source}.\n{absent_note}//!\n//! Do not edit: run `cargo run -p xtask -- bindgen` \
         instead.\n\n{items}\n\
         /// Expands `$callback! {{ $extra required {{ fn ...; }} optional {{ fn ...; }} }}` with \
         every\n/// ACL function npu-rs binds, in header order. `optional` lists the functions \
         a runtime\n/// library may lack (newer, deprecated, model dump and uncalled functions).\n\
         #[macro_export]\nmacro_rules! for_each_acl_function {{\n    ($callback:ident ! ( \
         $($extra:tt)* )) => {{\n        $callback! {{\n            $($extra)*\n            \
         required {{\n{required}            }}\n            optional {{\n{optional}            \
         }}\n        }}\n    }};\n}}\n"
    ))
}

fn rustfmt(root: &Path, text: &str) -> Result<String, String> {
    let mut child = Command::new(env::var("RUSTFMT").unwrap_or_else(|_| "rustfmt".into()))
        .arg("--edition=2024")
        .arg(format!(
            "--config-path={}",
            root.join("rustfmt.toml").display()
        ))
        .arg("--emit=stdout")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run rustfmt: {e}"))?;
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(text.as_bytes())
        .map_err(|e| format!("writing to rustfmt: {e}"))?;
    let out = child
        .wait_with_output()
        .map_err(|e| format!("rustfmt: {e}"))?;
    if !out.status.success() {
        return Err("rustfmt rejected the generated bindings".into());
    }
    String::from_utf8(out.stdout).map_err(|e| format!("rustfmt output: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn arguments_select_a_mode_and_anything_else_is_refused() {
        let committed = workspace_root().join(OUTPUT);
        assert_eq!(parse_bindgen(&[]), Ok(Mode::Write(committed)));
        assert_eq!(parse_bindgen(&args(&["--check"])), Ok(Mode::Check));
        assert_eq!(
            parse_bindgen(&args(&["--out", "/tmp/b.rs"])),
            Ok(Mode::Write("/tmp/b.rs".into()))
        );
        for wrong in [&["--check", "--out", "x"][..], &["--out"], &["--chek"]] {
            let err = parse_bindgen(&args(wrong)).unwrap_err();
            assert!(err.starts_with("unexpected arguments"), "{err}");
        }
    }

    fn file(text: &str) -> syn::File {
        syn::parse_str(text).expect("valid Rust")
    }

    #[test]
    fn what_an_older_toolkit_lacks_comes_from_our_header_and_is_listed() {
        let ours = file(
            "pub type aclError = i32; pub const ACL_NEW: u32 = 1; \
             unsafe extern \"C\" { pub fn aclInit(p: *const u8) -> aclError; \
             pub fn aclrtHostRegisterV2(p: *mut u8, n: u64, f: u32) -> aclError; }",
        );
        let theirs = file(
            "pub type aclError = i32; \
             unsafe extern \"C\" { pub fn aclInit(p: *const u8) -> aclError; }",
        );
        let (completed, absent) = complete(theirs, &ours).unwrap();
        assert_eq!(absent, ["ACL_NEW", "aclrtHostRegisterV2"]);
        assert_eq!(item_names(&completed), item_names(&ours));
    }

    #[test]
    fn a_required_function_the_toolkit_lacks_is_an_error() {
        let ours = file("unsafe extern \"C\" { pub fn aclInit(p: *const u8) -> i32; }");
        let err = complete(file(""), &ours).unwrap_err();
        assert!(err.contains("required functions: [\"aclInit\"]"), "{err}");
    }

    #[test]
    fn only_the_headers_the_toolkit_lacks_are_copied() {
        let base = env::temp_dir().join(format!("npu-xtask-test-{}", std::process::id()));
        let (ours, toolkit, scratch) = (base.join("ours"), base.join("toolkit"), base.join("s"));
        for dir in [ours.join("acl/error_codes"), toolkit.join("acl")] {
            fs::create_dir_all(dir).unwrap();
        }
        for header in [
            "acl/acl.h",
            "acl/acl_op.h",
            "acl/error_codes/rt_error_codes.h",
        ] {
            fs::write(ours.join(header), header).unwrap();
        }
        fs::write(toolkit.join("acl/acl.h"), "theirs").unwrap();
        copy_missing(&ours, &toolkit, &scratch).unwrap();
        assert!(!scratch.join("acl/acl.h").exists(), "the toolkit has it");
        assert_eq!(
            fs::read_to_string(scratch.join("acl/acl_op.h")).unwrap(),
            "acl/acl_op.h"
        );
        assert!(scratch.join("acl/error_codes/rt_error_codes.h").exists());
        fs::remove_dir_all(&base).unwrap();
    }
}

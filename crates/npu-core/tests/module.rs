//! Kernel binaries and functions, on the in-process simulator and on its cdylib: loading from
//! a file and from memory, lookups, raw launches, typed errors and when a binary is unloaded.

mod common;

use std::ffi::c_void;
use std::num::NonZeroU32;

use npu_core::{
    AclCode, ArgPacker, BinaryMagic, Context, Error, Function, LaunchConfig, Module, Runtime,
    acl_call,
};
use npu_sim::kernel::{LIBRARY_PATH, VECTOR_ADD_F32, registry_image};

fn context(runtime: &Runtime) -> Context {
    runtime.device(0).unwrap().primary_context().clone()
}

/// Both ways to get npu-sim's `vector_add_f32`: its C library, and its in-process registry.
fn vector_adds(ctx: &Context) -> [(&'static str, Function); 2] {
    // SAFETY: npu-sim's shipped kernel library, built for its kernel ABI.
    let file = unsafe { Module::from_file(ctx, LIBRARY_PATH) }.unwrap();
    // SAFETY: a registry image names in-process kernels; loading it runs no code.
    let data = unsafe { Module::from_data(ctx, &registry_image(&[VECTOR_ADD_F32])) }.unwrap();
    [
        ("shared object", file.function(VECTOR_ADD_F32).unwrap()),
        ("registry image", data.function(VECTOR_ADD_F32).unwrap()),
    ]
}

fn assert_invalid(err: Error, api: &str, argument: &str) {
    match &err {
        Error::InvalidArgument {
            api: a,
            argument: b,
            ..
        } => assert_eq!((*a, *b), (api, argument), "{err}"),
        other => panic!("expected a typed argument error, got {other:?}"),
    }
}

#[test]
fn modules_and_functions_are_send_sync_and_clone() {
    fn shareable<T: Send + Sync + Clone + std::fmt::Debug>() {}
    shareable::<Module>();
    shareable::<Function>();
}

#[test]
fn kernels_load_from_a_file_and_from_memory() {
    for (name, runtime) in common::runtimes() {
        let ctx = context(&runtime);
        for (path, function) in vector_adds(&ctx) {
            assert_eq!(function.name(), VECTOR_ADD_F32, "{name}: {path}");
            assert!(function.context().same(&ctx));
        }
        // SAFETY: npu-sim's shipped kernel library.
        let module = unsafe { Module::from_file(&ctx, LIBRARY_PATH) }.unwrap();
        assert_eq!(module.path(), Some(std::path::Path::new(LIBRARY_PATH)));
        let bytes = std::fs::read(LIBRARY_PATH).unwrap();
        // SAFETY: the same library, from memory.
        let in_memory = unsafe { Module::from_data(&ctx, &bytes) }.unwrap();
        assert_eq!(in_memory.path(), None);
        in_memory.function("reduce_sum_f32").unwrap();
        let loader = Module::loader(&ctx)
            .lazy_load(true)
            .magic(BinaryMagic::AiCore);
        // SAFETY: as above; the options only have to be accepted.
        let with_options = unsafe { loader.file(LIBRARY_PATH) }.unwrap();
        with_options.function("scale_f32").unwrap();
        assert!(format!("{with_options:?}").contains("libnpusim_kernels.so"));
    }
}

#[test]
fn relative_paths_are_made_absolute() {
    let runtime = Runtime::global().unwrap();
    let ctx = context(&runtime);
    let absolute = std::path::Path::new(LIBRARY_PATH);
    let cwd = std::env::current_dir().unwrap();
    let Ok(relative) = absolute.strip_prefix(&cwd) else {
        // The target directory lies outside the working directory; nothing to check.
        return;
    };
    // SAFETY: npu-sim's shipped kernel library.
    let module = unsafe { Module::from_file(&ctx, relative) }.unwrap();
    assert_eq!(module.path(), Some(absolute));
}

#[test]
fn bad_names_paths_and_data_are_typed_errors() {
    for (name, runtime) in common::runtimes() {
        let ctx = context(&runtime);
        // SAFETY: loading fails before anything is loaded.
        let err = unsafe { Module::from_file(&ctx, "/nonexistent/kernels.so") }.unwrap_err();
        assert_eq!(err.acl_code(), Some(AclCode(107009)), "{name}: {err}");
        assert!(
            err.to_string()
                .starts_with("aclrtBinaryLoadFromFile failed")
        );
        // SAFETY: rejected before ACL is called.
        let err = unsafe { Module::from_file(&ctx, "/tmp/a\0b.so") }.unwrap_err();
        assert_invalid(err, "Module::from_file", "path");
        // SAFETY: rejected before ACL is called.
        let err = unsafe { Module::from_data(&ctx, &[]) }.unwrap_err();
        assert_invalid(err, "Module::from_data", "data");
        // The loader's own calls name themselves, not the shortcuts built on them.
        // SAFETY: rejected before ACL is called.
        let err = unsafe { Module::loader(&ctx).file("/tmp/a\0b.so") }.unwrap_err();
        assert_invalid(err, "ModuleLoader::file", "path");
        // SAFETY: rejected before ACL is called.
        let err = unsafe { Module::loader(&ctx).data(&[]) }.unwrap_err();
        assert_invalid(err, "ModuleLoader::data", "data");
        let err = runtime.device(1_000).unwrap_err();
        assert_invalid(err, "Runtime::device", "id");
        // SAFETY: the simulator recognises neither an ELF nor a registry image and loads
        // nothing.
        let err = unsafe { Module::from_data(&ctx, b"not a binary") }.unwrap_err();
        assert_eq!(err.acl_code(), Some(AclCode(107000)), "{name}: {err}");

        // SAFETY: npu-sim's shipped kernel library.
        let module = unsafe { Module::from_file(&ctx, LIBRARY_PATH) }.unwrap();
        let err = module.function("no_such_kernel").unwrap_err();
        assert_eq!(err.acl_code(), Some(AclCode(107042)), "{name}: {err}");
        assert!(err.to_string().starts_with("aclrtBinaryGetFunction failed"));
        assert_invalid(module.function("").unwrap_err(), "Module::function", "name");
        assert_invalid(
            module.function("a\0b").unwrap_err(),
            "Module::function",
            "name",
        );
    }
}

/// Allocates device memory holding `data` (or zeros) with the raw API.
fn upload(ctx: &Context, data: &[f32]) -> *mut c_void {
    let runtime = ctx.runtime();
    let bytes = size_of_val(data);
    let mut ptr = std::ptr::null_mut();
    ctx.bind().unwrap();
    // SAFETY: `ptr` is a valid out-pointer; `data` holds `bytes` readable bytes.
    unsafe {
        acl_call!(runtime, aclrtMalloc(&mut ptr, bytes, 0)).unwrap();
        acl_call!(
            runtime,
            aclrtMemcpy(ptr, bytes, data.as_ptr().cast(), bytes, 1)
        )
        .unwrap();
    }
    ptr
}

#[test]
fn launch_raw_runs_every_block() {
    for (name, runtime) in common::runtimes() {
        let ctx = context(&runtime);
        let n = 1000usize;
        let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let b: Vec<f32> = (0..n).map(|i| (2 * i) as f32).collect();
        for (path, function) in vector_adds(&ctx) {
            let (da, db, dc) = (
                upload(&ctx, &a),
                upload(&ctx, &b),
                upload(&ctx, &[0.0; 1000]),
            );
            let mut args = ArgPacker::new("test");
            for address in [da, db, dc] {
                args.push(&(address as usize).to_ne_bytes(), 8).unwrap();
            }
            args.push(&(n as u64).to_ne_bytes(), 8).unwrap();
            let mut args = args.into_bytes();
            let config = LaunchConfig::new(NonZeroU32::new(7).unwrap());
            let mut c = vec![0f32; n];
            // SAFETY: vector_add_f32 takes {a, b, c, n} and touches n f32 of each, which the
            // three allocations hold; they are freed only after the stream is synchronised.
            unsafe {
                function
                    .launch_raw(std::ptr::null_mut(), &config, &mut args)
                    .unwrap();
                acl_call!(&runtime, aclrtSynchronizeStream(std::ptr::null_mut())).unwrap();
                acl_call!(
                    &runtime,
                    aclrtMemcpy(c.as_mut_ptr().cast(), 4 * n, dc, 4 * n, 2)
                )
                .unwrap();
                for ptr in [da, db, dc] {
                    acl_call!(&runtime, aclrtFree(ptr)).unwrap();
                }
            }
            assert!(
                c.iter().enumerate().all(|(i, &x)| x == (3 * i) as f32),
                "{name}: {path}"
            );
        }
    }
}

#[test]
fn a_binary_is_unloaded_when_its_last_function_is_gone() {
    for (name, runtime) in common::runtimes() {
        let ctx = context(&runtime);
        // SAFETY: npu-sim's shipped kernel library.
        let module = unsafe { Module::from_file(&ctx, LIBRARY_PATH) }.unwrap();
        let function = module.function(VECTOR_ADD_F32).unwrap();
        let raw = function.as_raw();
        // A raw launch over zero elements ({a, b, c, n} all zero) succeeds while the handle
        // is alive, and fails with ACL_ERROR_RT_INVALID_HANDLE (107017) once it is stale.
        let launch = || {
            ctx.bind().unwrap();
            let mut args = [0u64; 4];
            // SAFETY: 32 bytes of arguments that make the kernel touch no memory; no
            // placeholders. The handle may be stale, which ACL reports without using it.
            unsafe {
                runtime.api().aclrtLaunchKernelWithHostArgs.unwrap()(
                    raw,
                    1,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    args.as_mut_ptr().cast(),
                    size_of_val(&args),
                    std::ptr::null_mut(),
                    0,
                )
            }
        };
        drop(module);
        assert_eq!(launch(), 0, "{name}: the function keeps it loaded");
        let clone = function.clone();
        drop(function);
        assert_eq!(launch(), 0, "{name}: so does any clone");
        drop(clone);
        assert_eq!(launch(), 107017, "{name}: unloaded with the last user");
        ctx.synchronize_blocking().unwrap();
    }
}

//! Runtime, devices, contexts and errors, on the in-process simulator and on its cdylib.

mod common;

use npu_core::{
    AclCode, Backend, BackendChoice, Context, Device, DeviceAttr, ErrorClass, LoadError,
    LoadFailure, MemAttr, Runtime, acl_call,
};

#[test]
fn backends_report_what_was_loaded() {
    let [(_, in_process), (_, dlopened)] = common::runtimes().try_into().unwrap();
    assert_eq!(in_process.backend(), &Backend::Simulator);
    assert_eq!(
        dlopened.backend(),
        &Backend::Library {
            path: common::simulator_library(),
            simulated: true
        }
    );
    assert!(
        !in_process.same_library(&dlopened),
        "two loaded libraries, two simulators"
    );
    for (name, runtime) in common::runtimes() {
        assert!(
            runtime.unsupported_functions().is_empty(),
            "{name}: the sim exports everything"
        );
        assert!(
            runtime.soc_name().is_some_and(|s| s.starts_with("Ascend")),
            "{name}"
        );
    }
}

#[test]
fn devices_open_and_describe_themselves() {
    for (name, runtime) in common::runtimes() {
        let count = runtime.device_count().unwrap();
        assert!(count >= 2, "{name}: the default simulator has two devices");
        for id in 0..count {
            let device = runtime.device(id).unwrap();
            assert_eq!(device.id(), id);
            assert!(
                device.attribute(DeviceAttr::AicoreCoreNum).unwrap() > 0,
                "{name}"
            );
            let total = device.attribute(DeviceAttr::TotalGlobalMemSize).unwrap();
            let memory = device.memory_info(MemAttr::Normal).unwrap();
            assert_eq!(
                memory.total as i64, total,
                "{name}: both report the capacity"
            );
            assert!(memory.free <= memory.total);
            let range = device.stream_priority_range().unwrap();
            assert_eq!((range.greatest, range.least), (0, 7), "{name}");
        }
        let err = runtime.device(count).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "Runtime::device: invalid argument `id`: device {count} does not exist: {count} device(s) are visible"
            )
        );
    }
}

#[test]
fn one_primary_context_per_device_is_shared() {
    for (name, runtime) in common::runtimes() {
        let a = runtime.device(0).unwrap();
        let b = runtime.device(0).unwrap();
        assert_eq!(a, b, "{name}: both handles share the primary context");
        assert!(a.primary_context().is_primary());
        let explicit = a.create_context().unwrap();
        assert!(!explicit.is_primary());
        assert_eq!(
            explicit.device(),
            a,
            "{name}: an explicit context knows its device"
        );
        assert_ne!(explicit.id(), a.primary_context().id());
    }
}

#[test]
fn acl_failures_carry_code_class_and_runtime_message() {
    for (name, runtime) in common::runtimes() {
        let device = runtime.device(0).unwrap();
        device.primary_context().bind().unwrap();
        let mut ptr = std::ptr::null_mut();
        // SAFETY: `ptr` is a valid out-pointer; a zero size is rejected before any allocation.
        let err = unsafe { acl_call!(&runtime, aclrtMalloc(&mut ptr, 0, 0)) }.unwrap_err();
        assert_eq!(err.acl_code(), Some(AclCode(100000)), "{name}");
        let npu_core::Error::Acl(acl) = &err else {
            panic!("{name}: {err:?}")
        };
        assert_eq!(acl.api, "aclrtMalloc");
        assert_eq!(acl.class(), ErrorClass::Caller);
        let message = acl
            .message
            .as_deref()
            .expect("the simulator explains its errors");
        assert!(message.contains("aclrtMalloc"), "{name}: {message}");
        assert!(err.to_string().starts_with(
            "aclrtMalloc failed: ACL_ERROR_INVALID_PARAM (100000): invalid parameter"
        ));
        assert!(err.to_string().contains("(runtime: "), "{name}: {err}");
    }
}

#[test]
fn peer_access_is_directional_and_nests() {
    for (name, runtime) in common::runtimes() {
        let (a, b) = (runtime.device(0).unwrap(), runtime.device(1).unwrap());
        assert!(a.can_access_peer(&b).unwrap(), "{name}");
        assert!(
            a.can_access_peer(&a).is_err(),
            "{name}: a device is not its own peer"
        );
        assert!(copy(&a, &b).is_err(), "{name}: no access before enabling");
        let outer = a.enable_peer_access(&b).unwrap();
        let inner = a.enable_peer_access(&b).unwrap();
        copy(&a, &b).unwrap();
        drop(inner);
        copy(&a, &b).expect("the outer guard still holds access");
        drop(outer);
        assert!(
            copy(&a, &b).is_err(),
            "{name}: the last guard disabled access"
        );
    }
}

/// A synchronous 64-byte copy from `to`'s memory into `from`'s, issued on `from`: it needs
/// `from`'s access to `to`.
fn copy(from: &Device, to: &Device) -> npu_core::Result<()> {
    let (src, dst) = (alloc(from, 64), alloc(to, 64));
    from.primary_context().bind()?;
    // SAFETY: both are fresh 64-byte device allocations.
    let result = unsafe { acl_call!(from.runtime(), aclrtMemcpy(dst, 64, src, 64, 3)) };
    free(from, src);
    free(to, dst);
    result
}

/// A cross-device submission in progress holds no lock that other threads need (the reaper
/// drops peer-access guards, any thread enables access or opens a device: with a lock held
/// across the submission's ACL call, which may block, they all waited for it), and access
/// whose last guard is dropped meanwhile stays enabled until the submission, which ACL may
/// have accepted under it, holds a guard of its own. (Found by the eighth review.)
#[test]
fn a_cross_device_submission_in_progress_holds_up_no_peer_access_bookkeeping() {
    use std::sync::mpsc;
    use std::time::Duration;
    for (name, runtime) in common::runtimes() {
        // The direction no other test of this file enables.
        let (a, b) = (runtime.device(1).unwrap(), runtime.device(0).unwrap());
        let (entered_tx, entered) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        let (from, peer) = (a.clone(), b.clone());
        let submitter = std::thread::spawn(move || {
            // SAFETY: a test of npu-core's own.
            let seal = unsafe { npu_core::seal::Seal::npu_rs() };
            let ((), access) = from
                .with_steady_peer_access(seal, "test", &peer, || {
                    entered_tx.send(()).unwrap();
                    released.recv().unwrap();
                })
                .unwrap();
            access
        });
        entered.recv().unwrap();
        let (done_tx, done) = mpsc::channel();
        let (from, peer) = (a.clone(), b.clone());
        let bookkeeper = std::thread::spawn(move || {
            let guard = from.enable_peer_access(&peer).unwrap();
            drop(from.peer_access_to(&peer));
            drop(from.runtime().device(0).unwrap());
            drop(guard); // the last guard, with the submission in progress
            let enabled = copy(&from, &peer).is_ok();
            done_tx.send(enabled).unwrap();
        });
        // Bounded, so that a regression fails here; the release lets everything finish.
        let enabled_under_submission = done.recv_timeout(Duration::from_secs(30));
        release.send(()).unwrap();
        let access = submitter.join().unwrap();
        bookkeeper.join().unwrap();
        assert_eq!(
            enabled_under_submission,
            Ok(true),
            "{name}: the bookkeeping returned, and the access stayed enabled in ACL"
        );
        assert!(
            access.is_some(),
            "{name}: the submission holds a guard on the access"
        );
        copy(&a, &b).expect("the submission's guard keeps the access");
        drop(access);
        assert!(
            copy(&a, &b).is_err(),
            "{name}: the submission's guard was the last: access disabled"
        );
    }
}

fn alloc(device: &Device, bytes: usize) -> *mut std::ffi::c_void {
    device.primary_context().bind().unwrap();
    let mut ptr = std::ptr::null_mut();
    // SAFETY: `ptr` is a valid out-pointer and the device's context is bound.
    unsafe { acl_call!(device.runtime(), aclrtMalloc(&mut ptr, bytes, 0)) }.unwrap();
    ptr
}

fn free(device: &Device, ptr: *mut std::ffi::c_void) {
    // SAFETY: `ptr` came from `alloc` and is freed once.
    unsafe { acl_call!(device.runtime(), aclrtFree(ptr)) }.unwrap();
}

fn current(runtime: &Runtime) -> npu_core::ffi::aclrtContext {
    let mut ctx = std::ptr::null_mut();
    // SAFETY: `ctx` is a valid out-pointer.
    unsafe { acl_call!(runtime, aclrtGetCurrentContext(&mut ctx)) }.unwrap();
    ctx
}

#[test]
fn forget_binding_recovers_from_raw_context_switches() {
    for (name, runtime) in common::runtimes() {
        let (a, b) = (runtime.device(0).unwrap(), runtime.device(1).unwrap());
        a.primary_context().bind().unwrap();
        // Switch behind npu-rs's back, as raw FFI code might.
        let raw_b = b.primary_context().as_raw();
        // SAFETY: `b` keeps its primary context alive.
        unsafe { acl_call!(&runtime, aclrtSetCurrentContext(raw_b)) }.unwrap();
        a.primary_context().bind().unwrap();
        assert_eq!(
            current(&runtime),
            raw_b,
            "{name}: the cache skipped the rebind, as documented"
        );
        Context::forget_binding(&runtime);
        a.primary_context().bind().unwrap();
        assert_eq!(current(&runtime), a.primary_context().as_raw(), "{name}");
    }
}

#[test]
fn asking_for_a_real_runtime_lists_every_place_tried() {
    match Runtime::builder().backend(BackendChoice::Acl).build() {
        // A CANN host: the real runtime loaded.
        Ok(runtime) => assert!(matches!(
            runtime.backend(),
            Backend::Library {
                simulated: false,
                ..
            }
        )),
        Err(npu_core::Error::Load(LoadError::NotFound { tried })) => {
            let paths: Vec<String> = tried.iter().map(|t| t.path.display().to_string()).collect();
            assert_eq!(
                paths.last().map(String::as_str),
                Some("libascendcl.so"),
                "{paths:?}"
            );
            assert!(
                paths
                    .iter()
                    .any(|p| p.ends_with("Ascend/cann/lib64/libacl_rt.so"))
            );
            // cargo puts target/<profile>/deps on the loader path, so the system loader finds
            // npu-sim's cdylib there; `acl` must not mistake it for CANN.
            let system = tried.last().unwrap();
            assert_eq!(system.reason, LoadFailure::Simulator);
        }
        Err(other) => panic!("unexpected {other:?}"),
    }
    assert!(matches!(
        "cuda".parse::<BackendChoice>(),
        Err(LoadError::InvalidBackend(_))
    ));
}

/// Bad input is a typed error, never ignored: an `acl_config` path with a NUL byte, or one
/// that cannot apply because ACL is initialised already (by a runtime still alive, without
/// that configuration), is refused before anything changes; the runtimes alive keep working.
#[test]
fn an_acl_config_that_cannot_apply_is_refused() {
    for (name, runtime) in common::runtimes() {
        let choice = match runtime.backend() {
            Backend::Library { path, .. } => {
                // SAFETY: the library a runtime of `common::runtimes` loaded: npu-sim's build.
                let library = unsafe { npu_core::RuntimeLibrary::new(path) };
                BackendChoice::Library(library)
            }
            _ => BackendChoice::Sim,
        };
        let build = |config: &str| {
            Runtime::builder()
                .backend(choice.clone())
                .acl_config(config)
                .build()
                .unwrap_err()
        };
        for (config, says) in [
            ("a\0b.json", "NUL"),
            (
                "/nonexistent/acl.json",
                "/nonexistent/acl.json cannot apply",
            ),
        ] {
            let err = build(config);
            assert!(
                matches!(
                    err,
                    npu_core::Error::InvalidArgument {
                        api: "RuntimeBuilder::build",
                        argument: "acl_config",
                        ..
                    }
                ),
                "{name}: {err:?}"
            );
            assert!(err.to_string().contains(says), "{name}: {err}");
        }
        let same = Runtime::builder().backend(choice).build().unwrap();
        assert!(same.same_library(&runtime), "{name}");
        assert!(runtime.device_count().unwrap() >= 1, "{name}");
    }
}

#[test]
fn runtimes_are_send_sync_and_cheap_to_clone() {
    fn assert_send_sync<T: Send + Sync + Clone>() {}
    assert_send_sync::<Runtime>();
    assert_send_sync::<Device>();
    assert_send_sync::<Context>();
}

//! Builds the shipped C kernels (`kernels/npusim_kernels.c`) into a shared object in OUT_DIR,
//! so tests, examples and users can load them with aclrtBinaryLoadFromFile. The path is exposed
//! to the crate as `NPU_SIM_KERNELS_SO`; the target triple as `NPU_SIM_TARGET` (the C tests
//! compile their programs for it with the same compiler detection).
//!
//! It also compiles the C half of aclAppLog (`csrc/app_log.c`, see `src/abi/app_log.rs`) into a
//! static library linked into the crate, so the rlib and the cdylib both carry it.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let target = env::var("TARGET").expect("cargo sets TARGET");
    let source = PathBuf::from("kernels/npusim_kernels.c");
    let so = out_dir.join("libnpusim_kernels.so");

    println!("cargo:rerun-if-changed={}", source.display());
    println!("cargo:rerun-if-changed=include/npusim/kernel.h");
    println!("cargo:rustc-env=NPU_SIM_TARGET={target}");
    println!("cargo:rustc-env=NPU_SIM_KERNELS_SO={}", so.display());

    // cc knows how to find the C compiler for the target (CC, CC_<target>, cross prefixes);
    // it has no "shared object" mode, so the detected compiler is invoked directly.
    let compiler = cc::Build::new()
        .cargo_metadata(false)
        .opt_level(2)
        .get_compiler();
    let status = Command::new(compiler.path())
        .args(compiler.args())
        .args([
            "-shared", "-fPIC", "-std=c11", "-Wall", "-Wextra", "-Werror",
        ])
        .arg("-Iinclude")
        .arg(&source)
        .arg("-o")
        .arg(&so)
        .status()
        .expect("failed to run the C compiler for the simulator's kernels");
    assert!(status.success(), "compiling {} failed", source.display());

    // aclAppLog's C half: C-variadic, which stable Rust cannot define.
    let app_log = "csrc/app_log.c";
    println!("cargo:rerun-if-changed={app_log}");
    println!("cargo:rerun-if-changed=include/acl/acl_base_rt.h");
    cc::Build::new()
        .file(app_log)
        .include("include")
        .std("c11")
        .opt_level(2)
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .compile("npusim_app_log");
}

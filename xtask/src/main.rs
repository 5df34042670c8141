//! Project automation for npu-rs.
//!
//! `cargo run -p xtask -- bindgen` regenerates `crates/npu-sys/src/bindings.rs` from the ACL
//! header npu-sim ships (`crates/npu-sim/include/acl/acl.h`). With `ASCEND_TOOLKIT_HOME` (or
//! `ASCEND_HOME_PATH`) set it reads the real CANN headers under `$ASCEND_TOOLKIT_HOME/include`
//! instead, restricted to the same subset of names, so the rest of the workspace builds unchanged.
//!
//! `cargo run -p xtask -- bindgen --check` regenerates in memory and fails if the committed file
//! differs; `.ci/run` uses it so stale bindings cannot land.
//!
//! bindgen loads libclang at run time (the `runtime` feature), so building this crate needs no
//! libclang; running the `bindgen` command does.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::{env, fs, io::Write as _};

use bindgen::callbacks::{IntKind, ParseCallbacks};
use syn::visit_mut::VisitMut;

/// Functions that only newer CANN releases export. They are bound as `Option` fields and probed
/// at load time, so an older libascendcl.so still loads; see docs/ascend.md.
const OPTIONAL_FUNCTIONS: &[&str] = &[
    "aclFinalizeReference",
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
    // Memory (simmem).
    "aclrtMemsetD32",
    "aclrtMemsetD32Async",
    "aclrtMemGetAddressRange",
    "aclrtGetMemUsageInfo",
    "aclrtMemcpyBatch",
    "aclrtMemcpyBatchAsync",
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
];

/// Headers CANN does not include from `acl/acl.h` that npu-rs binds too.
const EXTRA_HEADERS: &[&str] = &["acl_rt_memory_soma.h"];

const OUTPUT: &str = "crates/npu-sys/src/bindings.rs";
const PROJECT_INCLUDE: &str = "crates/npu-sim/include";

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("bindgen") => bindgen_command(args.iter().skip(1).any(|a| a == "--check")),
        _ => Err(
            "usage: cargo run -p xtask -- bindgen [--check]\n\n  bindgen   regenerate \
             crates/npu-sys/src/bindings.rs from the ACL headers\n  --check   fail if the \
             committed bindings differ from a fresh generation"
                .to_string(),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

fn bindgen_command(check: bool) -> Result<(), String> {
    let root = workspace_root();
    let generated = generate(&root)?;
    let output = root.join(OUTPUT);
    if check {
        let committed = fs::read_to_string(&output)
            .map_err(|e| format!("cannot read {}: {e}", output.display()))?;
        if committed != generated {
            return Err(format!(
                "{OUTPUT} is stale: the ACL header changed without regenerating the bindings.\n\
                 Run `cargo run -p xtask -- bindgen` and commit the result."
            ));
        }
        println!("{OUTPUT} is up to date");
    } else {
        fs::write(&output, generated)
            .map_err(|e| format!("cannot write {}: {e}", output.display()))?;
        println!("wrote {OUTPUT}");
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

fn generate(root: &Path) -> Result<String, String> {
    let project_include = root.join(PROJECT_INCLUDE);
    let ours = run_bindgen(&project_include, None)?;
    let (source, file) = match toolkit_include() {
        Some(include) => {
            // The subset is defined by our header: take exactly its names from the real one.
            let names = item_names(&ours);
            let generated = run_bindgen(&include, Some(&names))?;
            (
                format!("the CANN headers in {}", include.display()),
                generated,
            )
        }
        None => (format!("{PROJECT_INCLUDE}/acl/acl.h"), ours),
    };
    let text = render(&file, &source)?;
    rustfmt(root, &text)
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

fn run_bindgen(include: &Path, only: Option<&BTreeSet<String>>) -> Result<syn::File, String> {
    let header = include.join("acl").join("acl.h");
    if !header.is_file() {
        return Err(format!("no ACL header at {}", header.display()));
    }
    let extra = EXTRA_HEADERS
        .iter()
        .map(|name| include.join("acl").join(name))
        .filter(|path| path.is_file());
    let mut builder = extra
        .fold(
            bindgen::Builder::default().header(header.to_string_lossy()),
            |builder, path| builder.header(path.to_string_lossy()),
        )
        .clang_arg(format!("-I{}", include.display()))
        .default_enum_style(bindgen::EnumVariation::Consts)
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
        .map_err(|e| format!("bindgen failed on {}: {e}", header.display()))?;
    syn::parse_file(&bindings.to_string()).map_err(|e| format!("bindgen output: {e}"))
}

/// Every item name in a generated file: functions, types and constants.
fn item_names(file: &syn::File) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for item in &file.items {
        match item {
            syn::Item::ForeignMod(block) => {
                for f in &block.items {
                    if let syn::ForeignItem::Fn(f) = f {
                        names.insert(f.sig.ident.to_string());
                    }
                }
            }
            syn::Item::Type(t) => {
                names.insert(t.ident.to_string());
            }
            syn::Item::Struct(s) => {
                names.insert(s.ident.to_string());
            }
            syn::Item::Union(u) => {
                names.insert(u.ident.to_string());
            }
            syn::Item::Const(c) => {
                names.insert(c.ident.to_string());
            }
            _ => {}
        }
    }
    names
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

fn render(file: &syn::File, source: &str) -> Result<String, String> {
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
            "optional functions not declared by the header: {missing:?}"
        ));
    }

    Ok(format!(
        "//! Raw ACL types, constants and the function list, generated by bindgen from \
         {source}.\n//!\n//! Do not edit: run `cargo run -p xtask -- bindgen` instead.\n\n\
         {items}\n\
         /// Expands `$callback! {{ $extra required {{ fn ...; }} optional {{ fn ...; }} }}` with \
         every\n/// ACL function npu-rs binds, in header order. `optional` lists the functions \
         only newer\n/// CANN releases export.\n\
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

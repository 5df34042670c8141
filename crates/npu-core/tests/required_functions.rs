//! The functions a runtime must export to load (`AclApi::REQUIRED`) are exactly those npu-rs
//! calls unconditionally: each is called somewhere in the code of npu-rs's library crates (doc
//! comments and other comments do not count). A required function nothing calls would refuse,
//! for no reason, a runtime that lacks it; the reverse (an optional function called as if it
//! were always there) does not compile, since optional functions are `Option`s.

use std::path::{Path, PathBuf};

use npu_core::ffi::AclApi;

/// The library crates whose code calls the runtime.
const CRATES: [&str; 4] = ["npu-core", "npu-mem", "npu-stream", "npu"];

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// The code of the library crates, without comments (so without doc examples).
fn library_code() -> String {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    for name in CRATES {
        sources(&crates.join(name).join("src"), &mut files);
    }
    let mut code = String::new();
    for file in files {
        for line in std::fs::read_to_string(&file).unwrap().lines() {
            let line = line.split("//").next().unwrap();
            code.push_str(line);
            code.push('\n');
        }
    }
    code
}

/// Whether `name` stands in `code` as a whole word.
fn mentions(code: &str, name: &str) -> bool {
    code.match_indices(name).any(|(at, _)| {
        let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
        let before = code[..at].chars().next_back().is_none_or(|c| !word(c));
        let after = code[at + name.len()..]
            .chars()
            .next()
            .is_none_or(|c| !word(c));
        before && after
    })
}

#[test]
fn every_required_function_is_called_by_the_library() {
    let code = library_code();
    let uncalled: Vec<&str> = AclApi::REQUIRED
        .iter()
        .copied()
        .filter(|name| !mentions(&code, name))
        .collect();
    assert!(
        uncalled.is_empty(),
        "required by npu-sys but called nowhere in {CRATES:?}: {uncalled:?}; list them in \
         xtask's OPTIONAL_FUNCTIONS and regenerate the bindings"
    );
}

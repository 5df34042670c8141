//! Misuse that must not compile: safe code cannot complete an operation (and so free its
//! buffers while the device still uses them), create a completer, run code on a completion, or
//! call the plumbing npu-rs's crates share (it takes a seal a dependent cannot make); nor can
//! it replace a stream's fault watch or claim its faults, implement the pool machinery's
//! sealed `Source`, name a runtime library without `unsafe`, build a record npu-sys
//! reports (`#[non_exhaustive]`), hand pageable memory to an async copy or a borrowed buffer to
//! a kernel launch, reach one part of a split buffer from two operations, copy over a value
//! word that another stream may be signalling through, or register a boxed slice; and a
//! discarded builder, setting of a value type or guard is flagged (`#[must_use]`). The expected
//! compiler errors are in `tests/ui*/*.stderr`; `TRYBUILD=overwrite` regenerates them after a
//! deliberate change.

#[test]
fn forging_a_completion_does_not_compile() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}

#[test]
fn aliasing_memory_or_copying_pageable_memory_does_not_compile() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui_memory/*.rs");
}

#[test]
fn calling_the_plumbing_npu_rs_crates_share_without_their_seal_does_not_compile() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui_sealed/*.rs");
}

#[test]
fn discarding_a_builder_a_changed_setting_or_a_guard_is_flagged() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui_unused/*.rs");
}

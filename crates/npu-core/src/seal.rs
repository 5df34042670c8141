//! The seal of the plumbing npu-rs's crates share.
//!
//! npu-core, npu-mem, npu-stream and the `npu` facade are separate packages, so whatever one of
//! them calls in another is `pub`, and reachable by any crate that adds the callee as a
//! dependency. That plumbing is not API: it changes with npu-rs's crates, and its misuse (a
//! teardown counted that never ends, a completing scope raised by a user's thread) would make
//! npu-rs's own waits time out or refuse. So every safe item of it takes a [`Seal`], which has
//! no safe constructor: each of npu-rs's other crates makes one (its `crate::SEAL`) through
//! [`Seal::npu_rs`], whose contract reserves it for them (npu-core makes its own directly).
//! Plumbing whose misuse could be unsound is an `unsafe fn` with a `# Safety` section instead,
//! which seals it the same way.

/// The capability to call the plumbing npu-rs's crates share (see the [module](self)). It
/// carries nothing: an item that takes one only requires that its caller could make one.
#[derive(Debug, Clone, Copy)]
pub struct Seal(());

impl Seal {
    /// The seal, for npu-rs's own crates.
    ///
    /// # Safety
    ///
    /// Called only by npu-rs's own crates (and their tests): the items that take a `Seal`
    /// change with them, without notice to anyone else, and keep their invariants only when
    /// called the way npu-rs's crates call them.
    pub const unsafe fn npu_rs() -> Seal {
        Seal(())
    }
}

/// npu-core's own seal.
pub(crate) const SEAL: Seal = Seal(());

//! Scoped tracing subscribers that see every callsite, in test binaries whose other tests run
//! on other threads meanwhile. Shared by path with the other crates' tests.

use std::sync::LazyLock;

use tracing::Dispatch;

/// Keeps a second tracing dispatcher alive for the rest of the process; call it before making
/// a scoped subscriber (`with_default`, `set_default`). While one dispatcher is alive, tracing
/// asks only the hitting thread's default for a new callsite's interest, so a callsite another
/// test's thread hits first is cached as "never" and the scoped subscriber misses it on its
/// own thread too (docs/observability.md). With two alive, every callsite's interest is asked
/// of all of them.
pub(crate) fn see_every_callsite() {
    static SECOND: LazyLock<Dispatch> =
        LazyLock::new(|| Dispatch::new(tracing::subscriber::NoSubscriber::default()));
    LazyLock::force(&SECOND);
}

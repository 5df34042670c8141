//! A page of memory shared between processes (a memfd) holding the state of one shared object,
//! whose first word is a futex: a change made by any process wakes, through it, a watcher
//! thread in every process that maps the page, which rings that process's bell.

use std::marker::PhantomData;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use npu_sys::*;

use crate::error::{Res, SimError};
use crate::memory::PAGE;

/// How long a watcher sleeps on the futex before checking whether its owner still exists
/// (a change wakes it at once; this only bounds how long a destroyed owner's watcher lives).
const WATCH_SLICE: Duration = Duration::from_millis(200);

/// What a shared page holds: atomics only, laid out from the page's start, valid when
/// all-zero (a new page is zero-filled).
///
/// # Safety
/// Implementors must be `#[repr(C)]` structs of atomics (or a single atomic) no larger than a
/// page, for which all-zero bytes are a valid value.
pub(crate) unsafe trait Words: Send + Sync + 'static {
    /// The futex word every change bumps or sets.
    fn futex(&self) -> &AtomicU32;
    /// Whether a watcher that finds the futex at `seen` (after `last` the previous time) must
    /// ring its owner's bell.
    fn rings(seen: u32, last: Option<u32>) -> bool;
}

/// A mapping of a shared page, typed by what it holds.
pub(crate) struct SharedPage<W: Words> {
    file: Arc<OwnedFd>,
    base: *const W,
    _words: PhantomData<W>,
}

// SAFETY: the page holds atomics only (the `Words` contract), in a mapping that lives as long
// as the SharedPage; every access is atomic.
unsafe impl<W: Words> Send for SharedPage<W> {}
// SAFETY: as above.
unsafe impl<W: Words> Sync for SharedPage<W> {}
// The impls above vouch for `base` alone: every other field is `Send + Sync` of its own for any
// `W: Words` (atomics, which are both), checked here, and a field added later breaks this
// pattern until it is checked too.
const _: () = {
    fn checked<W: Words>(fields: &SharedPage<W>) {
        let SharedPage {
            file,
            base: _,
            _words: words,
        } = fields;
        let _: [&(dyn Send + Sync); 2] = [file, words];
    }
    let _ = checked::<AtomicU32>;
};

impl<W: Words> SharedPage<W> {
    /// A new, zeroed page of `what`.
    pub(crate) fn create(what: &str) -> Res<Self> {
        const { assert!(size_of::<W>() <= PAGE) };
        let file = super::memfd(what)?;
        // SAFETY: ftruncate on a descriptor this process owns.
        if unsafe { libc::ftruncate(file.as_raw_fd(), PAGE as libc::off_t) } != 0 {
            return Err(SimError::new(
                ACL_ERROR_RT_RESOURCE_ALLOC_FAIL,
                format!(
                    "cannot size the shared page of {what} ({})",
                    std::io::Error::last_os_error()
                ),
            ));
        }
        Self::map(Arc::new(file))
    }

    /// Maps the page another process shared.
    pub(crate) fn map(file: Arc<OwnedFd>) -> Res<Self> {
        let base = super::map_file(&file, PAGE)?;
        Ok(SharedPage {
            file,
            base: base as *const W,
            _words: PhantomData,
        })
    }

    /// The shared file, for the broker to hand out.
    pub(crate) fn file(&self) -> &Arc<OwnedFd> {
        &self.file
    }

    /// What the page holds.
    pub(crate) fn words(&self) -> &W {
        // SAFETY: the mapping is page-aligned, at least size_of::<W>() long, zero-filled or
        // written only through these atomics, and lives as long as self.
        unsafe { &*self.base }
    }

    /// Wakes the watchers of every process after a change.
    pub(crate) fn wake(&self) {
        // SAFETY: FUTEX_WAKE on an aligned u32 of a live shared mapping (not private: the
        // waiters are in other processes).
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.words().futex().as_ptr(),
                libc::FUTEX_WAKE,
                i32::MAX,
                0,
                0,
                0,
            );
        }
    }

    /// Starts the thread that turns changes made by other processes into rings of `ring`'s
    /// bell, for as long as `owner` lives.
    pub(crate) fn watch<T: Send + Sync + 'static>(
        self: &Arc<Self>,
        what: &str,
        owner: Weak<T>,
        ring: fn(&T),
    ) -> Res<()> {
        let page = self.clone();
        std::thread::Builder::new()
            .name(format!("npusim-ipc-{what}"))
            .spawn(move || {
                let slice = libc::timespec {
                    tv_sec: WATCH_SLICE.as_secs() as libc::time_t,
                    tv_nsec: WATCH_SLICE.subsec_nanos() as libc::c_long,
                };
                let futex = page.words().futex();
                let mut last = None;
                loop {
                    let seen = futex.load(Ordering::Acquire);
                    let Some(owner) = owner.upgrade() else { break };
                    if W::rings(seen, last) {
                        ring(&owner);
                    }
                    last = Some(seen);
                    drop(owner);
                    // SAFETY: FUTEX_WAIT on an aligned u32 of a live shared mapping (the
                    // thread holds the page); it returns at once if the word is no longer
                    // `seen`, so a change between the load and the wait is not missed.
                    unsafe {
                        libc::syscall(
                            libc::SYS_futex,
                            futex.as_ptr(),
                            libc::FUTEX_WAIT,
                            seen,
                            &raw const slice,
                            0,
                            0,
                        );
                    }
                }
            })
            .map(drop)
            .map_err(|error| {
                SimError::new(
                    ACL_ERROR_RT_RESOURCE_ALLOC_FAIL,
                    format!("cannot start the watcher of a shared {what}: {error}"),
                )
            })
    }
}

impl<W: Words> Drop for SharedPage<W> {
    fn drop(&mut self) {
        // SAFETY: the page was mapped by `map` and nothing else refers to it any more.
        unsafe { libc::munmap(self.base as *mut libc::c_void, PAGE) };
    }
}

//! The state of a notify shared between processes: one 32-bit word in a shared page (a
//! memfd), set by any process's record and cleared by any process's wait, with a futex so a
//! record in one process wakes the waits of the others.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use npu_sys::*;

use crate::error::{Res, SimError};
use crate::memory::PAGE;

const SET: u32 = 1;
/// How long a watcher sleeps on the futex before checking whether its notify still exists
/// (a record wakes it at once; this only bounds how long a destroyed notify's watcher lives).
const WATCH_SLICE: Duration = Duration::from_millis(200);

/// A notify's flag word in shared memory.
pub(crate) struct SharedFlag {
    file: Arc<OwnedFd>,
    word: *const AtomicU32,
}

// SAFETY: the word is an atomic in a mapping that lives as long as the SharedFlag; every access
// is atomic.
unsafe impl Send for SharedFlag {}
// SAFETY: as above.
unsafe impl Sync for SharedFlag {}

impl SharedFlag {
    /// A new, cleared flag in a new shared page.
    pub(crate) fn create() -> Res<Self> {
        let file = super::memfd("a notify")?;
        // SAFETY: ftruncate on a descriptor this process owns.
        if unsafe { libc::ftruncate(file.as_raw_fd(), PAGE as libc::off_t) } != 0 {
            return Err(SimError::new(
                ACL_ERROR_RT_RESOURCE_ALLOC_FAIL,
                format!(
                    "cannot size a shared notify page ({})",
                    std::io::Error::last_os_error()
                ),
            ));
        }
        Self::map(Arc::new(file))
    }

    /// Maps the flag page another process shared.
    pub(crate) fn map(file: Arc<OwnedFd>) -> Res<Self> {
        let base = super::map_file(&file, PAGE)?;
        Ok(SharedFlag {
            file,
            word: base as *const AtomicU32,
        })
    }

    /// The shared page, for the broker to hand out.
    pub(crate) fn file(&self) -> &Arc<OwnedFd> {
        &self.file
    }

    fn word(&self) -> &AtomicU32 {
        // SAFETY: the mapping is page-aligned and lives as long as self.
        unsafe { &*self.word }
    }

    /// A record: sets the flag and wakes the watchers of every process.
    pub(crate) fn set(&self) {
        self.word().fetch_or(SET, Ordering::AcqRel);
        // SAFETY: FUTEX_WAKE on an aligned u32 of a live shared mapping (not private: the
        // waiters are in other processes).
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.word,
                libc::FUTEX_WAKE,
                i32::MAX,
                0,
                0,
                0,
            );
        }
    }

    /// A wait's reset: clears the flag; whether it was set.
    pub(crate) fn take(&self) -> bool {
        self.word().swap(0, Ordering::AcqRel) & SET != 0
    }

    /// Starts the thread that turns records made by other processes into rings of `ring`'s
    /// bell, for as long as `owner` lives.
    pub(crate) fn watch<T: Send + Sync + 'static>(
        self: &Arc<Self>,
        owner: Weak<T>,
        ring: fn(&T),
    ) -> Res<()> {
        let flag = self.clone();
        std::thread::Builder::new()
            .name("npusim-ipc-notify".into())
            .spawn(move || {
                let slice = libc::timespec {
                    tv_sec: WATCH_SLICE.as_secs() as libc::time_t,
                    tv_nsec: WATCH_SLICE.subsec_nanos() as libc::c_long,
                };
                loop {
                    let seen = flag.word().load(Ordering::Acquire);
                    let Some(owner) = owner.upgrade() else { break };
                    if seen & SET != 0 {
                        ring(&owner);
                    }
                    drop(owner);
                    // SAFETY: FUTEX_WAIT on an aligned u32 of a live shared mapping (the
                    // thread holds the flag); it returns at once if the word is no longer
                    // `seen`, so a record between the load and the wait is not missed.
                    unsafe {
                        libc::syscall(
                            libc::SYS_futex,
                            flag.word,
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
                    format!("cannot start a shared notify's watcher: {error}"),
                )
            })
    }
}

impl Drop for SharedFlag {
    fn drop(&mut self) {
        // SAFETY: the page was mapped by `map` and nothing else refers to it any more.
        unsafe { libc::munmap(self.word as *mut libc::c_void, PAGE) };
    }
}

//! IPC memory sharing between processes (aclrtIpcMem*): each process has its own simulator,
//! and device memory is host memory of that process, so an export makes the allocation a
//! shared file mapped at its own address, and an import maps the same file into the importer.
//!
//! An exporting process runs a broker thread on an abstract Unix socket named after its pid;
//! an importer asks it for a key, the broker checks the importer's pid (SO_PEERCRED, which the
//! importer cannot forge) against the key's whitelist and answers with the file over
//! SCM_RIGHTS. No ptrace rights or shared names in the file system are needed, and the broker
//! dies with its process, so an import from an exporter that is gone fails cleanly.

mod event;
mod flag;
mod page;
mod wire;

pub(crate) use event::{Reached, SharedEvent};
pub(crate) use flag::SharedFlag;

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use npu_sys::*;

use crate::error::{Res, SimError, ensure, fail};
use crate::memory::{AllocKind, MemoryMap};
use crate::sync::lock;
pub(crate) use wire::Reply;

/// Bytes of a key, with its NUL (the `len` aclrtIpcMemGetExportKey requires).
pub(crate) const KEY_LEN: usize = 65;
const KEY_PREFIX: &str = "npusim-ipc";

/// What a key shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A range of device memory (aclrtIpcMemGetExportKey).
    Memory = 1,
    /// A notify's flag (aclrtNotifyGetExportKey).
    Notify = 2,
    /// Physical memory of virtual memory management (aclrtMemExportToShareableHandle).
    Physical = 3,
    /// An event's record counters (aclrtIpcGetEventHandle).
    Event = 4,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Memory => "memory",
            Kind::Notify => "a notify",
            Kind::Physical => "physical memory",
            Kind::Event => "an event",
        }
    }
}

/// One export, as the broker hands it out.
struct Export {
    kind: Kind,
    /// What it shares, to withdraw it when that goes: the allocation's base, the notify's
    /// handle.
    owner: usize,
    offset: usize,
    size: usize,
    len: usize,
    device: i32,
    page_size: u32,
    /// Physical memory's memAttr (0 otherwise).
    attr: u32,
    /// The pids allowed to import it; `None` when exported without pid validation.
    whitelist: Option<Vec<i32>>,
    file: Arc<OwnedFd>,
}

/// A range this process imported: the mapping of the whole allocation and where in it the
/// exported range starts.
struct Import {
    base: usize,
    len: usize,
}

/// The process's IPC sharing state.
#[derive(Default)]
pub(crate) struct Ipc {
    exports: Mutex<HashMap<String, Export>>,
    /// The shared file of every allocation made shareable, by its base (exported once, shared
    /// by all its keys).
    files: Mutex<HashMap<usize, Arc<OwnedFd>>>,
    imports: Mutex<HashMap<String, Import>>,
    /// The handle each shareable handle was imported as (one per process while it lives).
    physical_imports: Mutex<HashMap<u64, crate::handle::Handle>>,
    serial: AtomicU64,
    /// Drawn at the first export ([`random_nonce`]).
    nonce: OnceLock<u64>,
    /// Set once the broker listens (or failed to).
    broker: OnceLock<Result<(), String>>,
}

fn own_pid() -> i32 {
    // SAFETY: getpid has no preconditions and cannot fail.
    unsafe { libc::getpid() }
}

/// The pid a key names as its exporter; malformed keys → 107000.
fn exporter_of(key: &str) -> Res<i32> {
    let pid = key
        .strip_prefix(KEY_PREFIX)
        .and_then(|rest| rest.strip_prefix('-'))
        .and_then(|rest| rest.split('-').next())
        .and_then(|pid| pid.parse::<i32>().ok());
    match pid {
        Some(pid) if pid > 0 => Ok(pid),
        _ => fail!(
            ACL_ERROR_RT_PARAM_INVALID,
            "key {key:?} is not a key from aclrtIpcMemGetExportKey"
        ),
    }
}

/// A process-unique token, so that a key of an earlier process whose pid was reused names
/// nothing in the new one.
fn random_nonce() -> u64 {
    let mut bytes = [0u8; 8];
    // SAFETY: getrandom writes at most `bytes.len()` bytes into the buffer.
    let got = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if got == bytes.len() as isize {
        u64::from_ne_bytes(bytes)
    } else {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos() as u64)
    }
}

impl Ipc {
    /// Exports `[ptr, ptr+size)` of a device allocation under a new key; `validate` says
    /// whether importers must be whitelisted.
    pub(crate) fn export_memory(
        &'static self,
        memory: &MemoryMap,
        ptr: usize,
        size: usize,
        validate: bool,
    ) -> Res<String> {
        let (base, len, kind, file) = {
            let mut files = lock(&self.files);
            match memory.allocation_of(ptr) {
                Some((base, len, kind)) if files.contains_key(&base) => {
                    (base, len, kind, files[&base].clone())
                }
                _ => {
                    let file = memfd(format_args!("{ptr:#x}"))?;
                    let (base, len, kind) = memory.share(ptr, &file)?;
                    let file = Arc::new(file);
                    files.insert(base, file.clone());
                    (base, len, kind, file)
                }
            }
        };
        let AllocKind::Device {
            device, page_size, ..
        } = kind
        else {
            fail!(ACL_ERROR_RT_PARAM_INVALID, "{ptr:#x} is not device memory");
        };
        // Checked: a size near usize::MAX would wrap the sum round to an end that passes.
        ensure!(
            (ptr - base).checked_add(size).is_some_and(|end| end <= len),
            ACL_ERROR_RT_PARAM_INVALID,
            "range {ptr:#x}+{size} runs past the end of its allocation ({base:#x}+{len})"
        );
        self.publish(
            self.new_key(),
            Export {
                kind: Kind::Memory,
                owner: base,
                offset: ptr - base,
                size,
                len,
                device,
                page_size,
                attr: 0,
                whitelist: validate.then(Vec::new),
                file,
            },
        )
    }

    /// Exports the flag of the notify with handle `owner` of `device` under a new key.
    pub(crate) fn export_notify(
        &'static self,
        owner: usize,
        device: i32,
        flag: &SharedFlag,
        validate: bool,
    ) -> Res<String> {
        self.publish(
            self.new_key(),
            Export {
                kind: Kind::Notify,
                owner,
                offset: 0,
                size: 4,
                len: crate::memory::PAGE,
                device,
                page_size: crate::memory::PAGE as u32,
                attr: 0,
                whitelist: validate.then(Vec::new),
                file: flag.file().clone(),
            },
        )
    }

    /// Exports the record counters of the event with handle `owner` of `device` under a new
    /// key. Any process may open it: CANN has no whitelist for events.
    pub(crate) fn export_event(
        &'static self,
        owner: usize,
        device: i32,
        shared: &SharedEvent,
    ) -> Res<String> {
        self.publish(
            self.new_key(),
            Export {
                kind: Kind::Event,
                owner,
                offset: 0,
                size: size_of::<event::Counters>(),
                len: crate::memory::PAGE,
                device,
                page_size: crate::memory::PAGE as u32,
                attr: 0,
                whitelist: None,
                file: shared.file().clone(),
            },
        )
    }

    /// Exports the physical memory with handle `owner` under a new shareable handle; one
    /// export per physical allocation (a second → 107000).
    pub(crate) fn export_physical(
        &'static self,
        owner: usize,
        physical: &crate::vmm::Physical,
        validate: bool,
    ) -> Res<u64> {
        ensure!(
            !physical.is_imported(),
            ACL_ERROR_RT_PARAM_INVALID,
            "the physical memory was imported from another process: only memory this process \
             allocated with aclrtMallocPhysical can be exported"
        );
        self.start_broker()?;
        // The check and the insertion hold one guard: two threads exporting the same handle
        // at once must not both pass the check.
        let mut exports = lock(&self.exports);
        ensure!(
            !exports
                .values()
                .any(|export| export.kind == Kind::Physical && export.owner == owner),
            ACL_ERROR_RT_PARAM_INVALID,
            "the physical memory is already exported (one shareable handle per handle)"
        );
        let low = (*self.nonce.get_or_init(random_nonce) as u32)
            .wrapping_add(self.serial.fetch_add(1, Ordering::Relaxed) as u32);
        let shareable = (u64::from(own_pid() as u32) << 32) | u64::from(low);
        exports.insert(
            shareable_key(shareable),
            Export {
                kind: Kind::Physical,
                owner,
                offset: 0,
                size: physical.size,
                len: physical.bytes(),
                device: physical.device.id,
                page_size: physical.granularity as u32,
                attr: physical.prop.memAttr,
                whitelist: validate.then(Vec::new),
                file: physical.file().clone(),
            },
        );
        Ok(shareable)
    }

    /// A new key of this process.
    fn new_key(&self) -> String {
        let key = format!(
            "{KEY_PREFIX}-{}-{:016x}-{}",
            own_pid(),
            self.nonce.get_or_init(random_nonce),
            self.serial.fetch_add(1, Ordering::Relaxed)
        );
        debug_assert!(key.len() < KEY_LEN);
        key
    }

    /// Files `export` under `key`, which the broker then answers for.
    fn publish(&'static self, key: String, export: Export) -> Res<String> {
        self.start_broker()?;
        lock(&self.exports).insert(key.clone(), export);
        Ok(key)
    }

    /// Adds `pids` to the whitelist of a key of `kind` this process exported.
    pub(crate) fn allow(&self, key: &str, kind: Kind, pids: &[i32]) -> Res<()> {
        ensure!(
            self.allow_where(pids, |exported, export| exported == key
                && export.kind == kind)?,
            ACL_ERROR_RT_PARAM_INVALID,
            "key {key:?} is not exported by this process (or was closed)"
        );
        Ok(())
    }

    /// Adds `pids` to the whitelists of the keys of the notify with handle `owner`.
    pub(crate) fn allow_notify(&self, owner: usize, pids: &[i32]) -> Res<()> {
        ensure!(
            self.allow_where(pids, |_, export| export.kind == Kind::Notify
                && export.owner == owner)?,
            ACL_ERROR_RT_PARAM_INVALID,
            "the notify was not exported with aclrtNotifyGetExportKey"
        );
        Ok(())
    }

    /// Adds `pids` (positive, else 107000) to the whitelist of every export `matches` picks;
    /// whether there was one.
    fn allow_where(&self, pids: &[i32], matches: impl Fn(&str, &Export) -> bool) -> Res<bool> {
        if let Some(bad) = pids.iter().find(|&&pid| pid <= 0) {
            fail!(ACL_ERROR_RT_PARAM_INVALID, "pid {bad} is not a process id");
        }
        let mut exports = lock(&self.exports);
        let mut found = false;
        for (key, export) in exports.iter_mut() {
            if matches(key, export) {
                found = true;
                if let Some(whitelist) = &mut export.whitelist {
                    whitelist.extend_from_slice(pids);
                }
            }
        }
        Ok(found)
    }

    /// Maps the memory `key` names into this process as device memory; returns the device
    /// pointer of the exported range.
    /// `devices` is how many devices this process's simulator has: the exporter's device must
    /// be one of them.
    pub(crate) fn import_memory(
        &self,
        memory: &MemoryMap,
        key: &str,
        devices: usize,
    ) -> Res<usize> {
        let mut imports = lock(&self.imports);
        ensure!(
            !imports.contains_key(key),
            ACL_ERROR_RT_PARAM_INVALID,
            "key {key:?} is already imported by this process (aclrtIpcMemClose it first)"
        );
        let (reply, file) = fetch(key, Kind::Memory)?;
        ensure!(
            usize::try_from(reply.device).is_ok_and(|device| device < devices),
            ACL_ERROR_RT_IPC_ERROR,
            "key {key:?} names memory of device {}, which this process's simulator does not \
             have ({devices} devices)",
            reply.device
        );
        let len = reply.len as usize;
        let base = map_file(&file, len)?;
        memory.adopt_import(
            base,
            len,
            AllocKind::Device {
                device: reply.device,
                accounted: 0,
                page_size: reply.page_size,
            },
        );
        imports.insert(key.to_owned(), Import { base, len });
        Ok(base + reply.offset as usize)
    }

    /// Imports the physical memory of a shareable handle: `adopt` records the exporter's file
    /// as a physical allocation of this process; `alive` says whether an earlier import's
    /// handle is still in use (then the import is refused, 107000).
    pub(crate) fn import_physical(
        &self,
        shareable: u64,
        adopt: impl FnOnce(&Reply, OwnedFd) -> Res<crate::handle::Handle>,
        alive: impl Fn(crate::handle::Handle) -> bool,
    ) -> Res<crate::handle::Handle> {
        let mut imported = lock(&self.physical_imports);
        if let Some(&earlier) = imported.get(&shareable) {
            ensure!(
                !alive(earlier),
                ACL_ERROR_RT_PARAM_INVALID,
                "shareable handle {shareable:#x} is already imported by this process (free its \
                 handle with aclrtFreePhysical first)"
            );
        }
        let (reply, file) = fetch(&shareable_key(shareable), Kind::Physical)?;
        let handle = adopt(&reply, file)?;
        imported.insert(shareable, handle);
        Ok(handle)
    }

    /// Closes `key` in this process: an import is unmapped once no task touches it; an export
    /// is withdrawn (no new imports; the exporter's memory and existing imports stay valid).
    pub(crate) fn close(&self, memory: &MemoryMap, key: &str) -> Res<()> {
        if let Some(import) = lock(&self.imports).remove(key) {
            memory.disown(import.base);
            // SAFETY: the mapping was made by `map_file` with this length and is no longer
            // device memory of the simulator, so no task can reach it. Held back like freed
            // memory, so a copy naming it later fails with a code instead of faulting.
            unsafe { crate::quarantine::retire(import.base, import.len) };
            return Ok(());
        }
        let mut exports = lock(&self.exports);
        ensure!(
            exports
                .get(key)
                .is_some_and(|export| export.kind == Kind::Memory),
            ACL_ERROR_RT_PARAM_INVALID,
            "key {key:?} is neither exported nor imported by this process (or was closed)"
        );
        exports.remove(key);
        Ok(())
    }

    /// Withdraws every export of the allocation at `base`, which is being freed: later imports
    /// of its keys fail, while processes that imported it keep their mapping.
    pub(crate) fn forget_allocation(&self, base: usize) {
        if lock(&self.files).remove(&base).is_some() {
            self.forget(Kind::Memory, base);
        }
    }

    /// Withdraws every export of what `owner` names.
    pub(crate) fn forget(&self, kind: Kind, owner: usize) {
        lock(&self.exports).retain(|_, export| export.kind != kind || export.owner != owner);
    }

    /// Starts the broker thread once per process.
    fn start_broker(&'static self) -> Res<()> {
        let started = self.broker.get_or_init(|| {
            let listener = wire::listen(own_pid()).map_err(|error| error.to_string())?;
            std::thread::Builder::new()
                .name("npusim-ipc".into())
                .spawn(move || self.serve(listener))
                .map(drop)
                .map_err(|error| error.to_string())
        });
        match started {
            Ok(()) => Ok(()),
            Err(error) => fail!(
                ACL_ERROR_RT_IPC_ERROR,
                "cannot start the process's IPC broker: {error}"
            ),
        }
    }

    /// The broker: answers import requests one at a time, for the life of the process.
    fn serve(&self, listener: UnixListener) {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            // A stalled importer must not keep the others waiting for ever.
            if stream.set_read_timeout(Some(wire::PEER_TIMEOUT)).is_err()
                || stream.set_write_timeout(Some(wire::PEER_TIMEOUT)).is_err()
            {
                continue;
            }
            let (Some(pid), Some(key)) = (wire::peer_pid(&stream), wire::read_request(&mut stream))
            else {
                continue;
            };
            let exports = lock(&self.exports);
            let (reply, file) = match exports.get(&key) {
                None => (Reply::refusal(ACL_ERROR_RT_PARAM_INVALID), None),
                Some(export)
                    if export
                        .whitelist
                        .as_ref()
                        .is_some_and(|allowed| !allowed.contains(&pid)) =>
                {
                    (Reply::refusal(ACL_ERROR_RT_NO_PERMISSION), None)
                }
                Some(export) => (
                    Reply {
                        code: 0,
                        kind: export.kind as u32,
                        device: export.device,
                        page_size: export.page_size,
                        offset: export.offset as u64,
                        size: export.size as u64,
                        len: export.len as u64,
                        attr: export.attr,
                    },
                    Some(export.file.clone()),
                ),
            };
            drop(exports);
            if let Err(error) = wire::send_reply(&stream, &reply, file.as_deref()) {
                crate::error::log!(debug, target: "npu_sim", %error, pid, "an IPC import reply was not delivered");
            }
        }
    }
}

/// The broker key of a shareable handle: the exporter's pid is its upper half.
pub(crate) fn shareable_key(shareable: u64) -> String {
    format!(
        "{KEY_PREFIX}-{}-shareable-{:08x}",
        shareable >> 32,
        shareable as u32
    )
}

/// Asks the exporter of `key` for it, which must share `kind`: its description and file.
pub(crate) fn fetch(key: &str, kind: Kind) -> Res<(Reply, OwnedFd)> {
    let pid = exporter_of(key)?;
    ensure!(
        pid != own_pid(),
        ACL_ERROR_RT_PARAM_INVALID,
        "key {key:?} was exported by this process, which uses what it exported directly"
    );
    let (reply, file) = wire::request(pid, key)?;
    ensure!(
        reply.kind == kind as u32,
        ACL_ERROR_RT_PARAM_INVALID,
        "key {key:?} does not share {}",
        kind.name()
    );
    ensure!(
        reply
            .offset
            .checked_add(reply.size)
            .is_some_and(|end| end <= reply.len),
        ACL_ERROR_RT_IPC_ERROR,
        "the exporting process {pid} answered with an inconsistent range"
    );
    Ok((reply, file))
}

/// A new, empty shared file for `what`.
fn memfd(what: impl std::fmt::Display) -> Res<OwnedFd> {
    let name = c"npusim-ipc-memory";
    // SAFETY: memfd_create takes a NUL-terminated name and flags; it returns a new descriptor
    // or -1.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(SimError::new(
            ACL_ERROR_RT_MEMORY_ALLOCATION,
            format!(
                "cannot share {what}: memfd_create failed ({})",
                std::io::Error::last_os_error()
            ),
        ));
    }
    // SAFETY: fd is a new descriptor nothing else owns.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
}

/// Maps `len` bytes of a shared file anywhere in this process.
fn map_file(file: &OwnedFd, len: usize) -> Res<usize> {
    // SAFETY: a shared mapping of a file descriptor this process holds, with no address hint.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        fail!(
            ACL_ERROR_RT_MEMORY_ALLOCATION,
            "cannot map {len} bytes of imported memory ({})",
            std::io::Error::last_os_error()
        );
    }
    Ok(ptr as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_well_formed_keys_name_an_exporter() {
        assert_eq!(exporter_of("npusim-ipc-42-00ff-3").unwrap(), 42);
        for bad in [
            "",
            "npusim-ipc",
            "npusim-ipc-",
            "npusim-ipc-0-1-1",
            "npusim-ipc--1-0",
            "other-42",
        ] {
            assert_eq!(
                exporter_of(bad).unwrap_err().code,
                ACL_ERROR_RT_PARAM_INVALID,
                "{bad:?}"
            );
        }
    }
}

// The plumbing npu-rs's crates share is public (they are separate packages), but a dependent
// cannot call it: each item takes a `Seal`, which it cannot make (`forge_seal.rs`). Here a
// representative of each module, called as before the seal.
use std::sync::{Mutex, OnceLock};

use npu_core::contain::{Rank, lock_here};
use npu_core::{Device, Runtime};

fn main() -> npu_core::Result<()> {
    let lock = Mutex::new(0);
    let _held = lock_here(&lock, Rank::Submission);
    npu_core::contain::contained(|| ());
    npu_core::holds::completing(|| ());
    npu_core::reaper::as_shared_thread(|| ());
    let runtime = Runtime::global()?;
    let _counted = npu_core::reaper::counted(runtime.library_id());
    npu_core::reaper::spawn_counted("forged", 0, || ()).unwrap();
    static CELL: OnceLock<u32> = OnceLock::new();
    npu_core::fork::start_once(&CELL, || 1);
    npu_core::fork::refuse("forged")?;
    let (a, b) = (Device::open(0)?, Device::open(1)?);
    a.with_steady_peer_access("forged", &b, || ())?;
    let buffer = npu_mem::DeviceBuffer::<u8>::new(a.primary_context(), 4)?;
    let _ = npu_mem::bytes_of(&buffer);
    let _ = npu_mem::pool_cache::byte_size::<u8>("forged", "len", 4);
    let _ = runtime.latest_fault(0, npu_core::AclCode(507015));
    Ok(())
}

fn spawned(handle: &tokio::runtime::Handle) -> bool {
    npu_core::contain::spawn_contained(handle, || ())
}

fn watched(runtime: &Runtime, watcher: std::sync::Weak<dyn npu_core::DeviceAbortWatch>) {
    runtime.watch_device_aborts(0, watcher);
}

fn refused_blocking() -> npu_core::Result<()> {
    npu_core::refuse_blocking("aclrtMemcpy", "forged")
}

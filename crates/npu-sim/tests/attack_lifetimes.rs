//! Attacks on memory lifetimes under queued and captured tasks, beyond aclrtFree: virtual
//! memory unmapped (and the addresses mapped again), managed memory freed (and allocated
//! again), pool blocks returned and trimmed, pinned memory of aclrtMallocHostWithCfg freed,
//! registered host memory registered again smaller. The promise attacked is always the one of
//! docs/simulator.md: a task whose memory was freed since its submission (or its capture)
//! fails with 507013 ACL_ERROR_RT_SYS_DMA and touches nothing. Tests that close a hold gate use
//! a device of their own; the file is meant to run under valgrind as well.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ffi::{CStr, c_char, c_void};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::ptr;

use common::*;
use npu_sim::abi::*;
use npu_sim::control;
use npu_sys::*;

const MIB: usize = 1 << 20;

fn memset_async(dev: *mut c_void, len: usize, stream: aclrtStream) -> aclError {
    code!(aclrtMemsetAsync(dev, len, 7, len, stream))
}

/// Reserves `reserve` bytes of addresses and maps one huge page of `device` at their start.
fn mapped_page(device: u32, reserve: usize) -> (*mut c_void, aclrtDrvMemHandle) {
    let mut va = ptr::null_mut();
    acl!(aclrtReserveMemAddress(
        &mut va,
        reserve,
        0,
        ptr::null_mut(),
        0
    ));
    (va, map_new_page(device, va))
}

/// Maps a new huge page of `device` at `va`.
fn map_new_page(device: u32, va: *mut c_void) -> aclrtDrvMemHandle {
    let mut physical = ptr::null_mut();
    acl!(aclrtMallocPhysical(
        &mut physical,
        2 * MIB,
        &huge_physical_prop(device),
        0
    ));
    acl!(aclrtMapMem(va, 2 * MIB, 0, physical, 0));
    physical
}

fn unmap_and_free(va: *mut c_void, physical: aclrtDrvMemHandle) {
    acl!(aclrtUnmapMem(va));
    acl!(aclrtFreePhysical(physical));
}

fn all_zero(dev: *const c_void, len: usize) -> bool {
    download::<u8>(dev, len).iter().all(|&byte| byte == 0)
}

/// Promise: a task names virtual addresses, which it reaches through the mappings in place
/// when it runs (docs/simulator.md, virtual memory): a memset queued on mapped virtual memory
/// that is unmapped, its physical memory freed and other physical memory mapped at the same
/// addresses before it runs writes the new memory (never the freed one, whose pages are gone
/// with its handle and mapping); the same memset with nothing mapped there faults (507013).
#[test]
fn a_queued_memset_on_virtual_memory_reaches_what_is_mapped_when_it_runs() {
    install_eight_devices();
    set_device(1);
    let stream = create_stream();
    let (va, first) = mapped_page(1, 4 * MIB);
    control::hold(1).unwrap();
    assert_eq!(memset_async(va, 2 * MIB, stream), 0);
    unmap_and_free(va, first);
    let second = map_new_page(1, va);
    control::release(1).unwrap();
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(
        download::<u8>(va, 2 * MIB),
        vec![7; 2 * MIB],
        "the new mapping"
    );
    control::hold(1).unwrap();
    assert_eq!(memset_async(va, 2 * MIB, stream), 0);
    unmap_and_free(va, second);
    control::release(1).unwrap();
    sync_fails_with_dma(stream);
    acl!(aclrtReleaseMemAddress(va));
    acl!(aclrtDestroyStream(stream));
}

/// Promise (model runtime instances, point 7, and virtual memory): a memset captured on mapped
/// virtual memory, replayed after the unmap, fails with 507013; replayed after other physical
/// memory was mapped at the same addresses, it writes that memory, as a replay reads the
/// addresses as they are when it runs.
#[test]
fn a_captured_memset_on_virtual_memory_unmapped_since_faults() {
    install_eight_devices();
    set_device(0);
    let stream = create_stream();
    let (va, first) = mapped_page(0, 4 * MIB);
    acl!(aclmdlRICaptureBegin(
        stream,
        ACL_MODEL_RI_CAPTURE_MODE_RELAXED
    ));
    assert_eq!(memset_async(va, 2 * MIB, stream), 0);
    let model = capture_end(stream);
    acl!(aclmdlRIExecuteAsync(model, stream));
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(download::<u8>(va, 1), vec![7], "the replay ran");
    unmap_and_free(va, first);
    acl!(aclmdlRIExecuteAsync(model, stream));
    sync_fails_with_dma(stream);
    let second = map_new_page(0, va);
    acl!(aclmdlRIExecuteAsync(model, stream));
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(
        download::<u8>(va, 2 * MIB),
        vec![7; 2 * MIB],
        "the new mapping"
    );
    acl!(aclmdlRIDestroy(model));
    unmap_and_free(va, second);
    acl!(aclrtReleaseMemAddress(va));
    acl!(aclrtDestroyStream(stream));
}

/// Promise: a value write queued on virtual memory unmapped before it runs faults (507013).
#[test]
fn a_queued_value_write_on_unmapped_virtual_memory_faults() {
    install_eight_devices();
    set_device(6);
    let stream = create_stream();
    let (va, physical) = mapped_page(6, 2 * MIB);
    control::hold(6).unwrap();
    acl!(aclrtValueWrite(va, 42, 0, stream));
    unmap_and_free(va, physical);
    control::release(6).unwrap();
    sync_fails_with_dma(stream);
    acl!(aclrtReleaseMemAddress(va));
    acl!(aclrtDestroyStream(stream));
}

fn alloc_managed(len: usize) -> *mut c_void {
    let mut ptr = ptr::null_mut();
    acl!(aclrtMemAllocManaged(
        &mut ptr,
        len as u64,
        ACL_RT_MEM_ATTACH_GLOBAL
    ));
    ptr
}

/// Promise: a memset and a copy queued on managed memory freed before they run fail with
/// 507013 and touch nothing, even when a new managed allocation has taken the freed addresses.
/// A prefetch queued on it (a task that touches nothing) completes.
#[test]
fn queued_tasks_on_managed_memory_freed_and_allocated_again_fault() {
    install_eight_devices();
    set_device(2);
    let stream = create_stream();
    let managed = alloc_managed(2 * MIB);
    let dev = malloc(4096);
    upload::<u8>(dev, &[3; 4096]);
    control::hold(2).unwrap();
    let location = aclrtMemManagedLocation {
        type_: ACL_MEM_LOCATIONTYPE_DEVICE,
        id: 2,
    };
    acl!(aclrtMemManagedPrefetchAsync(
        managed,
        2 * MIB,
        location,
        0,
        stream
    ));
    assert_eq!(memset_async(managed, 2 * MIB, stream), 0);
    acl!(aclrtMemcpyAsync(
        managed,
        4096,
        dev,
        4096,
        ACL_MEMCPY_DEVICE_TO_DEVICE,
        stream
    ));
    acl!(aclrtFree(managed));
    let again = alloc_managed(2 * MIB);
    control::release(2).unwrap();
    sync_fails_with_dma(stream);
    assert!(
        all_zero(again, 2 * MIB),
        "the tasks wrote the new managed allocation (at {again:p}, the old one was at {managed:p})"
    );
    acl!(aclrtFree(again));
    acl!(aclrtFree(dev));
    acl!(aclrtDestroyStream(stream));
}

/// Promise: a pool block one stream uses in a queued memset, returned with
/// aclrtMemPoolFreeAsync on another stream and released by aclrtMemPoolTrimTo before the memset
/// runs, fails the memset with 507013 (the memory is gone, nothing freed is written).
#[test]
fn a_pool_block_trimmed_under_a_queued_memset_of_another_stream_faults() {
    install_eight_devices();
    set_device(3);
    let (user, freer) = (create_stream(), create_stream());
    let mut pool = ptr::null_mut();
    acl!(aclrtMemPoolCreate(&mut pool, &device_pool_props(3)));
    let mut block = ptr::null_mut();
    acl!(aclrtMemPoolMallocAsync(&mut block, 4096, pool, freer));
    acl!(aclrtSynchronizeStream(freer));
    let mut notify = ptr::null_mut();
    acl!(aclrtCreateNotify(&mut notify, 0));
    acl!(aclrtWaitAndResetNotify(notify, user, 0));
    assert_eq!(memset_async(block, 4096, user), 0);
    acl!(aclrtMemPoolFreeAsync(block, freer));
    acl!(aclrtSynchronizeStream(freer));
    acl!(aclrtMemPoolTrimTo(pool, 0));
    let mut reserved = u64::MAX;
    acl!(aclrtMemPoolGetAttr(
        pool,
        ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_CURRENT,
        (&raw mut reserved).cast()
    ));
    assert_eq!(reserved, 0, "the trim released the block");
    acl!(aclrtRecordNotify(notify, freer));
    sync_fails_with_dma(user);
    acl!(aclrtDestroyNotify(notify));
    acl!(aclrtMemPoolDestroy(pool));
    acl!(aclrtDestroyStream(user));
    acl!(aclrtDestroyStream(freer));
}

/// Promise (model runtime instances, point 7): a memset captured on a pool block, replayed
/// after aclrtMemPoolDestroy released the pool's memory, fails with 507013.
#[test]
fn a_captured_memset_on_a_destroyed_pools_block_faults() {
    install_eight_devices();
    set_device(0);
    let stream = create_stream();
    let mut pool = ptr::null_mut();
    acl!(aclrtMemPoolCreate(&mut pool, &device_pool_props(0)));
    let mut block = ptr::null_mut();
    acl!(aclrtMemPoolMallocAsync(&mut block, 4096, pool, stream));
    acl!(aclrtSynchronizeStream(stream));
    acl!(aclmdlRICaptureBegin(
        stream,
        ACL_MODEL_RI_CAPTURE_MODE_RELAXED
    ));
    assert_eq!(memset_async(block, 4096, stream), 0);
    let model = capture_end(stream);
    acl!(aclmdlRIExecuteAsync(model, stream));
    acl!(aclrtSynchronizeStream(stream));
    acl!(aclrtMemPoolDestroy(pool));
    acl!(aclmdlRIExecuteAsync(model, stream));
    sync_fails_with_dma(stream);
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtDestroyStream(stream));
}

/// Promise: pinned memory of aclrtMallocHostWithCfg freed under a queued download fails it
/// with 507013; so does a captured upload from it replayed after the free.
#[test]
fn pinned_memory_with_a_configuration_freed_under_queued_and_captured_copies_faults() {
    install_eight_devices();
    set_device(5);
    let stream = create_stream();
    let dev = malloc(4096);
    upload::<u8>(dev, &[5; 4096]);
    let mut host = ptr::null_mut();
    acl!(aclrtMallocHostWithCfg(&mut host, 4096, ptr::null_mut()));
    acl!(aclmdlRICaptureBegin(
        stream,
        ACL_MODEL_RI_CAPTURE_MODE_RELAXED
    ));
    h2d_async(dev, host, 4096, stream);
    let model = capture_end(stream);
    control::hold(5).unwrap();
    acl!(aclrtMemcpyAsync(
        host,
        4096,
        dev,
        4096,
        ACL_MEMCPY_DEVICE_TO_HOST,
        stream
    ));
    acl!(aclrtFreeHost(host));
    control::release(5).unwrap();
    sync_fails_with_dma(stream);
    acl!(aclmdlRIExecuteAsync(model, stream));
    sync_fails_with_dma(stream);
    assert_eq!(download::<u8>(dev, 4096), vec![5; 4096], "nothing uploaded");
    acl!(aclmdlRIDestroy(model));
    acl!(aclrtFree(dev));
    acl!(aclrtDestroyStream(stream));
}

/// Two pages of host memory of the C allocator, page-aligned, zeroed.
struct HostPages(*mut u8);

const PAGE: usize = 4096;

impl HostPages {
    fn layout() -> Layout {
        Layout::from_size_align(2 * PAGE, PAGE).unwrap()
    }

    fn new() -> Self {
        // SAFETY: the layout has a non-zero size.
        let pages = unsafe { alloc_zeroed(Self::layout()) };
        assert!(!pages.is_null());
        HostPages(pages)
    }

    fn bytes(&self) -> Vec<u8> {
        // SAFETY: the two pages are ours until `free`.
        unsafe { std::slice::from_raw_parts(self.0, 2 * PAGE) }.to_vec()
    }

    fn free(self) {
        // SAFETY: allocated by `new` with this layout, freed once (`self` is consumed).
        unsafe { dealloc(self.0, Self::layout()) };
    }
}

/// Promise: a task touching registered host memory faults (507013) if the memory is no longer
/// registered when it runs. A download queued into two registered pages, which are then
/// unregistered and only the first registered again, must not write the second page (no
/// memory of the runtime's any more: the program may have given it back).
#[test]
fn a_queued_download_into_host_memory_registered_again_smaller_faults() {
    install_eight_devices();
    set_device(4);
    let stream = create_stream();
    let dev = malloc(2 * PAGE);
    upload::<u8>(dev, &[0xab; 2 * PAGE]);
    let host = HostPages::new();
    let mut mapped = ptr::null_mut();
    acl!(aclrtHostRegister(
        host.0.cast(),
        2 * PAGE as u64,
        ACL_HOST_REGISTER_MAPPED,
        &mut mapped
    ));
    control::hold(4).unwrap();
    acl!(aclrtMemcpyAsync(
        host.0.cast(),
        2 * PAGE,
        dev,
        2 * PAGE,
        ACL_MEMCPY_DEVICE_TO_HOST,
        stream
    ));
    acl!(aclrtHostUnregister(host.0.cast()));
    acl!(aclrtHostRegister(
        host.0.cast(),
        PAGE as u64,
        ACL_HOST_REGISTER_MAPPED,
        &mut mapped
    ));
    control::release(4).unwrap();
    sync_fails_with_dma(stream);
    assert_eq!(
        host.bytes(),
        vec![0; 2 * PAGE],
        "the download wrote the pages"
    );
    acl!(aclrtHostUnregister(host.0.cast()));
    host.free();
    acl!(aclrtFree(dev));
    acl!(aclrtDestroyStream(stream));
}

/// The exporting peer of the IPC attack (this binary run again): exports 4096 bytes of device 7
/// holding 9s without pid validation and prints the key; `free` frees the memory; it exits at
/// the end of its input.
#[test]
#[ignore = "the peer process of the IPC attack, which runs it itself"]
fn lifetimes_ipc_peer() {
    if std::env::var_os("ATTACK_LIFETIMES_PEER").is_none() {
        return;
    }
    install_eight_devices();
    set_device(7);
    let dev = malloc(4096);
    upload::<u8>(dev, &[9; 4096]);
    let mut key = [0 as c_char; 65];
    acl!(aclrtIpcMemGetExportKey(
        dev,
        4096,
        key.as_mut_ptr(),
        65,
        ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION as u64
    ));
    // SAFETY: the simulator wrote a NUL-terminated key into the buffer.
    let key = unsafe { CStr::from_ptr(key.as_ptr()) }.to_str().unwrap();
    println!("@key {key}");
    for line in std::io::stdin().lock().lines().map_while(Result::ok) {
        if line == "free" {
            acl!(aclrtFree(dev));
            println!("@freed");
        }
    }
}

/// Promise: memory imported by key stays valid in the importer after the exporter frees it
/// (docs/simulator.md, IPC), so a memset queued on it then runs; after aclrtIpcMemClose the
/// import is gone, and a memset queued before the close fails with 507013.
#[test]
fn queued_memsets_on_an_import_run_after_the_exporters_free_and_fault_after_the_close() {
    install_eight_devices();
    let mut peer = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "lifetimes_ipc_peer",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("ATTACK_LIFETIMES_PEER", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the peer process starts");
    let mut to_peer = peer.stdin.take().unwrap();
    let mut from_peer = BufReader::new(peer.stdout.take().unwrap());
    // Blocking reads: the peer's answer, or the end of its output if it died.
    let mut answer = |tag: &str| -> String {
        let mut line = String::new();
        loop {
            line.clear();
            assert_ne!(from_peer.read_line(&mut line).unwrap(), 0, "the peer died");
            if let Some(at) = line.find(tag) {
                return line[at + tag.len()..].trim().to_owned();
            }
        }
    };
    let key = c_string(&answer("@key "));
    set_device(7);
    let stream = create_stream();
    let mut imported = ptr::null_mut();
    acl!(aclrtIpcMemImportByKey(&mut imported, key.as_ptr(), 0));
    assert_eq!(download::<u8>(imported, 4096), vec![9; 4096]);
    control::hold(7).unwrap();
    assert_eq!(memset_async(imported, 4096, stream), 0);
    writeln!(to_peer, "free").unwrap();
    answer("@freed");
    control::release(7).unwrap();
    acl!(aclrtSynchronizeStream(stream));
    assert_eq!(download::<u8>(imported, 4096), vec![7; 4096]);
    control::hold(7).unwrap();
    assert_eq!(memset_async(imported, 4096, stream), 0);
    acl!(aclrtIpcMemClose(key.as_ptr()));
    control::release(7).unwrap();
    sync_fails_with_dma(stream);
    acl!(aclrtDestroyStream(stream));
    drop(to_peer);
    assert!(peer.wait().unwrap().success(), "the peer failed");
}

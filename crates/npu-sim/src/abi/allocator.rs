//! Custom allocators (acl_rt_allocator.h): descriptors holding a user's allocator object and
//! callbacks, and their registration per stream.
//!
//! CANN calls the callbacks only while it executes single operators or dynamic-shape models
//! (to get workspace memory); the simulator runs neither, so it records and returns the
//! callbacks and never calls them.

use std::sync::{Arc, Mutex};

use npu_sys::*;

use crate::allocator::Desc;
use crate::error::{Res, ensure, fail, guard, guard_value, non_null, write_out};
use crate::handle;
use crate::sim::{Sim, sim};
use crate::sync::lock;

fn desc(sim: &Sim, handle: aclrtAllocatorDesc) -> Res<Arc<Mutex<Desc>>> {
    non_null(handle, "allocatorDesc")?;
    sim.allocators.descs.resolve(handle::from_ptr(handle))
}

/// Creates an empty descriptor; NULL if none can be created.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtAllocatorCreateDesc() -> aclrtAllocatorDesc {
    guard_value("aclrtAllocatorCreateDesc", std::ptr::null_mut(), || {
        let handle = sim()?
            .allocators
            .descs
            .insert(Arc::new(Mutex::new(Desc::default())))?;
        Ok(handle::to_ptr(handle))
    })
}

/// Destroys a descriptor (registrations made with it stay).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtAllocatorDestroyDesc(allocatorDesc: aclrtAllocatorDesc) -> aclError {
    guard("aclrtAllocatorDestroyDesc", || {
        non_null(allocatorDesc, "allocatorDesc")?;
        let sim = sim()?;
        sim.allocators
            .descs
            .remove_live(handle::from_ptr(allocatorDesc))
            .map(drop)
    })
}

/// Sets one field of a descriptor, after checking that neither the descriptor nor the value
/// (`what`) is NULL (100000, the ACL layer's checks, made before the descriptor is looked up).
fn set(
    allocator_desc: aclrtAllocatorDesc,
    present: bool,
    what: &str,
    apply: impl FnOnce(&mut Desc),
) -> Res<()> {
    non_null(allocator_desc, "allocatorDesc")?;
    ensure!(present, ACL_ERROR_INVALID_PARAM, "{what} is NULL");
    let desc = desc(sim()?, allocator_desc)?;
    apply(&mut lock(&desc));
    Ok(())
}

/// Sets the user's allocator object (not NULL).
///
/// # Safety
/// No preconditions; the object is stored, never dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtAllocatorSetObjToDesc(
    allocatorDesc: aclrtAllocatorDesc,
    allocator: aclrtAllocator,
) -> aclError {
    guard("aclrtAllocatorSetObjToDesc", || {
        set(allocatorDesc, !allocator.is_null(), "allocator", |d| {
            d.allocator = allocator as usize;
        })
    })
}

/// Sets the block allocation callback (not NULL).
///
/// # Safety
/// No preconditions; the callback is stored, never called.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtAllocatorSetAllocFuncToDesc(
    allocatorDesc: aclrtAllocatorDesc,
    func: aclrtAllocatorAllocFunc,
) -> aclError {
    guard("aclrtAllocatorSetAllocFuncToDesc", || {
        set(allocatorDesc, func.is_some(), "func", |d| d.alloc = func)
    })
}

/// Sets the block release callback (not NULL).
///
/// # Safety
/// No preconditions; the callback is stored, never called.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtAllocatorSetFreeFuncToDesc(
    allocatorDesc: aclrtAllocatorDesc,
    func: aclrtAllocatorFreeFunc,
) -> aclError {
    guard("aclrtAllocatorSetFreeFuncToDesc", || {
        set(allocatorDesc, func.is_some(), "func", |d| d.free = func)
    })
}

/// Sets the callback allocating a block at a suggested address (not NULL).
///
/// # Safety
/// No preconditions; the callback is stored, never called.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtAllocatorSetAllocAdviseFuncToDesc(
    allocatorDesc: aclrtAllocatorDesc,
    func: aclrtAllocatorAllocAdviseFunc,
) -> aclError {
    guard("aclrtAllocatorSetAllocAdviseFuncToDesc", || {
        set(allocatorDesc, func.is_some(), "func", |d| d.advise = func)
    })
}

/// Sets the callback giving a block's device address (not NULL).
///
/// # Safety
/// No preconditions; the callback is stored, never called.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtAllocatorSetGetAddrFromBlockFuncToDesc(
    allocatorDesc: aclrtAllocatorDesc,
    func: aclrtAllocatorGetAddrFromBlockFunc,
) -> aclError {
    guard("aclrtAllocatorSetGetAddrFromBlockFuncToDesc", || {
        set(allocatorDesc, func.is_some(), "func", |d| d.get_addr = func)
    })
}

/// Registers a copy of the descriptor for `stream` (not NULL: 100000), replacing an earlier
/// registration. The descriptor must hold the allocator object and the alloc, free and
/// get-address callbacks (100000 otherwise; the advise callback is optional). The stream is
/// looked up before the descriptor, in parameter order, so a destroyed stream → 107017 even
/// with a descriptor that lacks a callback (what the descriptor holds is only known once it is
/// looked up).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtAllocatorRegister(
    stream: aclrtStream,
    allocatorDesc: aclrtAllocatorDesc,
) -> aclError {
    guard("aclrtAllocatorRegister", || {
        non_null(stream, "stream")?;
        non_null(allocatorDesc, "allocatorDesc")?;
        let sim = sim()?;
        let stream = sim.streams.resolve(handle::from_ptr(stream))?;
        let contents = *lock(&*desc(sim, allocatorDesc)?);
        ensure!(
            contents.allocator != 0
                && contents.alloc.is_some()
                && contents.free.is_some()
                && contents.get_addr.is_some(),
            ACL_ERROR_INVALID_PARAM,
            "the descriptor lacks the allocator object or its alloc, free or get-address callback"
        );
        let mut registered = lock(&sim.allocators.registered);
        // Registrations of destroyed streams can never be asked for again.
        registered.retain(|&s, _| sim.streams.get(s).is_some());
        registered.insert(stream.handle, (handle::from_ptr(allocatorDesc), contents));
        Ok(())
    })
}

/// The registration of `stream`: descriptor, allocator object and callbacks (the advise
/// callback NULL if it was not set). A stream without one → 100000.
///
/// # Safety
/// Every out pointer must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtAllocatorGetByStream(
    stream: aclrtStream,
    allocatorDesc: *mut aclrtAllocatorDesc,
    allocator: *mut aclrtAllocator,
    allocFunc: *mut aclrtAllocatorAllocFunc,
    freeFunc: *mut aclrtAllocatorFreeFunc,
    allocAdviseFunc: *mut aclrtAllocatorAllocAdviseFunc,
    getAddrFromBlockFunc: *mut aclrtAllocatorGetAddrFromBlockFunc,
) -> aclError {
    guard("aclrtAllocatorGetByStream", || {
        non_null(stream, "stream")?;
        non_null(allocatorDesc, "allocatorDesc")?;
        non_null(allocator, "allocator")?;
        non_null(allocFunc, "allocFunc")?;
        non_null(freeFunc, "freeFunc")?;
        non_null(allocAdviseFunc, "allocAdviseFunc")?;
        non_null(getAddrFromBlockFunc, "getAddrFromBlockFunc")?;
        let sim = sim()?;
        let stream = sim.streams.resolve(handle::from_ptr(stream))?;
        let Some((desc, contents)) = lock(&sim.allocators.registered)
            .get(&stream.handle)
            .copied()
        else {
            fail!(
                ACL_ERROR_INVALID_PARAM,
                "stream {} has no registered allocator",
                stream.id
            );
        };
        write_out(allocatorDesc, "allocatorDesc", handle::to_ptr(desc))?;
        write_out(allocator, "allocator", contents.allocator as aclrtAllocator)?;
        write_out(allocFunc, "allocFunc", contents.alloc)?;
        write_out(freeFunc, "freeFunc", contents.free)?;
        write_out(allocAdviseFunc, "allocAdviseFunc", contents.advise)?;
        write_out(
            getAddrFromBlockFunc,
            "getAddrFromBlockFunc",
            contents.get_addr,
        )
    })
}

/// Drops the registration of `stream`; a stream without one (or that does not exist) is fine.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtAllocatorUnregister(stream: aclrtStream) -> aclError {
    guard("aclrtAllocatorUnregister", || {
        let sim = sim()?;
        lock(&sim.allocators.registered).remove(&handle::from_ptr(stream));
        Ok(())
    })
}

//! Custom allocators registered per stream (the model behind acl_rt_allocator.h).

use std::collections::HashMap;
use std::sync::Mutex;

use npu_sys::*;

use crate::handle::{Handle, HandleTable, Kind};

/// What a descriptor holds.
#[derive(Clone, Copy, Default)]
pub(crate) struct Desc {
    pub(crate) allocator: usize,
    pub(crate) alloc: aclrtAllocatorAllocFunc,
    pub(crate) free: aclrtAllocatorFreeFunc,
    pub(crate) advise: aclrtAllocatorAllocAdviseFunc,
    pub(crate) get_addr: aclrtAllocatorGetAddrFromBlockFunc,
}

/// Every descriptor, and the registration of each stream (the descriptor's handle and a copy
/// of its contents at registration: the caller may destroy the descriptor afterwards).
pub(crate) struct Allocators {
    pub(crate) descs: HandleTable<Mutex<Desc>>,
    pub(crate) registered: Mutex<HashMap<Handle, (Handle, Desc)>>,
}

impl Allocators {
    pub(crate) fn new() -> Self {
        Self {
            descs: HandleTable::new(Kind::AllocatorDesc),
            registered: Mutex::new(HashMap::new()),
        }
    }
}

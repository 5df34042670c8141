//! Generation-checked handle tables.
//!
//! Every ACL handle the simulator gives out (context, stream, event, binary, function, args,
//! param, notify, ...) is an opaque token, never an address: bits 0..24 hold the slot index + 1,
//! bits 24..44 the slot's generation, bits 44..52 the kind and bits 52..60 a magic byte. A lookup checks all
//! of them, so a destroyed, forged or wrong-kind handle is reported as
//! ACL_ERROR_RT_INVALID_HANDLE instead of being dereferenced.

use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use npu_sys::{ACL_ERROR_RT_INVALID_HANDLE, ACL_ERROR_RT_RESOURCE_ALLOC_FAIL};

use crate::error::{Res, ensure, fail};
use crate::sync::lock;

const INDEX_BITS: u32 = 24;
const GENERATION_BITS: u32 = 20;
const KIND_BITS: u32 = 8;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;
const GENERATION_MASK: u64 = (1 << GENERATION_BITS) - 1;
const KIND_SHIFT: u32 = INDEX_BITS + GENERATION_BITS;
const KIND_MASK: u64 = (1 << KIND_BITS) - 1;
const MAGIC_SHIFT: u32 = KIND_SHIFT + KIND_BITS;
const MAGIC: u64 = 0xA5;

/// What a handle refers to; part of the token so that, say, an event passed as a stream fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Context = 1,
    Stream = 2,
    Event = 3,
    Binary = 4,
    Function = 5,
    Args = 6,
    Param = 7,
    Notify = 8,
    MemPool = 9,
    PhysicalMem = 10,
    AllocatorDesc = 11,
    BinaryData = 12,
    DataBuffer = 13,
    ModelRi = 14,
    ModelTask = 15,
    TaskGroup = 16,
    Label = 17,
    LabelList = 18,
    CondHandle = 19,
}

impl Kind {
    fn noun(self) -> &'static str {
        match self {
            Kind::Context => "context",
            Kind::Stream => "stream",
            Kind::Event => "event",
            Kind::Binary => "binary",
            Kind::Function => "function",
            Kind::Args => "kernel args",
            Kind::Param => "kernel param",
            Kind::Notify => "notify",
            Kind::MemPool => "memory pool",
            Kind::PhysicalMem => "physical memory",
            Kind::AllocatorDesc => "allocator descriptor",
            Kind::BinaryData => "binary data (aclrtBinary)",
            Kind::DataBuffer => "data buffer (aclDataBuffer)",
            Kind::ModelRi => "model runtime instance",
            Kind::ModelTask => "model runtime instance task",
            Kind::TaskGroup => "task group",
            Kind::Label => "label",
            Kind::LabelList => "label list",
            Kind::CondHandle => "condition handle",
        }
    }
}

/// A raw handle value, as passed through the C ABI.
pub(crate) type Handle = u64;

/// Converts a handle to the `void *` ACL hands out.
pub(crate) fn to_ptr(handle: Handle) -> *mut c_void {
    // An opaque token: the pointer is never dereferenced by anyone, only converted back.
    handle as usize as *mut c_void
}

/// Converts a `void *` handle argument back to its token.
pub(crate) fn from_ptr(ptr: *const c_void) -> Handle {
    ptr as usize as Handle
}

struct Entry<T> {
    generation: u64,
    value: Option<Arc<T>>,
}

struct Slots<T> {
    entries: Vec<Entry<T>>,
    free: Vec<usize>,
}

/// A table of live objects of one kind.
pub(crate) struct HandleTable<T> {
    kind: Kind,
    slots: Mutex<Slots<T>>,
}

impl<T> HandleTable<T> {
    pub(crate) const fn new(kind: Kind) -> Self {
        Self {
            kind,
            slots: Mutex::new(Slots {
                entries: Vec::new(),
                free: Vec::new(),
            }),
        }
    }

    fn encode(&self, index: usize, generation: u64) -> Handle {
        (MAGIC << MAGIC_SHIFT)
            | ((self.kind as u64) << KIND_SHIFT)
            | ((generation & GENERATION_MASK) << INDEX_BITS)
            | (index as u64 + 1)
    }

    /// Reserves a slot and returns its handle; the object is stored later with [`Self::fill`]
    /// (objects that must know their own handle are built in between).
    pub(crate) fn reserve(&self) -> Res<Handle> {
        let mut slots = lock(&self.slots);
        let index = match slots.free.pop() {
            Some(index) => index,
            None => {
                ensure!(
                    (slots.entries.len() as u64) < INDEX_MASK,
                    ACL_ERROR_RT_RESOURCE_ALLOC_FAIL,
                    "no {} handles left",
                    self.kind.noun()
                );
                slots.entries.push(Entry {
                    generation: 0,
                    value: None,
                });
                slots.entries.len() - 1
            }
        };
        let generation = slots.entries[index].generation;
        Ok(self.encode(index, generation))
    }

    /// Stores the object for a reserved handle.
    pub(crate) fn fill(&self, handle: Handle, value: Arc<T>) {
        let mut slots = lock(&self.slots);
        if let Some(index) = self.index_of(&slots, handle) {
            slots.entries[index].value = Some(value);
        }
    }

    /// Reserves a slot and stores `value` in it.
    pub(crate) fn insert(&self, value: Arc<T>) -> Res<Handle> {
        let handle = self.reserve()?;
        self.fill(handle, value);
        Ok(handle)
    }

    fn index_of(&self, slots: &Slots<T>, handle: Handle) -> Option<usize> {
        if handle >> MAGIC_SHIFT != MAGIC || (handle >> KIND_SHIFT) & KIND_MASK != self.kind as u64
        {
            return None;
        }
        let index = (handle & INDEX_MASK).checked_sub(1)? as usize;
        let entry = slots.entries.get(index)?;
        (entry.generation & GENERATION_MASK == (handle >> INDEX_BITS) & GENERATION_MASK)
            .then_some(index)
    }

    /// Looks a handle up; `None` for stale, forged or wrong-kind handles.
    pub(crate) fn get(&self, handle: Handle) -> Option<Arc<T>> {
        let slots = lock(&self.slots);
        let index = self.index_of(&slots, handle)?;
        slots.entries[index].value.clone()
    }

    /// Looks a handle up, failing with ACL_ERROR_RT_INVALID_HANDLE.
    pub(crate) fn resolve(&self, handle: Handle) -> Res<Arc<T>> {
        self.found(handle, self.get(handle))
    }

    /// Removes a live handle for a destroy call, failing as [`Self::resolve`] does if it is
    /// not live: two calls may both have looked the handle up before either removed it, and
    /// only the one whose removal finds it destroys it.
    pub(crate) fn remove_live(&self, handle: Handle) -> Res<Arc<T>> {
        self.found(handle, self.remove(handle))
    }

    /// The object found for `handle`, or ACL_ERROR_RT_INVALID_HANDLE if there was none.
    fn found(&self, handle: Handle, object: Option<Arc<T>>) -> Res<Arc<T>> {
        match object {
            Some(value) => Ok(value),
            None => fail!(
                ACL_ERROR_RT_INVALID_HANDLE,
                "{:#x} is not a live {} handle (destroyed, or never created)",
                handle,
                self.kind.noun()
            ),
        }
    }

    /// Removes a handle; later lookups of it fail. Returns the object if it was live.
    pub(crate) fn remove(&self, handle: Handle) -> Option<Arc<T>> {
        let mut slots = lock(&self.slots);
        let index = self.index_of(&slots, handle)?;
        let entry = &mut slots.entries[index];
        let value = entry.value.take();
        entry.generation = entry.generation.wrapping_add(1);
        slots.free.push(index);
        value
    }

    /// Every live object with its handle.
    pub(crate) fn live_with_handles(&self) -> Vec<(Handle, Arc<T>)> {
        let slots = lock(&self.slots);
        slots
            .entries
            .iter()
            .enumerate()
            .filter_map(|(index, entry)| {
                let value = entry.value.clone()?;
                Some((self.encode(index, entry.generation), value))
            })
            .collect()
    }

    /// Every live object, for sweeps (device reset, stats).
    pub(crate) fn live(&self) -> Vec<Arc<T>> {
        lock(&self.slots)
            .entries
            .iter()
            .filter_map(|entry| entry.value.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_forged_and_wrong_kind_handles_are_rejected() {
        let streams = HandleTable::new(Kind::Stream);
        let events: HandleTable<u32> = HandleTable::new(Kind::Event);
        let a = streams.insert(Arc::new(1u32)).unwrap();
        assert_eq!(*streams.get(a).unwrap(), 1);
        assert!(events.get(a).is_none(), "a stream handle is not an event");
        assert!(streams.remove(a).is_some());
        assert!(streams.get(a).is_none(), "stale after removal");
        let b = streams.insert(Arc::new(2u32)).unwrap();
        assert_ne!(a, b, "the slot is reused with a new generation");
        assert!(streams.get(a).is_none());
        for forged in [0u64, 1, 0xdead_beef, u64::MAX, 0x7fff_1234_5678, b + 1] {
            assert!(streams.get(forged).is_none(), "{forged:#x}");
        }
        assert_eq!(
            streams.resolve(0x1234).unwrap_err().code,
            ACL_ERROR_RT_INVALID_HANDLE
        );
    }
}

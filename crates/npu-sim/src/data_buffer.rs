//! aclDataBuffer: a description of caller-owned memory (an address and a size) that ACL's
//! model and operator APIs take. The simulator keeps it in a handle table, so the
//! `aclDataBuffer *` a program holds is a checked token, never an address it could corrupt.

use std::sync::Mutex;

use npu_sys::*;

use crate::error::{Res, ensure};
use crate::sync::lock;

/// The memory a data buffer describes: (address, size in bytes).
pub(crate) struct DataBuffer(Mutex<(usize, usize)>);

impl DataBuffer {
    /// A buffer describing `[data, data+size)`; `api` names the caller in the error.
    pub(crate) fn new(api: &str, data: usize, size: usize) -> Res<Self> {
        check(api, data, size)?;
        Ok(Self(Mutex::new((data, size))))
    }

    /// The address and size described.
    pub(crate) fn get(&self) -> (usize, usize) {
        *lock(&self.0)
    }

    /// Describes other memory from now on (aclUpdateDataBuffer), after [`check`].
    pub(crate) fn update(&self, data: usize, size: usize) {
        *lock(&self.0) = (data, size);
    }
}

/// A NULL address describes an empty buffer: its size must be 0.
pub(crate) fn check(api: &str, data: usize, size: usize) -> Res<()> {
    ensure!(
        data != 0 || size == 0,
        ACL_ERROR_INVALID_PARAM,
        "{api}: data is NULL with size {size} (an empty buffer has size 0)"
    );
    Ok(())
}

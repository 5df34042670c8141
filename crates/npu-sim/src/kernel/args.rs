//! The aclrtKernelArgs* builder: parameters appended in order, packed like a C struct.
//!
//! Each value is placed at the next offset aligned to its natural alignment (its size rounded
//! up to a power of two, at most 8), which is how a C compiler lays out a struct of those
//! fields. A placeholder is an 8-byte pointer slot; its data (from
//! aclrtKernelArgsGetPlaceHolderBuffer) is copied with the arguments at launch and the slot is
//! set to the copy's address.

use std::sync::Mutex;

use npu_sys::*;

use super::ArgsBlob;
use crate::error::{Res, ensure};
use crate::handle::Handle;
use crate::sync::lock;

/// Most parameters one launch may have.
pub(crate) const MAX_PARAMS: usize = 128;
/// The largest parameter a declared parameter list may have (1 MiB).
pub(crate) const MAX_PARAM_SIZE: usize = 1 << 20;

/// Whether `sizes` is a valid declared parameter list: at most [`MAX_PARAMS`] parameters, each
/// 1 to [`MAX_PARAM_SIZE`] bytes.
pub(crate) fn valid_param_list(sizes: &[usize]) -> bool {
    sizes.len() <= MAX_PARAMS
        && sizes
            .iter()
            .all(|&size| (1..=MAX_PARAM_SIZE).contains(&size))
}

struct Param {
    offset: usize,
    size: usize,
    /// Placeholder data, if this parameter is a placeholder.
    placeholder: Option<Vec<u8>>,
}

#[derive(Default)]
struct State {
    data: Vec<u8>,
    params: Vec<Param>,
    param_handles: Vec<Handle>,
    finalized: bool,
}

pub(crate) struct ArgsBuilder {
    pub(crate) function: Handle,
    /// For aclrtKernelArgsInitByUserMem: the caller's handle memory (the address the caller
    /// passes as the handle) and the bytes of argument memory it gave, which the packed
    /// arguments must fit in.
    pub(crate) user_memory: Option<(usize, usize)>,
    state: Mutex<State>,
}

/// What a param handle refers to.
pub(crate) struct ParamRef {
    pub(crate) args: Handle,
    pub(crate) index: usize,
}

fn align_for(size: usize) -> usize {
    size.next_power_of_two().min(8)
}

/// The offsets of parameters of these sizes laid out as the fields of a C struct (the
/// aclrtKernelArgsAppend rule), and the end of the last.
pub(crate) fn param_offsets(sizes: &[usize]) -> (Vec<usize>, usize) {
    let mut end = 0usize;
    let offsets = sizes
        .iter()
        .map(|&size| {
            let offset = end.next_multiple_of(align_for(size));
            end = offset + size;
            offset
        })
        .collect();
    (offsets, end)
}

/// A placeholder's place in the packed arguments: its pointer slot, its data's offset, its data.
type Placed<'a> = (usize, usize, &'a [u8]);

/// Where each placeholder's data goes, after the values, 8-aligned and in order; and the
/// packed length.
fn placeholder_layout(state: &State) -> (Vec<Placed<'_>>, usize) {
    let mut layout = Vec::new();
    let mut len = state.data.len();
    for param in &state.params {
        if let Some(data) = &param.placeholder {
            let at = len.next_multiple_of(8);
            layout.push((param.offset, at, data.as_slice()));
            len = at + data.len();
        }
    }
    (layout, len)
}

impl ArgsBuilder {
    pub(crate) fn new(function: Handle) -> Self {
        Self {
            function,
            user_memory: None,
            state: Mutex::default(),
        }
    }

    /// aclrtKernelArgsInitByUserMem: arguments whose handle is the caller's memory at
    /// `handle_memory` and which must fit in `capacity` bytes.
    pub(crate) fn in_user_memory(function: Handle, handle_memory: usize, capacity: usize) -> Self {
        Self {
            user_memory: Some((handle_memory, capacity)),
            ..Self::new(function)
        }
    }

    /// Fails with 107000 if `len` bytes of packed arguments do not fit the caller's memory.
    fn check_fits(&self, len: usize) -> Res<()> {
        if let Some((_, capacity)) = self.user_memory {
            ensure!(
                len <= capacity,
                ACL_ERROR_RT_PARAM_INVALID,
                "the arguments need {len} bytes, the memory given to \
                 aclrtKernelArgsInitByUserMem holds {capacity}"
            );
        }
        Ok(())
    }

    fn push(&self, size: usize, value: Option<&[u8]>) -> Res<usize> {
        let mut state = lock(&self.state);
        ensure!(
            state.params.len() < MAX_PARAMS,
            ACL_ERROR_RT_PARAM_INVALID,
            "a launch takes at most {MAX_PARAMS} parameters"
        );
        let offset = state.data.len().next_multiple_of(align_for(size));
        self.check_fits(offset + size)?;
        crate::error::reserve(&mut state.data, offset + size, "kernel arguments")?;
        state.data.resize(offset, 0);
        match value {
            Some(bytes) => state.data.extend_from_slice(bytes),
            None => state.data.resize(offset + size, 0),
        }
        let placeholder = value.is_none().then(Vec::new);
        state.params.push(Param {
            offset,
            size,
            placeholder,
        });
        state.finalized = false;
        Ok(state.params.len() - 1)
    }

    /// aclrtKernelArgsAppend: copies the value; returns the parameter's index.
    pub(crate) fn append(&self, value: &[u8]) -> Res<usize> {
        self.push(value.len(), Some(value))
    }

    /// aclrtKernelArgsAppendPlaceHolder.
    pub(crate) fn append_placeholder(&self) -> Res<usize> {
        self.push(8, None)
    }

    pub(crate) fn remember_param(&self, handle: Handle) {
        lock(&self.state).param_handles.push(handle);
    }

    pub(crate) fn param_handles(&self) -> Vec<Handle> {
        lock(&self.state).param_handles.clone()
    }

    /// aclrtKernelArgsGetPlaceHolderBuffer: a zeroed host buffer of `size` bytes the caller
    /// fills; valid until the next call for the same placeholder.
    pub(crate) fn placeholder_buffer(&self, index: usize, size: usize) -> Res<*mut u8> {
        let mut state = lock(&self.state);
        let param = state.params.get_mut(index);
        let Some(buffer) = param.and_then(|p| p.placeholder.as_mut()) else {
            crate::error::fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "parameter {index} is not a placeholder"
            );
        };
        buffer.clear();
        crate::error::reserve(buffer, size, "a placeholder's buffer")?;
        buffer.resize(size, 0);
        Ok(buffer.as_mut_ptr())
    }

    /// aclrtKernelArgsParaUpdate: replaces a value parameter (same size).
    pub(crate) fn update(&self, index: usize, value: &[u8]) -> Res<()> {
        let mut state = lock(&self.state);
        let Some(param) = state.params.get(index) else {
            crate::error::fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "parameter {index} does not exist"
            );
        };
        ensure!(
            param.placeholder.is_none(),
            ACL_ERROR_RT_PARAM_INVALID,
            "parameter {index} is a placeholder"
        );
        ensure!(
            param.size == value.len(),
            ACL_ERROR_RT_PARAM_INVALID,
            "parameter {index} has {} bytes, not {}",
            param.size,
            value.len()
        );
        let offset = param.offset;
        state.data[offset..offset + value.len()].copy_from_slice(value);
        state.finalized = false;
        Ok(())
    }

    /// aclrtKernelArgsFinalize: the arguments, placeholders' data included, must fit the
    /// caller's memory, if they live in it.
    pub(crate) fn finalize(&self) -> Res<()> {
        let mut state = lock(&self.state);
        self.check_fits(placeholder_layout(&state).1)?;
        state.finalized = true;
        Ok(())
    }

    /// The packed arguments for one launch, placeholders resolved.
    pub(crate) fn blob(&self) -> Res<ArgsBlob> {
        let state = lock(&self.state);
        ensure!(
            state.finalized,
            ACL_ERROR_RT_PARAM_INVALID,
            "the kernel args were changed after aclrtKernelArgsFinalize (or never finalized)"
        );
        let (layout, len) = placeholder_layout(&state);
        let mut blob = ArgsBlob::zeroed(len)?;
        blob.bytes_mut()[..state.data.len()].copy_from_slice(&state.data);
        for (slot, at, data) in layout {
            let address = blob.address_of(at);
            let bytes = blob.bytes_mut();
            bytes[at..at + data.len()].copy_from_slice(data);
            bytes[slot..slot + 8].copy_from_slice(&address.to_ne_bytes());
        }
        Ok(blob)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_lists_are_laid_out_like_the_builder_packs_them() {
        assert_eq!(param_offsets(&[8, 8, 4, 4]), (vec![0, 8, 16, 20], 24));
        assert_eq!(param_offsets(&[1, 4, 8, 2]), (vec![0, 4, 8, 16], 18));
        assert_eq!(param_offsets(&[]), (vec![], 0));
        assert!(valid_param_list(&[1, MAX_PARAM_SIZE]));
        assert!(!valid_param_list(&[8, 0]) && !valid_param_list(&[MAX_PARAM_SIZE + 1]));
        assert!(!valid_param_list(&[8; MAX_PARAMS + 1]));
    }

    #[test]
    fn arguments_in_user_memory_must_fit_it() {
        let args = ArgsBuilder::in_user_memory(0, 0x1000, 12);
        args.append(&1u32.to_ne_bytes()).unwrap(); // 0..4
        let too_far = args.append(&2u64.to_ne_bytes()).unwrap_err(); // would be 8..16
        assert_eq!(too_far.code, ACL_ERROR_RT_PARAM_INVALID);
        let slot = args.append_placeholder(); // 8..16 does not fit either
        assert!(slot.is_err());
        let fits = ArgsBuilder::in_user_memory(0, 0x1000, 20);
        let slot = fits.append_placeholder().unwrap(); // 0..8
        fits.placeholder_buffer(slot, 16).unwrap(); // data at 8..24: 4 bytes too many
        assert_eq!(
            fits.finalize().unwrap_err().code,
            ACL_ERROR_RT_PARAM_INVALID
        );
        fits.placeholder_buffer(slot, 12).unwrap();
        fits.finalize().unwrap();
        assert_eq!(fits.blob().unwrap().len(), 20);
    }

    #[test]
    fn values_are_packed_like_a_c_struct_and_placeholders_point_at_their_data() {
        let args = ArgsBuilder::new(0);
        args.append(&[1u8]).unwrap(); // u8 at 0
        args.append(&7u32.to_ne_bytes()).unwrap(); // u32 at 4
        let slot = args.append_placeholder().unwrap(); // pointer at 8
        args.append(&9u16.to_ne_bytes()).unwrap(); // u16 at 16
        let buffer = args.placeholder_buffer(slot, 4).unwrap();
        // SAFETY: the buffer has 4 bytes.
        unsafe { buffer.cast::<u32>().write_unaligned(0xabcd) };
        assert_eq!(
            args.blob().unwrap_err().code,
            ACL_ERROR_RT_PARAM_INVALID,
            "not finalized"
        );
        args.finalize().unwrap();
        let mut blob = args.blob().unwrap();
        let base = blob.address_of(0);
        let bytes = blob.bytes_mut();
        assert_eq!(bytes[0], 1);
        assert_eq!(u32::from_ne_bytes(bytes[4..8].try_into().unwrap()), 7);
        assert_eq!(u16::from_ne_bytes(bytes[16..18].try_into().unwrap()), 9);
        let pointer = u64::from_ne_bytes(bytes[8..16].try_into().unwrap());
        assert_eq!(pointer, base + 24);
        assert_eq!(
            u32::from_ne_bytes(bytes[24..28].try_into().unwrap()),
            0xabcd
        );
        assert!(args.update(1, &[0u8; 2]).is_err(), "size mismatch");
        assert!(args.update(slot, &[0u8; 8]).is_err(), "placeholder");
    }
}

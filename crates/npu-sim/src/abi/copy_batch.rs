//! Batched copies (aclrtMemcpyBatch, aclrtMemcpyBatchAsync and their V2 forms without
//! failIndex): every copy of a batch is checked before any runs, then each runs as aclrtMemcpy /
//! aclrtMemcpyAsync would run it.

use std::ffi::c_void;

use npu_sys::*;

use super::check::{array, run_of, run_starts};
use super::copy::{ALL, ASYNC, On, copy};
use crate::error::{Res, ensure, fail, guard, non_null, write_out};
use crate::memory::{Located, PtrClass};
use crate::sim::{Sim, sim};
use crate::task::Extent;

/// The caller's arrays, as passed.
struct Batch {
    dsts: *mut *mut c_void,
    dest_maxs: *mut usize,
    srcs: *mut *mut c_void,
    sizes: *mut usize,
    count: usize,
    attrs: *mut aclrtMemcpyBatchAttr,
    attrs_indexes: *mut usize,
    num_attrs: usize,
    /// Where the V1 forms report the failing copy; the V2 forms have none.
    fail_index: Option<*mut usize>,
}

/// A checked copy of the batch.
struct Entry {
    dst: *mut c_void,
    src: *const c_void,
    len: usize,
}

/// Fails with 107000 for copy `index`, naming it through `failIndex` if there is one.
fn fail_at<T>(fail_index: Option<*mut usize>, index: usize, why: &str) -> Res<T> {
    if let Some(fail_index) = fail_index {
        write_out(fail_index, "failIndex", index)?;
    }
    fail!(ACL_ERROR_RT_PARAM_INVALID, "copy {index}: {why}")
}

/// The copy kind an attribute describes: host to device or device to host only.
fn kind_of(attr: &aclrtMemcpyBatchAttr) -> Option<aclrtMemcpyKind> {
    match (attr.srcLoc.type_, attr.dstLoc.type_) {
        (ACL_MEM_LOCATION_TYPE_HOST, ACL_MEM_LOCATION_TYPE_DEVICE) => {
            Some(ACL_MEMCPY_HOST_TO_DEVICE)
        }
        (ACL_MEM_LOCATION_TYPE_DEVICE, ACL_MEM_LOCATION_TYPE_HOST) => {
            Some(ACL_MEMCPY_DEVICE_TO_HOST)
        }
        _ => None,
    }
}

/// Whether a pointer lives where its side of the attribute says.
fn matches_location(located: &Located, location: &aclrtMemLocation) -> bool {
    match located.class {
        PtrClass::Device(id) => {
            location.type_ == ACL_MEM_LOCATION_TYPE_DEVICE
                && i64::from(id) == i64::from(location.id)
        }
        PtrClass::Host | PtrClass::Unregistered => location.type_ == ACL_MEM_LOCATION_TYPE_HOST,
    }
}

/// Checks the whole batch; returns its copy kind and its non-empty copies.
fn check(sim: &Sim, batch: &Batch) -> Res<(aclrtMemcpyKind, Vec<Entry>)> {
    // Every error that names no copy leaves failIndex SIZE_MAX, the NULL arrays' included.
    if let Some(fail_index) = batch.fail_index.filter(|at| !at.is_null()) {
        write_out(fail_index, "failIndex", usize::MAX)?;
    }
    // The NULL checks in parameter order: failIndex, the last pointer, is named last.
    non_null(batch.dsts, "dsts")?;
    non_null(batch.dest_maxs, "destMaxs")?;
    non_null(batch.srcs, "srcs")?;
    non_null(batch.sizes, "sizes")?;
    non_null(batch.attrs, "attrs")?;
    non_null(batch.attrs_indexes, "attrsIndexes")?;
    if let Some(fail_index) = batch.fail_index {
        non_null(fail_index, "failIndex")?;
    }
    ensure!(batch.count != 0, ACL_ERROR_INVALID_PARAM, "numBatches is 0");
    ensure!(
        batch.num_attrs != 0 && batch.num_attrs <= batch.count,
        ACL_ERROR_RT_PARAM_INVALID,
        "numAttrs ({}) must be 1 to numBatches ({})",
        batch.num_attrs,
        batch.count
    );
    let dsts = array(batch.dsts.cast_const(), batch.count, "dsts")?;
    let dest_maxs = array(batch.dest_maxs.cast_const(), batch.count, "destMaxs")?;
    let srcs = array(batch.srcs.cast_const(), batch.count, "srcs")?;
    let sizes = array(batch.sizes.cast_const(), batch.count, "sizes")?;
    let attrs = array(batch.attrs.cast_const(), batch.num_attrs, "attrs")?;
    let starts = array(
        batch.attrs_indexes.cast_const(),
        batch.num_attrs,
        "attrsIndexes",
    )?;
    run_starts(starts, batch.count, "attrsIndexes")?;
    let mut kind = None;
    let mut entries = Vec::new();
    for index in 0..batch.count {
        // The attribute whose run holds this copy: the last one starting at or before it.
        let attr = &attrs[run_of(starts, index)];
        let Some(this_kind) = kind_of(attr) else {
            return fail_at(
                batch.fail_index,
                index,
                "its attribute is neither host to device nor device to host",
            );
        };
        if *kind.get_or_insert(this_kind) != this_kind {
            return fail_at(
                batch.fail_index,
                index,
                "a batch copies in one direction only",
            );
        }
        let (dst, src, len) = (dsts[index], srcs[index], sizes[index]);
        non_null(dst, "dsts[i]")?;
        non_null(src, "srcs[i]")?;
        let (dst_at, src_at) = (
            sim.memory.locate(dst as usize),
            sim.memory.locate(src as usize),
        );
        if !matches_location(&dst_at, &attr.dstLoc) || !matches_location(&src_at, &attr.srcLoc) {
            return fail_at(
                batch.fail_index,
                index,
                "its memory is not where its attribute says",
            );
        }
        ensure!(
            len <= dest_maxs[index],
            ACL_ERROR_RT_PARAM_INVALID,
            "copy {index}: size ({len}) is greater than destMax ({})",
            dest_maxs[index]
        );
        if len != 0 {
            // Here, not when the copy runs: the copies before it would have run already.
            dst_at.check_range(dst as usize, len, &format!("copy {index}: the destination"))?;
            src_at.check_range(src as usize, len, &format!("copy {index}: the source"))?;
            entries.push(Entry {
                dst,
                src: src.cast_const(),
                len,
            });
        }
    }
    Ok((kind.unwrap_or(ACL_MEMCPY_HOST_TO_DEVICE), entries))
}

fn run(batch: Batch, stream: Option<aclrtStream>) -> Res<()> {
    let sim = sim()?;
    let (kind, entries) = check(sim, &batch)?;
    let on = On::resolve(sim, stream)?;
    let allowed = if stream.is_some() { ASYNC } else { ALL };
    for entry in entries {
        copy(
            sim,
            &on,
            entry.dst,
            entry.src,
            kind,
            Extent::linear(entry.len),
            allowed,
        )?;
    }
    Ok(())
}

/// Defines an exported batch copy: CANN's parameters, with `failIndex` for the V1 forms
/// (`[failIndex]`, `[]` for V2), plus `$stream` for the forms that run on a stream.
macro_rules! export_batch {
    ($(#[$doc:meta])* $name:ident [$($fail:ident)?] $(, $stream:ident)?) => {
        $(#[$doc])*
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            dsts: *mut *mut c_void,
            destMaxs: *mut usize,
            srcs: *mut *mut c_void,
            sizes: *mut usize,
            numBatches: usize,
            attrs: *mut aclrtMemcpyBatchAttr,
            attrsIndexes: *mut usize,
            numAttrs: usize,
            $($fail: *mut usize,)?
            $($stream: aclrtStream,)?
        ) -> aclError {
            let batch = Batch {
                dsts,
                dest_maxs: destMaxs,
                srcs,
                sizes,
                count: numBatches,
                attrs,
                attrs_indexes: attrsIndexes,
                num_attrs: numAttrs,
                fail_index: None $(.or(Some($fail)))?,
            };
            guard(stringify!($name), || run(batch, None $(.or(Some($stream)))?))
        }
    };
}

export_batch! {
    /// Copies a batch synchronously: all host to device or all device to host, pinned or
    /// pageable host memory. Each copy's memory must be where its attribute says, and the
    /// batch one way (107000, with `*failIndex` naming the copy); NULL arrays → 100000;
    /// numAttrs 0 or above numBatches, or attrsIndexes not starting at 0 and increasing →
    /// 107000 (`*failIndex` SIZE_MAX).
    ///
    /// # Safety
    /// The arrays must hold `numBatches` (`numAttrs`) elements; host memory the runtime does
    /// not own must be valid for its copy's size.
    aclrtMemcpyBatch [failIndex]
}

export_batch! {
    /// aclrtMemcpyBatch as tasks of `stream`; copies involving pageable host memory are done
    /// before the call returns (after the stream's earlier work).
    ///
    /// # Safety
    /// As aclrtMemcpyBatch; host memory must stay valid until the stream has run the copies.
    aclrtMemcpyBatchAsync [failIndex], stream
}

export_batch! {
    /// aclrtMemcpyBatch without failIndex: the same checks and codes.
    ///
    /// # Safety
    /// As aclrtMemcpyBatch.
    aclrtMemcpyBatchV2 []
}

export_batch! {
    /// aclrtMemcpyBatchAsync without failIndex: the same checks and codes.
    ///
    /// # Safety
    /// As aclrtMemcpyBatchAsync.
    aclrtMemcpyBatchAsyncV2 [], stream
}

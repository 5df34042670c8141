//! Queries of managed memory's advice and prefetch record (aclrtMemManagedGetAttr,
//! aclrtMemManagedGetAttrs), from `crate::advice`.

use std::ffi::c_void;

use npu_sys::*;

use super::check::array;
use super::managed::is_managed;
use crate::advice::{PageAdvice, Place, common};
use crate::error::{Res, ensure, fail, guard, non_null, write_out};
use crate::sim::{Sim, sim};

/// The id reported for pages that disagree or say nothing ("invalid").
const NO_ID: i32 = -2;

/// Checks a queried range: managed memory, 1 byte or more, inside one allocation (107000).
fn check_query_range(sim: &Sim, ptr: *const c_void, size: usize) -> Res<()> {
    non_null(ptr, "ptr")?;
    let address = ptr as usize;
    let inside = is_managed(sim, address)
        && sim
            .memory
            .allocation_of(address)
            .is_some_and(|(base, len, _)| size <= len - (address - base));
    ensure!(
        size != 0 && inside,
        ACL_ERROR_RT_PARAM_INVALID,
        "{ptr:p}+{size} is not a non-empty range of one managed allocation"
    );
    Ok(())
}

/// Writes the 4-byte value of an attribute that takes exactly 4 bytes (`check_attribute`).
fn write_word(data: *mut c_void, value: i32) -> Res<()> {
    write_out(data.cast::<i32>(), "data", value)
}

/// The id a place is reported by: the host's is -1.
fn id_of(place: Option<Place>) -> i32 {
    place.map_or(NO_ID, |(_, id)| id)
}

/// The type a place is reported by.
fn type_of(place: Option<Place>) -> i32 {
    place.map_or(ACL_MEM_LOCATIONTYPE_INVALID, |(kind, _)| kind) as i32
}

/// A location's id where only devices and NUMA nodes have one.
fn node_id_of(place: Option<Place>) -> i32 {
    match place {
        Some((ACL_MEM_LOCATIONTYPE_HOST, _)) | None => NO_ID,
        Some((_, id)) => id,
    }
}

/// Checks that `data` (`data_size` bytes) can take `attribute`: a known attribute, 4 bytes
/// (ACCESSED_BY: a non-zero multiple of 4), NULL → 100000, else 107000. Checked for every
/// attribute of a query before any is written, so that a refused query writes nothing.
fn check_attribute(
    attribute: aclrtMemManagedRangeAttribute,
    data: *mut c_void,
    data_size: usize,
) -> Res<()> {
    non_null(data, "data")?;
    match attribute {
        ACL_MEM_RANGE_ATTRIBUTE_ACCESSED_BY => ensure!(
            data_size != 0 && data_size.is_multiple_of(4),
            ACL_ERROR_RT_PARAM_INVALID,
            "dataSize must be a non-zero multiple of 4 for ACCESSED_BY, not {data_size}"
        ),
        ACL_MEM_RANGE_ATTRIBUTE_READ_MOSTLY
        | ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION
        | ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE
        | ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID
        | ACL_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION
        | ACL_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE
        | ACL_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID => ensure!(
            data_size == 4,
            ACL_ERROR_RT_PARAM_INVALID,
            "dataSize must be 4 for this attribute, not {data_size}"
        ),
        other => fail!(
            ACL_ERROR_RT_PARAM_INVALID,
            "unknown managed memory attribute {other}"
        ),
    }
    Ok(())
}

/// Writes one attribute of the pages `records` into `data` (`data_size` bytes).
fn write_attribute(
    records: &[PageAdvice],
    attribute: aclrtMemManagedRangeAttribute,
    data: *mut c_void,
    data_size: usize,
) -> Res<()> {
    check_attribute(attribute, data, data_size)?;
    let preferred = common(records, |page| page.preferred);
    let prefetched = common(records, |page| page.last_prefetch);
    match attribute {
        ACL_MEM_RANGE_ATTRIBUTE_READ_MOSTLY => {
            let all = records.iter().all(|page| page.read_mostly);
            write_word(data, i32::from(all))
        }
        ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION => write_word(data, id_of(preferred)),
        ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE => write_word(data, type_of(preferred)),
        ACL_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID => write_word(data, node_id_of(preferred)),
        ACL_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION => write_word(data, id_of(prefetched)),
        ACL_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE => {
            write_word(data, type_of(prefetched))
        }
        ACL_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID => {
            write_word(data, node_id_of(prefetched))
        }
        ACL_MEM_RANGE_ATTRIBUTE_ACCESSED_BY => {
            // The places every page of the range names, then -2 for the rest of the array.
            let mut everywhere = records.first().map(|page| page.accessed_by.clone());
            if let Some(set) = everywhere.as_mut() {
                set.retain(|place| records.iter().all(|page| page.accessed_by.contains(place)));
            }
            let ids = everywhere.into_iter().flatten().map(|(_, id)| id);
            let out = data.cast::<i32>();
            for (i, id) in ids
                .chain(std::iter::repeat(NO_ID))
                .take(data_size / 4)
                .enumerate()
            {
                // SAFETY: `data` is non-NULL and, by the API contract, valid for `data_size`
                // bytes, which hold `data_size / 4` i32s; written unaligned.
                unsafe { out.add(i).write_unaligned(id) };
            }
            Ok(())
        }
        other => fail!(
            ACL_ERROR_RT_PARAM_INVALID,
            "unknown managed memory attribute {other}"
        ),
    }
}

/// What was said about a managed range: READ_MOSTLY (1 if every page is read-mostly),
/// PREFERRED_LOCATION / LAST_PREFETCH_LOCATION (the id every page agrees on, the host -1, else
/// -2), their _TYPE (the agreed type, else INVALID) and _ID (the agreed device or NUMA id,
/// else -2), each in 4 bytes; ACCESSED_BY (the ids every page names, then -2s) in a non-zero
/// multiple of 4 bytes. Another dataSize, an unknown attribute or a range that is not managed
/// memory → 107000; NULL → 100000.
///
/// # Safety
/// `data` must be NULL or valid for `dataSize` bytes of writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemManagedGetAttr(
    attribute: aclrtMemManagedRangeAttribute,
    ptr: *const c_void,
    size: usize,
    data: *mut c_void,
    dataSize: usize,
) -> aclError {
    guard("aclrtMemManagedGetAttr", || {
        non_null(ptr, "ptr")?;
        non_null(data, "data")?;
        let sim = sim()?;
        check_query_range(sim, ptr, size)?;
        let records = sim.advice.of(ptr as usize, size);
        write_attribute(&records, attribute, data, dataSize)
    })
}

/// aclrtMemManagedGetAttr for `numAttributes` attributes at once: `data[i]` (`dataSizes[i]`
/// bytes) receives `attributes[i]`. NULL arrays or numAttributes 0 → 100000. Every attribute
/// and its output are checked before any is written: a refused query writes nothing.
///
/// # Safety
/// The arrays must hold `numAttributes` elements; each `data[i]` NULL or valid for
/// `dataSizes[i]` bytes of writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemManagedGetAttrs(
    attributes: *mut aclrtMemManagedRangeAttribute,
    numAttributes: usize,
    ptr: *const c_void,
    size: usize,
    data: *mut *mut c_void,
    dataSizes: *mut usize,
) -> aclError {
    guard("aclrtMemManagedGetAttrs", || {
        non_null(attributes, "attributes")?;
        non_null(data, "data")?;
        non_null(dataSizes, "dataSizes")?;
        ensure!(
            numAttributes != 0,
            ACL_ERROR_INVALID_PARAM,
            "numAttributes is 0"
        );
        let sim = sim()?;
        check_query_range(sim, ptr, size)?;
        let attributes = array(attributes.cast_const(), numAttributes, "attributes")?;
        let outputs = array(data.cast_const(), numAttributes, "data")?;
        let sizes = array(dataSizes.cast_const(), numAttributes, "dataSizes")?;
        for ((&attribute, &out), &out_size) in attributes.iter().zip(outputs).zip(sizes) {
            check_attribute(attribute, out, out_size)?;
        }
        let records = sim.advice.of(ptr as usize, size);
        for ((&attribute, &out), &out_size) in attributes.iter().zip(outputs).zip(sizes) {
            write_attribute(&records, attribute, out, out_size)?;
        }
        Ok(())
    })
}

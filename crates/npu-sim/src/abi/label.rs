//! Labels: marking places in the tasks of streams bound to a built instance, and switching
//! to one of them, chosen by an index in device memory, when an execution runs.

use std::sync::Arc;

use npu_sys::*;

use super::model_build::bound_model;
use super::value::{check_aligned, check_word};
use crate::context;
use crate::control_flow::{Label, LabelList, MAX_LABELS, Place, Switch};
use crate::error::{Res, ensure, guard, non_null, write_out};
use crate::handle;
use crate::model_ri::Step;
use crate::sim::sim;

/// The label behind a handle (NULL → 100000; stale or forged → 107017).
fn label(label: aclrtLabel) -> Res<Arc<Label>> {
    non_null(label, "label")?;
    sim()?.labels.resolve(handle::from_ptr(label))
}

/// The label list behind a handle (NULL → 100000; stale or forged → 107017).
fn label_list(list: aclrtLabelList) -> Res<Arc<LabelList>> {
    non_null(list, "labelList")?;
    sim()?.label_lists.resolve(handle::from_ptr(list))
}

/// Creates a label in the current context; past 65535 labels in the process → 207005.
///
/// # Safety
/// `label` must be NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateLabel(label: *mut aclrtLabel) -> aclError {
    guard("aclrtCreateLabel", || {
        non_null(label, "label")?;
        let sim = sim()?;
        let ctx = context::current(sim)?;
        let handle = sim.labels.insert(Arc::new(Label::new(ctx.handle)?))?;
        write_out(label, "label", handle::to_ptr(handle))
    })
}

/// Sets the label at the place of the next task of a stream bound to a built instance
/// being built (not bound → 107005; its tasks complete → 107000); a label is set once
/// (107000) and on a stream of its own context (507031).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetLabel(label: aclrtLabel, stream: aclrtStream) -> aclError {
    guard("aclrtSetLabel", || {
        let label = self::label(label)?;
        let stream = context::submit_stream(sim()?, stream)?;
        let model = bound_model(&stream, "stream")?;
        model.check_accepts(&stream)?;
        ensure!(
            label.ctx == stream.ctx,
            ACL_ERROR_RT_LABEL_CONTEXT,
            "the label was created in another context than stream {}'s",
            stream.id
        );
        label.set(|| {
            let (_, seq) = model.push(&stream, Step::Label);
            Place {
                model: Arc::downgrade(&model),
                stream_id: stream.id,
                seq: seq as usize,
            }
        })
    })
}

/// Destroys a label. A label list holding it, and an instance it is set in, keep it.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDestroyLabel(label: aclrtLabel) -> aclError {
    guard("aclrtDestroyLabel", || {
        non_null(label, "label")?;
        sim()?.labels.remove_live(handle::from_ptr(label)).map(drop)
    })
}

/// Creates a list of `num` labels (1 to 65535, else 100000; NULL `labels` or `labelList` →
/// 100000; `labels` misaligned → 107000; a label destroyed or forged → 107017).
///
/// # Safety
/// `labels` must be NULL or valid for reads of `num` handles; `labelList` NULL or valid
/// for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateLabelList(
    labels: *mut aclrtLabel,
    num: usize,
    labelList: *mut aclrtLabelList,
) -> aclError {
    guard("aclrtCreateLabelList", || {
        non_null(labels, "labels")?;
        non_null(labelList, "labelList")?;
        ensure!(
            (1..=MAX_LABELS).contains(&num),
            ACL_ERROR_INVALID_PARAM,
            "num {num} is outside (0, {MAX_LABELS}]"
        );
        // A misaligned array is refused (107000): a slice of it would be undefined behaviour.
        let given = super::check::array(labels.cast_const(), num, "labels")?;
        super::check::non_null_entries(given, "a label of labels")?;
        let labels = given
            .iter()
            .map(|&l| self::label(l))
            .collect::<Res<Vec<_>>>()?;
        let handle = sim()?.label_lists.insert(Arc::new(LabelList { labels }))?;
        write_out(labelList, "labelList", handle::to_ptr(handle))
    })
}

/// Destroys a label list; switches that were given it keep its labels.
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDestroyLabelList(labelList: aclrtLabelList) -> aclError {
    guard("aclrtDestroyLabelList", || {
        non_null(labelList, "labelList")?;
        sim()?
            .label_lists
            .remove_live(handle::from_ptr(labelList))
            .map(drop)
    })
}

/// Adds to a bound stream's tasks a switch: when an execution reaches it, it reads the
/// uint32 at `ptr` (4-byte aligned device memory of the stream's device, else 107000) and
/// goes on from the label at that index among the list's first `maxValue` (past them: the
/// last of them), the rest of this stream's tasks skipped. NULL `ptr` or `labelList`, then
/// `maxValue` 0 → 100000, then an unaligned `ptr` → 107000 (all before the list is looked up:
/// a destroyed list → 107017), then
/// `maxValue` past the list's length → 100000; a stream not bound to a built instance →
/// 107005; one of those labels of another context → 507031.
///
/// # Safety
/// No preconditions; the pointer is only read by the device when the switch runs.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSwitchLabelByIndex(
    ptr: *mut std::ffi::c_void,
    maxValue: u32,
    labelList: aclrtLabelList,
    stream: aclrtStream,
) -> aclError {
    guard("aclrtSwitchLabelByIndex", || {
        non_null(ptr, "ptr")?;
        non_null(labelList, "labelList")?;
        // maxValue comes before labelList: 0 is refused before the list is looked up.
        ensure!(
            maxValue != 0,
            ACL_ERROR_INVALID_PARAM,
            "maxValue is 0: the switch needs at least one label"
        );
        check_aligned(ptr as usize, 4, "ptr")?;
        let list = label_list(labelList)?;
        let max = maxValue as usize;
        ensure!(
            max <= list.labels.len(),
            ACL_ERROR_INVALID_PARAM,
            "maxValue {maxValue} is outside [1, {}], the labels of the list",
            list.labels.len()
        );
        let stream = context::submit_stream(sim()?, stream)?;
        let model = bound_model(&stream, "stream")?;
        model.check_accepts(&stream)?;
        check_word(ptr as usize, 4, stream.device.id, "ptr")?;
        let targets = list.labels[..max].to_vec();
        ensure!(
            targets.iter().all(|label| label.ctx == stream.ctx),
            ACL_ERROR_RT_LABEL_CONTEXT,
            "a label of the list was created in another context than stream {}'s",
            stream.id
        );
        model.push(
            &stream,
            Step::Switch(Switch::Label {
                index: ptr as usize,
                targets,
            }),
        );
        Ok(())
    })
}

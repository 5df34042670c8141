//! The conditional-task side of an instance: the condition handles and branches it holds,
//! and, for a branch, where its capture stands.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};

use npu_sys::*;

use crate::capture::Capture;
use crate::control_flow::CondHandle;
use crate::device::Device;
use crate::error::{Res, fail};
use crate::handle::Handle;
use crate::sync::lock;

use super::{CondEntry, ModelRi};

/// Where the capture of a branch stands.
pub(super) enum BranchCapture {
    /// Not captured yet, or its capture failed: it runs nothing.
    Waiting,
    /// aclmdlRICaptureToModelRIBegin began this capture; if the capture is over without
    /// aclmdlRICaptureEnd ending it well (its stream went with its context), the branch runs
    /// nothing and may be captured again.
    Capturing(Weak<Capture>),
    /// aclmdlRICaptureEnd ended its capture: it runs what was captured.
    Captured,
}

/// Whether a capture is still going on.
fn is_going(capture: &Weak<Capture>) -> bool {
    capture.upgrade().is_some_and(|capture| capture.is_active())
}

impl ModelRi {
    /// A branch of a conditional task, in the context of the instance holding the task.
    pub(crate) fn new_branch(handle: Handle, ctx: Handle, device: Arc<Device>) -> Self {
        Self {
            branch: Some(Mutex::new(BranchCapture::Waiting)),
            ..Self::new(handle, ctx, device, false)
        }
    }

    /// Whether aclmdlRIAddCondTask created it as a branch.
    pub(crate) fn is_branch(&self) -> bool {
        self.branch.is_some()
    }

    /// Keeps a condition handle made for it, to be retired with it.
    pub(crate) fn add_cond_handle(&self, handle: Handle, cond: Arc<CondHandle>) {
        lock(&self.cond_handles).push((handle, cond));
    }

    /// Keeps the branches a conditional task of it created, to be destroyed with it.
    pub(crate) fn add_branches(&self, branches: &[Arc<ModelRi>]) {
        lock(&self.branches).extend(branches.iter().cloned());
    }

    /// The condition handles and branches it holds, handed over for destruction with it.
    pub(crate) fn take_dependents(&self) -> (Vec<CondEntry>, Vec<Arc<ModelRi>>) {
        (
            std::mem::take(&mut *lock(&self.cond_handles)),
            std::mem::take(&mut *lock(&self.branches)),
        )
    }

    /// aclmdlRICaptureToModelRIBegin: `begin` starts the capture of the branch (told whether
    /// a capture cut short left tasks to clear first). Not a branch, a branch captured
    /// already or being captured → ACL_ERROR_RT_PARAM_INVALID.
    pub(crate) fn capture_branch(&self, begin: impl FnOnce(bool) -> Res<Arc<Capture>>) -> Res<()> {
        let Some(state) = &self.branch else {
            fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "model runtime instance {} is not a branch of a conditional task (aclmdlRIAddCondTask)",
                self.id
            );
        };
        let mut state = lock(state);
        let cut_short = match &*state {
            BranchCapture::Waiting => false,
            BranchCapture::Capturing(capture) if is_going(capture) => fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "branch {} is being captured already",
                self.id
            ),
            BranchCapture::Capturing(_) => true,
            BranchCapture::Captured => fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "branch {} was captured already (a branch is captured once)",
                self.id
            ),
        };
        let capture = begin(cut_short)?;
        *state = BranchCapture::Capturing(Arc::downgrade(&capture));
        Ok(())
    }

    /// aclmdlRICaptureEnd of a branch's capture: it runs what was captured, or (`captured`
    /// false: the capture failed, and its tasks were cleared) nothing, until captured again.
    pub(crate) fn end_branch_capture(&self, captured: bool) {
        if let Some(state) = &self.branch {
            *lock(state) = match captured {
                true => BranchCapture::Captured,
                false => BranchCapture::Waiting,
            };
        }
    }

    /// Whether an execution runs its tasks: not a branch, or a branch captured.
    pub(super) fn runs_its_tasks(&self) -> bool {
        self.branch
            .as_ref()
            .is_none_or(|state| matches!(*lock(state), BranchCapture::Captured))
    }

    /// A branch of it (or of its branches) whose capture is going on, by id.
    pub(crate) fn capturing_branch(&self) -> Option<u32> {
        lock(&self.branches).iter().find_map(|branch| {
            let capturing = branch.branch.as_ref().is_some_and(|state| {
                matches!(&*lock(state), BranchCapture::Capturing(capture) if is_going(capture))
            });
            match capturing {
                true => Some(branch.id),
                false => branch.capturing_branch(),
            }
        })
    }

    /// Forgets what a branch's capture that failed (or was cut short) recorded, to be
    /// captured again (what it holds besides is the caller's to retire).
    pub(crate) fn forget_capture(&self) {
        lock(&self.tasks).clear();
        lock(&self.streams).clear();
        self.open.store(true, Ordering::Release);
    }
}

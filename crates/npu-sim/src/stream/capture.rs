//! Where a stream's tasks go instead of its queue: a capture, a bound model runtime
//! instance, a task group being recorded or updated, a PERSISTENT stream's kept tasks.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use npu_sys::*;

use crate::capture::Capture;
use crate::error::{Res, SimError, ensure, fail};
use crate::model_ri::{GroupWork, ModelRi, TaskGroup};
use crate::sync::lock;
use crate::task::Op;

use super::{State, Stream};

impl Stream {
    /// aclrtPersistentTaskClean: drops the tasks kept for a model.
    pub(crate) fn clean_persistent(&self) -> Res<()> {
        ensure!(
            self.is_persistent(),
            ACL_ERROR_RT_PARAM_INVALID,
            "stream {} is not an ACL_STREAM_PERSISTENT stream: it keeps no tasks to clean",
            self.id
        );
        let kept = std::mem::take(&mut lock(&self.state).persistent);
        // Dropping tasks may release a kernel library: outside the lock.
        drop(kept);
        Ok(())
    }

    /// Whether tasks on this stream are kept for a model instead of run (ACL_STREAM_PERSISTENT).
    pub(crate) fn is_persistent(&self) -> bool {
        self.flags & ACL_STREAM_PERSISTENT != 0
    }

    /// The capture the stream takes part in, if it is being captured.
    pub(crate) fn capture(&self) -> Option<Arc<Capture>> {
        lock(&self.state).capture.clone()
    }

    /// Fails with ACL_ERROR_RT_INVALID_HANDLE, as a submission does, if the stream's
    /// destruction has begun. Takes the state (its lock held), where the destruction marks the
    /// stream: a capture or update begun before the mark the destruction undoes
    /// (leave_capture, abandon_update), and none is begun after it that would outlive it.
    pub(super) fn check_alive(&self, _locked: &State) -> Res<()> {
        ensure!(
            !self.destroyed.load(Ordering::Acquire),
            ACL_ERROR_RT_INVALID_HANDLE,
            "stream {} is being destroyed",
            self.id
        );
        Ok(())
    }

    /// Fails with ACL_ERROR_RT_PARAM_INVALID if the stream is bound to an instance: its tasks
    /// go there, so they cannot also go into `elsewhere` (a stream in two instances at once).
    fn check_unbound(&self, state: &State, elsewhere: &str) -> Res<()> {
        if let Some(bound) = &state.bound {
            fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "stream {} is bound to model runtime instance {} (its tasks go there), so they \
                 cannot go into {elsewhere}",
                self.id,
                bound.id
            );
        }
        Ok(())
    }

    /// Makes the stream's tasks go into `capture` (one being destroyed →
    /// ACL_ERROR_RT_INVALID_HANDLE; one capturing already → ACL_ERROR_RT_STREAM_CAPTURED; one
    /// collecting a task group's update → ACL_ERROR_STREAM_TASK_GROUP_STATUS, as recording a
    /// group there is; one bound to an instance, whose tasks go there →
    /// ACL_ERROR_RT_PARAM_INVALID, as binding it to a second instance is).
    pub(crate) fn enter_capture(&self, capture: &Arc<Capture>) -> Res<()> {
        let mut state = lock(&self.state);
        self.check_alive(&state)?;
        ensure!(
            state.capture.is_none(),
            ACL_ERROR_RT_STREAM_CAPTURED,
            "stream {} is being captured already",
            self.id
        );
        ensure!(
            !matches!(state.group, Some(GroupWork::Updating { .. })),
            ACL_ERROR_STREAM_TASK_GROUP_STATUS,
            "stream {} collects a task group's update (aclmdlRICaptureTaskUpdateBegin): it \
             cannot be captured until aclmdlRICaptureTaskUpdateEnd",
            self.id
        );
        self.check_unbound(&state, "a capture's instance")?;
        state.capture = Some(capture.clone());
        Ok(())
    }

    /// The built instance the stream is bound to.
    pub(crate) fn bound_model(&self) -> Option<Arc<ModelRi>> {
        lock(&self.state).bound.clone()
    }

    /// Binds the stream to a built instance: a PERSISTENT stream (ACL_ERROR_RT_PARAM_INVALID
    /// otherwise) whose destruction has not begun (ACL_ERROR_RT_INVALID_HANDLE, as a
    /// submission), bound to none yet, not being captured into another and not collecting a
    /// task group's update (ACL_ERROR_RT_PARAM_INVALID: its tasks would go to two places).
    /// `enlist` runs under the state lock once the stream is bound, so that the instance lists
    /// it in the same step: a destruction, which marks the stream and then unbinds it under
    /// that lock, either finds it listed or keeps it from being bound.
    pub(crate) fn bind(&self, model: &Arc<ModelRi>, enlist: impl FnOnce()) -> Res<()> {
        ensure!(
            self.is_persistent(),
            ACL_ERROR_RT_PARAM_INVALID,
            "stream {} was not created with ACL_STREAM_PERSISTENT, so it cannot be bound to a model runtime instance",
            self.id
        );
        let mut state = lock(&self.state);
        self.check_alive(&state)?;
        ensure!(
            state.bound.is_none(),
            ACL_ERROR_RT_PARAM_INVALID,
            "stream {} is bound to a model runtime instance already",
            self.id
        );
        ensure!(
            state.capture.is_none(),
            ACL_ERROR_RT_PARAM_INVALID,
            "stream {} is being captured (its tasks go into the capture's instance)",
            self.id
        );
        ensure!(
            !matches!(state.group, Some(GroupWork::Updating { .. })),
            ACL_ERROR_RT_PARAM_INVALID,
            "stream {} collects a task group's update (its tasks go into the group until \
             aclmdlRICaptureTaskUpdateEnd)",
            self.id
        );
        state.bound = Some(model.clone());
        enlist();
        Ok(())
    }

    pub(crate) fn unbind(&self) {
        lock(&self.state).bound = None;
    }

    /// Fails with ACL_ERROR_STREAM_TASK_GROUP_STATUS if the stream records or updates a task
    /// group already (one at a time).
    fn check_no_group_work(&self, state: &State) -> Res<()> {
        ensure!(
            state.group.is_none(),
            ACL_ERROR_STREAM_TASK_GROUP_STATUS,
            "stream {} is recording or updating a task group already",
            self.id
        );
        Ok(())
    }

    /// The capture the stream takes part in (ACL_ERROR_RT_STREAM_NOT_CAPTURED if none).
    fn capture_of(&self, state: &State) -> Res<Arc<Capture>> {
        match &state.capture {
            Some(capture) => Ok(capture.clone()),
            None => fail!(
                ACL_ERROR_RT_STREAM_NOT_CAPTURED,
                "stream {} is not being captured",
                self.id
            ),
        }
    }

    /// Starts recording a task group on the capturing stream (aclmdlRICaptureTaskGrpBegin).
    /// The capture's instance counts it in the same step, under the state lock, as
    /// [`Self::end_group`] and [`Self::leave_capture`] uncount it: the count is always that of
    /// the streams recording, whichever thread ends the capture meanwhile.
    pub(crate) fn begin_recording(&self) -> Res<()> {
        let mut state = lock(&self.state);
        self.check_alive(&state)?;
        let capture = self.capture_of(&state)?;
        self.check_no_group_work(&state)?;
        state.group = Some(GroupWork::Recording(Vec::new()));
        capture.model.group_recording(true);
        Ok(())
    }

    /// Starts collecting an update of `group` (aclmdlRICaptureTaskUpdateBegin): refused on a
    /// stream being destroyed (its destruction abandoned its update already: this one would
    /// never be), bound to an instance (its launches would go to two places) or doing group
    /// work already.
    pub(crate) fn begin_update(&self, group: &Arc<TaskGroup>) -> Res<()> {
        let mut state = lock(&self.state);
        self.check_alive(&state)?;
        self.check_unbound(&state, "a task group's update")?;
        self.check_no_group_work(&state)?;
        state.group = Some(GroupWork::Updating {
            group: group.clone(),
            staged: Vec::new(),
        });
        Ok(())
    }

    /// Ends the recording of a task group: the indexes of its tasks in the instance and the
    /// capture recording them (not capturing → ACL_ERROR_RT_STREAM_NOT_CAPTURED; not
    /// recording → ACL_ERROR_STREAM_TASK_GROUP_STATUS).
    pub(crate) fn end_group(&self) -> Res<(Vec<usize>, Arc<Capture>)> {
        let mut state = lock(&self.state);
        let capture = self.capture_of(&state)?;
        match state.group.take() {
            Some(GroupWork::Recording(indexes)) => {
                capture.model.group_recording(false);
                Ok((indexes, capture))
            }
            other => {
                state.group = other;
                fail!(
                    ACL_ERROR_STREAM_TASK_GROUP_STATUS,
                    "stream {} is not recording a task group (aclmdlRICaptureTaskGrpBegin)",
                    self.id
                )
            }
        }
    }

    /// Ends the update of a task group: the group and the tasks staged for it (not updating
    /// → ACL_ERROR_STREAM_TASK_GROUP_STATUS).
    pub(crate) fn end_update(&self) -> Res<(Arc<TaskGroup>, Vec<Op>)> {
        let mut state = lock(&self.state);
        match state.group.take() {
            Some(GroupWork::Updating { group, staged }) => Ok((group, staged)),
            other => {
                state.group = other;
                fail!(
                    ACL_ERROR_STREAM_TASK_GROUP_STATUS,
                    "stream {} is not updating a task group (aclmdlRICaptureTaskUpdateBegin)",
                    self.id
                )
            }
        }
    }

    /// Fails with ACL_ERROR_RT_TASK_TYPE_NOT_SUPPORT if the stream is collecting a task
    /// group's update (aclmdlRICaptureTaskUpdateBegin): `what`, which is not one kernel launch,
    /// cannot be among the group's new tasks.
    pub(crate) fn check_not_updating(&self, what: &str) -> Res<()> {
        ensure!(
            !matches!(lock(&self.state).group, Some(GroupWork::Updating { .. })),
            ACL_ERROR_RT_TASK_TYPE_NOT_SUPPORT,
            "{what} is not possible while stream {} collects a task group's update (only kernel \
             launches are, until aclmdlRICaptureTaskUpdateEnd)",
            self.id
        );
        Ok(())
    }

    /// Drops the task-group update the stream is collecting, if any (it is being destroyed):
    /// the group may be updated again from another stream.
    pub(crate) fn abandon_update(&self) {
        let work = lock(&self.state).group.take();
        if let Some(GroupWork::Updating { group, .. }) = &work {
            group.updating.store(false, Ordering::Release);
        }
        // The staged launches may release a kernel library: outside the lock.
        drop(work);
    }

    /// Back to running its tasks; returns the capture it was in. A task group it was still
    /// recording ends with the capture (a group is recorded only while capturing), which
    /// notes it was left open.
    pub(crate) fn leave_capture(&self) -> Option<Arc<Capture>> {
        let mut state = lock(&self.state);
        let capture = state.capture.take();
        if matches!(state.group, Some(GroupWork::Recording(_))) {
            state.group = None;
            if let Some(capture) = &capture {
                capture.group_left_open();
            }
        }
        capture
    }

    /// Fails with ACL_ERROR_RT_STREAM_CAPTURED if the stream is being captured, and makes
    /// its capture invalid: `what` cannot be done to a capturing stream.
    pub(crate) fn check_not_captured(&self, what: &str) -> Res<()> {
        if let Some(capture) = self.capture() {
            let error = SimError::new(
                ACL_ERROR_RT_STREAM_CAPTURED,
                format!(
                    "{what} is not possible while stream {} is being captured (end the capture \
                     with aclmdlRICaptureEnd first)",
                    self.id
                ),
            );
            return capture.refuse(error);
        }
        Ok(())
    }
}

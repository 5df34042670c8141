//! Model runtime instances (aclmdlRI): the tasks a capture recorded, replayed on a stream by
//! every execution.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

use npu_sys::*;
use std::sync::{Arc, Mutex, Weak};

use crate::control_flow::{CondHandle, CondKind, Switch, is_branch};
use crate::device::Device;
use crate::error::{Res, ensure, fail};
use crate::event::{Event, Record};
use crate::handle::Handle;
use crate::kernel::{ArgsBlob, Launch, LaunchArgs};
use crate::stream::Stream;
use crate::sync::lock;
use crate::task::{HostFn, Op, Task};
use crate::task_update::PatchSlot;

mod branch;
mod program;

/// The longest name aclmdlRIGetName returns, in bytes, its NUL included.
pub(crate) const MAX_NAME: usize = 512;

/// What a captured task does when the instance executes.
#[derive(Clone)]
pub(crate) enum Step {
    /// A copy of the operation runs (records and the waits on them are new records).
    Run(Op),
    /// aclrtStreamWaitEventWithFlag(EXTERNAL): a wait for the event's record current when the
    /// replay is queued (a record outside the instance), as a wait issued then would be.
    WaitFor(Arc<Event>),
    /// aclrtActiveStream on a bound stream: the stream with this id (bound to the same
    /// instance) runs its tasks when the execution reaches this one.
    Activate(i32),
    /// aclrtSetLabel: the label's place (it does nothing when it runs).
    Label,
    /// aclrtSwitchLabelByIndex, aclrtSwitchStream: the execution goes on where the switch
    /// chooses when it runs.
    Switch(Switch),
    /// aclmdlRIAddCondTask: the handle's word chooses which branch runs (instances of their
    /// own, captured with aclmdlRICaptureToModelRIBegin).
    Cond {
        handle: Arc<CondHandle>,
        kind: CondKind,
        branches: Vec<Arc<ModelRi>>,
    },
}

impl Step {
    /// (category, name), as the trace names tasks.
    pub(crate) fn label(&self) -> (&'static str, String) {
        match self {
            Step::Run(op) => op.label(),
            Step::WaitFor(_) => ("event", "wait (external)".to_owned()),
            Step::Activate(id) => ("stream", format!("activate stream {id}")),
            Step::Label => ("label", "set".to_owned()),
            Step::Switch(Switch::Label { targets, .. }) => {
                ("label", format!("switch by index among {}", targets.len()))
            }
            Step::Switch(Switch::Stream { target, .. }) => {
                ("stream", format!("switch to stream {target}"))
            }
            Step::Cond { kind, branches, .. } => (
                "condition",
                format!("{kind:?} of {} branches", branches.len()).to_lowercase(),
            ),
        }
    }

    /// The operation, for steps that copy one.
    pub(crate) fn op(&self) -> Option<&Op> {
        match self {
            Step::Run(op) => Some(op),
            Step::WaitFor(_)
            | Step::Activate(_)
            | Step::Label
            | Step::Switch(_)
            | Step::Cond { .. } => None,
        }
    }
}

/// A task of the instance, as it was captured.
#[derive(Clone)]
pub(crate) struct Captured {
    /// The id of the stream it was captured from (aclrtStreamGetId).
    pub(crate) stream_id: i32,
    /// Its place among the tasks captured from that stream (0 for the first).
    pub(crate) seq: u32,
    pub(crate) step: Step,
    /// aclmdlRITaskDisable was called on it: the next aclmdlRIUpdate disables it.
    pub(crate) disabling: bool,
    /// Executions skip it.
    pub(crate) disabled: bool,
    /// Operator information cached on it (aclrtCacheLastTaskOpInfo).
    pub(crate) op_info: Option<Arc<[u8]>>,
    /// Extended information cached on it (aclrtCacheLastTaskExtendInfo).
    pub(crate) extend_info: Option<Arc<[u8]>>,
    /// What aclrtTaskUpdateAsync changes in it: random number tasks and kernel launches.
    pub(crate) patch: Option<Arc<PatchSlot>>,
}

impl Captured {
    /// The task becomes `op`, with a patch slot of its own; returns what it was.
    fn set_op(&mut self, op: Op) -> Step {
        let step = Step::Run(op);
        self.patch = patch_slot(&step);
        std::mem::replace(&mut self.step, step)
    }
}

/// The patch slot a task of an instance gets: one for the tasks aclrtTaskUpdateAsync updates.
fn patch_slot(step: &Step) -> Option<Arc<PatchSlot>> {
    matches!(step, Step::Run(Op::Kernel(_) | Op::Random(_))).then(Default::default)
}

/// What aclrtCacheLastTask* attach to a captured task.
#[derive(Clone, Copy, Debug)]
pub(crate) enum TaskInfo {
    Op,
    Extend,
}

/// What aclmdlRITaskGetType reports for a captured task.
pub(crate) fn task_type(step: &Step) -> aclmdlRITaskType {
    match step {
        Step::WaitFor(_) | Step::Run(Op::Wait { .. }) => ACL_MODEL_RI_TASK_EVENT_WAIT,
        Step::Run(Op::Kernel(_)) => ACL_MODEL_RI_TASK_KERNEL,
        Step::Run(Op::Record(record)) if record.event().is_some() => ACL_MODEL_RI_TASK_EVENT_RECORD,
        Step::Run(Op::Reset { .. }) => ACL_MODEL_RI_TASK_EVENT_RESET,
        Step::Run(Op::ValueWrite { .. }) => ACL_MODEL_RI_TASK_VALUE_WRITE,
        Step::Run(Op::ValueWait { .. }) => ACL_MODEL_RI_TASK_VALUE_WAIT,
        Step::Run(_) | Step::Activate(_) | Step::Label | Step::Switch(_) | Step::Cond { .. } => {
            ACL_MODEL_RI_TASK_DEFAULT
        }
    }
}

/// What an aclmdlRITask handle names: a task of an instance, by its place in it.
pub(crate) struct TaskRef {
    pub(crate) model: Weak<ModelRi>,
    pub(crate) index: usize,
}

/// A task group (aclrtTaskGrp): kernel launches of an instance that can be updated.
pub(crate) struct TaskGroup {
    pub(crate) model: Weak<ModelRi>,
    /// The indexes of its tasks in the instance.
    pub(crate) indexes: Vec<usize>,
    /// An update of it is going on (aclmdlRICaptureTaskUpdateBegin .. End).
    pub(crate) updating: AtomicBool,
}

/// A stream's task-group work.
pub(crate) enum GroupWork {
    /// aclmdlRICaptureTaskGrpBegin on a capturing stream: the indexes of the tasks so far.
    Recording(Vec<usize>),
    /// aclmdlRICaptureTaskUpdateBegin: the tasks submitted since, which replace the group's.
    Updating {
        group: Arc<TaskGroup>,
        staged: Vec<Op>,
    },
}

/// Only kernel launches (single-operator tasks) can be in a task group
/// (ACL_ERROR_RT_TASK_TYPE_NOT_SUPPORT).
pub(crate) fn check_groupable(step: &Step) -> Res<()> {
    ensure!(
        matches!(step, Step::Run(Op::Kernel(_))),
        ACL_ERROR_RT_TASK_TYPE_NOT_SUPPORT,
        "only kernel launches can be recorded or updated in a task group, not a {} task",
        step.label().1
    );
    Ok(())
}

/// A stream bound to a built instance (aclmdlRIBindStream).
struct Bound {
    stream: Arc<Stream>,
    /// ACL_MODEL_STREAM_FLAG_HEAD: it runs from the start of every execution.
    head: bool,
    /// aclmdlRIEndTask marked the end of its tasks.
    ended: bool,
}

/// A model runtime instance.
pub(crate) struct ModelRi {
    pub(crate) handle: Handle,
    /// Unique in the process (aclmdlRIGetId).
    pub(crate) id: u32,
    /// The context it was captured in: it executes on that context's streams.
    pub(crate) ctx: Handle,
    pub(crate) device: Arc<Device>,
    tasks: Mutex<Vec<Captured>>,
    /// The streams whose tasks it holds, in the order they joined (id, tasks so far).
    streams: Mutex<Vec<(i32, u32)>>,
    name: Mutex<String>,
    /// aclmdlRIDestroyRegisterCallback's functions and their user data, in registration order.
    destroy_callbacks: Mutex<Vec<(HostFn, usize)>>,
    /// Cloned into every replayed task: more than one holder means an execution is not over.
    running: Arc<()>,
    /// Executions being queued now, or `None` once the instance is destroyed: a destroy and
    /// the queueing of an execution exclude each other through it, so a destroy cannot pass
    /// between an execution's first task leaving its stream and its last being queued.
    executing: Mutex<Option<usize>>,
    /// Cloned into every replayed task; aclmdlRIAbort sets it (its tasks are dropped) and
    /// puts a fresh one here for later executions.
    aborted: Mutex<Arc<AtomicBool>>,
    /// Still being captured or built: it cannot execute yet.
    open: AtomicBool,
    /// Built explicitly (aclmdlRIBuildBegin) rather than captured.
    pub(crate) built: bool,
    bound: Mutex<Vec<Bound>>,
    /// The stream aclmdlRIExecute runs it on, created at its first synchronous execution.
    exec: Mutex<Option<Arc<Stream>>>,
    /// The streams it owns: a captured instance's model streams (one per captured stream).
    owned: Mutex<Vec<Arc<Stream>>>,
    /// The aclmdlRITask handles given out, by task index (one per task, reused).
    task_handles: Mutex<HashMap<usize, Handle>>,
    /// The aclrtTaskGrp handles of its task groups.
    group_handles: Mutex<Vec<Handle>>,
    /// How many of its capturing streams are recording a task group now: meanwhile a task
    /// submitted to one of its other capturing streams interrupts the recording (107034).
    groups_recording: AtomicUsize,
    /// The host-packed arguments of launches replaced since the capture, kept until the
    /// instance goes: a placeholder slot holds the address of its data inside the blob, and
    /// arguments read back (aclmdlRITaskGetParams) and set again as host arguments still point
    /// there, so a kernel reading them must find that memory, not freed memory.
    superseded: Mutex<Vec<Arc<ArgsBlob>>>,
    /// The condition handles made for it (aclmdlRICondHandleCreate), with their handles.
    cond_handles: Mutex<Vec<CondEntry>>,
    /// The branches its conditional tasks created: destroyed with it.
    branches: Mutex<Vec<Arc<ModelRi>>>,
    /// For a branch aclmdlRIAddCondTask created (captured with
    /// aclmdlRICaptureToModelRIBegin, run by its conditional task only, destroyed with the
    /// instance holding the task): where its capture stands.
    branch: Option<Mutex<branch::BranchCapture>>,
}

/// A condition handle made for an instance, with its handle.
pub(crate) type CondEntry = (Handle, Arc<CondHandle>);

static NEXT_ID: AtomicU32 = AtomicU32::new(1);

/// An execution being queued ([`ModelRi::executing`]), until it is dropped.
struct Queueing<'a>(&'a ModelRi);

impl<'a> Queueing<'a> {
    /// ACL_ERROR_RT_INVALID_HANDLE if the instance was destroyed since it was looked up.
    fn begin(model: &'a ModelRi) -> Res<Self> {
        match lock(&model.executing).as_mut() {
            Some(queueing) => *queueing += 1,
            None => fail!(
                ACL_ERROR_RT_INVALID_HANDLE,
                "model runtime instance {} was destroyed",
                model.id
            ),
        }
        Ok(Queueing(model))
    }
}

impl Drop for Queueing<'_> {
    fn drop(&mut self) {
        if let Some(queueing) = lock(&self.0.executing).as_mut() {
            *queueing -= 1;
        }
    }
}

impl ModelRi {
    /// An empty instance, being captured or (`built`) built.
    pub(crate) fn new(handle: Handle, ctx: Handle, device: Arc<Device>, built: bool) -> Self {
        Self {
            handle,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            ctx,
            device,
            tasks: Mutex::new(Vec::new()),
            streams: Mutex::new(Vec::new()),
            name: Mutex::new(String::new()),
            destroy_callbacks: Mutex::new(Vec::new()),
            running: Arc::new(()),
            executing: Mutex::new(Some(0)),
            aborted: Mutex::new(Arc::new(AtomicBool::new(false))),
            open: AtomicBool::new(true),
            built,
            bound: Mutex::new(Vec::new()),
            exec: Mutex::new(None),
            owned: Mutex::new(Vec::new()),
            task_handles: Mutex::new(HashMap::new()),
            group_handles: Mutex::new(Vec::new()),
            groups_recording: AtomicUsize::new(0),
            superseded: Mutex::new(Vec::new()),
            cond_handles: Mutex::new(Vec::new()),
            branches: Mutex::new(Vec::new()),
            branch: None,
        }
    }

    /// Whether its capture or build is still going on.
    pub(crate) fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// Its capture or build is over: it may execute.
    pub(crate) fn close(&self) {
        self.open.store(false, Ordering::Release);
    }

    /// aclmdlRIBindStream: `stream`'s tasks go into the instance from now on.
    pub(crate) fn bind(self: &Arc<Self>, stream: &Arc<Stream>, head: bool) -> Res<()> {
        stream.bind(self, || {
            self.add_stream(stream);
            lock(&self.bound).push(Bound {
                stream: stream.clone(),
                head,
                ended: false,
            });
        })
    }

    /// Whether `stream` is bound to it as a HEAD stream (it runs from the start of every
    /// execution).
    pub(crate) fn is_head(&self, stream: &Stream) -> bool {
        lock(&self.bound)
            .iter()
            .any(|b| b.stream.handle == stream.handle && b.head)
    }

    /// aclmdlRIUnbindStream: a stream not bound to it → ACL_ERROR_RT_STREAM_MODEL.
    pub(crate) fn unbind(&self, stream: &Stream) -> Res<()> {
        let found = {
            let mut bound = lock(&self.bound);
            let before = bound.len();
            bound.retain(|b| b.stream.handle != stream.handle);
            bound.len() != before
        };
        ensure!(
            found,
            ACL_ERROR_RT_STREAM_MODEL,
            "stream {} is not bound to model runtime instance {}",
            stream.id,
            self.id
        );
        stream.unbind();
        Ok(())
    }

    /// Unbinds every stream (the instance is being destroyed).
    pub(crate) fn unbind_all(&self) {
        let bound = std::mem::take(&mut *lock(&self.bound));
        for b in bound {
            b.stream.unbind();
        }
    }

    /// aclmdlRIEndTask: no more tasks on `stream` (ACL_ERROR_RT_STREAM_MODEL if not bound).
    pub(crate) fn end_tasks(&self, stream: &Stream) -> Res<()> {
        let mut bound = lock(&self.bound);
        let Some(entry) = bound.iter_mut().find(|b| b.stream.handle == stream.handle) else {
            fail!(
                ACL_ERROR_RT_STREAM_MODEL,
                "stream {} is not bound to model runtime instance {}",
                stream.id,
                self.id
            );
        };
        entry.ended = true;
        Ok(())
    }

    /// Whether a bound stream may still add tasks: not after aclmdlRIEndTask on it or
    /// aclmdlRIBuildEnd (ACL_ERROR_RT_PARAM_INVALID).
    pub(crate) fn check_accepts(&self, stream: &Stream) -> Res<()> {
        let ended = lock(&self.bound)
            .iter()
            .any(|b| b.stream.handle == stream.handle && b.ended);
        ensure!(
            self.is_open() && !ended,
            ACL_ERROR_RT_PARAM_INVALID,
            "stream {} is bound to model runtime instance {}, whose tasks on it are complete \
             (aclmdlRIEndTask or aclmdlRIBuildEnd)",
            stream.id,
            self.id
        );
        Ok(())
    }

    /// The stream aclmdlRIExecute runs it on, created in its context at the first call.
    pub(crate) fn exec_stream(
        &self,
        create: impl FnOnce() -> Res<Arc<Stream>>,
    ) -> Res<Arc<Stream>> {
        let mut exec = lock(&self.exec);
        if let Some(stream) = &*exec {
            return Ok(stream.clone());
        }
        let stream = create()?;
        *exec = Some(stream.clone());
        Ok(stream)
    }

    /// The streams the instance created (its execution stream and model streams), handed
    /// over for destruction with it.
    pub(crate) fn take_own_streams(&self) -> Vec<Arc<Stream>> {
        let mut streams = std::mem::take(&mut *lock(&self.owned));
        streams.extend(lock(&self.exec).take());
        streams
    }

    /// A captured instance takes a model stream of its own for each stream it captured, as
    /// CANN's capture does (each made by `make`: PERSISTENT, in the instance's context, bound
    /// to it); its tasks are then the model streams' tasks.
    pub(crate) fn adopt_streams(
        self: &Arc<Self>,
        mut make: impl FnMut() -> Res<Arc<Stream>>,
    ) -> Res<()> {
        let captured: Vec<i32> = lock(&self.streams).iter().map(|&(id, _)| id).collect();
        let mut renamed = HashMap::new();
        for id in captured {
            let stream = make()?;
            lock(&self.owned).push(stream.clone());
            stream.bind(self, || {
                lock(&self.bound).push(Bound {
                    stream: stream.clone(),
                    head: true,
                    ended: true,
                })
            })?;
            renamed.insert(id, stream.id);
        }
        for entry in lock(&self.streams).iter_mut() {
            entry.0 = renamed[&entry.0];
        }
        for task in lock(&self.tasks).iter_mut() {
            task.stream_id = renamed[&task.stream_id];
        }
        Ok(())
    }

    /// The handles of its streams: the bound ones (a captured instance's model streams).
    pub(crate) fn stream_handles(&self) -> Vec<Handle> {
        lock(&self.bound).iter().map(|b| b.stream.handle).collect()
    }

    /// The indexes of the tasks of stream `stream_id`, in order.
    pub(crate) fn tasks_of(&self, stream_id: i32) -> Vec<usize> {
        lock(&self.tasks)
            .iter()
            .enumerate()
            .filter(|(_, task)| task.stream_id == stream_id)
            .map(|(index, _)| index)
            .collect()
    }

    /// The task at `index`.
    pub(crate) fn task(&self, index: usize) -> Option<Captured> {
        lock(&self.tasks).get(index).cloned()
    }

    /// The aclmdlRITask handle of the task at `index` (`make` creates it the first time).
    pub(crate) fn task_handle(
        &self,
        index: usize,
        make: impl FnOnce() -> Res<Handle>,
    ) -> Res<Handle> {
        let mut handles = lock(&self.task_handles);
        if let Some(&handle) = handles.get(&index) {
            return Ok(handle);
        }
        let handle = make()?;
        handles.insert(index, handle);
        Ok(handle)
    }

    /// The task handles given out (the instance is being destroyed).
    pub(crate) fn take_task_handles(&self) -> Vec<Handle> {
        std::mem::take(&mut *lock(&self.task_handles))
            .into_values()
            .collect()
    }

    /// The task `task_id` of stream `stream_id` (its place among the stream's tasks plus
    /// one, as aclrtGetThreadLastTaskId reports it), if an update can change it (a random
    /// number task or a kernel launch): its step and patch slot.
    pub(crate) fn updatable(&self, stream_id: i32, task_id: u32) -> Option<(Step, Arc<PatchSlot>)> {
        let seq = task_id.checked_sub(1)?;
        let tasks = lock(&self.tasks);
        let task = tasks
            .iter()
            .find(|t| t.stream_id == stream_id && t.seq == seq)?;
        Some((task.step.clone(), task.patch.clone()?))
    }

    /// The steps an execution runs, in order, each with its task's patch slot. A captured
    /// instance runs every task in capture order. A built one runs the tasks of its HEAD
    /// streams in submission order, and each activation among them runs the activated
    /// stream's tasks there, in their order: a serialisation of the activated stream running
    /// beside the one that activated it.
    fn execution_steps(&self) -> Vec<(Step, Option<Arc<PatchSlot>>)> {
        let tasks = lock(&self.tasks);
        let enabled = tasks.iter().filter(|t| !t.disabled);
        if !self.built {
            return enabled.map(|t| (t.step.clone(), t.patch.clone())).collect();
        }
        let heads: Vec<i32> = lock(&self.bound)
            .iter()
            .filter(|b| b.head)
            .map(|b| b.stream.id)
            .collect();
        let mut steps = Vec::new();
        for task in enabled.filter(|t| heads.contains(&t.stream_id)) {
            push_activated(&tasks, &heads, &mut vec![task.stream_id], task, &mut steps);
        }
        steps
    }

    /// aclmdlRIAbort: the tasks of the executions queued so far that have not started are
    /// dropped when their stream reaches them (a running task finishes); later executions
    /// run in full.
    pub(crate) fn abort(&self) {
        let previous =
            std::mem::replace(&mut *lock(&self.aborted), Arc::new(AtomicBool::new(false)));
        previous.store(true, Ordering::Release);
    }

    /// Whether an execution of it has tasks that have not left their stream yet.
    pub(crate) fn running(&self) -> bool {
        Arc::strong_count(&self.running) > 1
    }

    /// For aclmdlRIDestroy: marks the instance destroyed, unless an execution is being queued
    /// or has tasks on a stream (ACL_ERROR_RT_MODEL_RUNNING) or another call destroyed it
    /// first (ACL_ERROR_RT_INVALID_HANDLE).
    pub(crate) fn retire(&self) -> Res<()> {
        let mut executing = lock(&self.executing);
        match *executing {
            None => fail!(
                ACL_ERROR_RT_INVALID_HANDLE,
                "model runtime instance {} was destroyed by another call",
                self.id
            ),
            Some(queueing) => ensure!(
                queueing == 0 && !self.running(),
                ACL_ERROR_RT_MODEL_RUNNING,
                "model runtime instance {} is still running (synchronize the streams it executes on first)",
                self.id
            ),
        }
        *executing = None;
        Ok(())
    }

    pub(crate) fn add_stream(&self, stream: &Stream) {
        let mut streams = lock(&self.streams);
        if !streams.iter().any(|&(id, _)| id == stream.id) {
            streams.push((stream.id, 0));
        }
    }

    /// Appends a task captured from `stream`; returns its index in the instance and its
    /// place among that stream's tasks.
    pub(crate) fn push(&self, stream: &Stream, step: Step) -> (usize, u32) {
        let seq = {
            let mut streams = lock(&self.streams);
            let entry = match streams.iter_mut().find(|(id, _)| *id == stream.id) {
                Some(entry) => entry,
                None => {
                    streams.push((stream.id, 0));
                    streams.last_mut().expect("just pushed")
                }
            };
            entry.1 += 1;
            entry.1 - 1
        };
        let mut tasks = lock(&self.tasks);
        tasks.push(Captured {
            stream_id: stream.id,
            seq,
            patch: patch_slot(&step),
            step,
            disabling: false,
            disabled: false,
            op_info: None,
            extend_info: None,
        });
        (tasks.len() - 1, seq)
    }

    /// aclmdlRICaptureTaskUpdateEnd: the tasks at `indexes` become `ops`, for the executions
    /// queued from now on (with a patch slot of their own: an aclrtTaskUpdateAsync of the
    /// tasks replaced does not reach them).
    pub(crate) fn replace(&self, indexes: &[usize], ops: Vec<Op>) {
        let mut tasks = lock(&self.tasks);
        for (&index, op) in indexes.iter().zip(ops) {
            let old = tasks[index].set_op(op);
            self.supersede(old);
        }
    }

    /// aclmdlRITaskSetParams: the task at `index` becomes `op`, for the executions queued from
    /// now on, as [`Self::replace`] makes it.
    pub(crate) fn set_op(&self, index: usize, op: Op) {
        if let Some(task) = lock(&self.tasks).get_mut(index) {
            let old = task.set_op(op);
            self.supersede(old);
        }
    }

    /// Keeps a replaced launch's host-packed arguments with the instance.
    fn supersede(&self, old: Step) {
        if let Step::Run(Op::Kernel(Launch {
            args: LaunchArgs::Owned(blob),
            ..
        })) = old
        {
            lock(&self.superseded).push(blob);
        }
    }

    /// Caches `bytes` on the task at `index` (a later call replaces them); they are released
    /// with the instance.
    pub(crate) fn cache_info(&self, index: usize, kind: TaskInfo, bytes: &[u8]) {
        if let Some(task) = lock(&self.tasks).get_mut(index) {
            let slot = match kind {
                TaskInfo::Op => &mut task.op_info,
                TaskInfo::Extend => &mut task.extend_info,
            };
            *slot = Some(Arc::from(bytes));
        }
    }

    /// aclmdlRITaskDisable: the task at `index` is disabled by the next [`Self::update`].
    pub(crate) fn disable(&self, index: usize) {
        if let Some(task) = lock(&self.tasks).get_mut(index) {
            task.disabling = true;
        }
    }

    /// aclmdlRIUpdate: the tasks aclmdlRITaskDisable named are skipped by the executions
    /// queued from now on. Not while capturing or building, nor while an execution is not
    /// over (ACL_ERROR_RT_MODEL_UPDATE_FAILED).
    pub(crate) fn update(&self) -> Res<()> {
        ensure!(
            !self.is_open() && !self.running(),
            ACL_ERROR_RT_MODEL_UPDATE_FAILED,
            "model runtime instance {} is {}",
            self.id,
            if self.is_open() {
                "not complete (still being captured or built)"
            } else {
                "running (synchronize the streams it executes on first)"
            }
        );
        for task in lock(&self.tasks).iter_mut() {
            task.disabled |= task.disabling;
        }
        Ok(())
    }

    /// The handles of its task groups.
    pub(crate) fn group_handles(&self) -> Vec<Handle> {
        lock(&self.group_handles).clone()
    }

    /// Records the handle of one of its task groups, retired with it.
    pub(crate) fn add_group_handle(&self, handle: Handle) {
        lock(&self.group_handles).push(handle);
    }

    /// A stream capturing into it began (`true`) or ended (`false`) recording a task group.
    pub(crate) fn group_recording(&self, began: bool) {
        if began {
            self.groups_recording.fetch_add(1, Ordering::AcqRel);
        } else {
            self.groups_recording.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Whether one of its capturing streams is recording a task group.
    pub(crate) fn is_recording_a_group(&self) -> bool {
        self.groups_recording.load(Ordering::Acquire) != 0
    }

    /// The task-group handles given out (the instance is being destroyed).
    pub(crate) fn take_group_handles(&self) -> Vec<Handle> {
        std::mem::take(&mut *lock(&self.group_handles))
    }

    /// A stream that joined the capture but did not return to the stream that began it: its
    /// last task is not an event record that a task of another stream of the capture waits
    /// on (ACL_ERROR_RT_STREAM_UNJOINED).
    pub(crate) fn unjoined(&self, origin: i32) -> Option<i32> {
        let tasks = lock(&self.tasks);
        let streams = lock(&self.streams);
        streams
            .iter()
            .map(|&(id, _)| id)
            .filter(|&id| id != origin)
            .find(|&id| {
                let last = tasks.iter().rev().find(|task| task.stream_id == id);
                let Some(Op::Record(record)) = last.and_then(|task| task.step.op()) else {
                    return true;
                };
                !tasks.iter().any(|task| {
                    task.stream_id != id
                        && matches!(task.step.op(), Some(Op::Wait { record: waited, .. }) if Arc::ptr_eq(waited, record))
                })
            })
    }

    /// Events whose latest record is one this instance captured: at the end of the capture
    /// they are as if never recorded (the record only ever runs as part of a replay).
    pub(crate) fn forget_captured_records(&self) {
        for task in lock(&self.tasks).iter() {
            if let Some(Op::Record(record)) = task.step.op()
                && let Some(event) = record.event()
            {
                event.reset_if(Some(record));
            }
        }
    }

    /// Queues a replay of the instance's tasks on `stream`, in the order of
    /// [`Self::execution_steps`] (for a capture, capture order, which respects every event
    /// dependency between the capture's streams). Each record is
    /// a new record of its event, made current as it is queued, and the waits on it wait for
    /// that new record; every replayed task holds [`Self::running`] until it leaves the stream.
    pub(crate) fn replay(self: &Arc<Self>, stream: &Arc<Stream>) -> Res<()> {
        let _queueing = Queueing::begin(self)?;
        let aborted = lock(&self.aborted).clone();
        if self.has_branches() {
            ensure!(
                !stream.is_persistent(),
                ACL_ERROR_RT_PARAM_INVALID,
                "model runtime instance {} has branches: it executes on a stream that runs it, not on PERSISTENT stream {}, which keeps its tasks for an instance",
                self.id,
                stream.id
            );
            let program = self.program(stream);
            return self.queue(stream, Op::Program(Arc::new(program)), &aborted, None);
        }
        let steps = self.execution_steps();
        let mut fresh = Fresh::default();
        for (step, patch) in steps {
            let op = match step {
                Step::Run(Op::Wait { record, timeout }) => match fresh.get(&Arc::as_ptr(&record)) {
                    Some(record) => Op::Wait {
                        record: record.clone(),
                        timeout,
                    },
                    // Captured waits wait on records of the same capture, recorded before.
                    None => continue,
                },
                Step::Run(op) => replayed(stream, op, &mut fresh),
                Step::WaitFor(event) => match external_wait(&event) {
                    Some(wait) => wait,
                    None => continue,
                },
                // Expanded by execution_steps, or nothing to run.
                Step::Activate(_) | Step::Label => continue,
                // An instance with an enabled one executes as a program instead.
                Step::Switch(_) | Step::Cond { .. } => continue,
            };
            self.queue(stream, op, &aborted, patch)?;
        }
        Ok(())
    }

    /// Whether an execution chooses some of its tasks as it runs: a task of it is a branch.
    fn has_branches(&self) -> bool {
        lock(&self.tasks)
            .iter()
            .any(|task| !task.disabled && is_branch(&task.step))
    }

    /// Queues one replayed task, which holds [`Self::running`] until it leaves the stream
    /// and takes the fields of its task's latest update (`patch`) as it starts.
    fn queue(
        &self,
        stream: &Arc<Stream>,
        op: Op,
        aborted: &Arc<AtomicBool>,
        patch: Option<Arc<PatchSlot>>,
    ) -> Res<()> {
        let mut task = Task::new(op);
        task.keep = Some(self.running.clone());
        task.aborted = Some(aborted.clone());
        task.patch = patch;
        stream.submit(task)
    }

    pub(crate) fn set_name(&self, name: &str) {
        let mut end = name.len().min(MAX_NAME - 1);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        *lock(&self.name) = name[..end].to_owned();
    }

    pub(crate) fn name(&self) -> String {
        lock(&self.name).clone()
    }

    /// Registers `func` (again: replaces its user data).
    pub(crate) fn register_destroy_callback(&self, func: HostFn, data: usize) {
        let mut callbacks = lock(&self.destroy_callbacks);
        match callbacks
            .iter_mut()
            .find(|(f, _)| std::ptr::fn_addr_eq(*f, func))
        {
            Some(entry) => entry.1 = data,
            None => callbacks.push((func, data)),
        }
    }

    pub(crate) fn unregister_destroy_callback(&self, func: HostFn) {
        lock(&self.destroy_callbacks).retain(|(f, _)| !std::ptr::fn_addr_eq(*f, func));
    }

    /// Runs the destroy callbacks, in registration order, on the calling thread.
    pub(crate) fn run_destroy_callbacks(&self) {
        let callbacks = std::mem::take(&mut *lock(&self.destroy_callbacks));
        for (func, data) in callbacks {
            // SAFETY: the caller of aclmdlRIDestroyRegisterCallback supplied a valid C function
            // and the user data it expects.
            unsafe { func(data as *mut std::ffi::c_void) };
        }
    }

    /// A copy of the captured tasks.
    pub(crate) fn tasks(&self) -> Vec<Captured> {
        lock(&self.tasks).clone()
    }

    /// A description for the log (aclmdlRIDebugPrint): the instance, then a line per task.
    pub(crate) fn describe(&self) -> String {
        let tasks = self.tasks();
        let mut text = format!(
            "model runtime instance {} {:?} on device {}: {} tasks",
            self.id,
            self.name(),
            self.device.id,
            tasks.len()
        );
        for task in &tasks {
            let _ = write!(
                text,
                "\n  stream {} task {}: {}",
                task.stream_id,
                task.seq,
                describe_step(&task.step)
            );
        }
        text
    }
}

/// The new records of an execution, by the captured record each replaces.
type Fresh = HashMap<*const Record, Arc<Record>>;

/// A replayed copy of a captured operation: a record is a new record of its event on
/// `stream` (kept in `fresh`); a reset applies to the record current when it is queued, as
/// an aclrtResetEvent issued now would. Waits are the caller's.
fn replayed(stream: &Arc<Stream>, op: Op, fresh: &mut Fresh) -> Op {
    match op {
        Op::Record(template) => {
            let record = Arc::new(Record::replaying(stream.clone(), template.event().as_ref()));
            fresh.insert(Arc::as_ptr(&template), record.clone());
            Op::Record(record)
        }
        Op::Reset { event, .. } => {
            let captured = event.current();
            Op::Reset { event, captured }
        }
        other => other,
    }
}

/// aclrtStreamWaitEventWithFlag(EXTERNAL) replayed: a wait for the event's record current
/// now, if it is a record outside every capture.
fn external_wait(event: &Event) -> Option<Op> {
    event
        .current()
        .filter(|record| !record.is_captured())
        .map(|record| Op::Wait {
            record,
            timeout: None,
        })
}

/// Appends `task`'s step to an execution's `steps`; an activation appends the enabled tasks
/// of the activated stream instead, expanded the same way. `active` holds the streams running
/// in this chain of activations: activating one of them, or a HEAD stream, does nothing, as
/// the stream is running already.
fn push_activated(
    tasks: &[Captured],
    heads: &[i32],
    active: &mut Vec<i32>,
    task: &Captured,
    steps: &mut Vec<(Step, Option<Arc<PatchSlot>>)>,
) {
    let Step::Activate(target) = task.step else {
        steps.push((task.step.clone(), task.patch.clone()));
        return;
    };
    if heads.contains(&target) || active.contains(&target) {
        return;
    }
    active.push(target);
    for task in tasks
        .iter()
        .filter(|t| t.stream_id == target && !t.disabled)
    {
        push_activated(tasks, heads, active, task, steps);
    }
    active.pop();
}

/// A task's type and what it works on, for aclmdlRIDebugPrint and aclmdlRIDebugJsonPrint.
pub(crate) fn describe_step(step: &Step) -> String {
    let label = step.label();
    let Step::Run(op) = step else {
        return format!("{} {}", label.0, label.1);
    };
    match op {
        Op::Kernel(launch) => format!(
            "kernel {} ({} blocks, {} bytes of arguments)",
            launch.name(),
            launch.blocks,
            launch.args().1
        ),
        Op::Copy { dst, extent, .. } => {
            format!("{} {} bytes to {dst:#x}", label.1, extent.bytes())
        }
        Op::Memset { dst, len, .. } => format!("memset {len} bytes at {dst:#x}"),
        Op::Random(task) => format!("random {} values to {:#x}", task.name(), task.result()),
        _ => format!("{} {}", label.0, label.1),
    }
}

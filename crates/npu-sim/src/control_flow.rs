//! Control flow inside model runtime instances: labels and label lists, condition handles,
//! and the programs an execution of an instance with branches runs.
//!
//! An instance without branches is replayed by queueing its tasks on the stream, one after
//! another ([`ModelRi::replay`]). A branch (aclrtSwitchStream, aclrtSwitchLabelByIndex, a
//! conditional task) decides which tasks follow it only when it runs, so such an instance
//! is queued as one task holding a [`Program`]; the stream's worker runs the program's tasks
//! one by one, reading each branch's condition from device memory as it reaches it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use npu_sys::*;

use crate::error::{Res, ensure};
use crate::event::{Event, Record};
use crate::handle::Handle;
use crate::model_ri::{ModelRi, Step};
use crate::sync::lock;
use crate::task::Op;
use crate::task_update::PatchSlot;

/// Labels a process may hold at once (aclrtCreateLabel).
pub(crate) const MAX_LABELS: usize = 65_535;

/// The most branches a SWITCH task may have: the simulator's bound (the reference sets none),
/// as each branch is an instance of its own.
pub(crate) const MAX_BRANCHES: u32 = 65_535;

/// Labels alive now.
static LIVE_LABELS: AtomicUsize = AtomicUsize::new(0);

/// Where aclrtSetLabel put a label: before the task at `seq` of a bound stream.
#[derive(Clone)]
pub(crate) struct Place {
    pub(crate) model: Weak<ModelRi>,
    pub(crate) stream_id: i32,
    pub(crate) seq: usize,
}

/// A label (aclrtCreateLabel).
pub(crate) struct Label {
    /// The context it was created in: it can be set only on that context's streams.
    pub(crate) ctx: Handle,
    place: Mutex<Option<Place>>,
}

impl Label {
    /// A new label in context `ctx`; ACL_ERROR_RT_RESOURCE_ALLOC_FAIL past [`MAX_LABELS`].
    pub(crate) fn new(ctx: Handle) -> Res<Self> {
        let taken = LIVE_LABELS.fetch_add(1, Ordering::AcqRel);
        if taken >= MAX_LABELS {
            LIVE_LABELS.fetch_sub(1, Ordering::AcqRel);
            crate::error::fail!(
                ACL_ERROR_RT_RESOURCE_ALLOC_FAIL,
                "the process holds {MAX_LABELS} labels already, the most it may"
            );
        }
        Ok(Self {
            ctx,
            place: Mutex::new(None),
        })
    }

    /// aclrtSetLabel: the label takes the place `set` gives (it adds the label's task); a
    /// label is set once (ACL_ERROR_RT_PARAM_INVALID after).
    pub(crate) fn set(&self, set: impl FnOnce() -> Place) -> Res<()> {
        let mut current = lock(&self.place);
        ensure!(
            current.is_none(),
            ACL_ERROR_RT_PARAM_INVALID,
            "the label is set already (aclrtSetLabel sets a label once)"
        );
        *current = Some(set());
        Ok(())
    }

    pub(crate) fn place(&self) -> Option<Place> {
        lock(&self.place).clone()
    }
}

impl Drop for Label {
    fn drop(&mut self) {
        LIVE_LABELS.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A label list (aclrtCreateLabelList): what aclrtSwitchLabelByIndex chooses from.
pub(crate) struct LabelList {
    pub(crate) labels: Vec<Arc<Label>>,
}

/// A condition handle (aclmdlRICondHandleCreate): an 8-byte word of device memory that
/// conditional tasks read, owned by the instance it was created for.
pub(crate) struct CondHandle {
    pub(crate) model: Weak<ModelRi>,
    /// The word's device address.
    pub(crate) word: usize,
    /// ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT: the value the word takes whenever the
    /// instance's tasks start running.
    pub(crate) default: Option<u64>,
}

/// A conditional task's kind (aclmdlRICondTaskType).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CondKind {
    If,
    While,
    Switch,
}

impl CondKind {
    /// The kind of an aclmdlRICondTaskType, if `size` branches suit it (IF: 1 or 2, WHILE: 1,
    /// SWITCH: 1 to [`MAX_BRANCHES`]; else ACL_ERROR_INVALID_PARAM).
    pub(crate) fn of(kind: aclmdlRICondTaskType, size: u32) -> Res<Self> {
        let (kind, fits) = match kind {
            ACL_MODEL_RI_COND_TYPE_IF => (Self::If, matches!(size, 1 | 2)),
            ACL_MODEL_RI_COND_TYPE_WHILE => (Self::While, size == 1),
            ACL_MODEL_RI_COND_TYPE_SWITCH => (Self::Switch, (1..=MAX_BRANCHES).contains(&size)),
            other => crate::error::fail!(
                ACL_ERROR_INVALID_PARAM,
                "type {other} is not an aclmdlRICondTaskType"
            ),
        };
        ensure!(
            fits,
            ACL_ERROR_INVALID_PARAM,
            "size {size} does not suit a {kind:?} task (IF: 1 or 2 branches, WHILE: 1, SWITCH: 1 to {MAX_BRANCHES})"
        );
        Ok(kind)
    }

    /// The branch to run for condition value `value`, if any (a WHILE runs its branch again
    /// while the value stays non-zero).
    pub(crate) fn branch(self, value: u64, branches: usize) -> Option<usize> {
        match self {
            Self::If | Self::While if value != 0 => Some(0),
            Self::If if branches == 2 => Some(1),
            Self::If | Self::While => None,
            Self::Switch => usize::try_from(value).ok().filter(|&i| i < branches),
        }
    }
}

/// aclrtSwitchStream's comparison (aclrtCondition) of two values of one type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Comparison {
    cond: aclrtCondition,
    /// ACL_RT_SWITCH_INT64 (else INT32).
    pub(crate) wide: bool,
}

impl Comparison {
    pub(crate) fn new(cond: aclrtCondition, data_type: aclrtCompareDataType) -> Res<Self> {
        ensure!(
            cond <= ACL_RT_LESS_OR_EQUAL,
            ACL_ERROR_INVALID_PARAM,
            "cond {cond} is not an aclrtCondition"
        );
        let wide = match data_type {
            ACL_RT_SWITCH_INT32 => false,
            ACL_RT_SWITCH_INT64 => true,
            other => crate::error::fail!(
                ACL_ERROR_INVALID_PARAM,
                "dataType {other} is not an aclrtCompareDataType"
            ),
        };
        Ok(Self { cond, wide })
    }

    /// The bytes each value takes.
    pub(crate) fn width(self) -> usize {
        if self.wide { 8 } else { 4 }
    }

    /// Whether the condition holds for the two values, as read from memory (`width` bytes,
    /// zero-extended): signed integers of the data type.
    pub(crate) fn holds(self, left: u64, right: u64) -> bool {
        let signed = |bits: u64| match self.wide {
            true => bits as i64,
            false => i64::from(bits as u32 as i32),
        };
        let (left, right) = (signed(left), signed(right));
        match self.cond {
            ACL_RT_EQUAL => left == right,
            ACL_RT_NOT_EQUAL => left != right,
            ACL_RT_GREATER => left > right,
            ACL_RT_GREATER_OR_EQUAL => left >= right,
            ACL_RT_LESS => left < right,
            _ => left <= right,
        }
    }
}

/// A switch on a stream of a built instance: where the execution goes on, chosen from
/// device memory when it runs.
#[derive(Clone)]
pub(crate) enum Switch {
    /// aclrtSwitchLabelByIndex: the uint32 at `index` chooses among `targets` (past the end:
    /// the last), and the tasks go on from that label, the rest of this stream's skipped.
    Label {
        index: usize,
        targets: Vec<Arc<Label>>,
    },
    /// aclrtSwitchStream: when the comparison of the values at `left` and `right` holds, the
    /// stream with id `target` runs from its first task instead of the rest of this one.
    Stream {
        left: usize,
        right: usize,
        comparison: Comparison,
        target: i32,
    },
}

/// What a program does at one place of a stream's (or a branch's) tasks.
pub(crate) enum Node {
    /// Runs a task (its fields updated from the patch slot as it starts).
    Run(Op, Option<Arc<PatchSlot>>),
    /// Nothing: a label's place, a disabled task, a captured wait (on a record of the same
    /// execution, which the serial order ran before it, or a branch skipped).
    Pass,
    /// A wait for the latest record of `event` (aclrtStreamWaitEvent on a bound stream, an
    /// EXTERNAL wait): it passes once the execution has run a record of the event itself,
    /// and otherwise waits for `before`, the event's record current when the execution was
    /// queued. Resolved as it runs: a record of the execution that a branch skipped, or that
    /// runs later, must not be waited for (it could only complete when the program ends).
    WaitFor {
        event: Arc<Event>,
        before: Option<Arc<Record>>,
    },
    /// aclrtActiveStream: the stream runs its tasks here.
    Activate(i32),
    /// A label or stream switch.
    Switch(Switch),
    /// A conditional task: the value of the word at `word` chooses the branch.
    Cond {
        word: usize,
        kind: CondKind,
        branches: Vec<Body>,
    },
}

/// A captured instance's tasks, in capture order, as a program runs them.
pub(crate) struct Body {
    pub(crate) nodes: Vec<Node>,
    /// (word, value) for the condition handles of the instance made with
    /// ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT: set whenever the body starts running.
    pub(crate) defaults: Vec<(usize, u64)>,
}

/// The tasks of a built instance's stream, in the stream's order (a label's place indexes
/// them), each with its place among all the instance's tasks: HEAD streams interleave their
/// tasks in that order, as a replay does.
pub(crate) type BoundTasks = Vec<(usize, Node)>;

/// What a program runs.
pub(crate) enum Layout {
    /// A built instance: its bound streams' tasks by stream id, and its HEAD streams.
    Built {
        streams: HashMap<i32, BoundTasks>,
        heads: Vec<i32>,
    },
    /// A captured instance (its branches inside its conditional tasks).
    Captured(Body),
}

/// An execution of an instance with branches.
pub(crate) struct Program {
    pub(crate) layout: Layout,
    /// The instance whose labels the program's label switches may go to.
    pub(crate) model: Weak<ModelRi>,
    /// Every record the program's tasks make, in the order they were made: those its
    /// branches skip are completed when the program ends, so no wait for them is left
    /// waiting; they become their events' current records once the program is queued.
    pub(crate) records: Vec<Arc<Record>>,
    /// It holds a BLOCK callback (aclrtLaunchCallback): its stream holds at its position for
    /// the report thread, which must not wait for the stream to pass it.
    pub(crate) blocks: bool,
}

impl Program {
    /// The place of `label` among the program's streams (a label not set, or set in
    /// another instance or on a stream no longer bound: none).
    pub(crate) fn place_of(&self, label: &Label) -> Option<(i32, usize)> {
        let place = label.place()?;
        let Layout::Built { streams, .. } = &self.layout else {
            return None;
        };
        let same = std::ptr::eq(place.model.as_ptr(), self.model.as_ptr());
        (same && streams.contains_key(&place.stream_id)).then_some((place.stream_id, place.seq))
    }

    /// Whether the program has run a record of `event` (it never completes one it has not
    /// run before it ends).
    pub(crate) fn ran_record_of(&self, event: &Arc<Event>) -> bool {
        self.records.iter().any(|record| {
            record.event().is_some_and(|e| Arc::ptr_eq(&e, event)) && record.is_settled()
        })
    }
}

/// Whether a step needs a program: it chooses what runs after it.
pub(crate) fn is_branch(step: &Step) -> bool {
    matches!(step, Step::Switch(_) | Step::Cond { .. })
}

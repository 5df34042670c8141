//! Building the program an execution of an instance with branches runs
//! ([`crate::control_flow`]): the instance's tasks as the program's nodes, each record a new
//! record of its event, as a replay makes them.

use std::collections::HashMap;
use std::sync::Arc;

use crate::control_flow::{Body, BoundTasks, Layout, Node, Program};
use crate::event::{Event, Record};
use crate::stream::Stream;
use crate::sync::lock;
use crate::task::Op;

use super::{Captured, ModelRi, Step};

/// What building a program keeps track of.
struct Builder<'a> {
    /// The stream the execution is queued on: its records are records of that stream.
    stream: &'a Arc<Stream>,
    /// A node runs a BLOCK callback.
    blocks: bool,
    /// The latest new record of each event, in the order the nodes are built: a reset of the
    /// same execution applies to it.
    latest: HashMap<*const Event, Arc<Record>>,
    records: Vec<Arc<Record>>,
}

impl ModelRi {
    /// The program an execution on `stream` runs: a built instance's bound streams' tasks,
    /// or a captured one's (and its branches') in capture order. Its records become their
    /// events' current records when its stream queues it ([`Record::queued`]).
    pub(super) fn program(self: &Arc<Self>, stream: &Arc<Stream>) -> Program {
        let mut builder = Builder {
            stream,
            blocks: false,
            latest: HashMap::new(),
            records: Vec::new(),
        };
        let layout = match self.built {
            true => self.bound_tasks(&mut builder),
            false => Layout::Captured(self.body(&mut builder)),
        };
        Program {
            layout,
            model: Arc::downgrade(self),
            records: builder.records,
            blocks: builder.blocks,
        }
    }

    /// A built instance's bound streams' tasks, each stream's in its order (by place, which
    /// a label names), built in the order they were submitted.
    fn bound_tasks(&self, builder: &mut Builder<'_>) -> Layout {
        let bound: Vec<(i32, bool)> = lock(&self.bound)
            .iter()
            .map(|b| (b.stream.id, b.head))
            .collect();
        let tasks = lock(&self.tasks).clone();
        let mut streams: HashMap<i32, Vec<(u32, usize, Node)>> = HashMap::new();
        for (index, task) in tasks.into_iter().enumerate() {
            if bound.iter().any(|&(id, _)| id == task.stream_id) {
                let (stream_id, seq) = (task.stream_id, task.seq);
                let node = builder.node(task);
                streams
                    .entry(stream_id)
                    .or_default()
                    .push((seq, index, node));
            }
        }
        let streams = streams
            .into_iter()
            .map(|(id, mut tasks)| {
                tasks.sort_by_key(|&(seq, ..)| seq);
                let tasks: BoundTasks = tasks.into_iter().map(|(_, i, node)| (i, node)).collect();
                (id, tasks)
            })
            .collect();
        let heads = bound.iter().filter(|b| b.1).map(|b| b.0).collect();
        Layout::Built { streams, heads }
    }

    /// The instance's tasks in capture order, and the defaults of its condition handles: a
    /// branch not captured (or whose capture failed) has none.
    fn body(&self, builder: &mut Builder<'_>) -> Body {
        if !self.runs_its_tasks() {
            return Body {
                nodes: Vec::new(),
                defaults: Vec::new(),
            };
        }
        let tasks = lock(&self.tasks).clone();
        Body {
            nodes: tasks.into_iter().map(|task| builder.node(task)).collect(),
            defaults: lock(&self.cond_handles)
                .iter()
                .filter_map(|(_, cond)| Some((cond.word, cond.default?)))
                .collect(),
        }
    }
}

impl Builder<'_> {
    /// What the program does for a task of the instance.
    fn node(&mut self, task: Captured) -> Node {
        if task.disabled {
            return Node::Pass;
        }
        match task.step {
            Step::Run(Op::Wait { .. }) | Step::Label => Node::Pass,
            Step::Run(Op::Reset { event, .. }) => {
                let captured = self
                    .latest
                    .get(&Arc::as_ptr(&event))
                    .cloned()
                    .or_else(|| event.current());
                Node::Run(Op::Reset { event, captured }, task.patch)
            }
            Step::Run(Op::Record(template)) => {
                let event = template.event();
                let record = Arc::new(Record::replaying(self.stream.clone(), event.as_ref()));
                if let Some(event) = event {
                    self.latest.insert(Arc::as_ptr(&event), record.clone());
                }
                self.records.push(record.clone());
                Node::Run(Op::Record(record), task.patch)
            }
            Step::Run(op) => {
                self.blocks |= matches!(op, Op::Callback { block: true, .. });
                Node::Run(op, task.patch)
            }
            Step::WaitFor(event) => Node::WaitFor {
                before: event.current().filter(|record| !record.is_captured()),
                event,
            },
            Step::Activate(id) => Node::Activate(id),
            Step::Switch(switch) => Node::Switch(switch),
            Step::Cond {
                handle,
                kind,
                branches,
            } => Node::Cond {
                word: handle.word,
                kind,
                branches: branches.iter().map(|branch| branch.body(self)).collect(),
            },
        }
    }
}

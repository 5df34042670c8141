//! The worker running a program: an execution of a model runtime instance with branches
//! ([`crate::control_flow`]), whose tasks it chooses as it goes.
//!
//! The program is one task of the stream (one position): its tasks run one after another
//! through the worker's own [`Stream::run_task`], each settled as a task is (its errors, its
//! record, its trace), and the program is counted finished once, when it ends.

use npu_sys::*;

use crate::control_flow::{Body, CondKind, Node, Program, Switch};
use crate::error::SimError;
use crate::sim::Sim;
use crate::sync::lock;
use crate::task::{Op, Task, read_signed, read_value};

use super::Stream;
use super::retire::Retired;

/// Why a program stops before its end.
enum Stop {
    /// The stream dropped its work (or aclmdlRIAbort the execution's).
    Abandoned,
    /// The stream gave up on a task (a forced destruction).
    GaveUp,
    /// A branch could not read its condition, or went to a label it cannot reach.
    Failed(SimError),
}

type Flow = Result<(), Stop>;

impl Stream {
    /// Runs the program `task` holds, then retires it.
    pub(super) fn run_program(&self, sim: &Sim, task: Task, program: &Program) {
        let timed = self.device.clock.timing().is_some();
        let now = |state_end: u64| match timed {
            true => state_end,
            false => self.device.clock.now_ns(),
        };
        let start_ns = now(lock(&self.state).last_end_ns.max(task.submit_ns));
        let mut active = Vec::new();
        let outcome = program
            .heads
            .iter()
            .try_for_each(|&head| self.run_stream(sim, &task, program, head, &mut active));
        let end_ns = now(lock(&self.state).last_end_ns).max(start_ns);
        // The records its branches skipped: complete, as the execution is over, or dropped
        // with it.
        let unsettled = program.records.iter().filter(|r| !r.is_settled());
        match &outcome {
            Ok(()) | Err(Stop::Failed(_)) => unsettled.for_each(|r| r.complete(None, end_ns)),
            Err(Stop::Abandoned | Stop::GaveUp) => {
                let code = self.discarding().unwrap_or(ACL_ERROR_RT_STREAM_ABORT);
                unsettled.for_each(|r| r.discard(code));
            }
        }
        let error = match outcome {
            Ok(()) => None,
            Err(Stop::Failed(error)) => Some(error),
            Err(Stop::Abandoned) => return self.retire(task, Retired::Abandoned),
            Err(Stop::GaveUp) => return self.give_up(task),
        };
        self.retire(
            task,
            Retired::Completed {
                start_ns,
                end_ns,
                error,
            },
        );
    }

    /// Runs the tasks of the program's stream `first` from its start, following its label and
    /// stream switches; `active` holds the streams running in this chain of activations.
    fn run_stream(
        &self,
        sim: &Sim,
        outer: &Task,
        program: &Program,
        first: i32,
        active: &mut Vec<i32>,
    ) -> Flow {
        if let Some(body) = program.streams.get(&first) {
            self.assign_defaults(sim, outer, body)?;
        }
        let (mut id, mut at) = (first, 0);
        loop {
            self.check_going(outer)?;
            let Some(node) = program.streams.get(&id).and_then(|body| body.nodes.get(at)) else {
                return Ok(());
            };
            at += 1;
            match node {
                // A HEAD stream, or one of this chain, runs already.
                Node::Activate(target)
                    if *target == id
                        || program.heads.contains(target)
                        || active.contains(target) => {}
                Node::Activate(target) => {
                    active.push(*target);
                    let flow = self.run_stream(sim, outer, program, *target, active);
                    active.pop();
                    flow?;
                }
                Node::Switch(Switch::Label { index, targets }) => {
                    let chosen = read_signed(&sim.memory, *index, 4).map_err(Stop::Failed)? as u32;
                    let label = &targets[(chosen as usize).min(targets.len() - 1)];
                    let Some(place) = program.place_of(label) else {
                        return Err(Stop::Failed(SimError::new(
                            ACL_ERROR_RT_PARAM_INVALID,
                            format!(
                                "label {chosen} of the list aclrtSwitchLabelByIndex chose on stream {id} is not set in this instance (aclrtSetLabel on one of its streams)"
                            ),
                        )));
                    };
                    (id, at) = place;
                }
                Node::Switch(Switch::Stream {
                    left,
                    right,
                    comparison,
                    target,
                }) => {
                    let width = comparison.width();
                    let left = read_signed(&sim.memory, *left, width).map_err(Stop::Failed)?;
                    let right = read_signed(&sim.memory, *right, width).map_err(Stop::Failed)?;
                    if comparison.holds(left, right) {
                        (id, at) = (*target, 0);
                    }
                }
                other => self.run_node(sim, outer, program, other)?,
            }
        }
    }

    /// Runs a captured body (a branch): its condition words take their defaults, then its
    /// tasks run.
    fn run_body(&self, sim: &Sim, outer: &Task, program: &Program, body: &Body) -> Flow {
        self.assign_defaults(sim, outer, body)?;
        body.nodes
            .iter()
            .try_for_each(|node| self.run_node(sim, outer, program, node))
    }

    /// Sets the body's condition words that take a default to it, as value writes.
    fn assign_defaults(&self, sim: &Sim, outer: &Task, body: &Body) -> Flow {
        body.defaults.iter().try_for_each(|&(dst, value)| {
            self.run_inner(sim, outer, Op::ValueWrite { dst, value }, None)
        })
    }

    /// Runs a task or a conditional task of the program (label and stream switches are
    /// [`Self::run_stream`]'s; captured bodies have none).
    fn run_node(&self, sim: &Sim, outer: &Task, program: &Program, node: &Node) -> Flow {
        match node {
            Node::Run(op, patch) => self.run_inner(sim, outer, op.clone(), patch.clone()),
            Node::Cond {
                word,
                kind,
                branches,
            } => loop {
                self.check_going(outer)?;
                let value = read_value(&sim.memory, *word).map_err(Stop::Failed)?;
                let Some(branch) = kind.branch(value, branches.len()) else {
                    return Ok(());
                };
                self.run_body(sim, outer, program, &branches[branch])?;
                if *kind != CondKind::While {
                    return Ok(());
                }
            },
            _ => Ok(()),
        }
    }

    /// Runs one of the program's tasks as the worker runs a queued one, at the program's
    /// position, and settles it.
    fn run_inner(
        &self,
        sim: &Sim,
        outer: &Task,
        op: Op,
        patch: Option<std::sync::Arc<crate::task_update::PatchSlot>>,
    ) -> Flow {
        let mut task = Task::new(op);
        task.position = outer.position;
        task.thread_id = outer.thread_id;
        task.submit_ns = outer.submit_ns;
        task.aborted = outer.aborted.clone();
        task.patch = patch;
        // A BLOCK callback holds the stream at its position, as a queued one does.
        if matches!(task.op, Op::Callback { block: true, .. }) {
            lock(&self.state).block_callbacks.insert(task.position);
        }
        let outcome = self.run_task(sim, &mut task);
        let stop = match &outcome {
            Some(Retired::Abandoned) => Some(Stop::Abandoned),
            None => Some(Stop::GaveUp),
            Some(Retired::Completed { .. }) => None,
        };
        self.settle(&task, outcome.unwrap_or(Retired::Abandoned));
        if matches!(task.op, Op::Record(_)) {
            // Its waiters listen for the program's position: they look again now.
            self.bell.ring();
        }
        stop.map_or(Ok(()), Err)
    }

    /// Stops the program if the stream drops its work or the execution was aborted.
    fn check_going(&self, outer: &Task) -> Flow {
        match self.discarding().is_some() || outer.is_aborted() {
            true => Err(Stop::Abandoned),
            false => Ok(()),
        }
    }
}

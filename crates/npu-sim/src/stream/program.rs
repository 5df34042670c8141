//! The worker running a program: an execution of a model runtime instance with branches
//! ([`crate::control_flow`]), whose tasks it chooses as it goes.
//!
//! The program is one task of the stream (one position): its tasks run one after another
//! through the worker's own [`Stream::run_task`], each settled as a task is (its errors, its
//! record, its trace), and the program is counted finished once, when it ends. A built
//! instance's HEAD streams interleave their tasks in the order they were submitted, as a
//! replay runs them; a stream switched or activated to runs where the switch or the
//! activation stands.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use npu_sys::*;

use crate::control_flow::{Body, BoundTasks, CondKind, Layout, Node, Program, Switch};
use crate::error::SimError;
use crate::sim::Sim;
use crate::sync::lock;
use crate::task::{Op, Task, read_bits, read_value};
use crate::task_update::PatchSlot;

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

type Flow<T = ()> = Result<T, Stop>;

/// Where a built instance's stream goes on after a switch: (stream id, place).
type Jump = Option<(i32, usize)>;

/// A built instance's streams, as a program runs them.
struct Built<'a> {
    program: &'a Program,
    streams: &'a HashMap<i32, BoundTasks>,
    heads: &'a [i32],
}

/// How deep activations may nest before the program fails: a cycle of switches and
/// activations whose activation is not its stream's last task nests one level per turn.
const MAX_NESTING: usize = 256;

impl Built<'_> {
    /// Whether activating `target` from stream `id` does nothing: it is that stream, a HEAD
    /// stream, or one of this chain of activations, running already.
    fn runs_already(&self, id: i32, target: i32, active: &[i32]) -> bool {
        target == id || self.heads.contains(&target) || active.contains(&target)
    }

    /// Whether HEAD cursor `i`'s next task is a wait for an event a record of which,
    /// submitted before the wait, is still ahead of another HEAD cursor.
    fn held_back(&self, cursors: &[(i32, usize, usize)], i: usize) -> bool {
        let (id, at, _) = cursors[i];
        let next = self.streams.get(&id).and_then(|tasks| tasks.get(at));
        let Some((index, Node::WaitFor { event, .. })) = next else {
            return false;
        };
        // A record of it already run satisfies the wait (see `run_node`).
        if self.program.ran_record_of(event) {
            return false;
        }
        cursors.iter().enumerate().any(|(j, &(other, from, _))| {
            let ahead = self
                .streams
                .get(&other)
                .and_then(|tasks| tasks.get(from..))
                .unwrap_or(&[]);
            j != i
                && ahead.iter().any(|(recorded, node)| {
                    recorded < index
                        && matches!(node, Node::Run(Op::Record(record), _)
                            if record.event().is_some_and(|e| Arc::ptr_eq(&e, event)))
                })
        })
    }
}

impl Stream {
    /// Runs the program `task` holds, then retires it.
    pub(super) fn run_program(&self, sim: &Sim, task: Task, program: &Program) {
        let timed = self.device.clock.timing().is_some();
        let last_end = || lock(&self.state).last_end_ns;
        let start_ns = match timed {
            true => last_end().max(task.submit_ns),
            false => self.device.clock.now_ns(),
        };
        let run = || match &program.layout {
            Layout::Captured(body) => self.run_body(sim, &task, program, body),
            Layout::Built { streams, heads } => {
                let built = Built {
                    program,
                    streams,
                    heads,
                };
                self.run_heads(sim, &task, &built)
            }
        };
        // A panic in the simulator's own code fails the execution, as in a task's work: the
        // worker must live on, or the stream's waits would never end.
        let outcome = crate::error::contain(run).unwrap_or_else(|what| {
            Err(Stop::Failed(SimError::new(
                ACL_ERROR_RT_INTERNAL_ERROR,
                format!("the simulator panicked running a model runtime instance: {what}"),
            )))
        });
        let end_ns = match timed {
            true => last_end(),
            false => self.device.clock.now_ns(),
        }
        .max(start_ns);
        // The records its branches skipped complete as the execution ends, with the failure a
        // record there would carry: the program's, or a task's since the last record (those
        // of a program dropped are dropped as it retires).
        let failure = match &outcome {
            Ok(()) => Some(lock(&self.state).since_record.as_ref().map(|e| e.code)),
            Err(Stop::Failed(error)) => Some(Some(error.code)),
            Err(Stop::Abandoned | Stop::GaveUp) => None,
        };
        if let Some(failure) = failure {
            program
                .records
                .iter()
                .filter(|r| !r.is_settled())
                .for_each(|r| r.complete(failure, end_ns));
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

    /// Runs a built instance's HEAD streams: each next task is the one submitted first among
    /// the HEAD streams' next tasks, so that the order a replay gives (submission order, in
    /// which a wait between them follows its record) is kept. A stream a switch sends back
    /// (a loop) goes behind the other HEAD streams' next tasks: on the device the HEAD streams
    /// run side by side, so a loop on one (polling a word another writes) must not keep the
    /// others from running. A switch forward keeps submission order.
    fn run_heads(&self, sim: &Sim, outer: &Task, built: &Built<'_>) -> Flow {
        // (stream, place, the submission index it may not go before)
        let mut cursors: Vec<(i32, usize, usize)> =
            built.heads.iter().map(|&id| (id, 0, 0)).collect();
        let next_index =
            |&(id, at, _): &(i32, usize, usize)| Some(built.streams.get(&id)?.get(at)?.0);
        let mut active = Vec::new();
        loop {
            self.check_going(outer)?;
            let key = |(i, cursor): (usize, &(i32, usize, usize))| {
                let index = next_index(cursor)?;
                Some(((index.max(cursor.2), index), i))
            };
            // A stream whose next task waits for a record another stream has yet to run
            // stands aside while another can go on, as on the device it would block.
            let next = cursors
                .iter()
                .enumerate()
                .filter(|&(i, _)| !built.held_back(&cursors, i))
                .filter_map(key)
                .min()
                .or_else(|| cursors.iter().enumerate().filter_map(key).min());
            let Some((_, i)) = next else {
                return Ok(());
            };
            let (id, at, floor) = cursors[i];
            cursors[i].1 += 1;
            let (index, node) = &built.streams[&id][at];
            active.clear();
            active.push(id);
            if let Some((target, place)) = self.step(sim, outer, built, id, node, &mut active)? {
                cursors[i] = (target, place, floor);
                let back = next_index(&cursors[i]).is_some_and(|to| to <= *index);
                if back {
                    // Behind the others' next tasks (each gets its turn once per loop).
                    let others = cursors
                        .iter()
                        .enumerate()
                        .filter(|&(j, _)| j != i)
                        .filter_map(|(_, cursor)| next_index(cursor))
                        .max();
                    cursors[i].2 = others.map_or(floor, |others| others.max(floor) + 1);
                }
            }
        }
    }

    /// Runs the tasks of stream `first` from its start, where an activation stands,
    /// following its switches; `active` holds the streams of this chain of activations.
    fn run_stream(
        &self,
        sim: &Sim,
        outer: &Task,
        built: &Built<'_>,
        first: i32,
        active: &mut Vec<i32>,
    ) -> Flow {
        let (mut id, mut at) = (first, 0);
        loop {
            self.check_going(outer)?;
            let Some(tasks) = built.streams.get(&id) else {
                return Ok(());
            };
            let Some((_, node)) = tasks.get(at) else {
                return Ok(());
            };
            at += 1;
            // An activation that ends a stream hands the chain over to the stream it
            // activates: the usual shape of a loop (a condition stream switching to a body
            // that activates the condition stream again) turns without nesting.
            if let Node::Activate(target) = node
                && at == tasks.len()
                && !built.runs_already(id, *target, active)
            {
                (id, at) = (*target, 0);
                if let Some(last) = active.last_mut() {
                    *last = id;
                }
                // A cycle of such activations must not hold the core the other workers need.
                std::thread::yield_now();
                continue;
            }
            if let Some(jump) = self.step(sim, outer, built, id, node, active)? {
                (id, at) = jump;
                // The stream switched to runs in place of this one: its rest is skipped.
                if let Some(last) = active.last_mut() {
                    *last = id;
                }
            }
        }
    }

    /// Runs a node of a built instance's stream `id`; returns where the stream goes on, if a
    /// switch moved it.
    fn step(
        &self,
        sim: &Sim,
        outer: &Task,
        built: &Built<'_>,
        id: i32,
        node: &Node,
        active: &mut Vec<i32>,
    ) -> Flow<Jump> {
        match node {
            Node::Activate(target) if built.runs_already(id, *target, active) => Ok(None),
            Node::Activate(_) if active.len() >= MAX_NESTING => Err(failed(format!(
                "activations nested {MAX_NESTING} deep on stream {id} (a cycle of stream \
                 switches and activations that does not end with its activation)"
            ))),
            Node::Activate(target) => {
                active.push(*target);
                let flow = self.run_stream(sim, outer, built, *target, active);
                active.pop();
                flow.map(|()| None)
            }
            Node::Switch(switch) => {
                let jump = self.switch(sim, outer, built, id, switch)?;
                if jump.is_some() {
                    // A loop of switches alone must not hold the core the simulator's other
                    // workers need.
                    std::thread::yield_now();
                }
                Ok(jump)
            }
            other => self
                .run_node(sim, outer, built.program, other)
                .map(|()| None),
        }
    }

    /// Where a switch of stream `id` sends it, read from device memory now.
    fn switch(
        &self,
        sim: &Sim,
        outer: &Task,
        built: &Built<'_>,
        id: i32,
        switch: &Switch,
    ) -> Flow<Jump> {
        // Taken: a stop or a synchronous copy waiting for the worker to take the program need
        // not wait for a memory task a loop of switches may never reach.
        self.begin(outer.position);
        match switch {
            Switch::Label { index, targets } => {
                let chosen = read_bits(&sim.memory, *index, 4).map_err(Stop::Failed)? as usize;
                let label = &targets[chosen.min(targets.len() - 1)];
                let Some((target, place)) = built.program.place_of(label) else {
                    return Err(failed(format!(
                        "label {chosen} of the list aclrtSwitchLabelByIndex chose on stream {id} \
                         is not set in this instance (aclrtSetLabel on one of its streams)"
                    )));
                };
                if target != id && built.heads.contains(&target) {
                    return Err(failed(format!(
                        "label {chosen} of the list aclrtSwitchLabelByIndex chose on stream {id} \
                         is on stream {target}, a HEAD stream, which runs in every execution already"
                    )));
                }
                Ok(Some((target, place)))
            }
            Switch::Stream {
                left,
                right,
                comparison,
                target,
            } => {
                let width = comparison.width();
                let left = read_bits(&sim.memory, *left, width).map_err(Stop::Failed)?;
                let right = read_bits(&sim.memory, *right, width).map_err(Stop::Failed)?;
                if !comparison.holds(left, right) {
                    return Ok(None);
                }
                // aclrtSwitchStream refuses another HEAD stream, but the stream may have been
                // bound again as one since.
                if *target != id && built.heads.contains(target) {
                    return Err(failed(format!(
                        "the aclrtSwitchStream on stream {id} goes to stream {target}, bound as a \
                         HEAD stream since, which runs in every execution already"
                    )));
                }
                Ok(Some((*target, 0)))
            }
        }
    }

    /// Runs a captured body (the root, or a branch): its condition words take their
    /// defaults, then its tasks run.
    fn run_body(&self, sim: &Sim, outer: &Task, program: &Program, body: &Body) -> Flow {
        for &(dst, value) in &body.defaults {
            self.run_inner(sim, outer, Op::ValueWrite { dst, value }, None)?;
        }
        body.nodes
            .iter()
            .try_for_each(|node| self.run_node(sim, outer, program, node))
    }

    /// Runs a task, a wait or a conditional task of the program.
    fn run_node(&self, sim: &Sim, outer: &Task, program: &Program, node: &Node) -> Flow {
        match node {
            Node::Run(op, patch) => self.run_inner(sim, outer, op.clone(), patch.clone()),
            Node::WaitFor { event, before } => match before {
                Some(record) if !program.ran_record_of(event) => {
                    let wait = Op::Wait {
                        record: record.clone(),
                        timeout: None,
                    };
                    self.run_inner(sim, outer, wait, None)
                }
                _ => Ok(()),
            },
            Node::Cond {
                word,
                kind,
                branches,
            } => loop {
                self.check_going(outer)?;
                // Taken (see `switch`).
                self.begin(outer.position);
                let value = read_value(&sim.memory, *word).map_err(Stop::Failed)?;
                let Some(branch) = kind.branch(value, branches.len()) else {
                    return Ok(());
                };
                self.run_body(sim, outer, program, &branches[branch])?;
                if *kind != CondKind::While {
                    return Ok(());
                }
                // An empty loop must not hold the core the other workers need.
                std::thread::yield_now();
            },
            // Switches and activations are a built instance's ([`Self::step`]); a captured
            // body has none.
            Node::Pass | Node::Activate(_) | Node::Switch(_) => Ok(()),
        }
    }

    /// Runs one of the program's tasks as the worker runs a queued one, at the program's
    /// position, and settles it.
    fn run_inner(&self, sim: &Sim, outer: &Task, op: Op, patch: Option<Arc<PatchSlot>>) -> Flow {
        let mut task = Task::new(op);
        task.position = outer.position;
        task.thread_id = outer.thread_id;
        task.submit_ns = outer.submit_ns;
        task.aborted = outer.aborted.clone();
        task.patch = patch;
        // Taken (see `switch`): a memory task is taken as it is admitted to its work, anything
        // else (a host function may wait for the host) as it is reached.
        if !task.touches_memory() {
            self.begin(outer.position);
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

    /// Stops the program if the stream drops its work or the execution was aborted; waits
    /// while the stream is stopped (aclrtStreamStop), as a queued task does.
    fn check_going(&self, outer: &Task) -> Flow {
        if self.stopped.load(Ordering::SeqCst) {
            self.wait_unstopped(outer).map_err(|_| Stop::Abandoned)?;
        }
        match self.discarding().is_some() || outer.is_aborted() {
            true => Err(Stop::Abandoned),
            false => Ok(()),
        }
    }
}

/// A program's failure at a switch that cannot go where it should.
fn failed(message: String) -> Stop {
    Stop::Failed(SimError::new(ACL_ERROR_RT_PARAM_INVALID, message))
}

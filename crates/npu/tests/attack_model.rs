//! A model-based random attack on the public API: a seeded generator of sequences of
//! operations (device, pooled, split, viewed, cast and `Arc`-shared buffers; copies in every
//! direction, pitched copies, memsets, value-word stores and waits, a test kernel; events
//! recorded on one stream and waited on by another; three streams, one per completion
//! strategy), interleaved with the worst things safe code may do at any point: dropping a
//! future before or after its first poll, forgetting it, dropping a buffer's last handle while
//! its operation is queued, `Stream::abort` and `Stream::stop`, holding the device and
//! releasing it later, and injected task and allocation faults.
//!
//! A host model predicts every byte as a set of the values it may hold: an operation that
//! completed `Ok` ran, one that failed with an injected fault did not, and one failed by an
//! abort, a stop or a disrupted event may or may not have run, so its bytes may hold either
//! value until rewritten (or observed). Host buffers are compared after every step, device
//! buffers at the end of each sequence; every outcome (success, each kind of error, whether
//! an `Arc` can be unwrapped) must be one the model allows; and the live allocation, event and
//! stream counts must return within their baseline (plus what forgotten futures leak).
//!
//! `NPU_MODEL_SEQUENCES` (default 300) and `NPU_MODEL_STEPS` (default 40) set the size;
//! `NPU_MODEL_SEED` runs the one sequence of that seed.

mod common;

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Once};
use std::task::Poll;

use common::*;
use npu::error::AclCode;
use npu::memory::{DevicePoolBackend, Split};
use npu::prelude::*;
use npu::sim;
use npu::stream::{Copy2d, Strategy, ValueCondition, ValueWord};
use npu::{Error, Stream};

// ---------------------------------------------------------------------------------------------
// The byte model: each byte is the set of values it may hold.

/// A set of byte values.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Cell([u64; 4]);

impl Cell {
    const ANY: Cell = Cell([u64::MAX; 4]);

    fn one(v: u8) -> Cell {
        let mut c = Cell([0; 4]);
        c.0[(v >> 6) as usize] |= 1 << (v & 63);
        c
    }

    fn has(self, v: u8) -> bool {
        self.0[(v >> 6) as usize] & (1 << (v & 63)) != 0
    }

    fn union(self, other: Cell) -> Cell {
        Cell(std::array::from_fn(|i| self.0[i] | other.0[i]))
    }

    fn xor(self, key: u8) -> Cell {
        let mut out = Cell([0; 4]);
        for v in 0..=255u8 {
            if self.has(v) {
                out = out.union(Cell::one(v ^ key));
            }
        }
        out
    }

    fn known(self) -> Option<u8> {
        let count: u32 = self.0.iter().map(|w| w.count_ones()).sum();
        (count == 1).then(|| (0..=255u8).find(|&v| self.has(v)).unwrap())
    }
}

impl std::fmt::Debug for Cell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.known() {
            Some(v) => write!(f, "{v}"),
            None if *self == Cell::ANY => write!(f, "*"),
            None => {
                let values: Vec<u8> = (0..=255u8).filter(|&v| self.has(v)).collect();
                write!(f, "{values:?}")
            }
        }
    }
}

fn known(bytes: &[u8]) -> Vec<Cell> {
    bytes.iter().map(|&b| Cell::one(b)).collect()
}

// ---------------------------------------------------------------------------------------------
// The values a sequence handles.

type DevPart = Split<DeviceBuffer<u8>>;
type HostPart = Split<PinnedBuffer<u8>>;

enum Dev {
    Plain(DeviceBuffer<u8>),
    Pooled(PooledDeviceBuffer<u8>),
    Part(DevPart),
    Shared(Arc<DeviceBuffer<u8>>),
}

enum Host {
    Plain(PinnedBuffer<u8>),
    Pooled(PooledBuffer<u8>),
    Part(HostPart),
    Shared(Arc<PinnedBuffer<u8>>),
}

enum Val {
    D(Dev),
    H(Host),
}

/// Runs `$body` with `$b` bound to the value inside `$v` (of the enum `$e`: [`Dev`] or
/// [`Host`]) and `$w` to the variant's constructor, for the three owned variants; `$shared`
/// are the arms for the shared one.
macro_rules! each_owned {
    ($e:ident, $v:expr, |$b:ident, $w:ident| $body:expr, { $($shared:tt)* }) => {
        match $v {
            $e::Plain($b) => {
                let $w = $e::Plain;
                $body
            }
            $e::Pooled($b) => {
                let $w = $e::Pooled;
                $body
            }
            $e::Part($b) => {
                let $w = $e::Part;
                $body
            }
            $($shared)*
        }
    };
}

/// [`each_owned`] over every variant, shared values too: for reading roles.
macro_rules! each_any {
    ($e:ident, $v:expr, |$b:ident, $w:ident| $body:expr) => {
        each_owned!($e, $v, |$b, $w| $body, {
            $e::Shared($b) => {
                let $w = $e::Shared;
                $body
            }
        })
    };
}

/// [`each_owned`] for writing roles: the model never picks a shared value for one.
macro_rules! each_mut {
    ($e:ident, $v:expr, |$b:ident, $w:ident| $body:expr) => {
        each_owned!($e, $v, |$b, $w| $body, {
            $e::Shared(_) => unreachable!("a shared buffer is never written"),
        })
    };
}

macro_rules! dev_any {
    ($v:expr, |$b:ident, $w:ident| $body:expr) => {
        each_any!(Dev, $v, |$b, $w| $body)
    };
}

macro_rules! dev_mut {
    ($v:expr, |$b:ident, $w:ident| $body:expr) => {
        each_mut!(Dev, $v, |$b, $w| $body)
    };
}

macro_rules! host_any {
    ($v:expr, |$b:ident, $w:ident| $body:expr) => {
        each_any!(Host, $v, |$b, $w| $body)
    };
}

macro_rules! host_mut {
    ($v:expr, |$b:ident, $w:ident| $body:expr) => {
        each_mut!(Host, $v, |$b, $w| $body)
    };
}

impl Host {
    fn bytes(&self) -> &[u8] {
        match self {
            Host::Plain(b) => b,
            Host::Pooled(b) => b,
            Host::Part(b) => b,
            Host::Shared(b) => b,
        }
    }

    fn bytes_mut(&mut self) -> Option<&mut [u8]> {
        match self {
            Host::Plain(b) => Some(b),
            Host::Pooled(b) => Some(b),
            Host::Part(b) => Some(b),
            Host::Shared(_) => None,
        }
    }
}

/// What the model knows of one allocation: a plain or pinned buffer, the parts of a split one
/// and the clones of an `Arc` share one.
#[derive(Debug, Default, Clone)]
struct Root {
    device: bool,
    /// From a pool: its memory goes back to the pool, not the runtime, and it is never forgotten.
    pooled: bool,
    /// Length of the whole allocation (for `into_whole`).
    len: usize,
    /// Pending operations owning an `Arc` clone of it.
    clones_pending: usize,
    /// A dropped operation may still own an `Arc` clone of it.
    clone_dropped: bool,
    /// Dropped operations that owned an `Arc` clone of it, dropped while the device was held
    /// since before their submission: `(stream, submitted at, hold began at)`. While that hold
    /// lasts, with no stop or abort of the stream since, such an operation cannot have run,
    /// so npu-rs must still keep its clone.
    clones_held: Vec<(usize, u64, u64)>,
    /// A forgotten operation owns a clone or a part of it: it is never released.
    forgotten: bool,
    /// A dropped operation owned a part of it, which npu-rs releases once the operation's
    /// task is done (so perhaps not yet).
    part_dropped: bool,
}

/// The model's side of a value: where its bytes live, and what they may hold.
#[derive(Debug, Clone)]
struct Meta {
    root: usize,
    /// Offset of a split part within its allocation.
    offset: usize,
    cells: Vec<Cell>,
    shared: bool,
    part: bool,
    /// An `Arc` clone an operation owns: dropped when the operation hands it back.
    clone: bool,
}

struct Slot {
    val: Val,
    meta: Meta,
}

// ---------------------------------------------------------------------------------------------
// Operations in flight.

/// What an operation hands back: its result and its values (a `Val` each, in the order of
/// its `Meta`s; none if a failed operation kept nothing).
struct Back {
    result: Result<(), Error>,
    vals: Option<Vec<Val>>,
}

type Fut = Pin<Box<dyn Future<Output = Back> + Send>>;

/// Forgotten futures: never dropped, as `mem::forget` leaves them, but reachable, so that a
/// leak checker tells them from real leaks.
static FORGOTTEN: Mutex<Vec<Fut>> = Mutex::new(Vec::new());

/// What the sequences did, printed at the end: a run that checks nothing would show here.
static TALLY: Mutex<std::collections::BTreeMap<String, u64>> =
    Mutex::new(std::collections::BTreeMap::new());

fn tally(what: impl Into<String>) {
    *TALLY.lock().unwrap().entry(what.into()).or_default() += 1;
}

/// The bytes an operation writes if it runs: `(value index, position, cell)`.
type Writes = Vec<(usize, usize, Cell)>;

struct Pending {
    what: String,
    fut: Fut,
    /// The stream the operation is queued on (an event wait: the stream that recorded it).
    stream: usize,
    at: u64,
    metas: Vec<Meta>,
    writes: Writes,
    polled: bool,
}

fn settle<V>(result: Result<V, npu::stream::OpError<V>>) -> (Result<(), Error>, Option<V>) {
    match result {
        Ok(v) => (Ok(()), Some(v)),
        Err(e) => {
            let (e, v) = e.into_parts();
            (Err(e), v)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The test kernel: `dst[i] = src[i] ^ key` for `i < n`, one block.

const XOR_KERNEL: &str = "attack_model_xor_u8";

fn xor_function(ctx: &Context) -> Function {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        sim::kernel::register_with_args_size(XOR_KERNEL, 32, |block, _, args| {
            // SAFETY: launched with {uint8_t *dst, const uint8_t *src, uint64_t n, uint64_t key}:
            // 32 bytes.
            let (dst, src, n, key) = unsafe {
                let w = args.cast::<u64>();
                (
                    w.read_unaligned() as *mut u8,
                    w.add(1).read_unaligned() as *const u8,
                    w.add(2).read_unaligned() as usize,
                    w.add(3).read_unaligned() as u8,
                )
            };
            if block == 0 {
                for i in 0..n {
                    // SAFETY: both hold n bytes, kept allocated by the launch until it
                    // completes; they are distinct buffers (or parts), so they never overlap.
                    unsafe { *dst.add(i) = *src.add(i) ^ key };
                }
            }
            0
        })
        .unwrap();
    });
    in_process(ctx, XOR_KERNEL)
}

// ---------------------------------------------------------------------------------------------
// The model of the streams: what happened to each, at which step, to judge an outcome.

#[derive(Default)]
struct StreamModel {
    /// Steps at which an abort was called, and the step its future confirmed it (if awaited).
    aborts: Vec<(u64, Option<u64>)>,
    /// Steps at which the stream was stopped.
    stops: Vec<u64>,
    /// Steps at which a task fault was armed, and its code.
    faults: Vec<(u64, AclCode)>,
    /// Streams whose events this one waited on.
    waited_on: BTreeSet<usize>,
}

impl StreamModel {
    fn disrupted(&self) -> bool {
        !self.aborts.is_empty() || !self.stops.is_empty() || !self.faults.is_empty()
    }

    /// Stopped now (a stop with no abort called after it).
    fn stopped(&self) -> bool {
        let last_stop = self.stops.iter().max();
        let last_abort = self.aborts.iter().map(|a| a.0).max();
        match (last_stop, last_abort) {
            (Some(s), Some(a)) => *s > a,
            (Some(_), None) => true,
            _ => false,
        }
    }
}

struct Seq {
    seed: u64,
    rng: Rng,
    ctx: Context,
    streams: Vec<Stream>,
    sm: Vec<StreamModel>,
    device_pool: DevicePool,
    pinned_pool: PinnedPool,
    xor: Function,
    events: Vec<(Event, Option<usize>)>,
    roots: Vec<Root>,
    devs: Vec<Slot>,
    hosts: Vec<Slot>,
    pending: Vec<Pending>,
    step: u64,
    hold: Option<sim::Hold>,
    /// The steps at which each hold began and ended.
    holds: Vec<(u64, Option<u64>)>,
    /// Device and host allocation faults armed and not seen yet.
    alloc_armed: bool,
    host_alloc_armed: bool,
    /// The armed device allocation fault may have been taken by a `DevicePool::alloc` that
    /// then succeeded: its first allocation failed out of memory and, as documented, it
    /// retried after giving its cached memory back (whether it retries depends on what the
    /// pool holds at that moment, which the reaper's timing decides).
    alloc_absorbed: bool,
    forgot: bool,
    log: Vec<String>,
}

const MAX_LEN: usize = 96;

impl Seq {
    fn fail(&self, msg: String) -> ! {
        let tail: Vec<&String> = self.log.iter().rev().take(30).collect();
        panic!(
            "seed {:#x} step {}: {msg}\nlast steps (newest first):\n{tail:#?}",
            self.seed, self.step
        );
    }

    fn note(&mut self, what: String) {
        self.log.push(format!("{}: {what}", self.step));
    }

    fn new_root(&mut self, device: bool, pooled: bool, len: usize) -> usize {
        self.roots.push(Root {
            device,
            pooled,
            len,
            ..Root::default()
        });
        self.roots.len() - 1
    }

    fn held(&self) -> bool {
        self.hold.is_some()
    }

    /// The step the current hold began at, if the device is held.
    fn hold_began(&self) -> Option<u64> {
        self.hold
            .as_ref()
            .and_then(|_| self.holds.last().map(|&(hs, _)| hs))
    }

    /// Drops an operation's future unresolved and records what it owned: its clones and parts
    /// are released when its task is done.
    fn op_dropped(&mut self, p: Pending) {
        drop(p.fut);
        for m in &p.metas {
            if m.clone {
                self.clone_op_dropped(p.stream, p.at, m.root);
            }
            if m.part {
                self.roots[m.root].part_dropped = true;
            }
        }
    }

    /// Joins two adjacent parts and, if `try_whole`, turns the join back into its buffer,
    /// which must succeed exactly when no other part is alive (`other`, `None` allowing
    /// either): the buffer, or the joined part if it stays one.
    fn join_parts<S: MemoryMut + Sync>(
        &self,
        a: Split<S>,
        b: Split<S>,
        try_whole: bool,
        other: Option<bool>,
    ) -> Result<S, Split<S>> {
        let joined = a
            .join(b)
            .unwrap_or_else(|e| self.fail(format!("join refused: {e:?}")));
        if !try_whole {
            return Err(joined);
        }
        match joined.into_whole() {
            Ok(whole) if other == Some(true) => {
                drop(whole);
                self.fail("into_whole accepted while another part is alive".into())
            }
            Ok(whole) => Ok(whole),
            Err(e) if other == Some(false) => self.fail(format!("into_whole refused: {e:?}")),
            Err(e) => {
                let (err, part) = e.into_parts();
                if !matches!(err, Error::InvalidArgument { .. }) {
                    self.fail(format!("into_whole refused with {err:?}"));
                }
                tally("into_whole refused while an empty part may be alive");
                Err(part.expect("the part handed back"))
            }
        }
    }

    /// Whether a part of `root` other than the two being joined is alive: `Some(true)` if
    /// surely (in a table, or owned by a pending operation), `None` if perhaps (owned by a
    /// dropped or forgotten operation). Parts that cover the allocation between them leave
    /// only empty parts for this.
    fn other_part_alive(&self, root: usize) -> Option<bool> {
        let part_of = |m: &Meta| m.part && m.root == root;
        let in_tables = self
            .devs
            .iter()
            .chain(&self.hosts)
            .any(|s| part_of(&s.meta));
        let in_pending = self.pending.iter().any(|p| p.metas.iter().any(part_of));
        let r = &self.roots[root];
        if in_tables || in_pending {
            Some(true)
        } else if r.part_dropped || r.forgotten {
            None
        } else {
            Some(false)
        }
    }

    /// Records that an operation of `stream` submitted at `at`, owning an `Arc` clone of a root, was dropped: npu-rs keeps the clone
    /// until its task is done, which it cannot be if the device has been held since before it
    /// was submitted (and its stream was not stopped at its submission).
    fn clone_op_dropped(&mut self, stream: usize, at: u64, root: usize) {
        let recorded = self.clone_op_dropped_record(stream, at, root);
        // Try to take the buffer back at once, sometimes: npu-rs must refuse.
        if recorded && self.rng.below(2) == 0 {
            self.unshare(Some(root));
        }
    }

    fn clone_op_dropped_record(&mut self, stream: usize, at: u64, root: usize) -> bool {
        let r = &mut self.roots[root];
        r.clones_pending -= 1;
        r.clone_dropped = true;
        if let Some(hs) = self.hold_began()
            && hs < at
            && !self.sm[stream].stopped()
        {
            self.roots[root].clones_held.push((stream, at, hs));
            return true;
        }
        false
    }

    /// Whether a dropped operation owning a clone of `root` surely has not run yet: the hold it
    /// was dropped under still lasts, and its stream was not stopped or aborted since its
    /// submission (which may discard it, after which npu-rs releases the clone), nor has an
    /// abort called before it whose end is unknown (a dropped abort may still be refusing
    /// submissions, or mark this one when it runs).
    fn clone_surely_kept(&self, root: usize) -> bool {
        let Some(now) = self.hold_began() else {
            return false;
        };
        self.roots[root].clones_held.iter().any(|&(s, at, hs)| {
            let m = &self.sm[s];
            hs == now
                && !m.stops.iter().any(|&u| u >= at)
                && !m
                    .aborts
                    .iter()
                    .any(|&(a, c)| a >= at || c.is_none_or(|c| c >= at))
        })
    }

    // --- outcome judgement ------------------------------------------------------------------

    /// Whether stream `s`'s operation submitted at `at` may have been disrupted (aborted,
    /// stopped, or behind a disrupted stream's event), so may or may not have run.
    fn may_be_disrupted(&self, s: usize, at: u64) -> bool {
        let m = &self.sm[s];
        let aborted = m
            .aborts
            .iter()
            .any(|&(called, confirmed)| called >= at || confirmed.is_none_or(|c| c >= at));
        // A stop not cleared by an abort confirmed before the submission.
        let stopped = m.stops.iter().any(|&stop| {
            stop >= at
                || !m
                    .aborts
                    .iter()
                    .any(|&(called, c)| called > stop && c.is_some_and(|c| c < at))
        });
        aborted || stopped || self.tainted(s, &mut BTreeSet::new())
    }

    /// Whether `s` waited on an event of a stream that was ever disrupted (transitively).
    fn tainted(&self, s: usize, seen: &mut BTreeSet<usize>) -> bool {
        if !seen.insert(s) {
            return false;
        }
        self.sm[s]
            .waited_on
            .iter()
            .any(|&o| self.sm[o].disrupted() || self.tainted(o, seen))
    }

    /// Whether a task fault of `code` armed on `s` before `at` may have hit the operation.
    fn fault_armed(&self, s: usize, at: u64, code: AclCode) -> bool {
        self.sm[s].faults.iter().any(|&(t, c)| t < at && c == code)
    }

    /// Whether the operation can never have run: it was submitted to a stopped stream, or
    /// the device was held from before its submission until its stream was stopped or an
    /// abort of it was confirmed (a held task has not started, and a stopped stream's task
    /// does not start; an abort discards it).
    fn never_ran(&self, p: &Pending) -> bool {
        let m = &self.sm[p.stream];
        // An abort not confirmed when the stop was made may run its runtime call after the
        // stop, which clears it.
        let sure = |u: u64| {
            m.aborts
                .iter()
                .all(|&(a, c)| a > u || c.is_some_and(|c| c < u))
        };
        let stops: Vec<u64> = m.stops.iter().copied().filter(|&u| sure(u)).collect();
        let on_stopped = stops
            .iter()
            .any(|&u| u < p.at && !m.aborts.iter().any(|&(a, _)| a > u && a < p.at));
        on_stopped
            || self.holds.iter().any(|&(hs, he)| {
                let held_at = |t: u64| t > hs && he.is_none_or(|e| t < e);
                held_at(p.at)
                    && (stops.iter().any(|&u| u >= p.at && held_at(u))
                        || m.aborts
                            .iter()
                            .any(|&(a, c)| a >= p.at && c.is_some_and(held_at)))
            })
    }

    /// Judges an operation's result: `Some(true)` it ran, `Some(false)` it did not, `None` it
    /// may have.
    fn judge(&self, p: &Pending, result: &Result<(), Error>) -> Option<bool> {
        // A synchronisation or an event wait writes nothing, and one with nothing before it
        // to wait for may resolve at once: only work that writes is held to this.
        if !p.writes.is_empty() && self.never_ran(p) {
            if result.is_ok() {
                self.fail(format!(
                    "{}: succeeded, but it was held until its stream was stopped or aborted",
                    p.what
                ));
            }
            return Some(false);
        }
        let err = match result {
            Ok(()) => return Some(true),
            Err(err) => err,
        };
        if let Some(code) = err.acl_code()
            && self.fault_armed(p.stream, p.at, code)
        {
            // An injected fault fails its task instead of running it.
            return Some(false);
        }
        if self.may_be_disrupted(p.stream, p.at) {
            return None;
        }
        self.fail(format!(
            "{}: an error the model does not allow: {err:?}",
            p.what
        ))
    }

    /// Applies an outcome to the model and puts the values back in their slots.
    fn resolve(&mut self, mut p: Pending, back: Back) {
        let ran = self.judge(&p, &back.result);
        let kind = p.what.split_whitespace().next().unwrap_or("").to_string();
        tally(match (&back.result, ran) {
            (Ok(()), _) => format!("resolved ok: {kind}"),
            (Err(e), Some(false)) => {
                format!("resolved, did not run (fault {:?}): {kind}", e.acl_code())
            }
            (Err(e), _) => format!(
                "resolved, may have run ({}): {kind}",
                if e.is_aborted() {
                    "aborted".to_string()
                } else {
                    format!("{:?}", e.acl_code())
                }
            ),
        });
        self.note(format!(
            "{} resolved: {:?} (ran: {ran:?})",
            p.what,
            back.result.as_ref().map_err(|e| e.to_string())
        ));
        for &(i, pos, cell) in &p.writes {
            let c = &mut p.metas[i].cells[pos];
            match ran {
                Some(true) => *c = cell,
                Some(false) => {}
                None => *c = c.union(cell),
            }
        }
        let Some(vals) = back.vals else {
            // Only an operation refused before it reached the device keeps nothing, and none
            // of these is refused: the model never builds an invalid one.
            if !p.metas.is_empty() {
                self.fail(format!("{}: a failed operation kept its values", p.what));
            }
            return;
        };
        assert_eq!(vals.len(), p.metas.len());
        for (val, meta) in vals.into_iter().zip(p.metas) {
            if meta.clone {
                self.roots[meta.root].clones_pending -= 1;
                drop(val);
                continue;
            }
            let slot = Slot { val, meta };
            match slot.val {
                Val::D(_) => self.devs.push(slot),
                Val::H(_) => self.hosts.push(slot),
            }
        }
    }

    // --- checks ---------------------------------------------------------------------------

    fn check_bytes(&self, what: &str, got: &[u8], cells: &[Cell]) {
        assert_eq!(got.len(), cells.len());
        for (i, (&b, c)) in got.iter().zip(cells).enumerate() {
            tally(match c.known() {
                Some(_) => "bytes checked: known",
                None if *c == Cell::ANY => "bytes checked: any",
                None => "bytes checked: one of several",
            });
            if !c.has(b) {
                self.fail(format!(
                    "{what}: byte {i} is {b}, the model allows {c:?}\ngot   {got:?}\nmodel {cells:?}"
                ));
            }
        }
    }

    /// Host buffers are read directly, after every step; what is seen is known from then on.
    fn check_hosts(&mut self) {
        for k in 0..self.hosts.len() {
            let slot = &self.hosts[k];
            let Val::H(h) = &slot.val else { unreachable!() };
            let got = h.bytes().to_vec();
            self.check_bytes(&format!("host slot {k}"), &got, &slot.meta.cells);
            self.hosts[k].meta.cells = known(&got);
        }
    }

    // --- picking --------------------------------------------------------------------------

    fn pick_stream(&mut self) -> usize {
        self.rng.below(self.streams.len())
    }

    /// A device slot (writable if `writable`), taken out of the table.
    fn take_dev(&mut self, writable: bool) -> Option<Slot> {
        let choices: Vec<usize> = (0..self.devs.len())
            .filter(|&k| !writable || !self.devs[k].meta.shared)
            .collect();
        if choices.is_empty() {
            return None;
        }
        let k = choices[self.rng.below(choices.len())];
        Some(self.devs.swap_remove(k))
    }

    fn take_host(&mut self, writable: bool) -> Option<Slot> {
        let choices: Vec<usize> = (0..self.hosts.len())
            .filter(|&k| !writable || !self.hosts[k].meta.shared)
            .collect();
        if choices.is_empty() {
            return None;
        }
        let k = choices[self.rng.below(choices.len())];
        Some(self.hosts.swap_remove(k))
    }

    /// Both slots, or neither: what was taken is put back.
    fn both(&mut self, a: Option<Slot>, b: Option<Slot>) -> Option<(Slot, Slot)> {
        match (a, b) {
            (Some(a), Some(b)) => Some((a, b)),
            (a, b) => {
                for slot in [a, b].into_iter().flatten() {
                    match slot.val {
                        Val::D(_) => self.devs.push(slot),
                        Val::H(_) => self.hosts.push(slot),
                    }
                }
                None
            }
        }
    }

    /// What an operation takes of a slot: the value itself, or an `Arc` clone of a shared
    /// one (the slot stays).
    fn lend(&mut self, slot: Slot) -> (Val, Meta) {
        if slot.meta.shared {
            let val = match &slot.val {
                Val::D(Dev::Shared(a)) => Val::D(Dev::Shared(a.clone())),
                Val::H(Host::Shared(a)) => Val::H(Host::Shared(a.clone())),
                _ => unreachable!(),
            };
            let mut meta = slot.meta.clone();
            meta.clone = true;
            self.roots[meta.root].clones_pending += 1;
            match &slot.val {
                Val::D(_) => self.devs.push(slot),
                Val::H(_) => self.hosts.push(slot),
            }
            (val, meta)
        } else {
            (slot.val, slot.meta)
        }
    }

    /// A random sub-range of `len` elements with length `n` if given.
    fn range(&mut self, len: usize, n: Option<usize>) -> std::ops::Range<usize> {
        let n = n.unwrap_or_else(|| self.rng.below(len + 1));
        let at = self.rng.below(len - n + 1);
        at..at + n
    }

    fn push(&mut self, p: Pending) {
        self.note(format!("submitted {} on stream {}", p.what, p.stream));
        self.pending.push(p);
    }

    // --- allocation -----------------------------------------------------------------------

    fn alloc_failed(&mut self, what: &str, err: &Error, device: bool) {
        let armed = if device {
            &mut self.alloc_armed
        } else {
            &mut self.host_alloc_armed
        };
        if !*armed || !err.is_out_of_memory() {
            self.fail(format!("{what} failed: {err:?}"));
        }
        *armed = false;
        if device {
            self.alloc_absorbed = false;
        }
        self.note(format!("{what} failed as injected"));
    }

    async fn new_dev(&mut self) {
        let len = 1 + self.rng.below(MAX_LEN);
        let how = self.rng.below(4);
        let (val, cells, pooled) = match how {
            0 | 1 => match DeviceBuffer::<u8>::new(&self.ctx, len) {
                Ok(b) => (Dev::Plain(b), vec![Cell::ANY; len], false),
                Err(e) => return self.alloc_failed("DeviceBuffer::new", &e, true),
            },
            2 if !self.held() => {
                let data: Vec<u8> = (0..len).map(|_| self.rng.next() as u8).collect();
                match DeviceBuffer::from_host_blocking(&self.ctx, &data) {
                    Ok(b) => (Dev::Plain(b), known(&data), false),
                    Err(e) => {
                        return self.alloc_failed("DeviceBuffer::from_host_blocking", &e, true);
                    }
                }
            }
            _ => {
                let s = self.pick_stream();
                let got =
                    if self.held() || self.sm[s].stopped() || self.tainted(s, &mut BTreeSet::new())
                    {
                        self.device_pool.try_alloc::<u8>(&self.streams[s], len)
                    } else {
                        match tokio::time::timeout(
                            HANG,
                            self.device_pool.alloc::<u8>(&self.streams[s], len),
                        )
                        .await
                        {
                            Ok(r) => r.map(Some),
                            Err(_) => self.fail("DevicePool::alloc hung".into()),
                        }
                    };
                match got {
                    Ok(Some(b)) => {
                        self.alloc_absorbed |= self.alloc_armed;
                        (Dev::Pooled(b), vec![Cell::ANY; len], true)
                    }
                    Ok(None) => return,
                    // A runtime-pool allocation is an operation of the stream: an abort in
                    // progress refuses it, and so does the runtime while a stop no confirmed
                    // abort has cleared holds (a dropped abort may not have run yet).
                    Err(e)
                        if !(self.alloc_armed && e.is_out_of_memory())
                            && (e.is_aborted() || matches!(e, Error::Acl(_)))
                            && self.may_be_disrupted(s, self.step) =>
                    {
                        self.note(format!("DevicePool::alloc on stream {s} refused: {e}"));
                        return;
                    }
                    Err(e) => return self.alloc_failed("DevicePool::alloc", &e, true),
                }
            }
        };
        let root = self.new_root(true, pooled, len);
        self.note(format!("new device slot of {len} (how {how})"));
        self.devs.push(Slot {
            val: Val::D(val),
            meta: Meta {
                root,
                offset: 0,
                cells,
                shared: false,
                part: false,
                clone: false,
            },
        });
    }

    fn new_host(&mut self) {
        let len = 1 + self.rng.below(MAX_LEN);
        let data: Vec<u8> = (0..len).map(|_| self.rng.next() as u8).collect();
        let (val, pooled) = if self.rng.below(2) == 0 {
            match PinnedBuffer::from_slice(&self.ctx, &data) {
                Ok(b) => (Host::Plain(b), false),
                Err(e) => return self.alloc_failed("PinnedBuffer::from_slice", &e, false),
            }
        } else {
            match self.pinned_pool.try_alloc::<u8>(len) {
                Ok(Some(mut b)) => {
                    b.copy_from_slice(&data);
                    (Host::Pooled(b), true)
                }
                Ok(None) => return,
                Err(e) => return self.alloc_failed("PinnedPool::try_alloc", &e, false),
            }
        };
        let root = self.new_root(false, pooled, len);
        self.note(format!("new host slot of {len}"));
        self.hosts.push(Slot {
            val: Val::H(val),
            meta: Meta {
                root,
                offset: 0,
                cells: known(&data),
                shared: false,
                part: false,
                clone: false,
            },
        });
    }

    // --- reshaping ------------------------------------------------------------------------

    /// Splits a plain slot in two parts, or shares it through an `Arc`, or takes it back
    /// from one, or joins two parts.
    fn reshape(&mut self) {
        match self.rng.below(4) {
            0 => {
                // Split a plain (device or host) buffer, or a part, in two.
                let device = self.rng.below(2) == 0;
                let table = if device {
                    &mut self.devs
                } else {
                    &mut self.hosts
                };
                let choices: Vec<usize> = (0..table.len())
                    .filter(|&k| {
                        matches!(
                            table[k].val,
                            Val::D(Dev::Plain(_) | Dev::Part(_))
                                | Val::H(Host::Plain(_) | Host::Part(_))
                        )
                    })
                    .collect();
                if choices.is_empty() {
                    return;
                }
                let slot = table.swap_remove(choices[self.rng.below(choices.len())]);
                let len = slot.meta.cells.len();
                let mid = self.rng.below(len + 1);
                let (a, b) = match slot.val {
                    Val::D(Dev::Plain(buf)) => {
                        let (a, b) = buf.into_halves(mid).unwrap();
                        (Val::D(Dev::Part(a)), Val::D(Dev::Part(b)))
                    }
                    Val::D(Dev::Part(p)) => {
                        let (a, b) = p.into_halves(mid).unwrap();
                        (Val::D(Dev::Part(a)), Val::D(Dev::Part(b)))
                    }
                    Val::H(Host::Plain(buf)) => {
                        let (a, b) = buf.into_halves(mid).unwrap();
                        (Val::H(Host::Part(a)), Val::H(Host::Part(b)))
                    }
                    Val::H(Host::Part(p)) => {
                        let (a, b) = p.into_halves(mid).unwrap();
                        (Val::H(Host::Part(a)), Val::H(Host::Part(b)))
                    }
                    _ => unreachable!(),
                };
                let m = slot.meta;
                let ma = Meta {
                    cells: m.cells[..mid].to_vec(),
                    part: true,
                    ..m.clone()
                };
                let mb = Meta {
                    cells: m.cells[mid..].to_vec(),
                    offset: m.offset + mid,
                    part: true,
                    ..m
                };
                self.note(format!(
                    "split a {} slot at {mid}",
                    if device { "device" } else { "host" }
                ));
                let table = if device {
                    &mut self.devs
                } else {
                    &mut self.hosts
                };
                table.push(Slot { val: a, meta: ma });
                table.push(Slot { val: b, meta: mb });
            }
            1 => {
                // Join two adjacent parts of one allocation; a part covering its whole
                // allocation becomes the buffer again.
                let device = self.rng.below(2) == 0;
                let table = if device { &self.devs } else { &self.hosts };
                let mut pair = None;
                'find: for i in 0..table.len() {
                    for j in 0..table.len() {
                        let (a, b) = (&table[i].meta, &table[j].meta);
                        if i != j
                            && a.part
                            && b.part
                            && a.root == b.root
                            && a.offset + a.cells.len() == b.offset
                            && (a.cells.len() + b.cells.len() > 0)
                        {
                            pair = Some((i, j));
                            break 'find;
                        }
                    }
                }
                let Some((i, j)) = pair else { return };
                let table = if device {
                    &mut self.devs
                } else {
                    &mut self.hosts
                };
                let (hi, lo) = (i.max(j), i.min(j));
                let sh = table.swap_remove(hi);
                let sl = table.swap_remove(lo);
                let (first, second) = if i < j { (sl, sh) } else { (sh, sl) };
                let mut meta = first.meta;
                meta.cells.extend(second.meta.cells);
                let whole = meta.offset == 0 && meta.cells.len() == self.roots[meta.root].len;
                // Parts that cover the allocation may still leave empty parts of it alive,
                // which `into_whole` must refuse for.
                let other = self.other_part_alive(meta.root);
                let try_whole = whole && self.rng.below(2) == 0;
                let val = match (first.val, second.val) {
                    (Val::D(Dev::Part(a)), Val::D(Dev::Part(b))) => {
                        match self.join_parts(a, b, try_whole, other) {
                            Ok(b) => Val::D(Dev::Plain(b)),
                            Err(part) => Val::D(Dev::Part(part)),
                        }
                    }
                    (Val::H(Host::Part(a)), Val::H(Host::Part(b))) => {
                        match self.join_parts(a, b, try_whole, other) {
                            Ok(b) => Val::H(Host::Plain(b)),
                            Err(part) => Val::H(Host::Part(part)),
                        }
                    }
                    _ => unreachable!(),
                };
                meta.part = matches!(val, Val::D(Dev::Part(_)) | Val::H(Host::Part(_)));
                self.note(format!("joined two parts (whole: {whole})"));
                let table = if device {
                    &mut self.devs
                } else {
                    &mut self.hosts
                };
                table.push(Slot { val, meta });
            }
            2 => {
                // Share a plain buffer through an `Arc`.
                let device = self.rng.below(2) == 0;
                let table = if device {
                    &mut self.devs
                } else {
                    &mut self.hosts
                };
                let choices: Vec<usize> = (0..table.len())
                    .filter(|&k| {
                        matches!(table[k].val, Val::D(Dev::Plain(_)) | Val::H(Host::Plain(_)))
                    })
                    .collect();
                if choices.is_empty() {
                    return;
                }
                let mut slot = table.swap_remove(choices[self.rng.below(choices.len())]);
                slot.val = match slot.val {
                    Val::D(Dev::Plain(b)) => Val::D(Dev::Shared(Arc::new(b))),
                    Val::H(Host::Plain(b)) => Val::H(Host::Shared(Arc::new(b))),
                    _ => unreachable!(),
                };
                slot.meta.shared = true;
                self.note("shared a buffer".into());
                let table = if device {
                    &mut self.devs
                } else {
                    &mut self.hosts
                };
                table.push(slot);
            }
            _ => self.unshare(None),
        }
    }

    /// Takes a shared buffer back (one of `root`'s, if given).
    fn unshare(&mut self, root: Option<usize>) {
        // Take a shared buffer back: `Arc::try_unwrap` must fail while an operation
        // that may still touch it owns a clone, and succeed once none can.
        let device = match root {
            Some(r) => self.roots[r].device,
            None => self.rng.below(2) == 0,
        };
        let table = if device {
            &mut self.devs
        } else {
            &mut self.hosts
        };
        let choices: Vec<usize> = (0..table.len())
            .filter(|&k| table[k].meta.shared && root.is_none_or(|r| table[k].meta.root == r))
            .collect();
        if choices.is_empty() {
            return;
        }
        let mut slot = table.swap_remove(choices[self.rng.below(choices.len())]);
        let root = self.roots[slot.meta.root].clone();
        let kept = self.clone_surely_kept(slot.meta.root);
        if kept {
            tally("unshare while a dropped operation's clone is surely kept");
        }
        let must_fail = root.clones_pending > 0 || root.forgotten || kept;
        let may_fail = must_fail || root.clone_dropped;
        let (unwrapped, val) = match slot.val {
            Val::D(Dev::Shared(a)) => match Arc::try_unwrap(a) {
                Ok(b) => (true, Val::D(Dev::Plain(b))),
                Err(a) => (false, Val::D(Dev::Shared(a))),
            },
            Val::H(Host::Shared(a)) => match Arc::try_unwrap(a) {
                Ok(b) => (true, Val::H(Host::Plain(b))),
                Err(a) => (false, Val::H(Host::Shared(a))),
            },
            _ => unreachable!(),
        };
        if unwrapped && must_fail {
            self.fail(format!(
                "Arc::try_unwrap succeeded while an operation owns a clone \
                 (a dropped one surely not run: {kept}): {root:?}"
            ));
        }
        if !unwrapped && !may_fail {
            self.fail(format!(
                "Arc::try_unwrap failed with no clone out: {root:?}"
            ));
        }
        if unwrapped {
            slot.meta.shared = false;
            self.roots[slot.meta.root].clone_dropped = false;
            self.roots[slot.meta.root].clones_held.clear();
        }
        self.note(format!("unshare: {unwrapped}"));
        slot.val = val;
        let table = if device {
            &mut self.devs
        } else {
            &mut self.hosts
        };
        table.push(slot);
    }

    // --- operations -----------------------------------------------------------------------

    fn memset(&mut self) {
        let Some(slot) = self.take_dev(true) else {
            return;
        };
        let s = self.pick_stream();
        let (val, meta) = self.lend(slot);
        let len = meta.cells.len();
        let r = self.range(len, None);
        let value = self.rng.next() as u8;
        let cast = self.rng.below(3);
        let writes: Writes = r.clone().map(|i| (0, i, Cell::one(value))).collect();
        let stream = self.streams[s].clone();
        let Val::D(d) = val else { unreachable!() };
        let fut: Fut = dev_mut!(d, |b, w| {
            let view = b.view(r.clone()).unwrap();
            macro_rules! as_elems {
                ($t:ty) => {
                    match view.cast::<$t>() {
                        Ok(c) => {
                            let op = stream.memset(c, value);
                            Box::pin(async move {
                                let (result, v) = settle(op.await);
                                Back {
                                    result,
                                    vals: v.map(|c| vec![Val::D(w(c.into_inner().into_inner()))]),
                                }
                            }) as Fut
                        }
                        Err(refused) => {
                            let view = refused.value.unwrap();
                            let op = stream.memset(view, value);
                            Box::pin(async move {
                                let (result, v) = settle(op.await);
                                Back {
                                    result,
                                    vals: v.map(|v| vec![Val::D(w(v.into_inner()))]),
                                }
                            }) as Fut
                        }
                    }
                };
            }
            match cast {
                0 => as_elems!(u8),
                1 => as_elems!(u16),
                _ => as_elems!(u32),
            }
        });
        self.push(Pending {
            what: format!("memset {r:?} of {len} to {value} (cast {cast})"),
            fut,
            stream: s,
            at: self.step,
            metas: vec![meta],
            writes,
            polled: false,
        });
    }

    /// A 1D copy between two of: host to device, device to host, device to device.
    fn copy(&mut self) {
        let kind = self.rng.below(3);
        let s = self.pick_stream();
        let stream = self.streams[s].clone();
        let (src, dst) = match kind {
            0 => (self.take_host(false), self.take_dev(true)),
            1 => (self.take_dev(false), self.take_host(true)),
            _ => {
                let src = self.take_dev(false);
                (src, self.take_dev(true))
            }
        };
        let Some((src, dst)) = self.both(src, dst) else {
            return;
        };
        let (sv, sm) = self.lend(src);
        let (dv, dm) = self.lend(dst);
        let n = self.rng.below(sm.cells.len().min(dm.cells.len()) + 1);
        let sr = self.range(sm.cells.len(), Some(n));
        let dr = self.range(dm.cells.len(), Some(n));
        let writes: Writes = (0..n)
            .map(|i| (1, dr.start + i, sm.cells[sr.start + i]))
            .collect();
        macro_rules! go {
            ($op:ident, $a:expr, $wa:expr, $b:expr, $wb:expr) => {{
                let op = stream.$op($a.view(sr.clone()).unwrap(), $b.view(dr.clone()).unwrap());
                Box::pin(async move {
                    let (result, v) = settle(op.await);
                    Back {
                        result,
                        vals: v.map(|(a, b)| vec![$wa(a.into_inner()), $wb(b.into_inner())]),
                    }
                }) as Fut
            }};
        }
        let fut: Fut = match (sv, dv) {
            (Val::H(h), Val::D(d)) => host_any!(h, |a, wa| dev_mut!(d, |b, wb| go!(
                copy_h2d,
                a,
                |x| Val::H(wa(x)),
                b,
                |x| Val::D(wb(x))
            ))),
            (Val::D(d), Val::H(h)) => dev_any!(d, |a, wa| host_mut!(h, |b, wb| go!(
                copy_d2h,
                a,
                |x| Val::D(wa(x)),
                b,
                |x| Val::H(wb(x))
            ))),
            (Val::D(d), Val::D(e)) => dev_any!(d, |a, wa| dev_mut!(e, |b, wb| go!(
                copy_d2d,
                a,
                |x| Val::D(wa(x)),
                b,
                |x| Val::D(wb(x))
            ))),
            _ => unreachable!(),
        };
        self.push(Pending {
            what: format!("copy kind {kind} {sr:?} -> {dr:?}"),
            fut,
            stream: s,
            at: self.step,
            metas: vec![sm, dm],
            writes,
            polled: false,
        });
    }

    /// A pitched copy, host to device or device to device, of a shape that fits both.
    fn copy_2d(&mut self) {
        let h2d = self.rng.below(2) == 0;
        let s = self.pick_stream();
        let stream = self.streams[s].clone();
        let src = if h2d {
            self.take_host(false)
        } else {
            self.take_dev(false)
        };
        let dst = self.take_dev(true);
        let Some((src, dst)) = self.both(src, dst) else {
            return;
        };
        if src.meta.cells.is_empty() || dst.meta.cells.is_empty() {
            self.both(Some(src), None);
            self.both(Some(dst), None);
            return;
        }
        let (sv, sm) = self.lend(src);
        let (dv, dm) = self.lend(dst);
        let (sl, dl) = (sm.cells.len(), dm.cells.len());
        let width = 1 + self.rng.below(sl.min(dl));
        let sp = width + self.rng.below(sl - width + 1);
        let dp = width + self.rng.below(dl - width + 1);
        let most = (1 + (sl - width) / sp).min(1 + (dl - width) / dp);
        let height = 1 + self.rng.below(most);
        let shape = Copy2d {
            width,
            height,
            src_pitch: sp,
            dst_pitch: dp,
        };
        let mut writes = Writes::new();
        for row in 0..height {
            for x in 0..width {
                writes.push((1, row * dp + x, sm.cells[row * sp + x]));
            }
        }
        macro_rules! go {
            ($op:ident, $a:expr, $wa:expr, $b:expr, $wb:expr) => {{
                let op = stream.$op($a, $b, shape);
                Box::pin(async move {
                    let (result, v) = settle(op.await);
                    Back {
                        result,
                        vals: v.map(|(a, b)| vec![$wa(a), $wb(b)]),
                    }
                }) as Fut
            }};
        }
        let fut: Fut = match (sv, dv) {
            (Val::H(h), Val::D(d)) => host_any!(h, |a, wa| dev_mut!(d, |b, wb| go!(
                copy_2d_h2d,
                a,
                |x| Val::H(wa(x)),
                b,
                |x| Val::D(wb(x))
            ))),
            (Val::D(d), Val::D(e)) => dev_any!(d, |a, wa| dev_mut!(e, |b, wb| go!(
                copy_2d_d2d,
                a,
                |x| Val::D(wa(x)),
                b,
                |x| Val::D(wb(x))
            ))),
            _ => unreachable!(),
        };
        self.push(Pending {
            what: format!("2D copy (h2d {h2d}) {shape:?} of {sl} -> {dl}"),
            fut,
            stream: s,
            at: self.step,
            metas: vec![sm, dm],
            writes,
            polled: false,
        });
    }

    /// The test kernel: `dst[i] = src[i] ^ key` over views of two device slots.
    fn launch(&mut self) {
        let s = self.pick_stream();
        let stream = self.streams[s].clone();
        let src = self.take_dev(false);
        let dst = self.take_dev(true);
        let Some((src, dst)) = self.both(src, dst) else {
            return;
        };
        let (sv, sm) = self.lend(src);
        let (dv, dm) = self.lend(dst);
        let n = self.rng.below(sm.cells.len().min(dm.cells.len()) + 1);
        let sr = self.range(sm.cells.len(), Some(n));
        let dr = self.range(dm.cells.len(), Some(n));
        let key = self.rng.next() as u8;
        let writes: Writes = (0..n)
            .map(|i| (1, dr.start + i, sm.cells[sr.start + i].xor(key)))
            .collect();
        let f = self.xor.clone();
        let (Val::D(sd), Val::D(dd)) = (sv, dv) else {
            unreachable!()
        };
        let fut: Fut = dev_any!(sd, |a, wa| dev_mut!(dd, |b, wb| {
            let args = (
                b.view(dr.clone()).unwrap(),
                a.view(sr.clone()).unwrap(),
                n as u64,
                u64::from(key),
            );
            // SAFETY: the kernel takes {uint8_t *dst, const uint8_t *src, uint64_t n,
            // uint64_t key}; both views hold n bytes.
            let op = unsafe { stream.launch(&f, 1, args) };
            Box::pin(async move {
                let (result, v) = settle(op.await);
                Back {
                    result,
                    vals: v.map(|(b, a, ..)| {
                        vec![Val::D(wa(a.into_inner())), Val::D(wb(b.into_inner()))]
                    }),
                }
            }) as Fut
        }));
        self.push(Pending {
            what: format!("xor kernel {sr:?} -> {dr:?} key {key}"),
            fut,
            stream: s,
            at: self.step,
            metas: vec![sm, dm],
            writes,
            polled: false,
        });
    }

    /// A value-word store into an aligned word of a device slot, or a wait for the value
    /// the model knows it holds.
    fn value_word(&mut self) {
        let Some(slot) = self.take_dev(true) else {
            return;
        };
        let Val::D(d) = &slot.val else { unreachable!() };
        let base = dev_any!(d, |b, _w| npu::memory::Memory::addr(b) as usize);
        let len = slot.meta.cells.len();
        let first = (8 - base % 8) % 8;
        if first + 8 > len {
            self.devs.push(slot);
            return;
        }
        let words = (len - first) / 8;
        let at = first + 8 * self.rng.below(words);
        let current: Option<Vec<u8>> = slot.meta.cells[at..at + 8]
            .iter()
            .map(|c| c.known())
            .collect();
        let wait = self.rng.below(2) == 0 && current.is_some();
        let value = if wait {
            u64::from_ne_bytes(current.unwrap().try_into().unwrap())
        } else {
            self.rng.next()
        };
        let s = self.pick_stream();
        let stream = self.streams[s].clone();
        let (val, meta) = self.lend(slot);
        let writes: Writes = if wait {
            Vec::new()
        } else {
            value
                .to_ne_bytes()
                .iter()
                .enumerate()
                .map(|(i, &b)| (0, at + i, Cell::one(b)))
                .collect()
        };
        let Val::D(d) = val else { unreachable!() };
        let fut: Fut = dev_mut!(d, |b, w| {
            let word = b.view(at..at + 8).unwrap().cast::<u64>().unwrap();
            let word = ValueWord::from_memory(word).unwrap_or_else(|e| panic!("{e:?}"));
            let op = if wait {
                stream.wait_value(word, value, ValueCondition::Equal)
            } else {
                stream.write_value(word, value)
            };
            Box::pin(async move {
                let (result, v) = settle(op.await);
                Back {
                    result,
                    vals: v
                        .map(|word| vec![Val::D(w(word.into_inner().into_inner().into_inner()))]),
                }
            }) as Fut
        });
        self.push(Pending {
            what: format!(
                "value word at {at} of {len}: {} {value:#x}",
                if wait { "wait" } else { "store" }
            ),
            fut,
            stream: s,
            at: self.step,
            metas: vec![meta],
            writes,
            polled: false,
        });
    }

    /// Records an event on one stream; another waits on it (on the device, or the host
    /// awaits the event).
    fn event(&mut self) {
        let k = self.rng.below(self.events.len());
        let a = self.pick_stream();
        match self.events[k].0.record(&self.streams[a]) {
            Ok(()) => self.events[k].1 = Some(a),
            Err(e) => {
                if !self.may_be_disrupted(a, self.step) {
                    self.fail(format!("Event::record failed: {e:?}"));
                }
                // Refused during an abort: the event keeps its earlier record.
                return;
            }
        }
        let b = self.pick_stream();
        self.note(format!("event {k} recorded on {a}"));
        if self.rng.below(2) == 0 && a != b {
            // Whether it fails or not, `b` may fail what follows once `a` is disrupted.
            self.sm[b].waited_on.insert(a);
            match self.streams[b].wait_event(&self.events[k].0) {
                Ok(()) => self.note(format!("stream {b} waits on event {k}")),
                Err(e) => {
                    // The wait fails (at once, if the runtime already knows) when the record
                    // it waits for fails: `a` stopped, say.
                    if !self.may_be_disrupted(b, self.step) && !self.may_be_disrupted(a, self.step)
                    {
                        self.fail(format!("Stream::wait_event failed: {e:?}"));
                    }
                }
            }
        } else {
            let wait = self.events[k].0.wait();
            let fut: Fut = Box::pin(async move {
                Back {
                    result: wait.await,
                    vals: Some(Vec::new()),
                }
            });
            self.push(Pending {
                what: format!("Event::wait of event {k} recorded on {a}"),
                fut,
                stream: a,
                at: self.step,
                metas: Vec::new(),
                writes: Vec::new(),
                polled: false,
            });
        }
    }

    fn synchronize(&mut self) {
        let s = self.pick_stream();
        let op = self.streams[s].synchronize();
        let fut: Fut = Box::pin(async move {
            let (result, _) = settle(op.await);
            Back {
                result,
                vals: Some(Vec::new()),
            }
        });
        self.push(Pending {
            what: "synchronize".into(),
            fut,
            stream: s,
            at: self.step,
            metas: Vec::new(),
            writes: Vec::new(),
            polled: false,
        });
    }

    // --- disruption -----------------------------------------------------------------------

    async fn abort(&mut self) {
        let s = self.pick_stream();
        let abort = self.streams[s].abort();
        let called = self.step;
        self.sm[s].aborts.push((called, None));
        match self.rng.below(3) {
            0 => {
                self.note(format!("abort of stream {s}, dropped"));
                drop(abort);
            }
            _ => {
                let result = match tokio::time::timeout(HANG, abort).await {
                    Ok(r) => r,
                    Err(_) => self.fail(format!("the abort of stream {s} hung")),
                };
                if let Err(e) = result {
                    self.fail(format!("abort failed: {e:?}"));
                }
                self.step += 1;
                let confirmed = self.step;
                self.sm[s].aborts.last_mut().unwrap().1 = Some(confirmed);
                self.note(format!("abort of stream {s}, awaited"));
            }
        }
    }

    fn stop(&mut self) {
        let s = self.pick_stream();
        if let Err(e) = self.streams[s].stop() {
            self.fail(format!("stop failed: {e:?}"));
        }
        self.sm[s].stops.push(self.step);
        self.note(format!("stop of stream {s}"));
    }

    fn fault(&mut self) {
        match self.rng.below(4) {
            0 if !self.alloc_armed => {
                sim::fail_next_alloc(&self.ctx.device()).unwrap();
                self.alloc_armed = true;
                self.note("armed a device allocation fault".into());
            }
            1 if !self.host_alloc_armed => {
                sim::fail_next_host_alloc(AclCode(207001)).unwrap();
                self.host_alloc_armed = true;
                self.note("armed a host allocation fault".into());
            }
            _ => {
                let s = self.pick_stream();
                let nth = 1 + self.rng.below(3) as u64;
                let code = [AclCode(507015), AclCode(507013)][self.rng.below(2)];
                sim::fail_task(&self.streams[s], nth, code).unwrap();
                self.sm[s].faults.push((self.step, code));
                self.note(format!("armed task fault {nth} {code:?} on stream {s}"));
            }
        }
    }

    fn toggle_hold(&mut self) {
        match self.hold.take() {
            Some(hold) => {
                hold.release().unwrap();
                self.holds.last_mut().unwrap().1 = Some(self.step);
                self.note("released the device".into());
            }
            None => {
                self.hold = Some(sim::hold(&self.ctx.device()).unwrap());
                self.holds.push((self.step, None));
                self.note("held the device".into());
            }
        }
    }

    // --- futures --------------------------------------------------------------------------

    /// Whether awaiting `p` cannot hang: the device runs (or an abort confirmed after its
    /// submission discarded it), and no stream it depends on is stopped.
    fn awaitable(&self, p: &Pending) -> bool {
        let s = p.stream;
        let confirmed_abort = self.sm[s]
            .aborts
            .iter()
            .any(|&(called, c)| called >= p.at && c.is_some());
        if confirmed_abort {
            return true;
        }
        if self.held() {
            return false;
        }
        let mut seen = BTreeSet::new();
        let mut todo = vec![s];
        while let Some(t) = todo.pop() {
            if !seen.insert(t) {
                continue;
            }
            if t != s && self.sm[t].stopped() {
                return false;
            }
            todo.extend(self.sm[t].waited_on.iter().copied());
        }
        true
    }

    async fn future_step(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let k = self.rng.below(self.pending.len());
        match self.rng.below(10) {
            0..=3 => {
                if !self.awaitable(&self.pending[k]) {
                    return;
                }
                let mut p = self.pending.swap_remove(k);
                let back = match tokio::time::timeout(HANG, &mut p.fut).await {
                    Ok(back) => back,
                    Err(_) => self.fail(format!("{} hung", p.what)),
                };
                self.resolve(p, back);
            }
            4..=6 => {
                let p = &mut self.pending[k];
                p.polled = true;
                let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
                if let Poll::Ready(back) = p.fut.as_mut().poll(&mut cx) {
                    let p = self.pending.swap_remove(k);
                    self.resolve(p, back);
                }
            }
            7 | 8 => {
                let p = self.pending.swap_remove(k);
                self.note(format!("dropped {} (polled: {})", p.what, p.polled));
                tally(format!("dropped (polled: {})", p.polled));
                self.op_dropped(p);
            }
            _ => {
                let p = self.pending.swap_remove(k);
                if p.metas.iter().any(|m| self.roots[m.root].pooled) {
                    // A forgotten pool block keeps its pool for good; only dropped here.
                    self.note(format!("dropped {} (instead of forgetting)", p.what));
                    self.op_dropped(p);
                    return;
                }
                self.note(format!("forgot {} (polled: {})", p.what, p.polled));
                for m in &p.metas {
                    let root = &mut self.roots[m.root];
                    root.forgotten = true;
                    if m.clone {
                        root.clones_pending -= 1;
                    }
                }
                self.forgot = true;
                tally(format!("forgotten (polled: {})", p.polled));
                FORGOTTEN.lock().unwrap().push(p.fut);
            }
        }
    }

    /// Drops a slot's handle (the last one of its buffer, unless an operation owns a clone or
    /// another part).
    fn drop_slot(&mut self) {
        let device = self.rng.below(2) == 0;
        let table = if device {
            &mut self.devs
        } else {
            &mut self.hosts
        };
        if table.is_empty() {
            return;
        }
        let k = self.rng.below(table.len());
        let slot = table.swap_remove(k);
        if slot.meta.shared && self.roots[slot.meta.root].clones_pending > 0 {
            self.roots[slot.meta.root].clone_dropped = true;
        }
        self.note(format!(
            "dropped a {} slot",
            if device { "device" } else { "host" }
        ));
        drop(slot);
    }

    // --- the driver -----------------------------------------------------------------------

    async fn step_once(&mut self) {
        self.step += 1;
        let choice = self.rng.below(100);
        match choice {
            0..=7 => self.new_dev().await,
            8..=13 => self.new_host(),
            14..=17 => {
                // A host write: known bytes.
                if let Some(mut slot) = self.take_host(true) {
                    let Val::H(h) = &mut slot.val else {
                        unreachable!()
                    };
                    let bytes = h.bytes_mut().unwrap();
                    for b in bytes.iter_mut() {
                        *b = self.rng.next() as u8;
                    }
                    slot.meta.cells = known(bytes);
                    self.hosts.push(slot);
                }
            }
            18..=24 => self.reshape(),
            25..=32 => self.memset(),
            33..=44 => self.copy(),
            45..=49 => self.copy_2d(),
            50..=55 => self.launch(),
            56..=59 => self.value_word(),
            60..=64 => self.event(),
            65..=67 => self.synchronize(),
            68..=84 => self.future_step().await,
            85..=87 => self.drop_slot(),
            88..=89 => self.abort().await,
            90 => self.stop(),
            91..=93 => self.fault(),
            _ => self.toggle_hold(),
        }
        self.check_hosts();
    }

    /// Ends the sequence: releases the device, aborts stopped streams, awaits everything,
    /// reads every device slot back and checks it.
    async fn finish(&mut self) {
        self.step += 1;
        if let Some(hold) = self.hold.take() {
            hold.release().unwrap();
            self.holds.last_mut().unwrap().1 = Some(self.step);
        }
        for s in 0..self.streams.len() {
            if self.sm[s].stopped() {
                self.sm[s].aborts.push((self.step, None));
                let result = tokio::time::timeout(HANG, self.streams[s].abort()).await;
                match result {
                    Ok(Ok(())) => {}
                    other => self.fail(format!("the final abort of stream {s}: {other:?}")),
                }
                self.step += 1;
                let confirmed = self.step;
                self.sm[s].aborts.last_mut().unwrap().1 = Some(confirmed);
            }
        }
        self.step += 1;
        while let Some(mut p) = self.pending.pop() {
            let back = match tokio::time::timeout(HANG, &mut p.fut).await {
                Ok(back) => back,
                Err(_) => self.fail(format!("{} hung at the end", p.what)),
            };
            self.resolve(p, back);
        }
        self.check_hosts();
        for s in 0..self.streams.len() {
            let result = tokio::time::timeout(HANG, self.streams[s].synchronize()).await;
            match result {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    if !(self.sm[s].disrupted() || self.tainted(s, &mut BTreeSet::new())) {
                        self.fail(format!("synchronize of an undisrupted stream {s}: {e:?}"));
                    }
                }
                Err(_) => self.fail(format!("synchronize of stream {s} hung")),
            }
        }
        // Every device slot read back through a fresh stream (the others may hold a fault).
        let reader = Stream::new(&self.ctx).unwrap();
        for k in 0..self.devs.len() {
            let len = self.devs[k].meta.cells.len();
            if len == 0 {
                continue;
            }
            let slot = self.devs.swap_remove(k);
            let host = PinnedBuffer::<u8>::new(&self.ctx, len);
            let host = match host {
                Ok(h) => h,
                Err(e) => {
                    self.alloc_failed("PinnedBuffer::new", &e, false);
                    PinnedBuffer::<u8>::new(&self.ctx, len).unwrap()
                }
            };
            let Val::D(d) = slot.val else { unreachable!() };
            let (got, val) = dev_any!(d, |b, w| {
                let (b, host) = reader
                    .copy_d2h(b, host)
                    .await
                    .unwrap_or_else(|e| self.fail(format!("reading device slot {k} back: {e:?}")));
                (host.to_vec(), w(b))
            });
            self.check_bytes(
                &format!("device slot {k} ({:?})", slot.meta),
                &got,
                &slot.meta.cells,
            );
            self.devs.insert(
                k,
                Slot {
                    val: Val::D(val),
                    meta: slot.meta,
                },
            );
        }
        // Shared buffers come back once no operation owns a clone.
        for k in 0..self.devs.len() + self.hosts.len() {
            let (device, k) = if k < self.devs.len() {
                (true, k)
            } else {
                (false, k - self.devs.len())
            };
            let slot = if device {
                &self.devs[k]
            } else {
                &self.hosts[k]
            };
            if !slot.meta.shared {
                continue;
            }
            let root = &self.roots[slot.meta.root];
            let count = match &slot.val {
                Val::D(Dev::Shared(a)) => Arc::strong_count(a),
                Val::H(Host::Shared(a)) => Arc::strong_count(a),
                _ => unreachable!(),
            };
            if root.forgotten && count == 1 {
                self.fail("a forgotten operation's Arc clone was released".into());
            }
        }
        // Any allocation fault still armed is consumed here, and must fail its allocation,
        // unless a pool's retry may have taken it.
        if self.alloc_armed {
            match DeviceBuffer::<u8>::new(&self.ctx, 1).map(drop) {
                Err(err) => assert!(err.is_out_of_memory(), "{err:?}"),
                Ok(()) if self.alloc_absorbed => self.note("a pool's retry took the fault".into()),
                Ok(()) => self.fail("the armed allocation fault was taken elsewhere".into()),
            }
            self.alloc_armed = false;
            self.alloc_absorbed = false;
        }
        if self.host_alloc_armed {
            let err = PinnedBuffer::<u8>::new(&self.ctx, 1).map(drop).unwrap_err();
            assert!(err.is_out_of_memory(), "{err:?}");
            self.host_alloc_armed = false;
        }
    }

    /// Allocations forgotten futures keep for good: (device, pinned).
    fn leaked(&self) -> (u64, u64) {
        let mut leaked = (0, 0);
        for root in &self.roots {
            if root.forgotten && !root.pooled {
                if root.device {
                    leaked.0 += 1;
                } else {
                    leaked.1 += 1;
                }
            }
        }
        leaked
    }
}

fn sequence(ctx: &Context, xor: &Function, seed: u64, steps: usize) {
    let baseline = live_objects(ctx);
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let strategies: Vec<Strategy> = (0..3)
        .map(|i| STRATEGIES[(seed as usize + i) % 3])
        .collect();
    let backend = [DevicePoolBackend::Caching, DevicePoolBackend::RuntimePool][rng.below(2)];
    let mut seq = Seq {
        seed,
        ctx: ctx.clone(),
        streams: strategies.iter().map(|&s| stream(ctx, s)).collect(),
        sm: (0..3).map(|_| StreamModel::default()).collect(),
        device_pool: DevicePool::builder(ctx).backend(backend).build().unwrap(),
        pinned_pool: PinnedPool::new(ctx),
        xor: xor.clone(),
        events: (0..2).map(|_| (Event::new(ctx).unwrap(), None)).collect(),
        roots: Vec::new(),
        devs: Vec::new(),
        hosts: Vec::new(),
        pending: Vec::new(),
        step: 0,
        hold: None,
        holds: Vec::new(),
        alloc_armed: false,
        host_alloc_armed: false,
        alloc_absorbed: false,
        forgot: false,
        log: vec![format!("strategies {strategies:?}, {backend:?}")],
        rng,
    };
    run(async {
        for _ in 0..steps {
            seq.step_once().await;
        }
        seq.finish().await;
    });
    let (leak_dev, leak_host) = seq.leaked();
    let forgot = seq.forgot;
    let what = format!("seed {seed:#x}");
    watchdog(&what, || drop(seq));
    let mut allowed = baseline;
    allowed[0] += leak_dev;
    allowed[1] += leak_host;
    let mut now = allowed;
    let settled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        until_released(&what, || {
            now = live_objects(ctx);
            if forgot {
                within([now[0], now[1]], [allowed[0], allowed[1]])
            } else {
                within(now, allowed)
            }
        })
    }));
    assert!(
        settled.is_ok(),
        "{what}: live {now:?}, allowed {allowed:?} (forgot: {forgot})"
    );
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|v| v.parse().unwrap_or_else(|_| panic!("{name}={v}")))
        .unwrap_or(default)
}

/// The promise attacked: whatever safe code does with futures, buffers, streams, the device
/// and faults, every byte it reads is one the model allows, every outcome is one the rules
/// allow, nothing hangs, and nothing but what forgotten futures own stays allocated.
#[test]
fn random_sequences_match_the_host_model() {
    let (_guard, ctx, _) = exclusive(None);
    let xor = xor_function(&ctx);
    let steps = env("NPU_MODEL_STEPS", 40) as usize;
    if let Ok(seed) = std::env::var("NPU_MODEL_SEED") {
        let seed = u64::from_str_radix(seed.trim_start_matches("0x"), 16).unwrap();
        sequence(&ctx, &xor, seed, steps);
        return;
    }
    let sequences = env("NPU_MODEL_SEQUENCES", 300);
    let first = env("NPU_MODEL_FIRST", 0);
    for seed in first..first + sequences {
        sequence(&ctx, &xor, seed, steps);
    }
    for (what, count) in TALLY.lock().unwrap().iter() {
        println!("{count:>8} {what}");
    }
}

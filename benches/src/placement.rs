//! Where the threads of one throughput run sit: the simulator's device is host threads (a
//! worker per stream), so on a 2-core host the scheduler's choice of cores for a stream's
//! worker decides how much of a core the device takes from the host's threads, which a real
//! device, running on its own cores, never does.

use std::collections::HashSet;
use std::mem::{size_of, zeroed};

/// While alive, the given simulator stream workers (the device) run alone on the process's
/// last CPU and every other thread of the process on the others; dropping it lets every
/// thread (including those started meanwhile) run on all the CPUs the process had.
pub(crate) struct DeviceAlone {
    all: libc::cpu_set_t,
}

/// The ids of the process's simulator stream workers of device 0.
pub(crate) fn sim_workers() -> HashSet<libc::pid_t> {
    threads()
        .unwrap_or_default()
        .into_iter()
        .filter(|(_, name)| name.starts_with("npu-sim-d0-s"))
        .map(|(tid, _)| tid)
        .collect()
}

/// The `count` workers started since `before` was taken (by [`sim_workers`]), or `None` if
/// they do not all show up. The stream id in a worker's name cannot tell them (a name keeps 15
/// bytes: `npu-sim-d0-s1234` reads back as `npu-sim-d0-s123`), and a new thread names itself
/// once it runs, shortly after its stream was made: the workers are waited for, a bounded
/// number of yields.
pub(crate) fn new_sim_workers(
    before: &HashSet<libc::pid_t>,
    count: usize,
) -> Option<HashSet<libc::pid_t>> {
    for _ in 0..10_000 {
        let new: HashSet<_> = sim_workers().difference(before).copied().collect();
        if new.len() == count {
            return Some(new);
        }
        std::thread::yield_now();
    }
    None
}

impl DeviceAlone {
    /// Pins the threads, `device` to the last CPU; `None` (nothing pinned) on a host with
    /// fewer than two CPUs, without `/proc/self/task`, or if no worker is given.
    pub(crate) fn pin(device: &HashSet<libc::pid_t>) -> Option<Self> {
        if device.is_empty() {
            return None;
        }
        // SAFETY: a zeroed `cpu_set_t` is an empty set, and the call writes at most its size.
        let mut all: libc::cpu_set_t = unsafe { zeroed() };
        // SAFETY: `all` is a valid, writable set of the size given.
        if unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut all) } != 0 {
            return None;
        }
        let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            // SAFETY: `all` is an initialised set and `cpu` is below its size.
            .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &all) })
            .collect();
        let (&last, host) = cpus.split_last()?;
        if host.is_empty() {
            return None;
        }
        let threads = threads()?;
        let (on_device, on_host) = (set_of(&[last]), set_of(host));
        for (tid, _) in &threads {
            let cpus = if device.contains(tid) {
                &on_device
            } else {
                &on_host
            };
            set(*tid, cpus);
        }
        Some(DeviceAlone { all })
    }
}

impl Drop for DeviceAlone {
    /// Until every thread reads back the full set: a thread a not yet restored one starts
    /// meanwhile inherits its creator's narrow set (a blocking-pool thread would keep it for
    /// the cells after).
    fn drop(&mut self) {
        for _ in 0..100 {
            for (tid, _) in threads().unwrap_or_default() {
                set(tid, &self.all);
            }
            let restored = threads().unwrap_or_default();
            if restored.iter().all(|(tid, _)| has(*tid, &self.all)) {
                return;
            }
        }
    }
}

/// The process's threads: (thread id, name).
fn threads() -> Option<Vec<(libc::pid_t, String)>> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    Some(
        tasks
            .flatten()
            .filter_map(|task| {
                let tid = task.file_name().to_str()?.parse().ok()?;
                let name = std::fs::read_to_string(task.path().join("comm")).ok()?;
                Some((tid, name.trim().to_owned()))
            })
            .collect(),
    )
}

fn set_of(cpus: &[usize]) -> libc::cpu_set_t {
    // SAFETY: a zeroed `cpu_set_t` is an empty set.
    let mut set: libc::cpu_set_t = unsafe { zeroed() };
    for &cpu in cpus {
        // SAFETY: `cpu` came from a set of this size, so it is below `CPU_SETSIZE`.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    set
}

/// Best effort: a thread that ended meanwhile is simply not moved.
fn set(tid: libc::pid_t, cpus: &libc::cpu_set_t) {
    // SAFETY: `cpus` is an initialised set of the size given; the call only reads it.
    unsafe { libc::sched_setaffinity(tid, size_of::<libc::cpu_set_t>(), cpus) };
}

/// Whether `tid` may run on every CPU of `cpus` (a thread that ended counts as restored).
fn has(tid: libc::pid_t, cpus: &libc::cpu_set_t) -> bool {
    // SAFETY: a zeroed `cpu_set_t` is an empty set, and the call writes at most its size.
    let mut now: libc::cpu_set_t = unsafe { zeroed() };
    // SAFETY: `now` is a valid, writable set of the size given.
    if unsafe { libc::sched_getaffinity(tid, size_of::<libc::cpu_set_t>(), &mut now) } != 0 {
        return true;
    }
    // SAFETY: both sets are initialised.
    unsafe { libc::CPU_EQUAL(&now, cpus) }
}

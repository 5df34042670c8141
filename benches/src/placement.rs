//! Where the threads of one throughput run sit: the simulator's device is host threads (a
//! worker per stream), so on a 2-core host the scheduler's choice of cores for a stream's
//! worker decides how much of a core the device takes from the host's threads, which a real
//! device, running on its own cores, never does.

use std::mem::{size_of, zeroed};

/// While alive, the newest simulator stream workers (the device) run alone on the second CPU
/// and every other thread of the process on the first; dropping it lets every thread
/// (including those started meanwhile) run on all the CPUs the process had.
pub(crate) struct DeviceAlone {
    all: libc::cpu_set_t,
}

impl DeviceAlone {
    /// Pins the threads, the newest `workers` stream workers of device 0 to the second CPU;
    /// `None` on a host with fewer than two CPUs or without `/proc/self/task`.
    pub(crate) fn pin(workers: usize) -> Option<Self> {
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
        let (&first, &second) = (cpus.first()?, cpus.get(1)?);
        let threads = threads()?;
        let mut device: Vec<(u32, libc::pid_t)> = threads
            .iter()
            .filter_map(|(tid, name)| {
                let stream = name.strip_prefix("npu-sim-d0-s")?.parse().ok()?;
                Some((stream, *tid))
            })
            .collect();
        device.sort_unstable();
        let device: Vec<libc::pid_t> = device.iter().rev().take(workers).map(|w| w.1).collect();
        for (tid, _) in &threads {
            set(
                *tid,
                &only(if device.contains(tid) { second } else { first }),
            );
        }
        Some(DeviceAlone { all })
    }
}

impl Drop for DeviceAlone {
    fn drop(&mut self) {
        for (tid, _) in threads().unwrap_or_default() {
            set(tid, &self.all);
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

fn only(cpu: usize) -> libc::cpu_set_t {
    // SAFETY: a zeroed `cpu_set_t` is an empty set.
    let mut set: libc::cpu_set_t = unsafe { zeroed() };
    // SAFETY: `cpu` came from a set of this size, so it is below `CPU_SETSIZE`.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    set
}

/// Best effort: a thread that ended meanwhile is simply not moved.
fn set(tid: libc::pid_t, cpus: &libc::cpu_set_t) {
    // SAFETY: `cpus` is an initialised set of the size given; the call only reads it.
    unsafe { libc::sched_setaffinity(tid, size_of::<libc::cpu_set_t>(), cpus) };
}

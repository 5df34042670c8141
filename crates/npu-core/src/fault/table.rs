//! The faults the exception callback recorded, per (device, stream id), and who watches each
//! stream for them.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::DeviceFault;
use crate::code::AclCode;

/// Called (on a runtime thread, inside its exception callback) when a fault is recorded for
/// the watched stream. It must not block or call ACL.
type Listener = Arc<dyn Fn() + Send + Sync>;

/// A stream's faults are claimed as its operations fail; this many are kept for a stream
/// nobody claims them for (a stream npu-rs did not create), so the table stays bounded.
const KEPT_PER_STREAM: usize = 16;

/// (device id, stream id).
type Key = (u32, u64);

#[derive(Default)]
pub(crate) struct FaultTable {
    streams: Mutex<HashMap<Key, StreamFaults>>,
    /// Each device's latest fault: in STOP mode it stopped the context, and the context then
    /// refuses work on every stream, not only on the one that faulted.
    latest: Mutex<HashMap<u32, DeviceFault>>,
    next_token: AtomicU64,
}

#[derive(Default)]
struct StreamFaults {
    recorded: VecDeque<Recorded>,
    /// The watch: its token, the watched stream's handle, its listener.
    listener: Option<(u64, usize, Listener)>,
}

struct Recorded {
    fault: DeviceFault,
    claimed: bool,
}

impl FaultTable {
    fn lock(&self) -> MutexGuard<'_, HashMap<Key, StreamFaults>> {
        lock(&self.streams)
    }

    /// The latest fault on `device`, if its code is `code`: what refused a submission with
    /// that code on a stream that had no fault of its own (a context a fault stopped).
    pub(crate) fn latest(&self, device: u32, code: AclCode) -> Option<DeviceFault> {
        lock(&self.latest)
            .get(&device)
            .filter(|fault| fault.code == code)
            .cloned()
    }

    /// Records a fault and tells the stream's watcher, outside the lock.
    pub(crate) fn record(&self, fault: DeviceFault) {
        let key = (fault.device_id, fault.stream_id);
        lock(&self.latest).insert(fault.device_id, fault.clone());
        let listener = {
            let mut streams = self.lock();
            let entry = streams.entry(key).or_default();
            if entry.recorded.len() == KEPT_PER_STREAM {
                entry.recorded.pop_front();
            }
            entry.recorded.push_back(Recorded {
                fault,
                claimed: false,
            });
            entry
                .listener
                .as_ref()
                .map(|(_, _, listener)| listener.clone())
        };
        if let Some(listener) = listener {
            listener();
        }
    }

    /// The fault behind a failure with `code` on a stream: the oldest one not claimed yet, or
    /// else the latest one claimed. Each task failure is reported to one operation (the
    /// oldest unclaimed fault goes to it), but a stream that a fault stopped fails all its
    /// later operations with the same code, and they all carry that fault.
    pub(crate) fn claim(&self, device: u32, stream: u64, code: AclCode) -> Option<DeviceFault> {
        let mut streams = self.lock();
        let recorded = &mut streams.get_mut(&(device, stream))?.recorded;
        let matching = |r: &&mut Recorded| r.fault.code == code;
        if let Some(unclaimed) = recorded.iter_mut().filter(matching).find(|r| !r.claimed) {
            unclaimed.claimed = true;
            return Some(unclaimed.fault.clone());
        }
        recorded
            .iter_mut()
            .rev()
            .find(|r| r.fault.code == code)
            .map(|r| r.fault.clone())
    }

    /// Forgets the faults of the stream `handle`, whose id is `stream`: it was just created or
    /// is being destroyed. The stream-state callback cannot ask which device the stream is on
    /// (see `callbacks::stream_id`), so a watched stream is recognised by its handle, and an
    /// unwatched one (a raw ACL stream) by its id on every device: at worst an unclaimed fault
    /// of a same-numbered raw stream of another device loses its detail, and no fault is ever
    /// attributed to the wrong stream.
    pub(crate) fn forget(&self, handle: usize, stream: u64) {
        self.lock().retain(|&(_, id), entry| {
            let ours = match &entry.listener {
                Some((_, watched, _)) => *watched == handle,
                None => true,
            };
            if id == stream && ours {
                entry.recorded.clear();
            }
            !entry.recorded.is_empty() || entry.listener.is_some()
        });
    }

    /// Calls `listener` whenever a fault is recorded for the stream `handle`, until the watch
    /// drops. A new watch starts with no faults: any recorded under its key belong to an
    /// earlier stream that had the same id.
    pub(crate) fn watch(
        &'static self,
        device: u32,
        stream: u64,
        handle: usize,
        listener: Listener,
    ) -> FaultWatch {
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        let key = (device, stream);
        let mut streams = self.lock();
        let entry = streams.entry(key).or_default();
        entry.recorded.clear();
        entry.listener = Some((token, handle, listener));
        drop(streams);
        FaultWatch {
            table: self,
            key,
            token,
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Watches one stream for faults (see `Runtime::watch_faults`); dropping it stops the calls.
///
/// What npu-stream's streams install to be told of their faults: made only by a hidden
/// runtime method, so it is not part of the documented API (the facade hides it too).
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use npu_core::Runtime;
///
/// let rt = Runtime::global()?;
/// let seen = Arc::new(AtomicUsize::new(0));
/// let counter = seen.clone();
/// // SAFETY: the closure only counts; no stream of npu-stream's has this id.
/// let watch = unsafe {
///     rt.watch_faults(0, 12345, std::ptr::null_mut(), move || {
///         counter.fetch_add(1, Ordering::Relaxed);
///     })
/// };
/// drop(watch); // no more calls
/// assert_eq!(seen.load(Ordering::Relaxed), 0);
/// # Ok::<(), npu_core::Error>(())
/// ```
#[must_use = "dropping a FaultWatch stops the calls at once"]
#[doc(hidden)]
pub struct FaultWatch {
    table: &'static FaultTable,
    key: Key,
    token: u64,
}

impl Drop for FaultWatch {
    fn drop(&mut self) {
        let mut streams = self.table.lock();
        if let Some(entry) = streams.get_mut(&self.key) {
            // A newer watch of the same stream id (a reused id) is not ours to remove.
            if entry
                .listener
                .as_ref()
                .is_some_and(|(token, _, _)| *token == self.token)
            {
                entry.listener = None;
            }
            if entry.listener.is_none() && entry.recorded.is_empty() {
                streams.remove(&self.key);
            }
        }
    }
}

impl std::fmt::Debug for FaultWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultWatch")
            .field("device", &self.key.0)
            .field("stream", &self.key.1)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fault(task_id: u32, code: i32) -> DeviceFault {
        DeviceFault {
            task_id,
            stream_id: 5,
            device_id: 1,
            thread_id: 0,
            code: AclCode(code),
            kind: None,
        }
    }

    fn table() -> &'static FaultTable {
        Box::leak(Box::default())
    }

    #[test]
    fn each_fault_goes_to_one_failure_then_the_latest_serves_the_rest() {
        let table = table();
        table.record(fault(1, 507015));
        table.record(fault(2, 507015));
        table.record(fault(3, 507013));
        let claim = |code| table.claim(1, 5, AclCode(code)).map(|f| f.task_id);
        assert_eq!(claim(507015), Some(1));
        assert_eq!(claim(507013), Some(3));
        assert_eq!(claim(507015), Some(2));
        assert_eq!(claim(507015), Some(2), "a stopped stream's later failures");
        assert_eq!(claim(100000), None, "no fault has that code");
        assert_eq!(table.claim(0, 5, AclCode(507015)), None, "another device");
        let latest = |device, code| table.latest(device, AclCode(code)).map(|f| f.task_id);
        assert_eq!(latest(1, 507013), Some(3), "the device's latest fault");
        assert_eq!(latest(1, 507015), None, "the latest fault has another code");
        assert_eq!(latest(0, 507013), None, "another device");
        table.record(DeviceFault {
            device_id: 2,
            ..fault(4, 507015)
        });
        table.forget(0xdead, 5);
        assert_eq!(claim(507015), None);
        assert!(
            table.lock().is_empty(),
            "nothing left of an unwatched stream"
        );
    }

    #[test]
    fn the_table_keeps_a_bounded_number_of_faults_per_stream() {
        let table = table();
        for task in 0..(KEPT_PER_STREAM as u32 + 4) {
            table.record(fault(task, 507015));
        }
        assert_eq!(table.lock()[&(1, 5)].recorded.len(), KEPT_PER_STREAM);
        assert_eq!(table.claim(1, 5, AclCode(507015)).unwrap().task_id, 4);
    }

    #[test]
    fn a_watch_hears_its_stream_until_dropped_and_a_newer_watch_survives_an_older_drop() {
        let table = table();
        let heard = Arc::new(AtomicU64::new(0));
        let listener = |heard: &Arc<AtomicU64>| -> Listener {
            let heard = heard.clone();
            Arc::new(move || {
                heard.fetch_add(1, Ordering::Relaxed);
            })
        };
        let old = table.watch(1, 5, 0xa, listener(&heard));
        let newer = table.watch(1, 5, 0xb, listener(&heard));
        drop(old);
        table.record(fault(1, 507015));
        assert_eq!(heard.load(Ordering::Relaxed), 1);
        table.forget(0xa, 5);
        assert!(
            table.claim(1, 5, AclCode(507015)).is_some(),
            "another stream's handle"
        );
        table.record(fault(3, 507015));
        table.forget(0xb, 5);
        assert!(
            table.claim(1, 5, AclCode(507015)).is_none(),
            "the watched stream's handle"
        );
        drop(newer);
        table.record(fault(2, 507015));
        assert_eq!(
            heard.load(Ordering::Relaxed),
            2,
            "only the record before the drop"
        );
    }
}

//! The callback worker's table of outstanding operations and what the threads around it do
//! with it: submitters register operations and take back those whose callback could not be
//! launched; the worker takes out those whose callbacks ran, settles the lost ones from their
//! events with the lock released, and destroys the taken-back events between two looks.
//! Written against `super::sync` and generic over the entries, so that the loom model
//! (`callback::model`) checks the very code the worker and its submitters run.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use super::sync::{Mutex, MutexGuard};

/// An operation a worker waits on: what the table needs of it.
pub(crate) trait Entry {
    /// The stream the operation runs on, handed to a look that settles its lost callbacks
    /// (which queries the stream's events with the table's lock released).
    type Stream: Clone;
    /// The operation's event, owned by the entry until the operation ends.
    type Event;
    /// A copy of the event's handle, valid while the event lives: queried by a look with the
    /// lock released, after the entry may have left the table.
    type Handle: Copy;
    /// What completes the operation, given back to a submitter that takes the entry back.
    type Completer;

    /// The key of the entry's stream: equal for the entries of one stream, and kept distinct
    /// from other streams' by the entry (which keeps its stream alive).
    fn stream_key(&self) -> usize;
    fn stream(&self) -> &Self::Stream;
    /// When the operation was registered: its callback is late a report timeout after.
    fn since(&self) -> Instant;
    fn handle(&self) -> Self::Handle;
    /// Splits an entry taken back by its submitter: its event, completer and stream.
    fn into_parts(self) -> (Self::Event, Self::Completer, Self::Stream);
    /// Destroys an event taken back, never to be pooled: its last record is never waited on.
    fn bury(event: Self::Event);
}

/// The operations a worker waits on, by stream, so that a look at them costs the streams
/// rather than the operations in flight: each stream's operations complete in submission
/// order, so only its oldest can be the next to settle, and only its oldest says whether it
/// has waited long.
pub(crate) struct Table<E: Entry> {
    /// Each stream's operations by id, oldest first (ids grow with submission, and so do
    /// `OpInfo::seq` and `since` on one stream). Keyed by [`Entry::stream_key`]; a stream
    /// leaves with its last entry.
    pub(super) streams: HashMap<usize, BTreeMap<u64, E>>,
    /// The stream of each operation, for a callback that names only the operation's id.
    stream_of: HashMap<u64, usize>,
    /// The events of operations their submitters took back ([`Ledger::take_back`]), which
    /// the worker thread destroys between two looks ([`Ledger::bury_taken_back`]): a look
    /// queries events through handles it copied out of the table, with the lock released
    /// (and wakers run) in between, and ACL forbids destroying an event another call uses.
    taken_back: Vec<E::Event>,
    /// How many entries the looks examined, for the tests that bound it.
    #[cfg(test)]
    pub(super) examined: usize,
}

impl<E: Entry> Default for Table<E> {
    fn default() -> Self {
        Table {
            streams: HashMap::new(),
            stream_of: HashMap::new(),
            taken_back: Vec::new(),
            #[cfg(test)]
            examined: 0,
        }
    }
}

impl<E: Entry> Drop for Table<E> {
    /// Events taken back are destroyed, never pooled, even by a table the worker thread did
    /// not empty (one it unwound out of): their last records are never waited on.
    fn drop(&mut self) {
        self.taken_back.drain(..).for_each(E::bury);
    }
}

impl<E: Entry> Table<E> {
    pub(super) fn insert(&mut self, id: u64, entry: E) {
        let stream = entry.stream_key();
        self.stream_of.insert(id, stream);
        self.streams.entry(stream).or_default().insert(id, entry);
    }

    pub(super) fn remove(&mut self, id: u64) -> Option<E> {
        let stream = self.stream_of.remove(&id)?;
        let ops = self.streams.get_mut(&stream)?;
        let entry = ops.remove(&id);
        if ops.is_empty() {
            self.streams.remove(&stream);
        }
        entry
    }

    pub(super) fn is_empty(&self) -> bool {
        self.stream_of.is_empty()
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.stream_of.len()
    }

    fn examine(&mut self) {
        #[cfg(test)]
        {
            self.examined += 1;
        }
    }

    /// Takes out the oldest operations of the stream keyed `stream` for which `ends` holds,
    /// up to the first for which it does not: oldest first, with their ids.
    pub(super) fn take_leading(
        &mut self,
        stream: usize,
        mut ends: impl FnMut(&E) -> bool,
    ) -> Vec<(u64, E)> {
        let mut taken = Vec::new();
        let Some(ops) = self.streams.get_mut(&stream) else {
            return taken;
        };
        while let Some(oldest) = ops.first_entry() {
            #[cfg(test)]
            {
                self.examined += 1;
            }
            if !ends(oldest.get()) {
                break;
            }
            let (id, entry) = oldest.remove_entry();
            self.stream_of.remove(&id);
            taken.push((id, entry));
        }
        if ops.is_empty() {
            self.streams.remove(&stream);
        }
        taken
    }

    /// [`take_leading`](Table::take_leading) on every stream, in no order between streams.
    pub(super) fn take_leading_everywhere(
        &mut self,
        mut ends: impl FnMut(&E) -> bool,
    ) -> Vec<(u64, E)> {
        let streams: Vec<usize> = self.streams.keys().copied().collect();
        let taken = streams
            .into_iter()
            .flat_map(|stream| self.take_leading(stream, &mut ends));
        taken.collect()
    }

    /// The oldest operation of the stream keyed `stream`, if it has waited for its callback
    /// since `now - late` or longer: its id and event.
    fn stale_head(
        &mut self,
        stream: usize,
        now: Instant,
        late: Duration,
    ) -> Option<(u64, E::Handle)> {
        self.examine();
        let (&id, oldest) = self.streams.get(&stream)?.first_key_value()?;
        (now.duration_since(oldest.since()) >= late).then(|| (id, oldest.handle()))
    }

    /// Every stream whose oldest operation is stale (see [`stale_head`](Table::stale_head)),
    /// with its key, and that operation's id and event.
    pub(super) fn stale_heads(
        &mut self,
        now: Instant,
        late: Duration,
    ) -> Vec<(E::Stream, usize, u64, E::Handle)> {
        let streams: Vec<usize> = self.streams.keys().copied().collect();
        let heads = streams.into_iter().filter_map(|stream| {
            let (id, event) = self.stale_head(stream, now, late)?;
            let entry = &self.streams.get(&stream)?[&id];
            Some((entry.stream().clone(), stream, id, event))
        });
        heads.collect()
    }
}

/// A worker's table behind its lock, with the steps of the threads that share it.
pub(crate) struct Ledger<E: Entry>(Mutex<Table<E>>);

impl<E: Entry> Default for Ledger<E> {
    fn default() -> Self {
        Ledger(Mutex::new(Table::default()))
    }
}

impl<E: Entry> Ledger<E> {
    pub(super) fn lock(&self) -> MutexGuard<'_, Table<E>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes out the operations whose callbacks ran (`fired`, by id), in that order; an id
    /// whose entry is gone (taken back, or ended by an abort or a look) is skipped.
    pub(super) fn take_fired(&self, fired: &[u64]) -> Vec<(u64, E)> {
        let mut table = self.lock();
        let ran = fired.iter().filter_map(|&id| Some((id, table.remove(id)?)));
        ran.collect()
    }

    /// Takes back the operation `id`, whose callback could not be launched, for its submitter
    /// to drain the stream instead: its completer, if the entry is still there. Its event,
    /// recorded but never to be waited on, is not destroyed here but by the worker thread
    /// between two looks: a look may be about to query it through a handle it copied out of
    /// the table before this took it (`settle_lost_callbacks` settles the operation ahead
    /// first, which runs wakers), and a query of a destroyed event is a use after free on
    /// CANN (the simulator refuses it as an invalid handle).
    pub(super) fn take_back(&self, id: u64) -> Option<E::Completer> {
        // The entry's stream reference goes once the lock is released.
        let (_stream, completer) = {
            let mut table = self.lock();
            let (event, completer, stream) = table.remove(id)?.into_parts();
            table.taken_back.push(event);
            (stream, completer)
        };
        Some(completer)
    }

    /// Destroys the events of the operations taken back since the last call; made by the
    /// worker thread only, between its looks (see [`Table::taken_back`]).
    pub(super) fn bury_taken_back(&self) {
        let taken_back = std::mem::take(&mut self.lock().taken_back);
        taken_back.into_iter().for_each(E::bury);
    }

    /// Settles stale operations (waiting for their callback since `now - late` or longer)
    /// whose event has completed (`complete`, asked of the event's stream and handle): the
    /// device is done with their memory, so their completion need not wait for a callback
    /// that may never come. `settle` ends an operation from its event; `release` lets go of
    /// a stream the look held.
    ///
    /// In submission order, as every completion on a stream is: each stream's oldest
    /// operation first, then the next once it settled; the first found not done holds back
    /// the ones behind it, whose events may complete before the next query, and nothing
    /// behind it is looked at. So a look costs the streams, and the operations it settles.
    /// The queries run without the lock; an entry that settled meanwhile is simply gone. The
    /// event handles it copies out of the table stay valid until it returns although the lock
    /// is released and wakers run in between: only the worker thread destroys the events of
    /// entries, those taken back by their submitters between two looks
    /// ([`take_back`](Ledger::take_back)).
    pub(super) fn settle_lost_callbacks(
        &self,
        now: Instant,
        late: Duration,
        mut complete: impl FnMut(&E::Stream, E::Handle) -> bool,
        mut settle: impl FnMut(E),
        mut release: impl FnMut(E::Stream),
    ) {
        let heads = self.lock().stale_heads(now, late);
        for (stream, key, mut id, mut event) in heads {
            while complete(&stream, event) {
                let (entry, next) = {
                    let mut table = self.lock();
                    let entry = table.remove(id);
                    (entry, table.stale_head(key, now, late))
                };
                if let Some(entry) = entry {
                    settle(entry);
                }
                match next {
                    Some(head) => (id, event) = head,
                    None => break,
                }
            }
            release(stream);
        }
    }
}

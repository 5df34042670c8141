//! The repair queue of a pool's blocks after a memory error, and the one thread serving it:
//! the first block queued starts the thread, which takes blocks until it finds none left and
//! ends under the same lock, so a block queued meanwhile either is taken by it or starts the
//! next one. Written against `super::sync`, so that the loom model (`pool::model`) checks
//! the very code the pool runs.

use super::sync::{Mutex, MutexGuard};

/// Blocks waiting for `Source::repair`, and whether a repair thread is serving them.
pub(crate) struct Repairs<B> {
    inner: Mutex<Queue<B>>,
}

struct Queue<B> {
    blocks: Vec<B>,
    running: bool,
}

impl<B> Repairs<B> {
    pub(crate) fn new() -> Self {
        Repairs {
            inner: Mutex::new(Queue {
                blocks: Vec::new(),
                running: false,
            }),
        }
    }

    /// Queues `block` (`Cache::suspect`); if no repair thread serves the queue, starts one
    /// with `start`, whose thread runs [`serve`](Repairs::serve). One thread serves every
    /// block queued while it runs: failing operations come in bursts. If it cannot start,
    /// every block queued meanwhile, by this caller or others that found the queue served,
    /// is handed to `unserved` with the error (nothing else will take them), and the next
    /// block queued starts a thread again.
    pub(crate) fn suspect<E>(
        &self,
        block: B,
        start: impl FnOnce() -> Result<(), E>,
        mut unserved: impl FnMut(B, &E),
    ) {
        if !self.queue(block) {
            return;
        }
        if let Err(err) = start() {
            for block in self.unserved() {
                unserved(block, &err);
            }
        }
    }

    /// The repair thread (`Cache::repair_queued`): `repair`s the queued blocks until it finds
    /// none left, and ends under the lock a block is queued under, so a block queued
    /// meanwhile is either taken here or starts the next thread.
    pub(crate) fn serve(&self, mut repair: impl FnMut(B)) {
        while let Some(block) = self.next() {
            repair(block);
        }
    }

    /// Queues `block`; whether a repair thread must be started (none was serving the queue).
    fn queue(&self, block: B) -> bool {
        let mut queue = self.lock();
        queue.blocks.push(block);
        !std::mem::replace(&mut queue.running, true)
    }

    /// The repair thread's next block; with none left, the thread ends.
    fn next(&self) -> Option<B> {
        let mut queue = self.lock();
        let block = queue.blocks.pop();
        if block.is_none() {
            queue.running = false;
        }
        block
    }

    /// For a thread that could not start: the queue is left unserved, and its blocks are the
    /// caller's to settle.
    fn unserved(&self) -> Vec<B> {
        let mut queue = self.lock();
        queue.running = false;
        std::mem::take(&mut queue.blocks)
    }

    fn lock(&self) -> MutexGuard<'_, Queue<B>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

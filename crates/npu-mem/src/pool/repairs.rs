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

    /// Queues `block`; returns whether the caller must start a repair thread (none was
    /// serving the queue), which runs [`next`](Repairs::next) until it returns `None`.
    pub(crate) fn queue(&self, block: B) -> bool {
        let mut queue = self.lock();
        queue.blocks.push(block);
        !std::mem::replace(&mut queue.running, true)
    }

    /// The repair thread's next block; with none left, the thread ends (under the lock a
    /// block is queued under, so the next one queued starts a new thread).
    pub(crate) fn next(&self) -> Option<B> {
        let mut queue = self.lock();
        let block = queue.blocks.pop();
        if block.is_none() {
            queue.running = false;
        }
        block
    }

    /// For a caller told to start a thread that could not: the queue is left unserved (the
    /// next block queued starts a thread again), and its blocks are the caller's to settle.
    pub(crate) fn unserved(&self) -> Vec<B> {
        let mut queue = self.lock();
        queue.running = false;
        std::mem::take(&mut queue.blocks)
    }

    fn lock(&self) -> MutexGuard<'_, Queue<B>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

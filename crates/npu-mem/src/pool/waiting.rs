//! A request queued for capacity, and what happens when its waiter goes away.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, ready};

use npu_core::{Error, Result};
use tokio::sync::oneshot;

use super::Shared;
use super::state::Granted;
use crate::host_block::HostBlock;

/// Resolves to the grant the pool sends when the queued request reaches the front and fits.
///
/// Dropping it before then leaves the queue; if the grant was already on its way, it goes
/// back to the pool (the block to its free list, the room to the capacity), so cancelling
/// loses nothing.
pub(crate) struct Waiting {
    pub(crate) shared: Arc<Shared>,
    pub(crate) id: u64,
    pub(crate) reply: oneshot::Receiver<Granted<HostBlock>>,
    pub(crate) done: bool,
}

impl Future for Waiting {
    type Output = Result<Granted<HostBlock>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let received = ready!(Pin::new(&mut self.reply).poll(cx));
        self.done = true;
        Poll::Ready(received.map_err(|_| {
            Error::invalid(
                "PinnedPool::alloc",
                "self",
                "the pool dropped a queued request",
            )
        }))
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let id = self.id;
        if self.shared.update(|state, _| state.cancel(id)) {
            return;
        }
        // Already served: closing makes the grant either arrive now or stay with the sender,
        // which then returns it itself.
        self.reply.close();
        if let Ok(granted) = self.reply.try_recv() {
            self.shared.untaken(granted);
        }
    }
}

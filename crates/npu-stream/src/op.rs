//! The future every stream operation returns.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use npu_core::{Completion, Error, Result};

/// A device operation in flight. Resolves to the buffers it took once the device is done.
///
/// - **Cancel safety:** dropping an `Op` never cancels the device work, never frees or reuses
///   memory the device may still touch, and never blocks: the buffers it owns are dropped at
///   once, and each of them releases its memory only after this operation (and every other
///   one that used it) has completed. Dropping is therefore safe at any point, but the buffers
///   are gone: an `Op` is *not* cancel-safe in the sense of losing nothing.
/// - `std::mem::forget` on an `Op` only leaks the buffers it holds.
/// - Polling after it resolved yields an error rather than a panic.
///
/// `Op<T>` is `Send` when `T` is, and `Unpin`.
///
/// ```
/// # use npu_core::Device;
/// use npu_mem::DeviceBuffer;
/// use npu_stream::{Op, Stream};
///
/// # tokio_test::block_on(async {
/// # let ctx = Device::open(0)?.primary_context().clone();
/// # let stream = Stream::new(&ctx)?;
/// let op: Op<DeviceBuffer<u8>> = stream.memset(DeviceBuffer::new(&ctx, 64)?, 1); // submitted
/// let buffer = op.await?; // the buffer comes back once the device is done
/// assert_eq!(buffer.to_vec_blocking()?, [1; 64]);
/// drop(stream.memset(buffer, 2)); // dropping runs the memset all the same, then frees
/// # Ok::<(), npu_core::Error>(())
/// # })?;
/// # Ok::<(), npu_core::Error>(())
/// ```
#[must_use = "an Op does nothing when dropped except release its buffers once the device is done"]
pub struct Op<T> {
    completion: Completion,
    value: Option<T>,
    span: tracing::Span,
}

impl<T> Op<T> {
    pub(crate) fn new(completion: Completion, value: T, span: tracing::Span) -> Self {
        Op {
            completion,
            value: Some(value),
            span,
        }
    }

    /// Whether the device has finished (successfully or not).
    ///
    /// ```
    /// # use npu_core::Device;
    /// use npu_mem::DeviceBuffer;
    /// use npu_stream::Stream;
    ///
    /// # tokio_test::block_on(async {
    /// # let ctx = Device::open(1)?.primary_context().clone();
    /// # let stream = Stream::new(&ctx)?;
    /// npu_sim::control::hold(1).unwrap(); // npu-sim: nothing on device 1 starts until release
    /// let op = stream.memset(DeviceBuffer::<u8>::new(&ctx, 64)?, 0);
    /// assert!(!op.is_complete());
    /// npu_sim::control::release(1).unwrap();
    /// op.completion().wait().await?;
    /// assert!(op.is_complete());
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn is_complete(&self) -> bool {
        self.completion.is_complete()
    }

    /// The operation's completion, for waiting on it from elsewhere.
    ///
    /// ```
    /// # use npu_core::Device;
    /// use npu_mem::DeviceBuffer;
    /// use npu_stream::Stream;
    ///
    /// # tokio_test::block_on(async {
    /// # let ctx = Device::open(0)?.primary_context().clone();
    /// # let stream = Stream::new(&ctx)?;
    /// let op = stream.memset(DeviceBuffer::<u8>::new(&ctx, 64)?, 0);
    /// let done = op.completion().clone();
    /// std::thread::spawn(move || done.wait_blocking()).join().unwrap()?; // waited for elsewhere
    /// assert!(op.is_complete());
    /// let _buffer = op.await?;
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn completion(&self) -> &Completion {
        &self.completion
    }
}

// The value is never pinned: it is moved out only once the device is done with it.
impl<T> Unpin for Op<T> {}

impl<T> Future for Op<T> {
    type Output = Result<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Result<T>> {
        let this = &mut *self;
        let _entered = this.span.enter();
        let result = std::task::ready!(this.completion.poll_result(cx));
        let value = this.value.take();
        Poll::Ready(match (result, value) {
            (Ok(()), Some(value)) => Ok(value),
            (Err(err), _) => Err(err),
            (Ok(()), None) => Err(Error::invalid(
                "Op::poll",
                "self",
                "polled after it resolved",
            )),
        })
    }
}

impl<T> fmt::Debug for Op<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Op")
            .field("completion", &self.completion)
            .finish()
    }
}

//! The future every stream operation returns.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use npu_core::{Completion, Error, OpError, Wait};

/// A device operation in flight. Resolves to the buffers it took once the device is done, or
/// to an [`OpError`] that hands them back with the failure.
///
/// - **Buffers on error:** the operation completes only once the device will never touch its
///   memory again, so a failure, whether found before submission (a bad argument) or on the
///   device (a task fault), comes with the buffers (`OpError::value`), and the caller may
///   retry with them. `op.await?` still works in a function returning `npu_core::Result`.
///
/// - **Cancel safety:** dropping an `Op` never cancels the device work, never frees or reuses
///   memory the device may still touch, and never blocks: the value it owns (the buffers, an
///   `Arc` clone of a shared one) is kept until the operation completes, and dropped then, on
///   npu-rs's reaper thread. So an `Arc` shared with the operation stays shared until the device
///   is done (`Arc::get_mut` cannot succeed early), and each buffer releases its memory only
///   after every operation that used it has completed. Dropping is therefore safe at any
///   point, but the buffers are gone: an `Op` is *not* cancel-safe in the sense of losing
///   nothing.
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
///
/// A failure hands the buffers back, so a retry loop reuses them:
///
/// ```
/// # use npu_core::Device;
/// use npu_mem::DeviceBuffer;
/// # use npu_stream::Stream;
///
/// # tokio_test::block_on(async {
/// # let ctx = Device::open(1)?.primary_context().clone();
/// # let stream = Stream::new(&ctx)?;
/// npu_sim::control::fail_task(stream.as_raw(), 1, 507015).unwrap(); // the first attempt faults
/// let mut buffer = DeviceBuffer::<u8>::new(&ctx, 64)?;
/// let mut attempts = 0;
/// let buffer = loop {
///     attempts += 1;
///     match stream.memset(buffer, 7).await {
///         Ok(done) => break done,
///         Err(failed) if attempts < 3 => buffer = failed.value.expect("handed back"),
///         Err(failed) => return Err(failed.into()),
///     }
/// };
/// assert_eq!((attempts, buffer.to_vec_blocking()?), (2, vec![7; 64]));
/// # Ok::<(), npu_core::Error>(())
/// # })?;
/// # Ok::<(), npu_core::Error>(())
/// ```
#[must_use = "an Op does nothing when dropped except release its buffers once the device is done"]
pub struct Op<T: Send + 'static> {
    /// Waits with a registration of its own, so that tasks waiting for the same completion
    /// (or an event recorded after it) never displace this future's waker, and keeps a
    /// paused Tokio clock from jumping past the operation.
    wait: Wait,
    value: Option<T>,
    span: tracing::Span,
}

impl<T: Send + 'static> Op<T> {
    pub(crate) fn new(completion: Completion, value: T, span: tracing::Span) -> Self {
        Op {
            wait: completion.wait(),
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
        self.wait.completion().is_complete()
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
        self.wait.completion()
    }
}

// The value is never pinned: it is moved out only once the device is done with it.
impl<T: Send + 'static> Unpin for Op<T> {}

impl<T: Send + 'static> Future for Op<T> {
    type Output = Result<T, OpError<T>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        // The value is taken when the operation resolves, and only then: polled again, it
        // has told its outcome, and its span logs nothing more ("completed" once only).
        if this.value.is_none() {
            return Poll::Ready(Err(Self::resolved_already()));
        }
        // Entering, recording into and leaving the span run the subscriber, user code: a
        // panic there is contained (a poll from a destructor run by the thread's TLS
        // destructors, say, where tracing-subscriber's registry panics once its per-thread
        // state is gone, and unwinding aborts the process). A span whose entry panicked is
        // left again, as in a submission.
        let mut entered = None;
        if npu_core::contain::contained(crate::SEAL, || entered = Some(this.span.enter())) {
            npu_core::contain::contained(crate::SEAL, || {
                this.span
                    .with_subscriber(|(id, dispatch)| dispatch.exit(id));
            });
        }
        let polled = Pin::new(&mut this.wait).poll(cx);
        if let Poll::Ready(Err(err)) = &polled {
            npu_core::contain::contained(crate::SEAL, || {
                this.span.record("error", tracing::field::display(err));
            });
        }
        match &polled {
            Poll::Ready(Ok(())) => npu_core::log!(debug, "completed"),
            Poll::Ready(Err(err)) => npu_core::log!(debug, error = %err, "failed"),
            Poll::Pending => {}
        }
        npu_core::contain::contained(crate::SEAL, move || drop(entered));
        let Poll::Ready(result) = polled else {
            return Poll::Pending;
        };
        let value = this.value.take();
        Poll::Ready(match (result, value) {
            (Ok(()), Some(value)) => Ok(value),
            (Err(error), value) => Err(OpError { error, value }),
            (Ok(()), None) => Err(Self::resolved_already()),
        })
    }
}

impl<T: Send + 'static> Op<T> {
    fn resolved_already() -> OpError<T> {
        OpError::without_value(Error::invalid(
            "Op::poll",
            "self",
            "polled after it resolved",
        ))
    }
}

impl<T: Send + 'static> Drop for Op<T> {
    fn drop(&mut self) {
        // Closing the span runs the subscriber, user code, which may panic (from the
        // thread's TLS destructors, say, where unwinding aborts the process): contained.
        let span = std::mem::replace(&mut self.span, tracing::Span::none());
        npu_core::contain::contained(crate::SEAL, move || drop(span));
        if let Some(value) = self.value.take() {
            // A value with nothing to drop (a synchronize's `()`) need not travel.
            if !std::mem::needs_drop::<T>() || self.wait.completion().is_complete() {
                drop(value);
            } else {
                // SAFETY: the values operations own are buffers, views, `Arc`s of them,
                // kernel arguments, and npu-rs's own operation values (an `Event` or `Notify`
                // clone, a device pool's unclaimed block), whose drops do not block: npu-rs's
                // own make only immediate calls (destroy, free, `aclrtMemPoolFreeAsync`, the
                // last under its pool's drain lock, held across such calls alone) or hand the
                // release on, and implementations of the unsafe `Memory`,
                // `StableBuffer`, `KernelArg` and `KernelArgs` traits promise it (a launch's
                // value is its `KernelArgs`, which may be a struct of the caller's own).
                unsafe { self.wait.completion().drop_after(value) };
            }
        }
    }
}

impl<T: Send + 'static> fmt::Debug for Op<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Op")
            .field("completion", self.wait.completion())
            .finish()
    }
}

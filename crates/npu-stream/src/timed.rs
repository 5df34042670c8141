//! Timing one operation on the device with a pair of timing events.

use std::time::Duration;

use npu_core::OpError;

use crate::event::Event;
use crate::op::Op;
use crate::staged::as_callers;
use crate::stream::Stream;

impl Stream {
    /// Runs the operation `submit` queues on this stream between two timing events and
    /// resolves to its value and the device time between them (`aclrtEventElapsedTime`).
    ///
    /// `submit` is a closure rather than an [`Op`] because the start event must be recorded
    /// before the operation is queued. It should queue one operation on `self`; work it queues
    /// elsewhere is not timed. A failure to create either event or to record the start event
    /// happens before `submit` runs, so the error carries no value; any later failure hands the
    /// operation's value back. A record of either event refused by npu-rs (on a thread that is
    /// submitting to this stream already) is an `InvalidArgument` naming `Stream::timed` and
    /// `self`.
    ///
    /// Like any `async fn` (and unlike an [`Op`]), it does nothing until first polled: the
    /// events are created and `submit` runs then, so a future dropped unpolled submits nothing.
    ///
    /// Cancel safety: as for the operation itself; the events are released after it.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::DeviceBuffer;
    /// use npu_stream::Stream;
    ///
    /// # tokio_test::block_on(async {
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let stream = Stream::new(&ctx)?;
    /// let buffer = DeviceBuffer::<u8>::new(&ctx, 1 << 20)?;
    /// let (buffer, took) = stream.timed(|s| s.memset(buffer, 1)).await?;
    /// assert_eq!(buffer.to_vec_blocking()?[0], 1);
    /// assert!(took < std::time::Duration::from_secs(10), "{took:?}");
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub async fn timed<T: Send + 'static>(
        &self,
        submit: impl FnOnce(&Stream) -> Op<T>,
    ) -> Result<(T, Duration), OpError<T>> {
        // The events are `timed`'s own: a refusal of their records (on a thread submitting to
        // this stream already) is about the caller's stream, `self`, and names the method the
        // caller called rather than `Event::record` and its `stream`.
        let as_timed = |error| as_callers(error, "Stream::timed", |_| "self");
        let start = Event::new(self.context()).map_err(OpError::without_value)?;
        let end = Event::new(self.context()).map_err(OpError::without_value)?;
        start
            .record(self)
            .map_err(|error| OpError::without_value(as_timed(error)))?;
        let op = submit(self);
        let recorded = end.record(self).map_err(as_timed);
        let value = op.await?;
        let elapsed = match recorded {
            Ok(()) => match end.wait().await {
                Ok(()) => Event::elapsed(&start, &end),
                Err(error) => Err(error),
            },
            Err(error) => Err(error),
        };
        match elapsed {
            Ok(elapsed) => Ok((value, elapsed)),
            Err(error) => Err(OpError::new(error, value)),
        }
    }
}

//! Notifies: one-shot flags of a device that one stream sets and another waits for and
//! clears (aclrtCreateNotify, aclrtRecordNotify, aclrtWaitAndResetNotify).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use npu_core::ffi;
use npu_core::{Context, Result, acl_call_opt};

use crate::op::Op;
use crate::stream::Stream;

/// A notify: a flag on one device that a stream sets ([`Stream::record_notify`]) and another
/// stream waits for and clears ([`Stream::wait_notify`]). One record satisfies one wait; a
/// record made before the wait is queued satisfies it too.
///
/// Unlike an [`Event`](crate::Event), a notify carries no timestamp and cannot be awaited by
/// the host on its own: the host awaits the operations that set and wait for it. `Notify` is
/// `Send + Sync` and cheap to clone. Every operation on a notify owns a clone until it
/// completes, so the ACL notify is destroyed (`aclrtDestroyNotify`, which does not wait) only
/// once the last handle is gone and no queued task uses it.
///
/// ```
/// use npu_core::Device;
/// use npu_mem::DeviceBuffer;
/// use npu_stream::{Notify, Stream};
///
/// # tokio_test::block_on(async {
/// let ctx = Device::open(0)?.primary_context().clone();
/// let (producer, consumer) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
/// let ready = Notify::new(&ctx)?;
/// let waited = consumer.wait_notify(&ready); // the consumer's later work waits for `ready`
/// let filled = producer.memset(DeviceBuffer::<u8>::new(&ctx, 64)?, 7);
/// let recorded = producer.record_notify(&ready); // set once the memset is done
/// recorded.await?;
/// waited.await?; // the consumer has passed the wait
/// assert!(filled.is_complete());
/// # Ok::<(), npu_core::Error>(())
/// # })?;
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Clone)]
pub struct Notify {
    inner: Arc<NotifyInner>,
}

struct NotifyInner {
    context: Context,
    handle: ffi::aclrtNotify,
}

// SAFETY: an aclrtNotify is an opaque handle ACL lets any thread use; every call binds the
// notify's context (or the using stream's, of the same device) first.
unsafe impl Send for NotifyInner {}
// SAFETY: as above; the handle is never mutated.
unsafe impl Sync for NotifyInner {}
// The impls above vouch for `handle` alone: every other field is `Send + Sync` of its own, checked
// here, and a field added later breaks this pattern until it is checked too.
const _: fn(&NotifyInner) = |fields| {
    let NotifyInner { context, handle: _ } = fields;
    let _: [&(dyn Send + Sync); 1] = [context];
};

impl Notify {
    /// Creates a cleared notify on `context`'s device (`aclrtCreateNotify` with
    /// `ACL_NOTIFY_DEFAULT`: a notify the host records and waits for; a device-only notify
    /// could not be used by any stream operation here). An Atlas A2 has 8192 per device.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::Notify;
    ///
    /// let ctx = Device::open(1)?.primary_context().clone();
    /// let notify = Notify::new(&ctx)?;
    /// assert_eq!(notify.context().device_id(), 1);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn new(context: &Context) -> Result<Notify> {
        context.bind()?;
        let mut handle: ffi::aclrtNotify = std::ptr::null_mut();
        let flag = u64::from(ffi::ACL_NOTIFY_DEFAULT);
        // SAFETY: `handle` is a valid out-pointer; the context is bound on this thread.
        unsafe { acl_call_opt!(context.runtime(), aclrtCreateNotify(&mut handle, flag)) }?;
        Ok(Notify {
            inner: Arc::new(NotifyInner {
                context: context.clone(),
                handle,
            }),
        })
    }

    /// The notify's id, unique on its device (`aclrtGetNotifyId`).
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::Notify;
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let (a, b) = (Notify::new(&ctx)?, Notify::new(&ctx)?);
    /// assert_ne!(a.id()?, b.id()?);
    /// assert_eq!(a.clone().id()?, a.id()?);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn id(&self) -> Result<u32> {
        let mut id = 0;
        let handle = self.inner.handle;
        // SAFETY: the notify is alive (`self`) and `id` is a valid out-pointer.
        unsafe { acl_call_opt!(self.context().runtime(), aclrtGetNotifyId(handle, &mut id)) }?;
        Ok(id)
    }

    /// The context the notify was created in.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::Notify;
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// assert!(Notify::new(&ctx)?.context().same(&ctx));
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn context(&self) -> &Context {
        &self.inner.context
    }

    /// The raw handle. Using it is `unsafe`; `self` must outlive every use.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::Notify;
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let notify = Notify::new(&ctx)?;
    /// let (rt, mut id) = (ctx.runtime(), 0);
    /// // SAFETY: the notify is alive and `id` is a valid out-pointer.
    /// let code = unsafe { (rt.api().aclrtGetNotifyId.unwrap())(notify.as_raw(), &mut id) };
    /// rt.check("aclrtGetNotifyId", code)?;
    /// assert_eq!(id, notify.id()?);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn as_raw(&self) -> ffi::aclrtNotify {
        self.inner.handle
    }
}

impl Drop for NotifyInner {
    fn drop(&mut self) {
        let runtime = self.context.runtime();
        let result = self.context.bind().and_then(|()| {
            // SAFETY: the notify is ours and no queued task uses it any more: every operation
            // on it held a clone until it completed. Destroying does not wait for the device.
            unsafe { acl_call_opt!(runtime, aclrtDestroyNotify(self.handle)) }
        });
        if let Err(err) = result {
            npu_core::log!(warn, %err, "destroying a notify failed");
        }
    }
}

impl fmt::Debug for Notify {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Notify")
            .field("device", &self.inner.context.device_id())
            .finish_non_exhaustive()
    }
}

impl Stream {
    /// Sets `notify` once the work submitted to this stream before it is done
    /// (`aclrtRecordNotify`).
    ///
    /// Resolves (to a clone of the notify) once the stream has passed the record, that is,
    /// once the notify is set. The operation owns the clone until then.
    ///
    /// Cancel safety: not cancel-safe: dropping the future does not cancel the record; the
    /// notify is still set, and the clone is dropped after the record completes.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::{Notify, Stream};
    ///
    /// # tokio_test::block_on(async {
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let (a, b) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
    /// let notify = Notify::new(&ctx)?;
    /// a.record_notify(&notify).await?; // set before anyone waits ...
    /// b.wait_notify(&notify).await?; // ... satisfies the next wait at once
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn record_notify(&self, notify: &Notify) -> Op<Notify> {
        let api = "Stream::record_notify";
        self.submit(
            (api, "self"),
            "aclrtRecordNotify",
            0,
            notify.clone(),
            |_, _| {},
            |notify, stream| {
                self.check_notify(api, notify)?;
                let handle = notify.inner.handle;
                // SAFETY: notify and stream are alive; the stream's context is bound.
                unsafe {
                    acl_call_opt!(self.context().runtime(), aclrtRecordNotify(handle, stream))
                }
            },
        )
    }

    /// Makes this stream's later work wait until `notify` is set, then clears it
    /// (`aclrtWaitAndResetNotify`, without a timeout).
    ///
    /// Resolves (to a clone of the notify) once the stream has passed the wait: the notify was
    /// set and has been cleared. A notify that is never set keeps the stream waiting, and this
    /// future pending, until [`Stream::abort`] discards the wait (it then fails with
    /// [`Error::Aborted`](npu_core::Error::Aborted)); use [`wait_notify_timeout`](Stream::wait_notify_timeout) to bound
    /// the wait on the device instead.
    ///
    /// Cancel safety: not cancel-safe: dropping the future does not cancel the wait; the stream
    /// still waits, and the clone is dropped after the wait is over.
    ///
    /// ```
    /// # use npu_core::Device;
    /// use npu_stream::{Notify, Stream};
    ///
    /// # tokio_test::block_on(async {
    /// # let ctx = Device::open(0)?.primary_context().clone();
    /// let (a, b) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
    /// let notify = Notify::new(&ctx)?;
    /// let waited = b.wait_notify(&notify);
    /// assert!(!waited.is_complete(), "nobody set the notify yet");
    /// a.record_notify(&notify).await?;
    /// waited.await?;
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn wait_notify(&self, notify: &Notify) -> Op<Notify> {
        self.wait_notify_for("Stream::wait_notify", notify, Ok(0))
    }

    /// As [`wait_notify`](Stream::wait_notify), but the device gives up once `timeout` has
    /// passed since the wait began: the operation then fails with an error whose
    /// [`is_timeout`](npu_core::Error::is_timeout) is true (`ACL_ERROR_RT_WAIT_TIMEOUT`), the notify
    /// stays as it was, and the stream goes on with its later work (in
    /// [`FailureMode::Continue`](crate::FailureMode)).
    ///
    /// ACL counts the timeout in whole seconds, so it is rounded up to the next second; a zero
    /// timeout (which ACL reads as "for ever") or one above `u32::MAX` seconds is refused with
    /// [`Error::InvalidArgument`](npu_core::Error::InvalidArgument).
    ///
    /// Cancel safety: not cancel-safe, as for [`wait_notify`](Stream::wait_notify): dropping
    /// the future does not cancel the wait; the stream still waits (until the notify is set or
    /// the timeout passes), and the clone is dropped after the wait is over.
    ///
    /// ```
    /// # use npu_core::Device;
    /// use std::time::Duration;
    /// use npu_stream::{Notify, Stream};
    ///
    /// # tokio_test::block_on(async {
    /// # let ctx = Device::open(0)?.primary_context().clone();
    /// let stream = Stream::new(&ctx)?;
    /// let never_set = Notify::new(&ctx)?;
    /// let err = stream.wait_notify_timeout(&never_set, Duration::from_secs(1)).await.unwrap_err();
    /// assert!(err.is_timeout(), "{err}");
    /// let refused = stream.wait_notify_timeout(&never_set, Duration::ZERO).await.unwrap_err();
    /// assert!(refused.to_string().contains("`timeout`"), "{refused}");
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn wait_notify_timeout(&self, notify: &Notify, timeout: Duration) -> Op<Notify> {
        let api = "Stream::wait_notify_timeout";
        let seconds = super::timeout_seconds(api, timeout, u64::from(u32::MAX));
        self.wait_notify_for(api, notify, seconds)
    }

    /// Queues `aclrtWaitAndResetNotify` with a timeout in seconds (0: none), or fails the
    /// operation with the timeout's error before submitting anything.
    fn wait_notify_for(
        &self,
        api: &'static str,
        notify: &Notify,
        seconds: Result<u64>,
    ) -> Op<Notify> {
        self.submit(
            (api, "self"),
            "aclrtWaitAndResetNotify",
            0,
            notify.clone(),
            |_, _| {},
            |notify, stream| {
                let seconds = u32::try_from(seconds?).unwrap_or(u32::MAX);
                self.check_notify(api, notify)?;
                let handle = notify.inner.handle;
                // SAFETY: notify and stream are alive; the stream's context is bound.
                unsafe {
                    acl_call_opt!(
                        self.context().runtime(),
                        aclrtWaitAndResetNotify(handle, stream, seconds)
                    )
                }
            },
        )
    }

    /// A notify belongs to one device: only that device's streams may record or wait for it.
    fn check_notify(&self, api: &'static str, notify: &Notify) -> Result<()> {
        self.check_runtime(api, "notify", notify.context())?;
        self.check_device(api, "notify", notify.context())
    }
}

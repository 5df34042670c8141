//! The 64-bit word that value operations signal through, kept apart from the memory that
//! copies, memsets and kernels take.

use std::ffi::c_void;
use std::fmt;
use std::sync::Arc;

use npu_core::{Completion, Context, Error, OpError, Result};
use npu_mem::{DeviceBuffer, DeviceSlice, MemoryMut};

/// One 8-byte aligned `u64` of device memory that streams signal each other through with
/// [`Stream::write_value`](crate::Stream::write_value) and
/// [`Stream::wait_value`](crate::Stream::wait_value).
///
/// A value word is meant to be shared: one stream writes it while another waits on it, so the
/// value operations accept an `Arc<ValueWord>` as well as an owned one. That is why it is not
/// [`Memory`](npu_mem::Memory): a copy, memset or kernel on the word could run unordered with
/// a value write on another stream, which is a data race on the simulator (whose device
/// memory is host memory). Only the value operations touch it while it may be shared; its
/// current value is read back once it is owned again ([`read_blocking`](ValueWord::read_blocking)
/// takes `&mut self`, [`into_inner`](ValueWord::into_inner) hands the memory back), which no
/// queued value operation can be holding, since each owns its handle until the device is done.
///
/// ```
/// use std::sync::Arc;
/// use npu_core::Device;
/// use npu_stream::{Stream, ValueCondition, ValueWord};
///
/// # tokio_test::block_on(async {
/// let ctx = Device::open(0)?.primary_context().clone();
/// let (producer, consumer) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
/// let ready = Arc::new(ValueWord::new(&ctx, 0)?);
/// let waited = consumer.wait_value(ready.clone(), 1, ValueCondition::Equal);
/// producer.write_value(ready.clone(), 1).await?;
/// drop(waited.await?);
/// let mut ready = Arc::into_inner(ready).expect("every operation handed its clone back");
/// assert_eq!(ready.read_blocking()?, 1);
/// # Ok::<(), npu_core::Error>(())
/// # })?;
/// # Ok::<(), npu_core::Error>(())
/// ```
pub struct ValueWord<M = DeviceBuffer<u64>> {
    memory: M,
}

impl ValueWord {
    /// Allocates a word on `context`'s device holding `initial` (a blocking copy, as
    /// [`DeviceBuffer::from_host_blocking`] makes, refused where that is: with
    /// [`Error::InvalidArgument`] (argument `thread`) on npu-rs's own threads and under its
    /// locks, [`Error::Forked`] in a forked child).
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::ValueWord;
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// assert_eq!(ValueWord::new(&ctx, 7)?.read_blocking()?, 7);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn new(context: &Context, initial: u64) -> Result<Self> {
        npu_core::refuse_blocking(crate::SEAL, "aclrtMemcpy", "ValueWord::new")?;
        let memory = DeviceBuffer::from_host_blocking(context, &[initial])?;
        Ok(ValueWord { memory })
    }

    /// The word's current value (a blocking copy to the host). `&mut self` makes it ordered
    /// after every value operation on the word: none can be queued while the word is borrowed
    /// exclusively. Refused as [`DeviceBuffer::copy_to_host_blocking`] is: with
    /// [`Error::InvalidArgument`] (argument `thread`) on npu-rs's own threads and under its
    /// locks, where the copy may wait (on the simulator, whose synchronous copies wait for the
    /// device's running work) for work that thread would let finish; [`Error::Forked`] in a
    /// forked child.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::{Stream, ValueWord};
    ///
    /// # tokio_test::block_on(async {
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let stream = Stream::new(&ctx)?;
    /// let mut word = stream.write_value(ValueWord::new(&ctx, 0)?, 42).await?;
    /// assert_eq!(word.read_blocking()?, 42);
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn read_blocking(&mut self) -> Result<u64> {
        npu_core::refuse_blocking(crate::SEAL, "aclrtMemcpy", "ValueWord::read_blocking")?;
        let mut value = [0];
        self.memory.copy_to_host_blocking(&mut value)?;
        Ok(value[0])
    }
}

impl<M: DeviceSlice<Elem = u64> + MemoryMut> ValueWord<M> {
    /// Makes a word of memory the caller owns exclusively (a pooled buffer, a one-element
    /// view of a longer buffer): exactly one `u64`, 8-byte aligned as ACL requires. Fails,
    /// handing the memory back, otherwise.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{DeviceBuffer, Memory};
    /// use npu_stream::ValueWord;
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let word = ValueWord::from_memory(DeviceBuffer::<u64>::new(&ctx, 4)?.view(3..4)?)?;
    /// assert_eq!(word.into_inner().len(), 1);
    /// let err = ValueWord::from_memory(DeviceBuffer::<u64>::new(&ctx, 2)?).unwrap_err();
    /// assert!(err.to_string().contains("holds 2 words"), "{err}");
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn from_memory(memory: M) -> Result<Self, OpError<M>> {
        let problem = if memory.len() != 1 {
            Some(format!(
                "holds {} words; a value word is exactly one (view one with `view(i..i + 1)`)",
                memory.len()
            ))
        } else if !(memory.addr() as usize).is_multiple_of(8) {
            Some(format!(
                "{:p} is not 8-byte aligned, as ACL requires",
                memory.addr()
            ))
        } else {
            None
        };
        match problem {
            Some(rule) => Err(OpError::new(
                Error::invalid("ValueWord::from_memory", "memory", rule),
                memory,
            )),
            None => Ok(ValueWord { memory }),
        }
    }

    /// The context whose device holds the word.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::ValueWord;
    ///
    /// let ctx = Device::open(1)?.primary_context().clone();
    /// assert_eq!(ValueWord::new(&ctx, 0)?.context().device_id(), 1);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn context(&self) -> &Context {
        self.memory.context()
    }

    /// Hands the memory back, to copy or reuse as any other device memory.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::ValueWord;
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let buffer = ValueWord::new(&ctx, 5)?.into_inner();
    /// assert_eq!(buffer.to_vec_blocking()?, [5]);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn into_inner(self) -> M {
        self.memory
    }
}

impl<M: fmt::Debug> fmt::Debug for ValueWord<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ValueWord")
            .field("memory", &self.memory)
            .finish()
    }
}

/// What [`Stream::write_value`](crate::Stream::write_value) and
/// [`Stream::wait_value`](crate::Stream::wait_value) accept: a [`ValueWord`], owned or shared
/// through an `Arc`. Sealed: only those two handles can reach the word's memory.
///
/// ```
/// use std::sync::Arc;
/// use npu_stream::{AsValueWord, ValueWord};
///
/// fn accepted<W: AsValueWord>() {}
/// accepted::<ValueWord>();
/// accepted::<Arc<ValueWord>>();
/// ```
pub trait AsValueWord: sealed::Word + Send + 'static {}

impl<M: DeviceSlice<Elem = u64> + MemoryMut> AsValueWord for ValueWord<M> {}

impl<M: DeviceSlice<Elem = u64> + MemoryMut + Sync> AsValueWord for Arc<ValueWord<M>> {}

pub(crate) mod sealed {
    use super::*;

    /// The word's memory, for the value operations only.
    pub trait Word {
        fn context(&self) -> &Context;
        /// The address the device reads or writes: `from_memory` checked it is one aligned
        /// word, and owning `M` (a `MemoryMut`) makes it this word's alone.
        fn addr(&self) -> *mut c_void;
        fn record_use(&self, done: &Completion);
    }

    impl<M: DeviceSlice<Elem = u64> + MemoryMut> Word for ValueWord<M> {
        fn context(&self) -> &Context {
            self.memory.context()
        }

        fn addr(&self) -> *mut c_void {
            self.memory.addr().cast_mut()
        }

        fn record_use(&self, done: &Completion) {
            self.memory.record_use(done)
        }
    }

    impl<M: DeviceSlice<Elem = u64> + MemoryMut + Sync> Word for Arc<ValueWord<M>> {
        fn context(&self) -> &Context {
            self.memory.context()
        }

        fn addr(&self) -> *mut c_void {
            Word::addr(&**self)
        }

        fn record_use(&self, done: &Completion) {
            Word::record_use(&**self, done)
        }
    }
}

//! Stream memory operations: a 64-bit store to device memory, and a wait until a 64-bit word
//! of device memory satisfies a comparison (aclrtValueWrite, aclrtValueWait).

use npu_core::{Result, acl_call_opt, ffi};

use super::word::AsValueWord;
use crate::op::Op;
use crate::stream::Stream;

/// The comparison [`Stream::wait_value`] waits for, between the word in device memory `m` and
/// the operation's value `v` (ACL's `ACL_STREAM_WAIT_VALUE_*` flags).
///
/// ```
/// use npu_stream::ValueCondition;
///
/// assert!(ValueCondition::AtLeast.holds(5, 3));
/// assert!(ValueCondition::AtLeast.holds(1, u64::MAX), "wrap-around aware: 1 comes after MAX");
/// assert!(ValueCondition::Equal.holds(7, 7));
/// assert!(ValueCondition::AnyBitOf.holds(0b0110, 0b0100));
/// assert!(ValueCondition::NotAllBits.holds(0b01, 0b10), "bits 2.. are clear in both");
/// assert!(!ValueCondition::NotAllBits.holds(u64::MAX, 0));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ValueCondition {
    /// `(m - v) as i64 >= 0` (`ACL_STREAM_WAIT_VALUE_GEQ`): `m` has reached `v`, counting
    /// with wrap-around, so a counter that overflows still compares as later.
    AtLeast,
    /// `m == v` (`ACL_STREAM_WAIT_VALUE_EQ`).
    Equal,
    /// `m & v != 0` (`ACL_STREAM_WAIT_VALUE_AND`): `m` has one of `v`'s bits set.
    AnyBitOf,
    /// `!(m | v) != 0` (`ACL_STREAM_WAIT_VALUE_NOR`): some bit is clear in both.
    NotAllBits,
}

impl ValueCondition {
    /// Whether the word `memory` satisfies the condition for `value`, as the device decides.
    ///
    /// ```
    /// use npu_stream::ValueCondition;
    ///
    /// assert!(!ValueCondition::Equal.holds(1, 2));
    /// ```
    pub fn holds(self, memory: u64, value: u64) -> bool {
        match self {
            ValueCondition::AtLeast => memory.wrapping_sub(value) as i64 >= 0,
            ValueCondition::Equal => memory == value,
            ValueCondition::AnyBitOf => memory & value != 0,
            ValueCondition::NotAllBits => !(memory | value) != 0,
        }
    }

    fn flag(self) -> u32 {
        match self {
            ValueCondition::AtLeast => ffi::ACL_STREAM_WAIT_VALUE_GEQ,
            ValueCondition::Equal => ffi::ACL_STREAM_WAIT_VALUE_EQ,
            ValueCondition::AnyBitOf => ffi::ACL_STREAM_WAIT_VALUE_AND,
            ValueCondition::NotAllBits => ffi::ACL_STREAM_WAIT_VALUE_NOR,
        }
    }
}

impl Stream {
    /// Stores `value` into the value word `word` once the work submitted to this stream
    /// before it is done (`aclrtValueWrite`). `word` is a [`ValueWord`](crate::ValueWord) of
    /// the stream's device, owned or shared through an `Arc` with the streams that
    /// [wait](Stream::wait_value) for it.
    ///
    /// Resolves to `word` once the store is done.
    ///
    /// Cancel safety: not cancel-safe: dropping the future does not cancel the store; `word`
    /// is dropped after it.
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
    pub fn write_value<W: AsValueWord>(&self, word: W, value: u64) -> Op<W> {
        let api = "Stream::write_value";
        self.submit(
            (api, "self"),
            "aclrtValueWrite",
            8,
            word,
            |word, done| word.record_use(done),
            |word, stream| {
                let addr = self.check_word(api, word)?;
                // SAFETY: `addr` is one aligned word of device memory of this stream's device,
                // kept allocated until the store completes; flag 0 is the reserved value.
                unsafe {
                    acl_call_opt!(
                        self.context().runtime(),
                        aclrtValueWrite(addr, value, 0, stream)
                    )
                }
            },
        )
    }

    /// Makes this stream's later work wait until the 64-bit word `word` satisfies `condition`
    /// against `value` (`aclrtValueWait`). `word` is as for [`write_value`](Stream::write_value).
    ///
    /// Resolves to `word` once the stream has passed the wait, that is, once the device saw
    /// the word satisfy the condition. A word that never does keeps the stream waiting, and
    /// this future pending, until [`Stream::abort`] discards the wait (it then fails with
    /// [`Error::Aborted`](npu_core::Error::Aborted)).
    ///
    /// Cancel safety: not cancel-safe: dropping the future does not cancel the wait; `word`
    /// is dropped after it is over.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use npu_core::Device;
    /// use npu_stream::{Stream, ValueCondition, ValueWord};
    ///
    /// # tokio_test::block_on(async {
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let (producer, consumer) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
    /// let flag = Arc::new(ValueWord::new(&ctx, 0)?);
    /// let waited = consumer.wait_value(flag.clone(), 3, ValueCondition::AtLeast);
    /// producer.write_value(flag.clone(), 2).await?;
    /// assert!(!waited.is_complete(), "2 has not reached 3");
    /// producer.write_value(flag, 3).await?;
    /// waited.await?;
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn wait_value<W: AsValueWord>(
        &self,
        word: W,
        value: u64,
        condition: ValueCondition,
    ) -> Op<W> {
        let api = "Stream::wait_value";
        self.submit(
            (api, "self"),
            "aclrtValueWait",
            8,
            word,
            |word, done| word.record_use(done),
            |word, stream| {
                let addr = self.check_word(api, word)?;
                let flag = condition.flag();
                // SAFETY: `addr` is one aligned word of device memory of this stream's device,
                // kept allocated until the wait is over.
                unsafe {
                    acl_call_opt!(
                        self.context().runtime(),
                        aclrtValueWait(addr, value, flag, stream)
                    )
                }
            },
        )
    }

    /// Checks that `word` is on this stream's device; returns its address for the ACL call.
    fn check_word<W: AsValueWord>(
        &self,
        api: &'static str,
        word: &W,
    ) -> Result<*mut std::ffi::c_void> {
        self.check_runtime(api, "word", word.context())?;
        self.check_device(api, "word", word.context())?;
        Ok(word.addr())
    }
}

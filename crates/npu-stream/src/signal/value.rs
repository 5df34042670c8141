//! Stream memory operations: a 64-bit store to device memory, and a wait until a 64-bit word
//! of device memory satisfies a comparison (aclrtValueWrite, aclrtValueWait).

use npu_core::{Error, Result, acl_call_opt, ffi};
use npu_mem::DeviceSlice;

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
    /// Stores `value` into the 64-bit word `word` once the work submitted to this stream
    /// before it is done (`aclrtValueWrite`). `word` is device memory of the stream's device
    /// holding exactly one `u64` (a one-element [`DeviceBuffer`](npu_mem::DeviceBuffer), or a
    /// one-element view of a longer one), 8-byte aligned as ACL requires.
    ///
    /// Resolves to `word` once the store is done. The word is a signalling cell, usually
    /// shared (an `Arc`) with the stream that [waits](Stream::wait_value) for it, so writing
    /// needs only [`DeviceSlice`], not exclusive ownership: a single aligned 64-bit store is
    /// what the device makes of it, and host code never reads device memory directly.
    ///
    /// Cancel safety: not cancel-safe: dropping the future does not cancel the store; `word`
    /// is dropped after it.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::DeviceBuffer;
    /// use npu_stream::Stream;
    ///
    /// # tokio_test::block_on(async {
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let stream = Stream::new(&ctx)?;
    /// let word = stream.write_value(DeviceBuffer::<u64>::new(&ctx, 1)?, 42).await?;
    /// assert_eq!(word.to_vec_blocking()?, [42]);
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn write_value<D: DeviceSlice<Elem = u64>>(&self, word: D, value: u64) -> Op<D> {
        let api = "Stream::write_value";
        self.submit(
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
    /// [`Error::Aborted`]).
    ///
    /// Cancel safety: not cancel-safe: dropping the future does not cancel the wait; `word`
    /// is dropped after it is over.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use npu_core::Device;
    /// use npu_mem::DeviceBuffer;
    /// use npu_stream::{Stream, ValueCondition};
    ///
    /// # tokio_test::block_on(async {
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let (producer, consumer) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
    /// let flag = Arc::new(DeviceBuffer::<u64>::new(&ctx, 1)?); // zero-filled
    /// let waited = consumer.wait_value(flag.clone(), 3, ValueCondition::AtLeast);
    /// producer.write_value(flag.clone(), 2).await?;
    /// assert!(!waited.is_complete(), "2 has not reached 3");
    /// producer.write_value(flag, 3).await?;
    /// waited.await?;
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn wait_value<D: DeviceSlice<Elem = u64>>(
        &self,
        word: D,
        value: u64,
        condition: ValueCondition,
    ) -> Op<D> {
        let api = "Stream::wait_value";
        self.submit(
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

    /// Checks that `word` is one 8-byte aligned `u64` of this stream's device; returns its
    /// address for the ACL call.
    fn check_word<D: DeviceSlice<Elem = u64>>(
        &self,
        api: &'static str,
        word: &D,
    ) -> Result<*mut std::ffi::c_void> {
        self.check_runtime(api, "word", word.context())?;
        self.check_device(api, "word", word.context())?;
        if word.len() != 1 {
            let rule = format!(
                "holds {} words; a value operation takes exactly one (view one with `view(i..i + 1)`)",
                word.len()
            );
            return Err(Error::invalid(api, "word", rule));
        }
        let addr = word.addr();
        if addr as usize % 8 != 0 {
            let rule = format!("{addr:p} is not 8-byte aligned, as ACL requires");
            return Err(Error::invalid(api, "word", rule));
        }
        Ok(addr.cast_mut())
    }
}

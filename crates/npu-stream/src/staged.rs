//! The escape hatch for pageable host memory: copies staged through a pinned pool block.
//!
//! Safe async copies refuse pageable memory (a `Vec`, a slice): ACL would turn such a copy
//! into a blocking one. These methods make the extra host copy explicit instead: the data is
//! copied by the CPU into (or out of) a [`PinnedPool`] block, and the device copies to or from
//! that block asynchronously.

use npu_core::{Error, OpError};
use npu_mem::{DeviceSlice, MemoryMut, PinnedPool};

use crate::stream::Stream;

impl Stream {
    /// Copies pageable host data to device memory through a block of `pool`: `src` is copied
    /// into the block on this thread, then the block is copied to `dst` on the stream. The
    /// block returns to the pool once the device copy has completed. Resolves to `dst`.
    ///
    /// `src` and `dst` must have the same length; the block must fit the pool's capacity
    /// (waiting for one follows [`PinnedPool::alloc`]). An empty copy resolves at once. On
    /// failure `dst` comes back in the [`OpError`].
    ///
    /// Cancel safety: not cancel-safe. Dropping the future gives up `dst`; if the device
    /// copy was already submitted it still happens, and the block returns to the pool after
    /// it.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{DeviceBuffer, PinnedPool};
    /// use npu_stream::Stream;
    ///
    /// # tokio_test::block_on(async {
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let (stream, pool) = (Stream::new(&ctx)?, PinnedPool::new(&ctx));
    /// let pageable: Vec<u32> = (0..1000).collect();
    /// let device = stream
    ///     .copy_from_slice_staged(&pool, &pageable, DeviceBuffer::new(&ctx, 1000)?)
    ///     .await?;
    /// assert_eq!(device.to_vec_blocking()?, pageable);
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub async fn copy_from_slice_staged<D>(
        &self,
        pool: &PinnedPool,
        src: &[D::Elem],
        dst: D,
    ) -> Result<D, OpError<D>>
    where
        D: DeviceSlice + MemoryMut,
    {
        if src.len() != dst.len() {
            let rule = format!(
                "holds {} elements but the source has {}",
                dst.len(),
                src.len()
            );
            let error = Error::invalid("Stream::copy_from_slice_staged", "dst", rule);
            return Err(OpError::new(error, dst));
        }
        if src.is_empty() {
            return Ok(dst);
        }
        let mut staging = match pool.alloc::<D::Elem>(src.len()).await {
            Ok(staging) => staging,
            Err(error) => return Err(OpError::new(error, dst)),
        };
        staging.copy_from_slice(src);
        match self.copy_h2d(staging, dst).await {
            Ok((_staging, dst)) => Ok(dst),
            Err(failed) => Err(failed.map_value(|(_staging, dst)| dst)),
        }
    }

    /// Copies device memory into a new `Vec` through a block of `pool`: the device copies
    /// `src` into the block on the stream, then the block is copied into the `Vec` on this
    /// thread. Resolves to `(src, data)`.
    ///
    /// The block must fit the pool's capacity (waiting for one follows
    /// [`PinnedPool::alloc`]). An empty `src` resolves at once. On failure `src` comes back in
    /// the [`OpError`].
    ///
    /// Cancel safety: not cancel-safe. Dropping the future gives up `src`; if the device
    /// copy was already submitted it still happens, and the block returns to the pool after
    /// it.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{DeviceBuffer, PinnedPool};
    /// use npu_stream::Stream;
    ///
    /// # tokio_test::block_on(async {
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let (stream, pool) = (Stream::new(&ctx)?, PinnedPool::new(&ctx));
    /// let device = DeviceBuffer::from_host_blocking(&ctx, &[5u8; 300])?;
    /// let (_device, data) = stream.copy_to_vec_staged(&pool, device).await?;
    /// assert_eq!(data, vec![5u8; 300]);
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub async fn copy_to_vec_staged<S>(
        &self,
        pool: &PinnedPool,
        src: S,
    ) -> Result<(S, Vec<S::Elem>), OpError<S>>
    where
        S: DeviceSlice,
    {
        if src.is_empty() {
            return Ok((src, Vec::new()));
        }
        let staging = match pool.alloc::<S::Elem>(src.len()).await {
            Ok(staging) => staging,
            Err(error) => return Err(OpError::new(error, src)),
        };
        match self.copy_d2h(src, staging).await {
            Ok((src, staging)) => Ok((src, staging.to_vec())),
            Err(failed) => Err(failed.map_value(|(src, _staging)| src)),
        }
    }
}

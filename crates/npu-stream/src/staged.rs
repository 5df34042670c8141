//! The escape hatch for pageable host memory: copies staged through a pinned pool block.
//!
//! Safe async copies refuse pageable memory (a `Vec`, a slice): ACL would turn such a copy
//! into a blocking one. These methods make the extra host copy explicit instead: the data is
//! copied by the CPU into (or out of) a [`PinnedPool`] block, and the device copies to or from
//! that block asynchronously. [`Stream::upload`] and [`Stream::download`] do the same through
//! a pool the context's streams own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use npu_core::{Context, Error, OpError, Result};
use npu_mem::pool_cache::byte_size;
use npu_mem::{DeviceBuffer, DeviceSlice, MemoryMut, PinnedPool, Pod, Zeroable, bytes_of};

use crate::stream::Stream;

impl Stream {
    /// Copies pageable host data to device memory through a block of `pool`: `src` is copied
    /// into the block on this thread, then the block is copied to `dst` on the stream. The
    /// block returns to the pool once the device copy has completed. Resolves to `dst`.
    ///
    /// `src` and `dst` must have the same length; the block must fit the pool's capacity
    /// (waiting for one follows [`PinnedPool::alloc`]). The block holds bytes, so elements
    /// aligned beyond pinned memory's 64 bytes are staged too. An empty copy resolves at
    /// once. On failure `dst` comes back in the [`OpError`]. A bad argument is an
    /// [`Error::InvalidArgument`] of this method naming the caller's argument at fault (`dst`
    /// of another device, a `pool` too small for the block), not of the allocation or the
    /// device copy made on the caller's behalf.
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
        const API: &str = "Stream::copy_from_slice_staged";
        // The block holds bytes: pinned memory is only 64-byte aligned, and device memory of
        // a more strictly aligned element type is still legal to fill.
        let bytes: &[u8] = bytemuck::cast_slice(src);
        let mut staging = match pool.alloc::<u8>(bytes.len()).await {
            Ok(staging) => staging,
            Err(error) => return Err(OpError::new(as_callers(error, API, |_| "pool"), dst)),
        };
        staging.copy_from_slice(bytes);
        match self.copy_h2d(staging, dst.into_bytes()).await {
            Ok((_staging, dst)) => Ok(dst.into_inner()),
            Err(failed) => {
                let (error, value) = failed.into_parts();
                Err(OpError {
                    error: as_callers(error, API, staging_side("src")),
                    value: value.map(|(_staging, dst)| dst.into_inner()),
                })
            }
        }
    }

    /// Copies device memory into a new `Vec` through a block of `pool`: the device copies
    /// `src` into the block on the stream, then the block is copied into the `Vec` on this
    /// thread. Resolves to `(src, data)`.
    ///
    /// The block must fit the pool's capacity (waiting for one follows
    /// [`PinnedPool::alloc`]). An empty `src` resolves at once. On failure `src` comes back in
    /// the [`OpError`]; a bad argument is an error of this method naming `src` or `pool`, as
    /// for [`copy_from_slice_staged`](Stream::copy_from_slice_staged).
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
        // `len()`, which `Memory`'s contract covers, not the implementation's own `is_empty`,
        // which it does not: one that said "empty" of a full buffer made a download of it empty.
        #[allow(
            clippy::len_zero,
            reason = "is_empty may be overridden; len() is contracted"
        )]
        let empty = src.len() == 0;
        if empty {
            return Ok((src, Vec::new()));
        }
        const API: &str = "Stream::copy_to_vec_staged";
        // Bytes, as for `copy_from_slice_staged`; the `Vec` has the element type's alignment.
        let staging = match pool.alloc::<u8>(bytes_of(crate::SEAL, &src)).await {
            Ok(staging) => staging,
            Err(error) => return Err(OpError::new(as_callers(error, API, |_| "pool"), src)),
        };
        match self.copy_d2h(src.into_bytes(), staging).await {
            Ok((src, staging)) => {
                let src = src.into_inner();
                let mut data = vec![<S::Elem as Zeroable>::zeroed(); src.len()];
                bytemuck::cast_slice_mut::<S::Elem, u8>(&mut data).copy_from_slice(&staging);
                Ok((src, data))
            }
            Err(failed) => {
                let (error, value) = failed.into_parts();
                Err(OpError {
                    error: as_callers(error, API, staging_side("dst")),
                    value: value.map(|(src, _staging)| src.into_inner()),
                })
            }
        }
    }
}

/// An argument error of a call an operation makes on its caller's behalf, as the caller's:
/// named after the API the caller called and, through `argument`, the argument of theirs the
/// inner one stands for. A staged copy's calls (the pool's allocation, a device buffer's, the
/// device copy between the staging block and the caller's memory) and `Stream::timed`'s event
/// records are such calls: to the caller the operation is one call, so an error naming
/// `PinnedPool::alloc`, `Stream::copy_h2d` or `Event::record`, and their `len`, `src` or
/// `stream`, would name an API they never called. Other errors (the runtime's, a device fault, an abort) name
/// the ACL function that failed, which is what happened, and are kept as they are.
pub(crate) fn as_callers(
    error: Error,
    api: &'static str,
    argument: impl FnOnce(&'static str) -> &'static str,
) -> Error {
    match error {
        Error::InvalidArgument {
            argument: inner,
            rule,
            ..
        } => Error::InvalidArgument {
            api,
            argument: argument(inner),
            rule,
        },
        other => other,
    }
}

/// The caller's argument behind an argument of the device copy between the staging block and
/// the caller's memory: the block's side (`src` when copying from it, `dst` when copying into
/// it) comes from the caller's `pool`; the other side is the caller's own argument.
fn staging_side(block: &'static str) -> impl FnOnce(&'static str) -> &'static str {
    move |inner| if inner == block { "pool" } else { inner }
}

/// The staging pools of [`Stream::upload`] and [`Stream::download`]: one per context, shared
/// by the context's streams and alive while any of them is, so its cached blocks serve every
/// stream of the context.
fn pool_for_context(context: &Context) -> Arc<PinnedPool> {
    static POOLS: OnceLock<Mutex<HashMap<u64, Weak<PinnedPool>>>> = OnceLock::new();
    let mut pools = POOLS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    pools.retain(|_, pool| pool.strong_count() > 0);
    if let Some(pool) = pools.get(&context.id()).and_then(Weak::upgrade) {
        return pool;
    }
    let pool = Arc::new(PinnedPool::new(context));
    pools.insert(context.id(), Arc::downgrade(&pool));
    pool
}

impl Stream {
    /// The pinned pool that [`upload`](Stream::upload) and [`download`](Stream::download)
    /// stage through: one per context, owned by its streams (for its stats, or to trim it).
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::Stream;
    ///
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let (a, b) = (Stream::new(&ctx)?, Stream::new(&ctx)?);
    /// assert!(a.staging_pool().context().same(&ctx));
    /// let block = a.staging_pool().try_alloc::<u8>(4096)?;
    /// assert_eq!(b.staging_pool().stats().allocated, 4096, "one pool per context");
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn staging_pool(&self) -> &PinnedPool {
        self.shared
            .staging
            .get_or_init(|| pool_for_context(self.context()))
    }

    /// Copies pageable host data into a new device buffer: the one-liner for getting data onto
    /// the device. The data is staged through the context's
    /// [`staging_pool`](Stream::staging_pool), as
    /// [`copy_from_slice_staged`](Stream::copy_from_slice_staged) does; the device buffer is
    /// allocated on this thread (`aclrtMalloc`).
    ///
    /// It is an `async fn` rather than an [`Op`](crate::Op): there is no buffer of the
    /// caller's to hand back on failure, so it fails with a plain [`Error`] (an empty
    /// `data`, a failed allocation, a device fault). Bad input (an empty `data`, an element
    /// type `T` of no size) is an [`Error::InvalidArgument`] of `Stream::upload`.
    ///
    /// Cancel safety: as for `copy_from_slice_staged`; dropping the future gives up the new
    /// buffer, which is released once the device is done with it.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_stream::Stream;
    ///
    /// # tokio_test::block_on(async {
    /// let stream = Stream::new(Device::open(0)?.primary_context())?;
    /// let device = stream.upload(&[1.5f32, 2.5, 3.5]).await?;
    /// assert_eq!(stream.download(device).await?, [1.5, 2.5, 3.5]);
    /// let err = stream.upload::<u8>(&[]).await.unwrap_err();
    /// assert!(err.to_string().contains("Stream::upload"), "{err}");
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub async fn upload<T: Pod>(&self, data: &[T]) -> Result<DeviceBuffer<T>> {
        const API: &str = "Stream::upload";
        // The allocation's own size check, in the caller's terms: the new buffer's length is
        // the caller's `data`, its `T` the caller's `T`. Past it, allocating fails only in ACL.
        byte_size::<T>(crate::SEAL, API, "data", data.len())?;
        let dst = DeviceBuffer::new(self.context(), data.len())?;
        let pool = self.staging_pool();
        match self.copy_from_slice_staged(pool, data, dst).await {
            Ok(dst) => Ok(dst),
            // The pool and the destination are the stream's own: an argument error of the
            // copy can only be about the data.
            Err(failed) => Err(as_callers(failed.error, API, |_| "data")),
        }
    }

    /// Copies device memory into a new `Vec` through the context's
    /// [`staging_pool`](Stream::staging_pool), as
    /// [`copy_to_vec_staged`](Stream::copy_to_vec_staged) does, consuming `src`. On failure
    /// `src` comes back in the [`OpError`]; a bad `src` (of another device) is an
    /// [`Error::InvalidArgument`] of `Stream::download`.
    ///
    /// Cancel safety: as for `copy_to_vec_staged`.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{DeviceBuffer, Memory};
    /// use npu_stream::Stream;
    ///
    /// # tokio_test::block_on(async {
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let stream = Stream::new(&ctx)?;
    /// let device = stream.memset(DeviceBuffer::<u8>::new(&ctx, 6)?, 9).await?;
    /// assert_eq!(stream.download(device.view(2..)?).await?, [9; 4]);
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub async fn download<S: DeviceSlice>(&self, src: S) -> Result<Vec<S::Elem>, OpError<S>> {
        let pool = self.staging_pool();
        match self.copy_to_vec_staged(pool, src).await {
            Ok((_src, data)) => Ok(data),
            // The staging pool is the stream's own: an argument error is about `src`.
            Err(OpError { error, value }) => Err(OpError {
                error: as_callers(error, "Stream::download", |_| "src"),
                value,
            }),
        }
    }
}

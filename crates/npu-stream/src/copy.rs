//! Copies and memsets: each takes the buffers it touches and returns them when done.

use std::cell::OnceCell;

use npu_core::ffi;
use npu_core::{Completion, Error, Result, acl_call};
use npu_mem::{DeviceSlice, HostSlice, Memory, MemoryMut, bytes_of};

use crate::op::Op;
use crate::stream::Stream;

/// ACL's limit on the rows of a 2D copy.
///
/// ```
/// # use npu_core::Device;
/// use npu_mem::{DeviceBuffer, PinnedBuffer};
/// use npu_stream::{Copy2d, MAX_2D_HEIGHT, Stream};
///
/// # tokio_test::block_on(async {
/// # let ctx = Device::open(0)?.primary_context().clone();
/// # let stream = Stream::new(&ctx)?;
/// let too_tall = Copy2d { width: 1, height: MAX_2D_HEIGHT + 1, src_pitch: 1, dst_pitch: 1 };
/// let (src, dst) = (PinnedBuffer::<u8>::new(&ctx, 1)?, DeviceBuffer::<u8>::new(&ctx, 1)?);
/// let err = stream.copy_2d_h2d(src, dst, too_tall).await.unwrap_err();
/// assert!(err.to_string().contains("exceeds ACL's limit of 5242880 rows"), "{err}");
/// # Ok::<(), npu_core::Error>(())
/// # })?;
/// # Ok::<(), npu_core::Error>(())
/// ```
pub const MAX_2D_HEIGHT: usize = 5 * 1024 * 1024;
/// ACL's limit on the width of a 2D copy, in bytes.
///
/// ```
/// # use npu_core::Device;
/// use npu_mem::{DeviceBuffer, PinnedBuffer};
/// use npu_stream::{Copy2d, MAX_2D_WIDTH_BYTES, Stream};
///
/// # tokio_test::block_on(async {
/// # let ctx = Device::open(0)?.primary_context().clone();
/// # let stream = Stream::new(&ctx)?;
/// let width = MAX_2D_WIDTH_BYTES / 4 + 1; // u32 elements: one too many bytes per row
/// let too_wide = Copy2d { width, height: 1, src_pitch: width, dst_pitch: width };
/// let (src, dst) = (PinnedBuffer::<u32>::new(&ctx, 1)?, DeviceBuffer::<u32>::new(&ctx, 1)?);
/// let err = stream.copy_2d_h2d(src, dst, too_wide).await.unwrap_err();
/// assert!(err.to_string().contains("bytes per row"), "{err}");
/// # Ok::<(), npu_core::Error>(())
/// # })?;
/// # Ok::<(), npu_core::Error>(())
/// ```
pub const MAX_2D_WIDTH_BYTES: usize = 5_000_000;

/// The shape of a pitched (2D) copy, in elements: `height` rows of `width` elements, rows
/// `src_pitch` elements apart in the source and `dst_pitch` apart in the destination.
///
/// A shape has no offsets: the copy starts at the first element of the source and of the
/// destination it is given. To start elsewhere (a column other than the first, a block of rows
/// further down), pass a [`view`](npu_mem::Memory::view) starting there, as below.
///
/// ```
/// # use npu_core::Device;
/// use npu_mem::{DeviceBuffer, Memory, PinnedBuffer};
/// use npu_stream::{Copy2d, Stream};
///
/// # tokio_test::block_on(async {
/// # let ctx = Device::open(0)?.primary_context().clone();
/// # let stream = Stream::new(&ctx)?;
/// // Column 1 of a 3×3 row-major matrix: 3 rows of 1 element, 3 elements apart in the source.
/// let column = Copy2d { width: 1, height: 3, src_pitch: 3, dst_pitch: 1 };
/// let matrix = PinnedBuffer::from_slice(&ctx, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0])?;
/// let dst = DeviceBuffer::new(&ctx, 3)?;
/// let (_matrix, dst) = stream.copy_2d_h2d(matrix.view(1..)?, dst, column).await?;
/// assert_eq!(dst.to_vec_blocking()?, [2.0, 5.0, 8.0]);
/// # Ok::<(), npu_core::Error>(())
/// # })?;
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Copy2d {
    /// Elements copied per row.
    pub width: usize,
    /// Number of rows.
    pub height: usize,
    /// Distance between row starts in the source, in elements.
    pub src_pitch: usize,
    /// Distance between row starts in the destination, in elements.
    pub dst_pitch: usize,
}

impl Copy2d {
    /// Checks the shape against ACL's limits and both buffers' lengths; returns the byte
    /// values for the ACL call: `(width, src_pitch, dst_pitch)`. A rule the shape breaks on
    /// its own is about the caller's argument `shape` (the field is named in the rule); one
    /// it breaks against a buffer is about that buffer, `src` or `dst`.
    fn check<T>(
        &self,
        api: &'static str,
        src_len: usize,
        dst_len: usize,
    ) -> Result<(usize, usize, usize)> {
        let size = size_of::<T>();
        if self.width > self.src_pitch {
            return Err(Error::invalid(
                api,
                "shape",
                format!(
                    "its width {} exceeds its source pitch {}",
                    self.width, self.src_pitch
                ),
            ));
        }
        if self.width > self.dst_pitch {
            return Err(Error::invalid(
                api,
                "shape",
                format!(
                    "its width {} exceeds its destination pitch {}",
                    self.width, self.dst_pitch
                ),
            ));
        }
        if self.height > MAX_2D_HEIGHT {
            return Err(Error::invalid(
                api,
                "shape",
                format!(
                    "its height {} exceeds ACL's limit of {MAX_2D_HEIGHT} rows",
                    self.height
                ),
            ));
        }
        let width_bytes = self
            .width
            .checked_mul(size)
            .filter(|&w| w <= MAX_2D_WIDTH_BYTES)
            .ok_or_else(|| {
                Error::invalid(
                    api,
                    "shape",
                    format!(
                        "its width of {} elements exceeds ACL's limit of {MAX_2D_WIDTH_BYTES} \
                         bytes per row",
                        self.width
                    ),
                )
            })?;
        for (pitch, len, argument) in [
            (self.src_pitch, src_len, "src"),
            (self.dst_pitch, dst_len, "dst"),
        ] {
            let needed = match self.height {
                0 => Some(0),
                rows => pitch
                    .checked_mul(rows - 1)
                    .and_then(|n| n.checked_add(self.width)),
            };
            match needed {
                Some(needed) if needed <= len => {}
                Some(needed) => {
                    let rule = format!("holds {len} elements but the copy spans {needed}");
                    return Err(Error::invalid(api, argument, rule));
                }
                None => return Err(Error::invalid(api, argument, "the copy's extent overflows")),
            }
        }
        // A one-row copy never multiplies its pitch by a row count above, so the pitch alone
        // may still be too large to express in bytes.
        let pitch_bytes = |pitch: usize, which| {
            pitch.checked_mul(size).ok_or_else(|| {
                Error::invalid(
                    api,
                    "shape",
                    format!("its {which} of {pitch} elements overflows as a byte count"),
                )
            })
        };
        let src_pitch = pitch_bytes(self.src_pitch, "src_pitch")?;
        let dst_pitch = pitch_bytes(self.dst_pitch, "dst_pitch")?;
        Ok((width_bytes, src_pitch, dst_pitch))
    }
}

impl Stream {
    /// Copies host memory the runtime knows is page-locked to device memory
    /// (`aclrtMemcpyAsync`, host to device). Both must have the same length.
    ///
    /// Resolves to `(src, dst)` once the device has finished.
    ///
    /// Cancel safety: not cancel-safe: dropping the future gives up both buffers (they are
    /// released only after the copy finishes); the copy itself still happens.
    ///
    /// ```
    /// use npu_core::Device;
    /// use npu_mem::{DeviceBuffer, PinnedBuffer};
    /// use npu_stream::Stream;
    ///
    /// # tokio_test::block_on(async {
    /// let ctx = Device::open(0)?.primary_context().clone();
    /// let stream = Stream::new(&ctx)?;
    /// let host = PinnedBuffer::from_slice(&ctx, &[1u32, 2, 3])?;
    /// let device = DeviceBuffer::<u32>::new(&ctx, 3)?;
    /// let (_host, device) = stream.copy_h2d(host, device).await?;
    /// let back = PinnedBuffer::<u32>::new(&ctx, 3)?;
    /// let (_device, back) = stream.copy_d2h(device, back).await?;
    /// assert_eq!(&back[..], &[1, 2, 3]);
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn copy_h2d<S, D>(&self, src: S, dst: D) -> Op<(S, D)>
    where
        S: HostSlice,
        D: DeviceSlice + MemoryMut<Elem = S::Elem>,
    {
        self.copy_linear("Stream::copy_h2d", ffi::ACL_MEMCPY_HOST_TO_DEVICE, src, dst)
    }

    /// Copies device memory to page-locked host memory (`aclrtMemcpyAsync`, device to host).
    ///
    /// Resolves to `(src, dst)`. Cancel safety as for [`copy_h2d`](Stream::copy_h2d).
    ///
    /// ```
    /// # use npu_core::Device;
    /// use npu_mem::{DeviceBuffer, PinnedBuffer};
    /// use npu_stream::Stream;
    ///
    /// # tokio_test::block_on(async {
    /// # let ctx = Device::open(0)?.primary_context().clone();
    /// # let stream = Stream::new(&ctx)?;
    /// let device = DeviceBuffer::from_host_blocking(&ctx, &[9u32; 4])?;
    /// let (_device, host) = stream.copy_d2h(device, PinnedBuffer::new(&ctx, 4)?).await?;
    /// assert_eq!(&host[..], &[9; 4]);
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn copy_d2h<S, D>(&self, src: S, dst: D) -> Op<(S, D)>
    where
        S: DeviceSlice,
        D: HostSlice + MemoryMut<Elem = S::Elem>,
    {
        self.copy_linear("Stream::copy_d2h", ffi::ACL_MEMCPY_DEVICE_TO_HOST, src, dst)
    }

    /// Copies between device buffers (`aclrtMemcpyAsync`, device to device), on one device or
    /// across devices once peer access is enabled from the stream's device.
    ///
    /// Resolves to `(src, dst)`. Cancel safety as for [`copy_h2d`](Stream::copy_h2d).
    ///
    /// ```
    /// # use npu_core::Device;
    /// use npu_mem::{DeviceBuffer, Memory};
    /// use npu_stream::Stream;
    ///
    /// # tokio_test::block_on(async {
    /// # let ctx = Device::open(0)?.primary_context().clone();
    /// # let stream = Stream::new(&ctx)?;
    /// let src = DeviceBuffer::from_host_blocking(&ctx, &[1i16, 2, 3, 4])?;
    /// let (_src, dst) = stream.copy_d2d(src.view(2..)?, DeviceBuffer::new(&ctx, 2)?).await?;
    /// assert_eq!(dst.to_vec_blocking()?, [3, 4]);
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn copy_d2d<S, D>(&self, src: S, dst: D) -> Op<(S, D)>
    where
        S: DeviceSlice,
        D: DeviceSlice + MemoryMut<Elem = S::Elem>,
    {
        self.copy_linear(
            "Stream::copy_d2d",
            ffi::ACL_MEMCPY_DEVICE_TO_DEVICE,
            src,
            dst,
        )
    }

    /// Copies between page-locked host buffers on the stream (`aclrtMemcpyAsync`, host to
    /// host). ACL supports this only on some deployments; elsewhere it fails with
    /// `ACL_ERROR_RT_FEATURE_NOT_SUPPORT`.
    ///
    /// Resolves to `(src, dst)`. Cancel safety as for [`copy_h2d`](Stream::copy_h2d).
    ///
    /// ```
    /// use npu_core::AclCode;
    /// # use npu_core::Device;
    /// use npu_mem::PinnedBuffer;
    /// use npu_stream::Stream;
    ///
    /// # tokio_test::block_on(async {
    /// # let ctx = Device::open(0)?.primary_context().clone();
    /// # let stream = Stream::new(&ctx)?;
    /// let src = PinnedBuffer::from_slice(&ctx, &[1u8; 16])?;
    /// let dst = PinnedBuffer::<u8>::new(&ctx, 16)?;
    /// match stream.copy_h2h(src, dst).await {
    ///     Ok((_src, dst)) => assert_eq!(&dst[..], &[1; 16]),
    ///     // npu-sim, like most deployments, has no asynchronous host-to-host copies.
    ///     Err(failed) => assert_eq!(failed.error.acl_code(), Some(AclCode(207000))),
    /// }
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn copy_h2h<S, D>(&self, src: S, dst: D) -> Op<(S, D)>
    where
        S: HostSlice,
        D: HostSlice + MemoryMut<Elem = S::Elem>,
    {
        self.copy_linear("Stream::copy_h2h", ffi::ACL_MEMCPY_HOST_TO_HOST, src, dst)
    }

    /// A pitched copy from page-locked host memory to device memory (`aclrtMemcpy2dAsync`).
    ///
    /// The shape is checked against both buffers and ACL's limits (width ≤ both pitches,
    /// height ≤ 5,242,880 rows, rows ≤ 5,000,000 bytes) before anything is submitted.
    /// Resolves to `(src, dst)`. Cancel safety as for [`copy_h2d`](Stream::copy_h2d).
    ///
    /// ```
    /// # use npu_core::Device;
    /// use npu_mem::{DeviceBuffer, PinnedBuffer};
    /// use npu_stream::{Copy2d, Stream};
    ///
    /// # tokio_test::block_on(async {
    /// # let ctx = Device::open(0)?.primary_context().clone();
    /// # let stream = Stream::new(&ctx)?;
    /// // The left 2×2 block of a 2×3 host matrix, packed densely on the device.
    /// let matrix = PinnedBuffer::from_slice(&ctx, &[1u16, 2, 3, 4, 5, 6])?;
    /// let block = Copy2d { width: 2, height: 2, src_pitch: 3, dst_pitch: 2 };
    /// let (matrix, dst) = stream.copy_2d_h2d(matrix, DeviceBuffer::new(&ctx, 4)?, block).await?;
    /// assert_eq!(dst.to_vec_blocking()?, [1, 2, 4, 5]);
    /// let wider = Copy2d { width: 4, ..block }; // rows wider than the source pitch
    /// assert!(stream.copy_2d_h2d(matrix, dst, wider).await.is_err());
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn copy_2d_h2d<S, D>(&self, src: S, dst: D, shape: Copy2d) -> Op<(S, D)>
    where
        S: HostSlice,
        D: DeviceSlice + MemoryMut<Elem = S::Elem>,
    {
        self.copy_pitched(
            "Stream::copy_2d_h2d",
            ffi::ACL_MEMCPY_HOST_TO_DEVICE,
            src,
            dst,
            shape,
        )
    }

    /// A pitched copy from device memory to page-locked host memory (`aclrtMemcpy2dAsync`).
    ///
    /// Checks as for [`copy_2d_h2d`](Stream::copy_2d_h2d). Resolves to `(src, dst)`. Cancel
    /// safety as for [`copy_h2d`](Stream::copy_h2d).
    ///
    /// ```
    /// # use npu_core::Device;
    /// use npu_mem::{DeviceBuffer, PinnedBuffer};
    /// use npu_stream::{Copy2d, Stream};
    ///
    /// # tokio_test::block_on(async {
    /// # let ctx = Device::open(0)?.primary_context().clone();
    /// # let stream = Stream::new(&ctx)?;
    /// // Two rows of 2 elements, stored 3 apart on the device, packed densely on the host.
    /// let padded = DeviceBuffer::from_host_blocking(&ctx, &[1u8, 2, 0, 3, 4, 0])?;
    /// let rows = Copy2d { width: 2, height: 2, src_pitch: 3, dst_pitch: 2 };
    /// let (_padded, host) = stream.copy_2d_d2h(padded, PinnedBuffer::new(&ctx, 4)?, rows).await?;
    /// assert_eq!(&host[..], &[1, 2, 3, 4]);
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn copy_2d_d2h<S, D>(&self, src: S, dst: D, shape: Copy2d) -> Op<(S, D)>
    where
        S: DeviceSlice,
        D: HostSlice + MemoryMut<Elem = S::Elem>,
    {
        self.copy_pitched(
            "Stream::copy_2d_d2h",
            ffi::ACL_MEMCPY_DEVICE_TO_HOST,
            src,
            dst,
            shape,
        )
    }

    /// A pitched copy between device buffers (`aclrtMemcpy2dAsync`; ACL supports it on
    /// Atlas A2/A3 and newer). Checks as for [`copy_2d_h2d`](Stream::copy_2d_h2d). Resolves
    /// to `(src, dst)`. Cancel safety as for [`copy_h2d`](Stream::copy_h2d).
    ///
    /// ```
    /// # use npu_core::Device;
    /// use npu_mem::DeviceBuffer;
    /// use npu_stream::{Copy2d, Stream};
    ///
    /// # tokio_test::block_on(async {
    /// # let ctx = Device::open(0)?.primary_context().clone();
    /// # let stream = Stream::new(&ctx)?;
    /// // Two dense rows of 2 elements, spread 4 elements apart.
    /// let dense = DeviceBuffer::from_host_blocking(&ctx, &[1u8, 2, 3, 4])?;
    /// let rows = Copy2d { width: 2, height: 2, src_pitch: 2, dst_pitch: 4 };
    /// let (_dense, padded) = stream.copy_2d_d2d(dense, DeviceBuffer::new(&ctx, 6)?, rows).await?;
    /// assert_eq!(padded.to_vec_blocking()?, [1, 2, 0, 0, 3, 4]);
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn copy_2d_d2d<S, D>(&self, src: S, dst: D, shape: Copy2d) -> Op<(S, D)>
    where
        S: DeviceSlice,
        D: DeviceSlice + MemoryMut<Elem = S::Elem>,
    {
        self.copy_pitched(
            "Stream::copy_2d_d2d",
            ffi::ACL_MEMCPY_DEVICE_TO_DEVICE,
            src,
            dst,
            shape,
        )
    }

    /// Sets every byte of `dst` to `value` (`aclrtMemsetAsync`). Resolves to `dst`.
    ///
    /// Cancel safety: not cancel-safe: dropping the future gives up `dst` (released after the
    /// memset finishes).
    ///
    /// ```
    /// # use npu_core::Device;
    /// use npu_mem::{DeviceBuffer, Memory};
    /// use npu_stream::Stream;
    ///
    /// # tokio_test::block_on(async {
    /// # let ctx = Device::open(0)?.primary_context().clone();
    /// # let stream = Stream::new(&ctx)?;
    /// let buffer = stream.memset(DeviceBuffer::<u32>::new(&ctx, 4)?, 0xff).await?;
    /// assert_eq!(buffer.to_vec_blocking()?, [u32::MAX; 4]); // every byte, not every element
    /// let tail = stream.memset(buffer.view(2..)?, 0).await?;
    /// assert_eq!(tail.into_inner().to_vec_blocking()?, [u32::MAX, u32::MAX, 0, 0]);
    /// # Ok::<(), npu_core::Error>(())
    /// # })?;
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn memset<D: DeviceSlice + MemoryMut>(&self, dst: D, value: u8) -> Op<D> {
        let bytes = bytes_of(crate::SEAL, &dst);
        self.submit(
            ("Stream::memset", "self"),
            "aclrtMemsetAsync",
            bytes,
            dst,
            |dst, done| dst.record_use(done),
            |dst, stream| {
                self.check_runtime("Stream::memset", "dst", dst.context())?;
                self.check_device("Stream::memset", "dst", dst.context())?;
                let ptr = dst.addr_mut();
                // SAFETY: `bytes` is `dst`'s `len()` elements, valid at `ptr` (`Memory`'s
                // contract), and `dst` stays valid until the memset completes (it recorded
                // this operation as a use, and the operation owns it until then).
                unsafe {
                    acl_call!(
                        self.context().runtime(),
                        aclrtMemsetAsync(ptr, bytes, i32::from(value), bytes, stream)
                    )
                }
            },
        )
    }

    fn copy_linear<S, D>(
        &self,
        api: &'static str,
        kind: ffi::aclrtMemcpyKind,
        src: S,
        dst: D,
    ) -> Op<(S, D)>
    where
        S: Memory,
        D: MemoryMut<Elem = S::Elem>,
    {
        // The check below makes it `dst`'s size too.
        let bytes = bytes_of(crate::SEAL, &src);
        let done = OnceCell::new();
        self.submit_described(
            (api, "self"),
            "aclrtMemcpyAsync",
            bytes,
            ("direction", direction(kind)),
            (src, dst),
            |value, completion| record_copy(kind, value, completion, &done),
            |(src, dst), stream| {
                self.check_pair(api, kind, src, dst)?;
                if src.len() != dst.len() {
                    let rule = format!(
                        "holds {} elements but the source has {}",
                        dst.len(),
                        src.len()
                    );
                    return Err(Error::invalid(api, "dst", rule));
                }
                let (d, s) = (dst.addr_mut(), src.addr());
                self.issue_copy(api, (src, dst), &done, || {
                    // SAFETY: `bytes` is `len()` elements of either buffer (their lengths were
                    // just checked equal), which `Memory`'s contract makes valid at `s` and
                    // `d`; both stay valid until the copy completes (both owners recorded
                    // this operation as a use, and the operation owns both until then).
                    unsafe {
                        acl_call!(
                            self.context().runtime(),
                            aclrtMemcpyAsync(d, bytes, s, bytes, kind, stream)
                        )
                    }
                })
            },
        )
    }

    fn copy_pitched<S, D>(
        &self,
        api: &'static str,
        kind: ffi::aclrtMemcpyKind,
        src: S,
        dst: D,
        shape: Copy2d,
    ) -> Op<(S, D)>
    where
        S: Memory,
        D: MemoryMut<Elem = S::Elem>,
    {
        let bytes = shape
            .width
            .saturating_mul(shape.height)
            .saturating_mul(size_of::<S::Elem>());
        let done = OnceCell::new();
        self.submit_described(
            (api, "self"),
            "aclrtMemcpy2dAsync",
            bytes,
            ("direction", direction(kind)),
            (src, dst),
            |value, completion| record_copy(kind, value, completion, &done),
            |(src, dst), stream| {
                self.check_pair(api, kind, src, dst)?;
                let (width, spitch, dpitch) = shape.check::<S::Elem>(api, src.len(), dst.len())?;
                let (d, s, height) = (dst.addr_mut(), src.addr(), shape.height);
                self.issue_copy(api, (src, dst), &done, || {
                    // SAFETY: `check` proved, in elements and without overflow, that
                    // `height` rows of `width` elements with a row every `src_pitch`
                    // (`dst_pitch`) elements end within `src`'s (`dst`'s) `len()` elements, which
                    // `Memory`'s contract makes valid at `s` (`d`); the byte counts passed are
                    // those extents times the element size, checked not to overflow. Both
                    // buffers stay valid until the copy completes (both owners recorded this
                    // operation as a use, and the operation owns both until then).
                    unsafe {
                        acl_call!(
                            self.context().runtime(),
                            aclrtMemcpy2dAsync(d, dpitch, s, spitch, width, height, kind, stream)
                        )
                    }
                })
            },
        )
    }

    /// Checks that both buffers suit the stream: of its runtime, and device memory on its
    /// device, except that one side of a device-to-device copy may be on a peer device (ACL
    /// then checks that peer access is enabled).
    fn check_pair(
        &self,
        api: &'static str,
        kind: ffi::aclrtMemcpyKind,
        src: &impl Memory,
        dst: &impl Memory,
    ) -> Result<()> {
        self.check_runtime(api, "src", src.context())?;
        self.check_runtime(api, "dst", dst.context())?;
        match kind {
            ffi::ACL_MEMCPY_HOST_TO_DEVICE => self.check_device(api, "dst", dst.context()),
            ffi::ACL_MEMCPY_DEVICE_TO_HOST => self.check_device(api, "src", src.context()),
            ffi::ACL_MEMCPY_DEVICE_TO_DEVICE => self
                .check_device(api, "src", src.context())
                .or_else(|_| self.check_device(api, "dst", dst.context()))
                .map_err(|_| {
                    Error::invalid(
                        api,
                        "self",
                        "is on neither buffer's device: a device-to-device copy runs on a \
                         stream of the source's or the destination's device",
                    )
                }),
            _ => Ok(()),
        }
    }

    /// Makes a copy's ACL call. A copy that reaches a peer device's memory also keeps that
    /// peer access enabled until it completes: the access is looked up under the same lock as
    /// the call, so another thread cannot enable it just for the call (ACL then accepts the
    /// copy) and disable it while the copy is queued. Its refusals name `api`, the copy the
    /// caller called.
    fn issue_copy<S: Memory, D: Memory>(
        &self,
        api: &'static str,
        (src, dst): (&S, &D),
        done: &OnceCell<Completion>,
        call: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let ours = self.context().device_id();
        let peer = [src.context(), dst.context()]
            .into_iter()
            .find(|context| context.device_id() != ours)
            .filter(|peer| peer.runtime().same_library(self.context().runtime()));
        let (Some(peer), Some(done)) = (peer, done.get()) else {
            return call();
        };
        let (result, access) = self.context().device().with_steady_peer_access(
            crate::SEAL,
            api,
            &peer.device(),
            call,
        )?;
        if let (Ok(()), Some(access)) = (&result, access) {
            // SAFETY: disabling peer access (when this is its last guard) does not wait for the
            // device, and the copy that used it has completed by then.
            unsafe { done.drop_after(access) };
        }
        result
    }
}

/// Records a copy as a user of both of its buffers, and keeps the completion of a
/// device-to-device copy for [`Stream::issue_copy`], which may tie a peer access to it.
fn record_copy<S: Memory, D: Memory>(
    kind: ffi::aclrtMemcpyKind,
    (src, dst): &(S, D),
    completion: &Completion,
    done: &OnceCell<Completion>,
) {
    src.record_use(completion);
    dst.record_use(completion);
    if kind == ffi::ACL_MEMCPY_DEVICE_TO_DEVICE {
        let _ = done.set(completion.clone());
    }
}

/// A copy kind as the operation's tracing span shows it.
fn direction(kind: ffi::aclrtMemcpyKind) -> &'static str {
    match kind {
        ffi::ACL_MEMCPY_HOST_TO_DEVICE => "h2d",
        ffi::ACL_MEMCPY_DEVICE_TO_HOST => "d2h",
        ffi::ACL_MEMCPY_DEVICE_TO_DEVICE => "d2d",
        ffi::ACL_MEMCPY_HOST_TO_HOST => "h2h",
        _ => "default",
    }
}

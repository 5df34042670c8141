//! What a kernel launch needs besides the function: its configuration and its packed
//! arguments.

use std::num::NonZeroU32;

use crate::error::{Error, Result};
use crate::ffi;

/// Which engine runs a kernel (`aclrtEngineType`, set with `ACL_RT_LAUNCH_KERNEL_ATTR_ENGINE_TYPE`).
///
/// It also decides how a trapping kernel is reported: `ACL_ERROR_RT_AICORE_EXCEPTION` (507015)
/// on the AIC engine, `ACL_ERROR_RT_VECTOR_CORE_EXCEPTION` (507035) on the AIV engine.
///
/// ```
/// use npu_core::Engine;
///
/// assert_eq!(Engine::Aiv.raw(), npu_core::ffi::ACL_RT_ENGINE_TYPE_AIV);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Engine {
    /// The AI Core's cube engine (`ACL_RT_ENGINE_TYPE_AIC`).
    Aic,
    /// The vector engine (`ACL_RT_ENGINE_TYPE_AIV`).
    Aiv,
}

impl Engine {
    /// The `aclrtEngineType` value.
    ///
    /// ```
    /// use npu_core::{Engine, ffi};
    ///
    /// assert_eq!(Engine::Aic.raw(), ffi::ACL_RT_ENGINE_TYPE_AIC);
    /// assert_ne!(Engine::Aic.raw(), Engine::Aiv.raw());
    /// ```
    pub fn raw(self) -> ffi::aclrtEngineType {
        match self {
            Engine::Aic => ffi::ACL_RT_ENGINE_TYPE_AIC,
            Engine::Aiv => ffi::ACL_RT_ENGINE_TYPE_AIV,
        }
    }
}

/// How to launch a kernel: the block count (never 0) and, optionally, the engine.
///
/// ```
/// use std::num::NonZeroU32;
/// use npu_core::{Engine, LaunchConfig};
///
/// let config = LaunchConfig::new(NonZeroU32::new(8).unwrap()).engine(Engine::Aiv);
/// assert_eq!(config.blocks().get(), 8);
/// assert_eq!(config.engine_type(), Some(Engine::Aiv));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[must_use = "a LaunchConfig is a value: a setter returns the changed copy"]
pub struct LaunchConfig {
    blocks: NonZeroU32,
    engine: Option<Engine>,
}

impl LaunchConfig {
    /// `blocks` blocks on the runtime's default engine. The type rules out 0 blocks, which
    /// ACL rejects.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use npu_core::LaunchConfig;
    ///
    /// let config = LaunchConfig::new(NonZeroU32::new(16).unwrap());
    /// assert_eq!(config.blocks().get(), 16);
    /// assert_eq!(config.engine_type(), None, "the runtime's default engine");
    /// ```
    pub fn new(blocks: NonZeroU32) -> Self {
        LaunchConfig {
            blocks,
            engine: None,
        }
    }

    /// Runs the kernel on `engine`.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use npu_core::{Engine, LaunchConfig};
    ///
    /// let config = LaunchConfig::new(NonZeroU32::MIN).engine(Engine::Aic);
    /// assert_eq!(config.engine_type(), Some(Engine::Aic));
    /// ```
    pub fn engine(mut self, engine: Engine) -> Self {
        self.engine = Some(engine);
        self
    }

    /// The block count.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use npu_core::LaunchConfig;
    ///
    /// assert_eq!(LaunchConfig::new(NonZeroU32::new(4).unwrap()).blocks().get(), 4);
    /// ```
    pub fn blocks(&self) -> NonZeroU32 {
        self.blocks
    }

    /// The engine, if one was chosen.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use npu_core::{Engine, LaunchConfig};
    ///
    /// let default = LaunchConfig::new(NonZeroU32::MIN);
    /// assert_eq!(default.engine_type(), None);
    /// assert_eq!(default.engine(Engine::Aiv).engine_type(), Some(Engine::Aiv));
    /// ```
    pub fn engine_type(&self) -> Option<Engine> {
        self.engine
    }

    /// The launch attribute for `aclrtLaunchKernelCfg`; none for a default launch. An
    /// `Option` rather than a `Vec` so a launch allocates nothing for its at most one
    /// attribute (`Option::as_mut_slice` gives ACL its array).
    pub(crate) fn attr(&self) -> Option<ffi::aclrtLaunchKernelAttr> {
        self.engine.map(|engine| ffi::aclrtLaunchKernelAttr {
            id: ffi::ACL_RT_LAUNCH_KERNEL_ATTR_ENGINE_TYPE,
            value: ffi::aclrtLaunchKernelAttrValue {
                engineType: engine.raw(),
            },
        })
    }
}

/// Packs kernel arguments into host memory the way a C compiler lays out a struct of the same
/// fields: each value at the next offset that is a multiple of its alignment, and the total
/// padded to the largest alignment (`sizeof` of that struct). The kernel reads the buffer as
/// its argument struct.
///
/// Limits (checked on every push, with a typed error naming `api`): at most
/// [`MAX_ARGS`](ArgPacker::MAX_ARGS) values, the most `aclrtKernelArgsAppend` accepts, and at
/// most [`MAX_BYTES`](ArgPacker::MAX_BYTES) bytes.
///
/// ```
/// use npu_core::ArgPacker;
///
/// let mut args = ArgPacker::new("example");
/// assert_eq!(args.push(&[1], 1)?, 0); // a u8 at 0
/// assert_eq!(args.push(&7u64.to_ne_bytes(), 8)?, 8); // a u64 at 8, after 7 bytes of padding
/// assert_eq!(args.push(&2.5f32.to_ne_bytes(), 4)?, 16); // an f32 at 16
/// assert_eq!(args.count(), 3);
/// assert_eq!(args.into_bytes().len(), 24); // padded to 8, like the C struct
/// # Ok::<(), npu_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct ArgPacker {
    api: &'static str,
    bytes: Vec<u8>,
    count: usize,
    align: usize,
}

impl ArgPacker {
    /// The most values one launch may take: ACL's limit for `aclrtKernelArgsAppend`.
    ///
    /// ```
    /// use npu_core::ArgPacker;
    ///
    /// let mut args = ArgPacker::new("example");
    /// for _ in 0..ArgPacker::MAX_ARGS {
    ///     args.push(&[0], 1)?;
    /// }
    /// assert!(args.push(&[0], 1).is_err(), "one argument too many");
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub const MAX_ARGS: usize = 128;
    /// The most bytes of packed arguments npu-rs accepts. This is npu-rs's own bound, not a
    /// documented ACL limit (the reference records none for host-packed arguments); a lower
    /// limit of the device is reported by ACL at launch.
    ///
    /// ```
    /// use npu_core::ArgPacker;
    ///
    /// let mut args = ArgPacker::new("example");
    /// args.push(&vec![0; ArgPacker::MAX_BYTES], 1)?;
    /// assert!(args.push(&[0], 1).is_err(), "one byte too many");
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub const MAX_BYTES: usize = 64 * 1024;
    /// The largest alignment a value may ask for.
    ///
    /// ```
    /// use npu_core::ArgPacker;
    ///
    /// let mut args = ArgPacker::new("example");
    /// assert_eq!(args.push(&[1], ArgPacker::MAX_ALIGN)?, 0);
    /// assert!(args.push(&[1], 2 * ArgPacker::MAX_ALIGN).is_err());
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub const MAX_ALIGN: usize = 4096;

    /// An empty argument buffer; errors will name `api`.
    ///
    /// ```
    /// use npu_core::ArgPacker;
    ///
    /// let mut args = ArgPacker::new("my_kernel");
    /// let err = args.push(&[0; 3], 3).unwrap_err(); // 3 is not a power of two
    /// assert!(err.to_string().starts_with("my_kernel: invalid argument `args`"), "{err}");
    /// ```
    pub fn new(api: &'static str) -> Self {
        ArgPacker {
            api,
            bytes: Vec::new(),
            count: 0,
            align: 1,
        }
    }

    /// Appends `value` at the next multiple of `align` (a power of two, at most
    /// [`MAX_ALIGN`](ArgPacker::MAX_ALIGN)); returns its offset.
    ///
    /// ```
    /// use npu_core::ArgPacker;
    ///
    /// // struct { uint16_t tag; float *x; } on a 64-bit host
    /// let mut args = ArgPacker::new("example");
    /// assert_eq!(args.push(&7u16.to_ne_bytes(), 2)?, 0);
    /// assert_eq!(args.push(&0x1000usize.to_ne_bytes(), 8)?, 8); // after 6 bytes of padding
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn push(&mut self, value: &[u8], align: usize) -> Result<usize> {
        let index = self.count;
        if !align.is_power_of_two() || align > Self::MAX_ALIGN {
            return Err(Error::invalid(
                self.api,
                "args",
                format!(
                    "argument {index}: alignment {align} is not a power of two up to {}",
                    Self::MAX_ALIGN
                ),
            ));
        }
        if index == Self::MAX_ARGS {
            return Err(Error::invalid(
                self.api,
                "args",
                format!("a launch takes at most {} arguments", Self::MAX_ARGS),
            ));
        }
        let offset = self.bytes.len().next_multiple_of(align);
        let end = offset
            .checked_add(value.len())
            .map(|end| end.next_multiple_of(self.align.max(align)))
            .filter(|&padded| padded <= Self::MAX_BYTES);
        if end.is_none() {
            return Err(Error::invalid(
                self.api,
                "args",
                format!(
                    "argument {index} ({} bytes at offset {offset}) takes the arguments past {} bytes",
                    value.len(),
                    Self::MAX_BYTES
                ),
            ));
        }
        self.bytes.resize(offset, 0);
        self.bytes.extend_from_slice(value);
        self.count += 1;
        self.align = self.align.max(align);
        Ok(offset)
    }

    /// How many values were pushed.
    ///
    /// ```
    /// use npu_core::ArgPacker;
    ///
    /// let mut args = ArgPacker::new("example");
    /// args.push(&1u32.to_ne_bytes(), 4)?;
    /// args.push(&2u32.to_ne_bytes(), 4)?;
    /// assert_eq!(args.count(), 2);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn count(&self) -> usize {
        self.count
    }

    /// The packed arguments, padded to the largest alignment pushed.
    ///
    /// ```
    /// use npu_core::ArgPacker;
    ///
    /// let mut args = ArgPacker::new("example");
    /// args.push(&1u32.to_ne_bytes(), 4)?;
    /// args.push(&[9], 1)?;
    /// let bytes = args.into_bytes();
    /// assert_eq!(bytes.len(), 8, "padded to the u32's alignment, like sizeof in C");
    /// assert_eq!(bytes[4], 9);
    /// # Ok::<(), npu_core::Error>(())
    /// ```
    pub fn into_bytes(mut self) -> Vec<u8> {
        let len = self.bytes.len().next_multiple_of(self.align);
        self.bytes.resize(len, 0);
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_laid_out_like_a_c_struct() {
        let mut args = ArgPacker::new("test");
        assert_eq!(args.push(&[1, 2], 2).unwrap(), 0);
        assert_eq!(args.push(&[3], 1).unwrap(), 2);
        assert_eq!(args.push(&[4; 4], 4).unwrap(), 4);
        assert_eq!(args.into_bytes(), [1, 2, 3, 0, 4, 4, 4, 4]);
        assert!(ArgPacker::new("test").into_bytes().is_empty());
    }

    #[test]
    fn limits_are_typed_errors_naming_the_api() {
        let mut args = ArgPacker::new("Stream::launch");
        let err = args.push(&[0; 3], 3).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("Stream::launch: invalid argument `args`")
        );
        assert!(args.push(&vec![0; ArgPacker::MAX_BYTES + 1], 1).is_err());
        assert_eq!(args.count(), 0, "rejected values are not kept");
        for _ in 0..ArgPacker::MAX_ARGS {
            args.push(&[0], 1).unwrap();
        }
        let err = args.push(&[0], 1).unwrap_err();
        assert!(err.to_string().contains("at most 128 arguments"), "{err}");
    }

    #[test]
    fn trailing_padding_counts_against_the_size_limit() {
        let mut args = ArgPacker::new("test");
        args.push(&[0; 8], 8).unwrap();
        // 8 + (MAX - 9) = MAX - 1 bytes, padded to 8: MAX, which still fits ...
        args.push(&vec![0; ArgPacker::MAX_BYTES - 9], 1).unwrap();
        // ... but one more byte would pad past it.
        assert!(args.push(&[0; 2], 1).is_err());
        assert_eq!(args.into_bytes().len(), ArgPacker::MAX_BYTES);
    }
}

//! aclrtReduceAsync's arithmetic: `dst[i] = op(dst[i], src[i])` element by element, for the
//! data types an Atlas A2's SDMA engine reduces (int8, int16, int32, fp16, fp32, bf16).
//! Integers wrap; fp16 and bf16 are computed in f32 and rounded back to nearest, ties to even;
//! MAX and MIN of a NaN and a number give the number (IEEE maxNum / minNum).

use npu_sys::*;

/// The operation of a reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reduction {
    Sum,
    Max,
    Min,
}

/// An element type a reduction supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Element {
    I8,
    I16,
    I32,
    F16,
    F32,
    Bf16,
}

impl Element {
    /// The element type of an `aclDataType` an Atlas A2 reduces, if it is one.
    pub(crate) fn of(data_type: aclDataType) -> Option<Self> {
        Some(match data_type {
            ACL_INT8 => Self::I8,
            ACL_INT16 => Self::I16,
            ACL_INT32 => Self::I32,
            ACL_FLOAT16 => Self::F16,
            ACL_FLOAT => Self::F32,
            ACL_BF16 => Self::Bf16,
            _ => return None,
        })
    }

    /// Bytes per element.
    pub(crate) fn size(self) -> usize {
        match self {
            Self::I8 => 1,
            Self::I16 | Self::F16 | Self::Bf16 => 2,
            Self::I32 | Self::F32 => 4,
        }
    }
}

/// A 16-bit float format's conversions to and from f32.
type Conversions = (fn(u16) -> f32, fn(f32) -> u16);

fn int(op: Reduction, a: i64, b: i64) -> i64 {
    match op {
        Reduction::Sum => a.wrapping_add(b),
        Reduction::Max => a.max(b),
        Reduction::Min => a.min(b),
    }
}

fn float(op: Reduction, a: f32, b: f32) -> f32 {
    match op {
        Reduction::Sum => a + b,
        Reduction::Max => a.max(b),
        Reduction::Min => a.min(b),
    }
}

/// Reduces `len` bytes of `src` into `dst` (a whole number of elements).
///
/// # Safety
/// `dst` must be valid for reads and writes and `src` for reads of `len` bytes; they may
/// overlap only exactly (the same range).
pub(crate) unsafe fn reduce(
    op: Reduction,
    element: Element,
    dst: *mut u8,
    src: *const u8,
    len: usize,
) {
    let size = element.size();
    for at in (0..len / size).map(|i| i * size) {
        // SAFETY: `at + size <= len`, inside both ranges (the caller's contract); elements may
        // be unaligned, hence the unaligned accesses.
        unsafe {
            let (d, s) = (dst.add(at), src.add(at));
            match element {
                Element::I8 => {
                    let r = int(
                        op,
                        i64::from(d.cast::<i8>().read()),
                        i64::from(s.cast::<i8>().read()),
                    );
                    d.cast::<i8>().write(r as i8);
                }
                Element::I16 => {
                    let (a, b) = (
                        d.cast::<i16>().read_unaligned(),
                        s.cast::<i16>().read_unaligned(),
                    );
                    d.cast::<i16>()
                        .write_unaligned(int(op, a.into(), b.into()) as i16);
                }
                Element::I32 => {
                    let (a, b) = (
                        d.cast::<i32>().read_unaligned(),
                        s.cast::<i32>().read_unaligned(),
                    );
                    d.cast::<i32>()
                        .write_unaligned(int(op, a.into(), b.into()) as i32);
                }
                Element::F32 => {
                    let (a, b) = (
                        d.cast::<f32>().read_unaligned(),
                        s.cast::<f32>().read_unaligned(),
                    );
                    d.cast::<f32>().write_unaligned(float(op, a, b));
                }
                Element::F16 | Element::Bf16 => {
                    let (a, b) = (
                        d.cast::<u16>().read_unaligned(),
                        s.cast::<u16>().read_unaligned(),
                    );
                    let (widen, narrow): Conversions = match element {
                        Element::F16 => (f16_to_f32, f32_to_f16),
                        _ => (bf16_to_f32, f32_to_bf16),
                    };
                    d.cast::<u16>()
                        .write_unaligned(narrow(float(op, widen(a), widen(b))));
                }
            }
        }
    }
}

/// IEEE binary16 to f32 (exact).
pub(crate) fn f16_to_f32(half: u16) -> f32 {
    let sign = u32::from(half & 0x8000) << 16;
    let exp = u32::from((half >> 10) & 0x1f);
    let man = u32::from(half & 0x3ff);
    match (exp, man) {
        (0, 0) => f32::from_bits(sign),
        (0, _) => {
            // Subnormal: man · 2^-24, exact in f32.
            let magnitude = man as f32 * f32::from_bits(0x3380_0000);
            if sign != 0 { -magnitude } else { magnitude }
        }
        (31, _) => f32::from_bits(sign | 0x7f80_0000 | (man << 13)),
        _ => f32::from_bits(sign | ((exp + 112) << 23) | (man << 13)),
    }
}

/// f32 to IEEE binary16, rounding to nearest, ties to even (overflow gives infinity).
pub(crate) fn f32_to_f16(value: f32) -> u16 {
    let bits = value.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32;
    let man = bits & 0x7f_ffff;
    if exp == 0xff {
        let nan = if man != 0 {
            0x200 | (man >> 13) as u16
        } else {
            0
        };
        return sign | 0x7c00 | nan;
    }
    let e = exp - 112;
    if e >= 31 {
        return sign | 0x7c00;
    }
    let (kept, dropped, shift) = if e <= 0 {
        if e < -10 {
            return sign;
        }
        let shift = (14 - e) as u32;
        let full = man | 0x80_0000;
        (full >> shift, full & ((1 << shift) - 1), shift)
    } else {
        (((e as u32) << 10) | (man >> 13), man & 0x1fff, 13)
    };
    let half = 1 << (shift - 1);
    // A carry out of the mantissa moves to the next binade (or infinity), as it should.
    let rounded = kept + u32::from(dropped > half || (dropped == half && kept & 1 == 1));
    sign | rounded as u16
}

/// bfloat16 to f32 (exact).
pub(crate) fn bf16_to_f32(value: u16) -> f32 {
    f32::from_bits(u32::from(value) << 16)
}

/// f32 to bfloat16, rounding to nearest, ties to even (NaN stays NaN).
pub(crate) fn f32_to_bf16(value: f32) -> u16 {
    let bits = value.to_bits();
    if value.is_nan() {
        return ((bits >> 16) | 0x40) as u16;
    }
    ((bits + 0x7fff + ((bits >> 16) & 1)) >> 16) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_half_round_trips_through_f32() {
        for half in 0..=u16::MAX {
            let value = f16_to_f32(half);
            if value.is_nan() {
                assert!(f16_to_f32(f32_to_f16(value)).is_nan(), "{half:#x}");
            } else {
                assert_eq!(f32_to_f16(value), half, "{half:#x} ({value})");
            }
        }
    }

    #[test]
    fn halves_round_to_nearest_even() {
        assert_eq!(
            f32_to_f16(1.0 + 1.0 / 2048.0),
            0x3c00,
            "a tie rounds to even"
        );
        assert_eq!(
            f32_to_f16(1.0 + 3.0 / 2048.0),
            0x3c02,
            "a tie rounds to even"
        );
        assert_eq!(
            f32_to_f16(65520.0),
            0x7c00,
            "past the largest half: infinity"
        );
        assert_eq!(f32_to_f16(1e-8), 0, "below the smallest subnormal");
        assert_eq!(
            f32_to_bf16(1.0 + 1.0 / 256.0),
            0x3f80,
            "a tie rounds to even"
        );
        assert_eq!(bf16_to_f32(f32_to_bf16(3.0)), 3.0);
    }

    #[test]
    fn reductions_combine_elementwise() {
        let mut dst = [100i8, -5, 127];
        let src = [27i8, 7, 1];
        // SAFETY: both arrays hold 3 bytes.
        unsafe {
            reduce(
                Reduction::Sum,
                Element::I8,
                dst.as_mut_ptr().cast(),
                src.as_ptr().cast(),
                3,
            )
        };
        assert_eq!(dst, [127, 2, -128], "integers wrap");
        let mut dst = [1.0f32, f32::NAN, -2.0];
        let src = [3.0f32, 1.0, -1.0];
        // SAFETY: both arrays hold 12 bytes.
        unsafe {
            reduce(
                Reduction::Max,
                Element::F32,
                dst.as_mut_ptr().cast(),
                src.as_ptr().cast(),
                12,
            )
        };
        assert_eq!(dst, [3.0, 1.0, -1.0]);
        let mut dst = [f32_to_f16(1.5), f32_to_f16(-4.0)];
        let src = [f32_to_f16(0.25), f32_to_f16(2.0)];
        // SAFETY: both arrays hold 4 bytes.
        unsafe {
            reduce(
                Reduction::Min,
                Element::F16,
                dst.as_mut_ptr().cast(),
                src.as_ptr().cast(),
                4,
            )
        };
        assert_eq!(dst.map(f16_to_f32), [0.25, -4.0]);
    }
}

//! Host-side numeric helpers: half-precision conversions and element sizes.
//!
//! Both conversions are defined without special values, as the reference documents: float to
//! half saturates (NaN and +Inf become 65504, -Inf -65504; finite values round to nearest, ties
//! to even, and overflow to ±65504), and half to float reads the all-ones exponent as the next
//! power of two (0x7C00 is 65536, 0x7E00 98304).

use npu_sys::*;

const HALF_MAX: u16 = 0x7BFF;
const SIGN: u16 = 0x8000;

/// Converts a float to half precision, saturating (see the module documentation).
///
/// ```
/// # extern crate ascendcl as npu_sim;
/// use npu_sim::abi::{aclFloat16ToFloat, aclFloatToFloat16};
///
/// // SAFETY: pure functions.
/// unsafe {
///     assert_eq!(aclFloatToFloat16(1.0), 0x3C00);
///     assert_eq!(aclFloatToFloat16(f32::NAN), 0x7BFF);
///     assert_eq!(aclFloatToFloat16(f32::NEG_INFINITY), 0xFBFF);
///     assert_eq!(aclFloat16ToFloat(0x7C00), 65536.0);
/// }
/// ```
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclFloatToFloat16(value: f32) -> aclFloat16 {
    if value.is_nan() {
        return HALF_MAX;
    }
    let bits = value.to_bits();
    let sign = ((bits >> 16) as u16) & SIGN;
    let magnitude = value.abs();
    // 65520 is the midpoint between 65504 and the next (unrepresentable) step: at or above it,
    // rounding would overflow.
    if magnitude >= 65520.0 {
        return sign | HALF_MAX;
    }
    let exponent = ((bits >> 23) & 0xFF) as i32 - 127;
    let mantissa = bits & 0x007F_FFFF;
    let half = if exponent >= -14 {
        // Normal half: 10 mantissa bits, round to nearest even on the 13 dropped bits.
        let biased = ((exponent + 15) as u32) << 10;
        round_shift(biased << 13 | mantissa, 13)
    } else {
        // Subnormal half (or zero): the implicit bit joins the mantissa, shifted further.
        let shift = (-14 - exponent) as u32 + 13;
        if shift > 24 {
            0
        } else {
            round_shift(mantissa | 0x0080_0000, shift)
        }
    };
    // A carry out of the mantissa correctly bumps the exponent; 65504 is the largest result
    // below the saturation threshold checked above.
    sign | half as u16
}

/// `value >> shift`, rounded to nearest with ties to even.
fn round_shift(value: u32, shift: u32) -> u32 {
    let kept = value >> shift;
    let dropped = value & ((1 << shift) - 1);
    let half = 1 << (shift - 1);
    if dropped > half || (dropped == half && kept & 1 == 1) {
        kept + 1
    } else {
        kept
    }
}

/// Converts a half to float; the all-ones exponent counts as 2^16 (see the module
/// documentation).
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclFloat16ToFloat(value: aclFloat16) -> f32 {
    let sign = if value & SIGN != 0 { -1.0 } else { 1.0 };
    let exponent = i32::from((value >> 10) & 0x1F);
    let fraction = f32::from(value & 0x03FF) / 1024.0;
    let magnitude = if exponent == 0 {
        fraction * 2f32.powi(-14)
    } else {
        (1.0 + fraction) * 2f32.powi(exponent - 15)
    };
    sign * magnitude
}

/// Bytes per element of a data type: 0 for ACL_STRING (variable) and unknown types, 1 for the
/// types narrower than a byte (the smallest unit a buffer of them is sized in).
///
/// ```
/// # extern crate ascendcl as npu_sim;
/// use npu_sim::abi::aclDataTypeSize;
/// use npu_sys::{ACL_BF16, ACL_COMPLEX128, ACL_DT_UNDEFINED, ACL_FLOAT};
///
/// // SAFETY: a pure function.
/// unsafe {
///     assert_eq!(aclDataTypeSize(ACL_FLOAT), 4);
///     assert_eq!(aclDataTypeSize(ACL_BF16), 2);
///     assert_eq!(aclDataTypeSize(ACL_COMPLEX128), 16);
///     assert_eq!(aclDataTypeSize(ACL_DT_UNDEFINED), 0);
/// }
/// ```
///
/// # Safety
/// No preconditions; `unsafe` only because it is part of the C ABI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclDataTypeSize(dataType: aclDataType) -> usize {
    match dataType {
        ACL_INT8 | ACL_UINT8 | ACL_BOOL | ACL_HIFLOAT8 | ACL_FLOAT8_E5M2 | ACL_FLOAT8_E4M3FN
        | ACL_FLOAT8_E8M0 => 1,
        // Narrower than a byte: a byte is the unit their buffers are sized in.
        ACL_INT4 | ACL_UINT1 | ACL_FLOAT6_E3M2 | ACL_FLOAT6_E2M3 | ACL_FLOAT4_E2M1
        | ACL_FLOAT4_E1M2 => 1,
        ACL_FLOAT16 | ACL_BF16 | ACL_INT16 | ACL_UINT16 => 2,
        ACL_FLOAT | ACL_INT32 | ACL_UINT32 | ACL_COMPLEX32 => 4,
        ACL_INT64 | ACL_UINT64 | ACL_DOUBLE | ACL_COMPLEX64 => 8,
        ACL_COMPLEX128 => 16,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to_half(value: f32) -> u16 {
        // SAFETY: a pure function.
        unsafe { aclFloatToFloat16(value) }
    }

    fn to_float(value: u16) -> f32 {
        // SAFETY: a pure function.
        unsafe { aclFloat16ToFloat(value) }
    }

    #[test]
    fn every_finite_half_round_trips() {
        for bits in 0..=u16::MAX {
            if bits & 0x7C00 == 0x7C00 {
                continue; // the all-ones exponent has no finite float16 meaning to return
            }
            let back = to_half(to_float(bits));
            // -0 and +0 are both zero.
            assert!(
                back == bits || (bits & 0x7FFF == 0 && back & 0x7FFF == 0),
                "{bits:#06x} -> {back:#06x}"
            );
        }
    }

    #[test]
    fn rounding_and_saturation() {
        assert_eq!(to_half(65504.0), 0x7BFF);
        assert_eq!(to_half(65519.0), 0x7BFF, "rounds down to the largest half");
        assert_eq!(to_half(1e9), 0x7BFF);
        assert_eq!(to_half(-1e9), 0xFBFF);
        assert_eq!(to_half(f32::INFINITY), 0x7BFF);
        assert_eq!(to_half(1.0 + 1.0 / 2048.0), 0x3C00, "a tie rounds to even");
        assert_eq!(to_half(1.0 + 3.0 / 2048.0), 0x3C02, "a tie rounds to even");
        assert_eq!(to_half(2f32.powi(-24)), 0x0001, "the smallest subnormal");
        assert_eq!(
            to_half(2f32.powi(-26)),
            0x0000,
            "below half the smallest subnormal"
        );
        assert_eq!(to_float(0xFC00), -65536.0);
        assert_eq!(to_float(0x7E00), 98304.0);
    }
}

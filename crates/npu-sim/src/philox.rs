//! Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011): the
//! counter-based generator Ascend's random number tasks use. A 64-bit key and a 128-bit
//! counter give four 32-bit words, so any element of a sequence can be computed on its own,
//! in any order, and equal keys and counters give equal words.

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;
const ROUNDS: usize = 10;

/// The high and low halves of `a * b`.
fn mul_hi_lo(a: u32, b: u32) -> (u32, u32) {
    let product = u64::from(a) * u64::from(b);
    ((product >> 32) as u32, product as u32)
}

/// The four words of counter `ctr` under `key`.
pub(crate) fn philox4x32(key: [u32; 2], ctr: [u32; 4]) -> [u32; 4] {
    let (mut key, mut ctr) = (key, ctr);
    for round in 0..ROUNDS {
        if round > 0 {
            key = [key[0].wrapping_add(W0), key[1].wrapping_add(W1)];
        }
        let (hi0, lo0) = mul_hi_lo(M0, ctr[0]);
        let (hi1, lo1) = mul_hi_lo(M1, ctr[2]);
        ctr = [hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0];
    }
    ctr
}

/// The words of a 64-bit seed as a Philox key (low word first).
pub(crate) fn key_of(seed: u64) -> [u32; 2] {
    [seed as u32, (seed >> 32) as u32]
}

/// The counter whose low 64 bits are `low` and high 64 bits `high` (low words first).
pub(crate) fn counter(low: u64, high: u64) -> [u32; 4] {
    [
        low as u32,
        (low >> 32) as u32,
        high as u32,
        (high >> 32) as u32,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The known-answer vectors Random123 publishes for philox4x32-10.
    #[test]
    fn known_answers() {
        assert_eq!(
            philox4x32([0, 0], [0, 0, 0, 0]),
            [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]
        );
        assert_eq!(
            philox4x32([u32::MAX; 2], [u32::MAX; 4]),
            [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]
        );
        assert_eq!(
            philox4x32(
                [0xa409_3822, 0x299f_31d0],
                [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344]
            ),
            [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1]
        );
    }

    #[test]
    fn keys_and_counters_split_low_words_first() {
        assert_eq!(key_of(0x1122_3344_5566_7788), [0x5566_7788, 0x1122_3344]);
        assert_eq!(
            counter(0x0102_0304_0506_0708, 9),
            [0x0506_0708, 0x0102_0304, 9, 0]
        );
    }
}

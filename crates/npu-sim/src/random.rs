//! Random number tasks (aclrtRandomNumAsync): a dropout bitmask, or values of a uniform,
//! normal or truncated normal distribution, generated into device memory when the task runs.
//!
//! The generator is Philox4x32-10 keyed by the seed: value `i` comes from the Philox block at
//! counter `offset + i` (a dropout bitmask packs four bits per block, bit `i` from word `i % 4`
//! of block `offset + i / 4`), so equal seeds and offsets give equal values, on any stream and
//! in any execution. The words Ascend's hardware draws from the same seed are not promised:
//! the sequence is the simulator's own.
//!
//! Everything the task reads through an address (a parameter with `isAddr` 1, the seed, the
//! count, the counter offset, the parameters at randomParaAddr after an update) is read when
//! the task runs, so work queued before it may write them. An address that is not device
//! memory of the task's device then is a DMA fault of the task (507013); a value that makes no
//! sense (max not above min, a negative standard deviation, an encoding the submission would
//! have refused) fails it with ACL_ERROR_RT_TS_ERROR (507001).

use std::mem::{offset_of, size_of};
use std::ptr;

use npu_sys::*;
use rayon::prelude::*;

use crate::error::{Res, SimError, ensure, fail};
use crate::indirect::{check_on_device, fault, lease_device, read_device, write_device};
use crate::memory::MemoryMap;
use crate::philox::{counter, key_of, philox4x32};
use crate::reduce::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};

/// The bytes of an aclrtRandomNumTaskInfo (it has no padding: every byte is a field's).
pub(crate) type TaskBytes = [u8; TASK_INFO_SIZE];
/// sizeof(aclrtRandomNumTaskInfo): what an update's srcAddr holds.
pub(crate) const TASK_INFO_SIZE: usize = size_of::<aclrtRandomNumTaskInfo>();
/// sizeof(aclrtRandomNumFuncParaInfo): what randomParaAddr holds.
pub(crate) const FUNC_PARA_SIZE: usize = size_of::<aclrtRandomNumFuncParaInfo>();
const PARA_SIZE: usize = size_of::<aclrtRandomParaInfo>();
/// Where the distribution's parameters start in an aclrtRandomNumFuncParaInfo.
const PARAMS_AT: usize = offset_of!(aclrtRandomNumFuncParaInfo, paramInfo);
const FUNC_AT: usize = offset_of!(aclrtRandomNumTaskInfo, randomNumFuncParaInfo);
/// A truncated normal value draws this many Philox blocks (four candidates each) at most,
/// then settles for the mean: 256 candidates all beyond 2 standard deviations never happen.
const TRUNCATED_BLOCKS: u64 = 64;
/// How many values a rayon job generates at least.
const MIN_JOB: usize = 4096;
const TWO_TO_32: f64 = 4_294_967_296.0;

const _: () = assert!(
    TASK_INFO_SIZE == 4 + FUNC_PARA_SIZE + 3 * size_of::<usize>() + 2 * PARA_SIZE + 8,
    "aclrtRandomNumTaskInfo has no padding, so its bytes can be read whole"
);

/// The value types of a random number task: the reference's list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Int32,
    Int64,
    Uint32,
    Uint64,
    Bf16,
    Float16,
    Float,
}

/// A parameter's value: floating types as f64, integers as i128 (every i64 and u64 fits).
#[derive(Debug, Clone, Copy)]
enum Number {
    Float(f64),
    Int(i128),
}

impl Kind {
    fn of(data_type: aclDataType) -> Option<Self> {
        Some(match data_type {
            ACL_INT32 => Self::Int32,
            ACL_INT64 => Self::Int64,
            ACL_UINT32 => Self::Uint32,
            ACL_UINT64 => Self::Uint64,
            ACL_BF16 => Self::Bf16,
            ACL_FLOAT16 => Self::Float16,
            ACL_FLOAT => Self::Float,
            _ => return None,
        })
    }

    pub(crate) fn size(self) -> usize {
        match self {
            Self::Int64 | Self::Uint64 => 8,
            Self::Int32 | Self::Uint32 | Self::Float => 4,
            Self::Bf16 | Self::Float16 => 2,
        }
    }

    fn is_float(self) -> bool {
        matches!(self, Self::Bf16 | Self::Float16 | Self::Float)
    }

    /// The value whose bytes (native order, zero-extended) are `bytes`.
    fn number(self, bytes: [u8; 8]) -> Number {
        let [b0, b1, b2, b3, ..] = bytes;
        let half = u16::from_ne_bytes([b0, b1]);
        let word = [b0, b1, b2, b3];
        match self {
            Self::Int32 => Number::Int(i32::from_ne_bytes(word).into()),
            Self::Uint32 => Number::Int(u32::from_ne_bytes(word).into()),
            Self::Int64 => Number::Int(i64::from_ne_bytes(bytes).into()),
            Self::Uint64 => Number::Int(u64::from_ne_bytes(bytes).into()),
            Self::Float => Number::Float(f32::from_ne_bytes(word).into()),
            Self::Float16 => Number::Float(f16_to_f32(half).into()),
            Self::Bf16 => Number::Float(bf16_to_f32(half).into()),
        }
    }

    /// The bits of `value` rounded to this floating type (to nearest).
    fn float_bits(self, value: f64) -> u64 {
        match self {
            Self::Float16 => f32_to_f16(value as f32).into(),
            Self::Bf16 => f32_to_bf16(value as f32).into(),
            _ => (value as f32).to_bits().into(),
        }
    }

    fn float_of_bits(self, bits: u64) -> f64 {
        match self {
            Self::Float16 => f16_to_f32(bits as u16).into(),
            Self::Bf16 => bf16_to_f32(bits as u16).into(),
            _ => f32::from_bits(bits as u32).into(),
        }
    }

    /// The bits of the largest value of this floating type below the finite value `bits`.
    fn float_below(self, bits: u64) -> u64 {
        let sign = 1u64 << (self.size() * 8 - 1);
        match (bits & sign != 0, bits & !sign) {
            (_, 0) => sign | 1,
            (false, _) => bits - 1,
            (true, _) => bits + 1,
        }
    }
}

/// What a task generates (aclrtRandomNumFuncType).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Func {
    Dropout,
    Uniform,
    Normal,
    Truncated,
}

impl Func {
    fn of(func_type: aclrtRandomNumFuncType) -> Option<Self> {
        Some(match func_type {
            ACL_RT_RANDOM_NUM_FUNC_TYPE_DROPOUT_BITMASK => Self::Dropout,
            ACL_RT_RANDOM_NUM_FUNC_TYPE_UNIFORM_DIS => Self::Uniform,
            ACL_RT_RANDOM_NUM_FUNC_TYPE_NORMAL_DIS => Self::Normal,
            ACL_RT_RANDOM_NUM_FUNC_TYPE_TRUNCATED_NORMAL_DIS => Self::Truncated,
            _ => return None,
        })
    }

    /// Its parameters' names, in the order of its aclrt*Info struct.
    fn params(self) -> &'static [&'static str] {
        match self {
            Self::Dropout => &["dropoutRation"],
            Self::Uniform => &["min", "max"],
            Self::Normal | Self::Truncated => &["mean", "stddev"],
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Dropout => "dropout bitmask",
            Self::Uniform => "uniform",
            Self::Normal => "normal",
            Self::Truncated => "truncated normal",
        }
    }

    /// A bitmask's ratio and a normal value are fractions: only the floating types carry them.
    fn takes(self, kind: Kind) -> bool {
        self == Self::Uniform || kind.is_float()
    }

    /// The bytes `n` values take: a bit each for a bitmask, else one value of `kind` each.
    fn output_len(self, kind: Kind, n: u64) -> Option<usize> {
        let n = usize::try_from(n).ok()?;
        match self {
            Self::Dropout => Some(n.div_ceil(8)),
            _ => n.checked_mul(kind.size()),
        }
    }
}

/// A parameter of a task: its value's bytes (zero-extended), or where its value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Para {
    Value([u8; 8]),
    Addr(usize),
}

impl Para {
    /// Decodes the aclrtRandomParaInfo in `bytes`, the `what`: isAddr 0 with a size among
    /// `sizes`, or isAddr 1 with size 8 and an address that is not NULL; reserved bytes 0.
    fn decode(bytes: &[u8], sizes: &[usize], what: &str) -> Res<Self> {
        let (is_addr, value, size, rsv) = (
            bytes[offset_of!(aclrtRandomParaInfo, isAddr)],
            &bytes[offset_of!(aclrtRandomParaInfo, valueOrAddr)..][..8],
            usize::from(bytes[offset_of!(aclrtRandomParaInfo, size)]),
            &bytes[offset_of!(aclrtRandomParaInfo, rsv)..PARA_SIZE],
        );
        ensure!(
            rsv.iter().all(|&b| b == 0),
            ACL_ERROR_RT_PARAM_INVALID,
            "{what}.rsv is reserved and must be 0"
        );
        match is_addr {
            0 => {
                ensure!(
                    sizes.contains(&size),
                    ACL_ERROR_RT_PARAM_INVALID,
                    "{what}.size is {size}: a value here takes {sizes:?} bytes"
                );
                let mut filled = [0u8; 8];
                filled[..size].copy_from_slice(&value[..size]);
                Ok(Self::Value(filled))
            }
            1 => {
                ensure!(
                    size == 8,
                    ACL_ERROR_RT_PARAM_INVALID,
                    "{what}.size is {size}: an address takes 8 bytes"
                );
                let addr = u64::from_ne_bytes(value.try_into().expect("8 bytes"));
                ensure!(
                    addr != 0,
                    ACL_ERROR_RT_PARAM_INVALID,
                    "{what} is an address (isAddr 1), and it is NULL"
                );
                match usize::try_from(addr) {
                    Ok(addr) => Ok(Self::Addr(addr)),
                    Err(_) => fail!(ACL_ERROR_RT_PARAM_INVALID, "{what} {addr:#x} is too large"),
                }
            }
            _ => fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "{what}.isAddr is {is_addr}: 0 (a value) or 1 (an address)"
            ),
        }
    }

    /// Checks an address points at `width` bytes of device memory of `device` (107000).
    fn check(self, memory: &MemoryMap, device: i32, width: usize, what: &str) -> Res<()> {
        match self {
            Self::Addr(addr) => check_on_device(memory, addr, width, device, what),
            Self::Value(_) => Ok(()),
        }
    }

    /// Its value's bytes when the task runs: `width` bytes of device memory for an address.
    fn read(
        self,
        memory: &MemoryMap,
        device: i32,
        width: usize,
        what: &str,
    ) -> Result<[u8; 8], SimError> {
        match self {
            Self::Value(bytes) => Ok(bytes),
            Self::Addr(addr) => {
                let mut bytes = [0u8; 8];
                read_device(memory, device, addr, &mut bytes[..width], what)?;
                Ok(bytes)
            }
        }
    }

    /// The value, if it is one, as an unsigned 64-bit number (a seed, a count).
    fn inline_u64(self) -> Option<u64> {
        match self {
            Self::Value(bytes) => Some(u64::from_ne_bytes(bytes)),
            Self::Addr(_) => None,
        }
    }
}

/// A distribution, its parameters known.
#[derive(Debug, Clone, Copy)]
enum Dist {
    Dropout { ratio: f64 },
    UniformFloat { min: f64, max: f64 },
    UniformInt { min: i128, max: i128 },
    Normal { mean: f64, stddev: f64 },
    Truncated { mean: f64, stddev: f64 },
}

impl Dist {
    /// The distribution `func` with parameters `values` (107000 for values it cannot take).
    fn new(func: Func, values: [Number; 2]) -> Res<Self> {
        let dist = match (func, values) {
            (Func::Dropout, [Number::Float(ratio), _]) => {
                ensure!(
                    (0.0..=1.0).contains(&ratio),
                    ACL_ERROR_RT_PARAM_INVALID,
                    "the dropout ratio {ratio} is not in [0, 1]"
                );
                Self::Dropout { ratio }
            }
            (Func::Uniform, [Number::Float(min), Number::Float(max)]) => {
                ensure!(
                    min.is_finite() && max.is_finite() && min < max,
                    ACL_ERROR_RT_PARAM_INVALID,
                    "the uniform distribution's min {min} is not below its max {max}"
                );
                Self::UniformFloat { min, max }
            }
            (Func::Uniform, [Number::Int(min), Number::Int(max)]) => {
                ensure!(
                    min < max,
                    ACL_ERROR_RT_PARAM_INVALID,
                    "the uniform distribution's min {min} is not below its max {max}"
                );
                Self::UniformInt { min, max }
            }
            (Func::Normal | Func::Truncated, [Number::Float(mean), Number::Float(stddev)]) => {
                ensure!(
                    mean.is_finite() && stddev.is_finite() && stddev >= 0.0,
                    ACL_ERROR_RT_PARAM_INVALID,
                    "a normal distribution takes a finite mean and a finite, non-negative \
                     stddev, not {mean} and {stddev}"
                );
                match func {
                    Func::Normal => Self::Normal { mean, stddev },
                    _ => Self::Truncated { mean, stddev },
                }
            }
            _ => fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "the {} function's parameters are not of its data type",
                func.name()
            ),
        };
        Ok(dist)
    }

    /// The bits of value `i`, of type `kind`, drawn from Philox blocks at `block`.
    fn value(self, kind: Kind, key: [u32; 2], block: u64) -> u64 {
        let words = philox4x32(key, counter(block, 0));
        match self {
            Self::UniformFloat { min, max } => {
                let unit = f64::from(words[0] >> 8) / f64::from(1u32 << 24);
                let bits = kind.float_bits(min + unit * (max - min));
                // Rounding to the type may reach max, which the interval leaves out.
                if kind.float_of_bits(bits) >= max {
                    kind.float_below(kind.float_bits(max))
                } else {
                    bits
                }
            }
            Self::UniformInt { min, max } => {
                let draw = u128::from(words[0]) | u128::from(words[1]) << 32;
                let span = (max - min) as u128;
                (min + ((draw * span) >> 64) as i128) as u64
            }
            Self::Normal { mean, stddev } => {
                kind.float_bits(mean + stddev * box_muller(words[0], words[1]).0)
            }
            Self::Truncated { mean, stddev } => {
                kind.float_bits(mean + stddev * truncated(key, block, words))
            }
            // Bitmasks are generated a byte at a time (`mask_byte`).
            Self::Dropout { .. } => 0,
        }
    }

    /// Byte `at` of a dropout bitmask of `n` bits: bit `k` (least significant first) keeps
    /// element `8 * at + k` (1) unless its draw falls below the ratio (0, dropped).
    fn mask_byte(ratio: f64, key: [u32; 2], offset: u64, at: usize, n: usize) -> u8 {
        let first = at * 8;
        let blocks =
            [0, 1].map(|b| philox4x32(key, counter(offset.wrapping_add((2 * at + b) as u64), 0)));
        let mut byte = 0u8;
        for bit in 0..8.min(n - first) {
            let word = blocks[bit / 4][bit % 4];
            let unit = f64::from(word >> 8) / f64::from(1u32 << 24);
            if unit >= ratio {
                byte |= 1 << bit;
            }
        }
        byte
    }
}

/// Two independent standard normal values from two 32-bit words (Box–Muller).
fn box_muller(a: u32, b: u32) -> (f64, f64) {
    let radius = (-2.0 * ((f64::from(a) + 1.0) / TWO_TO_32).ln()).sqrt();
    let angle = std::f64::consts::TAU * f64::from(b) / TWO_TO_32;
    (radius * angle.cos(), radius * angle.sin())
}

/// A standard normal value within 2 standard deviations: the first of the block's candidates
/// that is, then those of the blocks at the same counter with high words 1, 2, ... (CANN's and
/// TensorFlow's truncated normal resamples values beyond 2 standard deviations).
fn truncated(key: [u32; 2], block: u64, first: [u32; 4]) -> f64 {
    let mut words = first;
    for attempt in 1..=TRUNCATED_BLOCKS {
        let (z0, z1) = box_muller(words[0], words[1]);
        let (z2, z3) = box_muller(words[2], words[3]);
        if let Some(z) = [z0, z1, z2, z3].into_iter().find(|z| z.abs() <= 2.0) {
            return z;
        }
        words = philox4x32(key, counter(block, attempt));
    }
    0.0
}

/// Where a task's distribution parameters are when it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ParamSource {
    /// The ones it was submitted with, kept by the runtime (randomParaAddr NULL).
    Kept,
    /// The ones it was submitted with, written to randomParaAddr (an
    /// aclrtRandomNumFuncParaInfo) when the task runs.
    Written(usize),
    /// An aclrtRandomNumFuncParaInfo read from randomParaAddr when the task runs (an update
    /// set it; its funcType is the task's, whatever the memory holds).
    Read(usize),
}

/// The fields of a task an update may change (aclrtTaskUpdateAsync).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fields {
    params: ParamSource,
    result: usize,
    /// Where the counter offset is (a u64); 0: offset 0.
    counter: usize,
    seed: Para,
    count: Para,
}

impl Fields {
    /// The fields of the aclrtRandomNumTaskInfo in `bytes` (107000 for a field it cannot take);
    /// `params` tells what a randomParaAddr that is not NULL holds.
    fn decode(bytes: &TaskBytes, params: impl FnOnce(usize) -> ParamSource) -> Res<Self> {
        let address = |at: usize| {
            usize::from_ne_bytes(
                bytes[at..][..size_of::<usize>()]
                    .try_into()
                    .expect("a word"),
            )
        };
        let para_addr = address(offset_of!(aclrtRandomNumTaskInfo, randomParaAddr));
        let result = address(offset_of!(aclrtRandomNumTaskInfo, randomResultAddr));
        ensure!(
            result != 0,
            ACL_ERROR_RT_PARAM_INVALID,
            "randomResultAddr is NULL"
        );
        let para = |at: usize, what: &str| Para::decode(&bytes[at..][..PARA_SIZE], &[4, 8], what);
        Ok(Self {
            params: if para_addr == 0 {
                ParamSource::Kept
            } else {
                params(para_addr)
            },
            result,
            counter: address(offset_of!(aclrtRandomNumTaskInfo, randomCounterAddr)),
            seed: para(offset_of!(aclrtRandomNumTaskInfo, randomSeed), "randomSeed")?,
            count: para(offset_of!(aclrtRandomNumTaskInfo, randomNum), "randomNum")?,
        })
    }

    /// The fields an update in device memory gives (an aclrtRandomNumTaskInfo): its
    /// randomParaAddr, randomResultAddr, randomCounterAddr, randomSeed and randomNum; the rest
    /// of it is not read.
    pub(crate) fn of_update(bytes: &TaskBytes) -> Res<Self> {
        Self::decode(bytes, ParamSource::Read)
    }
}

/// A random number task.
#[derive(Debug, Clone)]
pub(crate) struct RandomTask {
    pub(crate) device: i32,
    kind: Kind,
    func: Func,
    /// The aclrtRandomNumFuncParaInfo it was submitted with, and its parameters decoded.
    submitted: [u8; FUNC_PARA_SIZE],
    kept: [Para; 2],
    pub(crate) fields: Fields,
}

impl RandomTask {
    /// The task an aclrtRandomNumTaskInfo describes, its fields checked in their order
    /// (107000): dataType, the function and its parameters, randomResultAddr, randomSeed,
    /// randomNum, rsv. Its addresses are checked when it is placed on a device
    /// ([`Self::on_device`]).
    pub(crate) fn new(bytes: &TaskBytes) -> Res<Self> {
        let word = |at: usize| u32::from_ne_bytes(bytes[at..][..4].try_into().expect("4 bytes"));
        let data_type = word(offset_of!(aclrtRandomNumTaskInfo, dataType)) as aclDataType;
        let Some(kind) = Kind::of(data_type) else {
            fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "dataType {data_type} is not one a random number task generates (ACL_INT32, \
                 ACL_INT64, ACL_UINT32, ACL_UINT64, ACL_BF16, ACL_FLOAT16, ACL_FLOAT)"
            );
        };
        let func_type = word(FUNC_AT + offset_of!(aclrtRandomNumFuncParaInfo, funcType));
        let Some(func) = Func::of(func_type) else {
            fail!(
                ACL_ERROR_RT_PARAM_INVALID,
                "funcType {func_type} is not an aclrtRandomNumFuncType"
            );
        };
        ensure!(
            func.takes(kind),
            ACL_ERROR_RT_PARAM_INVALID,
            "a {} takes a floating data type (ACL_FLOAT, ACL_FLOAT16, ACL_BF16), not {data_type}",
            func.name()
        );
        let submitted: [u8; FUNC_PARA_SIZE] = bytes[FUNC_AT..][..FUNC_PARA_SIZE]
            .try_into()
            .expect("the function's bytes");
        let kept = decode_params(func, kind, &submitted)?;
        if let [Para::Value(a), Para::Value(b)] = kept {
            Dist::new(func, [kind.number(a), kind.number(b)])?;
        }
        let fields = Fields::decode(bytes, ParamSource::Written)?;
        let rsv = &bytes[offset_of!(aclrtRandomNumTaskInfo, rsv)..];
        ensure!(
            rsv.iter().all(|&b| b == 0),
            ACL_ERROR_RT_PARAM_INVALID,
            "rsv is reserved and must be 0"
        );
        Ok(Self {
            device: 0,
            kind,
            func,
            submitted,
            kept,
            fields,
        })
    }

    /// The task on `device`, once every address it was given is device memory of the device,
    /// large enough for what it holds (107000): randomParaAddr, each parameter's,
    /// randomResultAddr (for the values, when their count is given as a value),
    /// randomCounterAddr, randomSeed's and randomNum's.
    pub(crate) fn on_device(self, device: i32, memory: &MemoryMap) -> Res<Self> {
        let fields = &self.fields;
        if let ParamSource::Written(addr) = fields.params {
            check_on_device(memory, addr, FUNC_PARA_SIZE, device, "randomParaAddr")?;
        }
        for (para, what) in self.kept.iter().zip(self.func.params()) {
            para.check(memory, device, self.kind.size(), what)?;
        }
        let len = match fields.count.inline_u64() {
            Some(n) => match self.func.output_len(self.kind, n) {
                Some(len) => len,
                None => fail!(ACL_ERROR_RT_PARAM_INVALID, "randomNum {n} is too large"),
            },
            None => 0,
        };
        check_on_device(memory, fields.result, len, device, "randomResultAddr")?;
        if fields.counter != 0 {
            check_on_device(memory, fields.counter, 8, device, "randomCounterAddr")?;
        }
        fields.seed.check(memory, device, 8, "randomSeed")?;
        fields.count.check(memory, device, 8, "randomNum")?;
        Ok(Self { device, ..self })
    }

    /// The bytes it writes, when its count is a value (0 otherwise), for the timing model.
    pub(crate) fn known_len(&self) -> u64 {
        let len = self.fields.count.inline_u64();
        len.and_then(|n| self.func.output_len(self.kind, n))
            .map_or(0, |len| len as u64)
    }

    /// What it generates, for the trace and the debug prints.
    pub(crate) fn name(&self) -> &'static str {
        self.func.name()
    }

    /// Where its values go.
    pub(crate) fn result(&self) -> usize {
        self.fields.result
    }

    /// Runs the task: reads what it reads through addresses, generates, writes the values.
    pub(crate) fn run(&self, memory: &MemoryMap) -> Result<(), SimError> {
        let device = self.device;
        let fields = &self.fields;
        let params = match fields.params {
            ParamSource::Kept => self.kept,
            ParamSource::Written(addr) => {
                write_device(memory, device, addr, &self.submitted, "randomParaAddr")?;
                self.kept
            }
            ParamSource::Read(addr) => {
                let mut bytes = [0u8; FUNC_PARA_SIZE];
                read_device(memory, device, addr, &mut bytes, "randomParaAddr")?;
                decode_params(self.func, self.kind, &bytes).map_err(found_in_memory)?
            }
        };
        let mut values = [Number::Int(0); 2];
        for ((value, para), what) in values.iter_mut().zip(params).zip(self.func.params()) {
            *value = self
                .kind
                .number(para.read(memory, device, self.kind.size(), what)?);
        }
        let dist = Dist::new(self.func, values).map_err(found_in_memory)?;
        let seed = u64::from_ne_bytes(fields.seed.read(memory, device, 8, "randomSeed")?);
        let n = u64::from_ne_bytes(fields.count.read(memory, device, 8, "randomNum")?);
        let offset = match fields.counter {
            0 => 0,
            at => {
                let mut bytes = [0u8; 8];
                read_device(memory, device, at, &mut bytes, "randomCounterAddr")?;
                u64::from_ne_bytes(bytes)
            }
        };
        let Some(len) = self.func.output_len(self.kind, n) else {
            return Err(found_in_memory(SimError::new(
                ACL_ERROR_RT_PARAM_INVALID,
                format!("randomNum {n} is too large"),
            )));
        };
        let Some(_result) = lease_device(memory, device, fields.result, len) else {
            return Err(fault("randomResultAddr", fields.result, len, device));
        };
        memory.uce.check(fields.result, len)?;
        let values = generate(dist, self.kind, key_of(seed), offset, n as usize, len);
        // SAFETY: the lease keeps the `len` bytes at the result address allocated as device
        // memory of the device (host memory on the simulator); `values` is ours.
        unsafe { ptr::copy_nonoverlapping(values.as_ptr(), fields.result as *mut u8, len) };
        Ok(())
    }
}

/// The parameters of `func` in an aclrtRandomNumFuncParaInfo's bytes (its funcType is not
/// read): each a value of `kind` or the address of one (107000 otherwise). A function of one
/// parameter leaves the second a zero value.
fn decode_params(func: Func, kind: Kind, bytes: &[u8; FUNC_PARA_SIZE]) -> Res<[Para; 2]> {
    let mut params = [Para::Value([0; 8]); 2];
    for (at, (para, what)) in params.iter_mut().zip(func.params()).enumerate() {
        let info = &bytes[PARAMS_AT + at * PARA_SIZE..][..PARA_SIZE];
        *para = Para::decode(info, &[kind.size()], what)?;
    }
    Ok(params)
}

/// A value a task (`what`) read from device memory that the submission of such a task would
/// have refused: the task fails as the device's task scheduler fails a task it cannot execute.
pub(crate) fn refused_at_run(what: &str, error: SimError) -> SimError {
    SimError::new(
        ACL_ERROR_RT_TS_ERROR,
        format!("the {what} read from device memory: {}", error.msg),
    )
}

fn found_in_memory(error: SimError) -> SimError {
    refused_at_run("random number task", error)
}

/// The `len` bytes of `n` values of `dist` (of type `kind`) from counter `offset` on.
fn generate(dist: Dist, kind: Kind, key: [u32; 2], offset: u64, n: usize, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    match dist {
        Dist::Dropout { ratio } => out
            .par_iter_mut()
            .with_min_len(MIN_JOB)
            .enumerate()
            .for_each(|(at, byte)| *byte = Dist::mask_byte(ratio, key, offset, at, n)),
        _ => {
            let size = kind.size();
            out.par_chunks_mut(size)
                .with_min_len(MIN_JOB)
                .enumerate()
                .for_each(|(i, value)| {
                    let bits = dist.value(kind, key, offset.wrapping_add(i as u64));
                    value.copy_from_slice(&bits.to_ne_bytes()[..size]);
                });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(dist: Dist, kind: Kind, n: usize) -> Vec<u8> {
        let len = n * kind.size();
        generate(dist, kind, key_of(7), 0, n, len)
    }

    #[test]
    fn uniform_floats_stay_in_the_half_open_interval() {
        // An interval of one fp16 step: every value is min, as max is left out.
        let (min, max) = (f64::from(f16_to_f32(0x3c00)), f64::from(f16_to_f32(0x3c01)));
        let values = sample(Dist::UniformFloat { min, max }, Kind::Float16, 1000);
        assert!(values.chunks(2).all(|v| v == 0x3c00u16.to_ne_bytes()));
    }

    #[test]
    fn the_largest_value_below_a_float() {
        assert_eq!(Kind::Float16.float_below(0x3c01), 0x3c00);
        assert_eq!(
            Kind::Float16.float_below(0xbc00),
            0xbc01,
            "negative: away from zero"
        );
        assert_eq!(
            Kind::Float.float_below(0),
            0x8000_0001,
            "below zero: -denormal"
        );
        assert_eq!(Kind::Bf16.float_below(0x8000), 0x8001);
    }

    #[test]
    fn uniform_integers_cover_their_range_and_no_more() {
        let values = sample(Dist::UniformInt { min: -3, max: 2 }, Kind::Int32, 1000);
        let seen: std::collections::BTreeSet<i32> = values
            .chunks(4)
            .map(|v| i32::from_ne_bytes(v.try_into().unwrap()))
            .collect();
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), [-3, -2, -1, 0, 1]);
    }

    #[test]
    fn truncated_normal_values_stay_within_two_deviations() {
        let dist = Dist::Truncated {
            mean: 10.0,
            stddev: 1.0,
        };
        let values = sample(dist, Kind::Float, 20_000);
        let floats: Vec<f32> = values
            .chunks(4)
            .map(|v| f32::from_ne_bytes(v.try_into().unwrap()))
            .collect();
        assert!(floats.iter().all(|v| (8.0..=12.0).contains(v)));
        // Plain normal values of the same seed go beyond.
        let normal = sample(
            Dist::Normal {
                mean: 10.0,
                stddev: 1.0,
            },
            Kind::Float,
            20_000,
        );
        assert!(normal.chunks(4).any(|v| {
            let v = f32::from_ne_bytes(v.try_into().unwrap());
            !(8.0..=12.0).contains(&v)
        }));
    }

    #[test]
    fn bitmask_bits_past_the_count_are_zero() {
        let mask = generate(
            Dist::Dropout { ratio: 0.0 },
            Kind::Float,
            key_of(1),
            0,
            11,
            2,
        );
        assert_eq!(mask, [0xff, 0x07]);
    }
}

//! The ggml tensor type table: the ids GGUF files carry, block geometry and
//! byte sizes. One enum for the whole workspace.

/// A ggml tensor type as stored in a GGUF tensor info (`ggml_type`).
///
/// Every type that current llama.cpp accepts is listed; ids that llama.cpp
/// removed (4, 5, 31-33, 36-38) are rejected by [`GgmlType::from_id`].
#[allow(non_camel_case_types, missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum GgmlType {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ2_XXS = 16,
    IQ2_XS = 17,
    IQ3_XXS = 18,
    IQ1_S = 19,
    IQ4_NL = 20,
    IQ3_S = 21,
    IQ2_S = 22,
    IQ4_XS = 23,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    IQ1_M = 29,
    BF16 = 30,
    TQ1_0 = 34,
    TQ2_0 = 35,
    MXFP4 = 39,
}

/// Every type, in id order.
pub const ALL_TYPES: [GgmlType; 32] = {
    use GgmlType::*;
    [
        F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ2_XXS,
        IQ2_XS, IQ3_XXS, IQ1_S, IQ4_NL, IQ3_S, IQ2_S, IQ4_XS, I8, I16, I32, I64, F64, IQ1_M, BF16,
        TQ1_0, TQ2_0, MXFP4,
    ]
};

impl GgmlType {
    /// The type for a GGUF `ggml_type` id, or `None` for ids llama.cpp does not accept.
    pub fn from_id(id: u32) -> Option<Self> {
        ALL_TYPES.iter().copied().find(|t| *t as u32 == id)
    }

    /// The GGUF id.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// Parse a name as ggml spells it (`q4_K`, `Q4_K`, `bf16`, ...), case-insensitive.
    pub fn from_name(name: &str) -> Option<Self> {
        ALL_TYPES
            .iter()
            .copied()
            .find(|t| t.name().eq_ignore_ascii_case(name))
    }

    /// ggml's own name of the type (`ggml_type_name`).
    pub fn name(self) -> &'static str {
        use GgmlType::*;
        match self {
            F32 => "f32",
            F16 => "f16",
            Q4_0 => "q4_0",
            Q4_1 => "q4_1",
            Q5_0 => "q5_0",
            Q5_1 => "q5_1",
            Q8_0 => "q8_0",
            Q8_1 => "q8_1",
            Q2_K => "q2_K",
            Q3_K => "q3_K",
            Q4_K => "q4_K",
            Q5_K => "q5_K",
            Q6_K => "q6_K",
            Q8_K => "q8_K",
            IQ2_XXS => "iq2_xxs",
            IQ2_XS => "iq2_xs",
            IQ3_XXS => "iq3_xxs",
            IQ1_S => "iq1_s",
            IQ4_NL => "iq4_nl",
            IQ3_S => "iq3_s",
            IQ2_S => "iq2_s",
            IQ4_XS => "iq4_xs",
            I8 => "i8",
            I16 => "i16",
            I32 => "i32",
            I64 => "i64",
            F64 => "f64",
            IQ1_M => "iq1_m",
            BF16 => "bf16",
            TQ1_0 => "tq1_0",
            TQ2_0 => "tq2_0",
            MXFP4 => "mxfp4",
        }
    }

    /// Weights per block (1 for plain types).
    pub fn block_size(self) -> usize {
        use GgmlType::*;
        match self {
            F32 | F16 | BF16 | I8 | I16 | I32 | I64 | F64 => 1,
            Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q8_1 | IQ4_NL | MXFP4 => 32,
            _ => 256,
        }
    }

    /// Bytes per block (`ggml_type_size`).
    pub fn type_size(self) -> usize {
        use GgmlType::*;
        match self {
            F32 => 4,
            F16 => 2,
            BF16 => 2,
            I8 => 1,
            I16 => 2,
            I32 => 4,
            I64 => 8,
            F64 => 8,
            Q4_0 => 18,
            Q4_1 => 20,
            Q5_0 => 22,
            Q5_1 => 24,
            Q8_0 => 34,
            Q8_1 => 36,
            Q2_K => 84,
            Q3_K => 110,
            Q4_K => 144,
            Q5_K => 176,
            Q6_K => 210,
            Q8_K => 292,
            IQ2_XXS => 66,
            IQ2_XS => 74,
            IQ3_XXS => 98,
            IQ1_S => 50,
            IQ4_NL => 18,
            IQ3_S => 110,
            IQ2_S => 82,
            IQ4_XS => 136,
            IQ1_M => 56,
            TQ1_0 => 54,
            TQ2_0 => 66,
            MXFP4 => 17,
        }
    }

    /// True for block-quantized types (block size > 1).
    pub fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// Bytes of one row of `ncols` weights, or `None` when `ncols` is not a
    /// multiple of the block size or the product overflows.
    pub fn row_bytes(self, ncols: u64) -> Option<u64> {
        let bs = self.block_size() as u64;
        if !ncols.is_multiple_of(bs) {
            return None;
        }
        (ncols / bs).checked_mul(self.type_size() as u64)
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name().to_ascii_uppercase())
    }
}

/// An element type that `convert` carries as raw bytes, never decodes:
/// integers, booleans, f64 and the 8-bit and smaller floats of safetensors
/// (`position_ids`, masks, FP8 checkpoints' weights and scales...).
///
/// [`RawType::id`] is the number the `.weights` container stores (precision
/// code `0x200 + id`, `docs/FORMAT.md` §raw); it never changes for a type.
#[allow(non_camel_case_types, missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum RawType {
    BOOL = 0,
    U8 = 1,
    I8 = 2,
    U16 = 3,
    I16 = 4,
    U32 = 5,
    I32 = 6,
    U64 = 7,
    I64 = 8,
    F64 = 9,
    F8_E4M3 = 10,
    F8_E5M2 = 11,
    F8_E8M0 = 12,
    F6_E2M3 = 13,
    F6_E3M2 = 14,
    F4 = 15,
}

/// Every raw type, in id order.
pub const ALL_RAW_TYPES: [RawType; 16] = {
    use RawType::*;
    [
        BOOL, U8, I8, U16, I16, U32, I32, U64, I64, F64, F8_E4M3, F8_E5M2, F8_E8M0, F6_E2M3,
        F6_E3M2, F4,
    ]
};

impl RawType {
    /// The container id (`precision = 0x200 + id`).
    pub fn id(self) -> u32 {
        self as u32
    }

    /// The type for a container id.
    pub fn from_id(id: u32) -> Option<Self> {
        ALL_RAW_TYPES.iter().copied().find(|t| t.id() == id)
    }

    /// Bits per element.
    pub fn bits(self) -> u64 {
        use RawType::*;
        match self {
            BOOL | U8 | I8 | F8_E4M3 | F8_E5M2 | F8_E8M0 => 8,
            U16 | I16 => 16,
            U32 | I32 => 32,
            U64 | I64 | F64 => 64,
            F6_E2M3 | F6_E3M2 => 6,
            F4 => 4,
        }
    }

    /// The safetensors spelling (`I64`, `BOOL`, `F8_E4M3`, ...).
    pub fn name(self) -> &'static str {
        use RawType::*;
        match self {
            BOOL => "BOOL",
            U8 => "U8",
            I8 => "I8",
            U16 => "U16",
            I16 => "I16",
            U32 => "U32",
            I32 => "I32",
            U64 => "U64",
            I64 => "I64",
            F64 => "F64",
            F8_E4M3 => "F8_E4M3",
            F8_E5M2 => "F8_E5M2",
            F8_E8M0 => "F8_E8M0",
            F6_E2M3 => "F6_E2M3",
            F6_E3M2 => "F6_E3M2",
            F4 => "F4",
        }
    }

    /// Parse the safetensors spelling (exact, upper case).
    pub fn from_name(name: &str) -> Option<Self> {
        ALL_RAW_TYPES.iter().copied().find(|t| t.name() == name)
    }

    /// Bytes of `elements` values, or `None` when they do not fill whole
    /// bytes or the size overflows.
    pub fn bytes_of(self, elements: u64) -> Option<u64> {
        let bits = elements.checked_mul(self.bits())?;
        bits.is_multiple_of(8).then_some(bits / 8)
    }

    /// The raw type of a ggml plain non-float type (`I8`..`I64`, `F64`).
    pub fn of_ggml(t: GgmlType) -> Option<Self> {
        Some(match t {
            GgmlType::I8 => RawType::I8,
            GgmlType::I16 => RawType::I16,
            GgmlType::I32 => RawType::I32,
            GgmlType::I64 => RawType::I64,
            GgmlType::F64 => RawType::F64,
            _ => return None,
        })
    }
}

impl std::fmt::Display for RawType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The element type of a source tensor: a ggml type `convert` can decode
/// (float or block-quantized) or a raw type it only copies.
///
/// ggml's plain non-float types (I8..I64, F64) are always [`Dtype::Raw`]
/// ([`Dtype::of_ggml`] normalizes them), so one type has one spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dtype {
    /// A ggml float or block type.
    Ggml(GgmlType),
    /// Raw bytes of a non-float (or exotic float) type.
    Raw(RawType),
}

impl Dtype {
    /// A GGUF tensor's type, normalized (I8..I64 and F64 become raw).
    pub fn of_ggml(t: GgmlType) -> Self {
        RawType::of_ggml(t).map_or(Dtype::Ggml(t), Dtype::Raw)
    }

    /// The ggml type, if this is one.
    pub fn ggml(self) -> Option<GgmlType> {
        match self {
            Dtype::Ggml(t) => Some(t),
            Dtype::Raw(_) => None,
        }
    }

    /// True for F32, F16 and BF16.
    pub fn is_float(self) -> bool {
        matches!(
            self,
            Dtype::Ggml(GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
        )
    }
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dtype::Ggml(t) => t.fmt(f),
            Dtype::Raw(t) => t.fmt(f),
        }
    }
}

impl From<GgmlType> for Dtype {
    fn from(t: GgmlType) -> Self {
        Dtype::of_ggml(t)
    }
}

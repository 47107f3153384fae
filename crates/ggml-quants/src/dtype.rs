//! The dtype policy of materialized f32 values ([`TorchDtype`]) and the
//! overflow statistics [`crate::materialize_rows`] returns.

use crate::float::round_through_f16;

/// The floating dtype a tensor is materialized as (the `torch_dtype` of a
/// Hugging Face config). Values stay f32 in memory; the dtype decides which
/// rounding they go through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TorchDtype {
    /// Unchanged f32.
    Float32,
    /// Rounded to bfloat16 (nearest, ties to even), back to f32.
    BFloat16,
    /// Rounded to float16 (nearest, ties to even), back to f32; values that
    /// would overflow to +-inf are kept as f32 and counted.
    Float16,
}

impl TorchDtype {
    /// The canonical name (`float32`, `bfloat16`, `float16`).
    pub fn name(self) -> &'static str {
        match self {
            TorchDtype::Float32 => "float32",
            TorchDtype::BFloat16 => "bfloat16",
            TorchDtype::Float16 => "float16",
        }
    }
}

impl std::fmt::Display for TorchDtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A dtype name that is not one of float32|f32|bfloat16|bf16|float16|f16.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown dtype {0:?}: expected float32 (f32), bfloat16 (bf16) or float16 (f16)")]
pub struct ParseDtypeError(pub String);

impl std::str::FromStr for TorchDtype {
    type Err = ParseDtypeError;

    /// Accepts `float32|f32|bfloat16|bf16|float16|f16`, ASCII
    /// case-insensitive, with an optional `torch.` prefix.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        let name = lower.strip_prefix("torch.").unwrap_or(&lower);
        match name {
            "float32" | "f32" => Ok(TorchDtype::Float32),
            "bfloat16" | "bf16" => Ok(TorchDtype::BFloat16),
            "float16" | "f16" => Ok(TorchDtype::Float16),
            _ => Err(ParseDtypeError(s.to_string())),
        }
    }
}

/// The first value whose fp16 rounding overflowed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct F16OverflowAt {
    /// Index of the value (in the slice of the call, or in the whole tensor
    /// after [`MaterializeStats::merge`] with chunk offsets).
    pub index: u64,
    /// The finite f32 value (kept as is in the output).
    pub value: f32,
}

/// What a materialization saw. Only [`TorchDtype::Float16`] can overflow.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MaterializeStats {
    /// Number of finite values whose fp16 rounding is +-inf.
    pub f16_overflows: u64,
    /// The first of them.
    pub first_f16_overflow: Option<F16OverflowAt>,
}

impl MaterializeStats {
    /// True when no value overflowed.
    pub fn is_clean(&self) -> bool {
        self.f16_overflows == 0
    }

    /// Adds the stats of a later chunk whose first value is element
    /// `chunk_start` of the whole tensor (indices of `chunk` are relative to
    /// the chunk). Use it to stream a tensor in row chunks.
    pub fn merge(&mut self, chunk: &MaterializeStats, chunk_start: u64) {
        self.f16_overflows = self.f16_overflows.saturating_add(chunk.f16_overflows);
        if self.first_f16_overflow.is_none() {
            self.first_f16_overflow = chunk.first_f16_overflow.map(|o| F16OverflowAt {
                index: o.index.saturating_add(chunk_start),
                value: o.value,
            });
        }
    }
}

/// The bits of `f32 -> bf16 -> f32` ([`crate::float::round_through_bf16`], round to
/// nearest even; a NaN keeps its top 16 bits and gets the quiet bit) in
/// branch-free integer steps, so the loop over a tensor vectorizes (the
/// `half` call compiled to ~7 instructions per value; this is ~3 at the
/// x86-64 baseline's 4 lanes). The test `bf16_bits_match_half` holds it
/// to `half` over every rounding case and every exponent.
#[inline]
pub(crate) fn bf16_round_bits(b: u32) -> u32 {
    // Adding 0x7FFF plus the kept part's lowest bit carries into bit 16
    // exactly when the dropped half is above the tie, or at it with an odd
    // kept part; overflow runs into the infinity pattern, as in `half`.
    let rounded = b.wrapping_add(0x7FFF + ((b >> 16) & 1)) & 0xFFFF_0000;
    let quiet_nan = (b | 0x0040_0000) & 0xFFFF_0000;
    if b & 0x7FFF_FFFF > 0x7F80_0000 {
        quiet_nan
    } else {
        rounded
    }
}

/// Passes every value through `dtype` in place (see [`TorchDtype`]) and
/// reports fp16 overflows. Indices in the result are relative to `values`.
pub fn apply_dtype(dtype: TorchDtype, values: &mut [f32]) -> MaterializeStats {
    let mut stats = MaterializeStats::default();
    match dtype {
        TorchDtype::Float32 => {}
        TorchDtype::BFloat16 => values
            .iter_mut()
            .for_each(|v| *v = f32::from_bits(bf16_round_bits(v.to_bits()))),
        TorchDtype::Float16 => {
            for (i, v) in values.iter_mut().enumerate() {
                let r = round_through_f16(*v);
                if r.is_infinite() && v.is_finite() {
                    stats.f16_overflows += 1;
                    if stats.first_f16_overflow.is_none() {
                        stats.first_f16_overflow = Some(F16OverflowAt {
                            index: i as u64,
                            value: *v,
                        });
                    }
                } else {
                    *v = r;
                }
            }
        }
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `bf16_round_bits` is `half`'s round trip, bit for bit: every
    /// pattern of the low 17 bits (the dropped half, the kept lowest bit)
    /// under every sign and exponent with three mantissa tops, NaNs and
    /// infinities included, and a stride over all 2^32 patterns.
    #[test]
    fn bf16_bits_match_half() {
        use crate::float::round_through_bf16;
        let check = |b: u32| {
            let want = round_through_bf16(f32::from_bits(b)).to_bits();
            assert_eq!(bf16_round_bits(b), want, "{b:#010x}");
        };
        for high in 0..=0x1FFu32 {
            for top in [0u32, 0x2A, 0x3F] {
                for low in 0..=0x1_FFFFu32 {
                    check((high << 23) | (top << 17) | low);
                }
            }
        }
        (0..=u32::MAX).step_by(65_521).for_each(check);
    }
}

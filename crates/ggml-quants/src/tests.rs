//! Property tests of the crate (byte-exactness against ggml lives in the
//! workspace's `tests/ggml_vectors.rs` and `tests/ggml_models.rs`).

use crate::block::{BlockFormat, WeightedBlockFormat};
use crate::iq4::{BlockIq4Nl, BlockIq4Xs, Iq4Nl, Iq4Xs, KVALUES_IQ4NL};
use crate::k_quants::{
    q3k_scale, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, Q2K, Q3K, Q4K, Q5K, Q6K,
};
use crate::legacy::{
    BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
};
use crate::search::{best_index_int8, nearest_int};
use crate::*;
use std::mem::{align_of, size_of};

/// Deterministic xorshift64* generator.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
    /// Approximately gaussian (Irwin-Hall of 12 uniforms).
    fn gauss(&mut self) -> f32 {
        (0..12).map(|_| self.uniform()).sum::<f32>() - 6.0
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

const QUANTS: [GgmlType; 12] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
];
const FLOATS: [GgmlType; 3] = [GgmlType::F32, GgmlType::F16, GgmlType::BF16];

#[test]
fn block_structs_match_ggml_sizes_and_have_alignment_one() {
    assert_eq!(size_of::<BlockQ4_0>(), 18);
    assert_eq!(size_of::<BlockQ4_1>(), 20);
    assert_eq!(size_of::<BlockQ5_0>(), 22);
    assert_eq!(size_of::<BlockQ5_1>(), 24);
    assert_eq!(size_of::<BlockQ8_0>(), 34);
    assert_eq!(size_of::<BlockQ4K>(), 144);
    assert_eq!(size_of::<BlockQ5K>(), 176);
    assert_eq!(size_of::<BlockQ6K>(), 210);
    assert_eq!(size_of::<BlockQ2K>(), 84);
    assert_eq!(size_of::<BlockQ3K>(), 110);
    assert_eq!(size_of::<BlockIq4Nl>(), 18);
    assert_eq!(size_of::<BlockIq4Xs>(), 136);
    assert_eq!(align_of::<BlockQ8_0>(), 1);
    assert_eq!(align_of::<BlockQ4K>(), 1);
    assert_eq!(align_of::<BlockQ6K>(), 1);
    assert_eq!(align_of::<BlockQ2K>(), 1);
    assert_eq!(align_of::<BlockQ3K>(), 1);
    assert_eq!(align_of::<BlockIq4Nl>(), 1);
    assert_eq!(align_of::<BlockIq4Xs>(), 1);

    fn geometry<F: BlockFormat>() {
        assert_eq!(F::TYPE.block_size(), F::QK, "{}", F::TYPE);
        assert_eq!(F::TYPE.type_size(), F::BYTES, "{}", F::TYPE);
        assert_eq!(size_of::<F::Block>(), F::BYTES, "{}", F::TYPE);
    }
    geometry::<Q4_0>();
    geometry::<Q4_1>();
    geometry::<Q5_0>();
    geometry::<Q5_1>();
    geometry::<Q8_0>();
    geometry::<Q4K>();
    geometry::<Q5K>();
    geometry::<Q6K>();
    geometry::<Q2K>();
    geometry::<Q3K>();
    geometry::<Iq4Nl>();
    geometry::<Iq4Xs>();
}

#[test]
fn support_table() {
    for ty in QUANTS.iter().chain(&FLOATS) {
        assert!(supports_decode(*ty), "{ty}");
        assert!(supports_encode(*ty), "{ty}");
    }
    let mut listed: Vec<GgmlType> = QUANTS.iter().chain(&FLOATS).copied().collect();
    listed.sort();
    assert_eq!(
        listed, SUPPORTED_TYPES,
        "SUPPORTED_TYPES is the list, in id order"
    );
    for ty in [
        GgmlType::Q8_1,
        GgmlType::Q8_K,
        GgmlType::IQ2_XXS,
        GgmlType::IQ3_S,
        GgmlType::TQ1_0,
        GgmlType::MXFP4,
        GgmlType::I32,
    ] {
        assert!(!supports_decode(ty), "{ty}");
        assert!(!supports_encode(ty), "{ty}");
        assert!(!uses_imatrix(ty), "{ty}");
    }
    // The importance-weighted types are the quantized ones but Q8_0.
    for ty in QUANTS {
        assert_eq!(uses_imatrix(ty), ty != GgmlType::Q8_0, "{ty}");
        assert_eq!(IMATRIX_TYPES.contains(&ty), uses_imatrix(ty), "{ty}");
    }
    for ty in FLOATS {
        assert!(!uses_imatrix(ty), "{ty}");
    }
    assert!(IMATRIX_TYPES.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn block_bytes_round_trip_through_the_struct() {
    fn check<F: BlockFormat>(rng: &mut Rng) {
        for _ in 0..20 {
            let bytes = rng.bytes(F::BYTES);
            let block = F::read(&bytes).unwrap();
            let mut back = vec![0u8; F::BYTES];
            F::write(&block, &mut back).unwrap();
            assert_eq!(bytes, back, "{}", F::TYPE);
        }
        assert!(matches!(
            F::read(&vec![0u8; F::BYTES + 1]),
            Err(QuantError::BlockLength { .. })
        ));
        let block = F::read(&vec![0u8; F::BYTES]).unwrap();
        assert!(F::decode(&block, &mut vec![0.0; F::QK - 1]).is_err());
        assert!(F::write(&block, &mut vec![0u8; F::BYTES - 1]).is_err());
        assert!(matches!(
            F::encode(&vec![0.0; F::QK + 1]),
            Err(EncodeError::Length(_))
        ));
    }
    let mut rng = Rng(7);
    check::<Q4_0>(&mut rng);
    check::<Q4_1>(&mut rng);
    check::<Q5_0>(&mut rng);
    check::<Q5_1>(&mut rng);
    check::<Q8_0>(&mut rng);
    check::<Q4K>(&mut rng);
    check::<Q5K>(&mut rng);
    check::<Q6K>(&mut rng);
    check::<Q2K>(&mut rng);
    check::<Q3K>(&mut rng);
    check::<Iq4Nl>(&mut rng);
    check::<Iq4Xs>(&mut rng);
}

/// Relative RMS error of encode -> decode on gaussian rows stays within the
/// precision each format is known for.
#[test]
fn round_trip_error_bounds() {
    let ncols = 1024;
    let rows = 8;
    let mut rng = Rng(42);
    let src: Vec<f32> = (0..ncols * rows).map(|_| 0.02 * rng.gauss()).collect();
    let rms = (src.iter().map(|v| v * v).sum::<f32>() / src.len() as f32).sqrt();
    let bounds = [
        (GgmlType::Q4_0, 0.15),
        (GgmlType::Q4_1, 0.12),
        (GgmlType::Q5_0, 0.07),
        (GgmlType::Q5_1, 0.06),
        (GgmlType::Q8_0, 0.008),
        (GgmlType::Q4_K, 0.10),
        (GgmlType::Q5_K, 0.05),
        (GgmlType::Q6_K, 0.025),
        (GgmlType::Q2_K, 0.40),
        (GgmlType::Q3_K, 0.20),
        (GgmlType::IQ4_NL, 0.12),
        (GgmlType::IQ4_XS, 0.12),
        (GgmlType::F16, 0.001),
        (GgmlType::BF16, 0.005),
        (GgmlType::F32, 0.0),
    ];
    for (ty, bound) in bounds {
        let mut bytes = vec![0u8; rows * row_bytes(ty, ncols).unwrap()];
        quantize_rows(ty, &src, ncols, &mut bytes).unwrap();
        let mut back = vec![0.0f32; src.len()];
        dequantize_rows(ty, &bytes, ncols, &mut back).unwrap();
        let err = (src
            .iter()
            .zip(&back)
            .map(|(a, b)| (a - b) * (a - b))
            .sum::<f32>()
            / src.len() as f32)
            .sqrt();
        assert!(
            err <= bound * rms,
            "{ty}: rel rms error {} > {bound}",
            err / rms
        );
        // Encoding the decoded values again is stable for the symmetric formats.
        if matches!(
            ty,
            GgmlType::Q8_0 | GgmlType::F16 | GgmlType::BF16 | GgmlType::F32
        ) {
            let mut again = vec![0u8; bytes.len()];
            quantize_rows(ty, &back, ncols, &mut again).unwrap();
            assert_eq!(again, bytes, "{ty}: requantization is not idempotent");
        }
    }
}

/// Q8_0's per-value error is at most half a quantization step (plus the
/// fp16 rounding of the scale).
#[test]
fn q8_0_per_value_bound() {
    let mut rng = Rng(3);
    let src: Vec<f32> = (0..32 * 64).map(|_| rng.gauss() * 3.0).collect();
    let mut bytes = vec![0u8; 34 * 64];
    quantize_rows(GgmlType::Q8_0, &src, 32 * 64, &mut bytes).unwrap();
    let mut back = vec![0.0; src.len()];
    dequantize_rows(GgmlType::Q8_0, &bytes, 32 * 64, &mut back).unwrap();
    for (blk, (a, b)) in src.chunks(32).zip(back.chunks(32)).enumerate() {
        let amax = a.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        for (x, y) in a.iter().zip(b) {
            assert!(
                (x - y).abs() <= amax * (0.5 / 127.0 + 1.0 / 1024.0),
                "block {blk}: {x} vs {y}"
            );
        }
    }
}

#[test]
fn zero_rows_encode_to_zero_and_decode_to_zero() {
    for ty in QUANTS.iter().chain(&FLOATS).copied() {
        let src = vec![0.0f32; 512];
        let mut bytes = vec![0xAAu8; row_bytes(ty, 512).unwrap()];
        quantize_rows(ty, &src, 512, &mut bytes).unwrap();
        let mut back = vec![1.0f32; 512];
        dequantize_rows(ty, &bytes, 512, &mut back).unwrap();
        assert!(back.iter().all(|v| *v == 0.0), "{ty}");
    }
}

#[test]
fn decoding_random_bytes_never_panics() {
    let mut rng = Rng(99);
    for ty in QUANTS.iter().chain(&FLOATS).copied() {
        let ncols = 512;
        let bytes = rng.bytes(3 * row_bytes(ty, ncols).unwrap());
        let mut out = vec![0.0; 3 * ncols];
        dequantize_rows(ty, &bytes, ncols, &mut out).unwrap();
        for dtype in [
            TorchDtype::Float32,
            TorchDtype::BFloat16,
            TorchDtype::Float16,
        ] {
            materialize_rows(ty, &bytes, ncols, dtype, &mut out).unwrap();
        }
    }
}

#[test]
fn bad_widths_and_lengths_are_errors() {
    let mut out = vec![0.0f32; 64];
    // Width not a multiple of the block size, zero width.
    for (ty, ncols) in [
        (GgmlType::Q8_0, 48),
        (GgmlType::Q4_K, 32),
        (GgmlType::Q6_K, 0),
        (GgmlType::F32, 0),
    ] {
        let err = dequantize_rows(ty, &[], ncols, &mut out).unwrap_err();
        assert_eq!(
            err,
            QuantError::BadRowWidth {
                ty,
                ncols,
                block_size: ty.block_size()
            }
        );
        let err = quantize_rows(ty, &out, ncols, &mut []).unwrap_err();
        assert!(matches!(err, QuantError::BadRowWidth { .. }), "{err}");
    }
    // out not a whole number of rows.
    let err = dequantize_rows(GgmlType::Q8_0, &[0; 34], 32, &mut [0.0; 33]).unwrap_err();
    assert_eq!(
        err,
        QuantError::PartialRow {
            ty: GgmlType::Q8_0,
            ncols: 32,
            len: 33
        }
    );
    // Byte length off by one in either direction.
    for len in [67, 69] {
        let err = dequantize_rows(GgmlType::Q8_0, &vec![0; len], 32, &mut out).unwrap_err();
        assert_eq!(
            err,
            QuantError::ByteLength {
                ty: GgmlType::Q8_0,
                ncols: 32,
                rows: 2,
                row_bytes: 34,
                expected: 68,
                actual: len
            }
        );
        let err = quantize_rows(GgmlType::Q8_0, &out, 32, &mut vec![0; len]).unwrap_err();
        assert!(
            matches!(err, QuantError::ByteLength { expected: 68, .. }),
            "{err}"
        );
    }
    let err = quantize_rows(GgmlType::F16, &out, 64, &mut [0; 127]).unwrap_err();
    assert!(
        matches!(err, QuantError::ByteLength { expected: 128, .. }),
        "{err}"
    );
    // The messages carry the evidence.
    let msg = dequantize_rows(GgmlType::Q4_K, &[], 100, &mut out)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("100") && msg.contains("256") && msg.contains("Q4_K"),
        "{msg}"
    );
}

#[test]
fn unsupported_types_are_named() {
    let mut out = vec![0.0f32; 256];
    let err = dequantize_rows(GgmlType::IQ2_XXS, &[0; 66], 256, &mut out).unwrap_err();
    assert_eq!(
        err,
        QuantError::Unsupported {
            ty: GgmlType::IQ2_XXS,
            op: Op::Decode
        }
    );
    let err = quantize_rows(GgmlType::IQ3_S, &out, 256, &mut [0; 110]).unwrap_err();
    assert_eq!(
        err,
        QuantError::Unsupported {
            ty: GgmlType::IQ3_S,
            op: Op::Encode
        }
    );
    assert!(err.to_string().contains("IQ3_S"));
    let err = quantize_rows_imatrix(GgmlType::Q8_K, &out, 256, &out, &mut [0; 292]).unwrap_err();
    assert_eq!(
        err,
        QuantError::Unsupported {
            ty: GgmlType::Q8_K,
            op: Op::Encode
        }
    );
    let err = materialize_rows(
        GgmlType::Q8_1,
        &[0; 36],
        32,
        TorchDtype::Float32,
        &mut out[..32],
    )
    .unwrap_err();
    assert!(matches!(
        err,
        QuantError::Unsupported {
            ty: GgmlType::Q8_1,
            ..
        }
    ));
}

#[test]
fn scale_overflow_is_an_error_with_its_position() {
    // Row 1, block 1 of a 2-row x 64-column Q8_0 tensor has |x| = 1e7, so
    // d = 1e7 / 127 > 65504.
    let mut src = vec![0.5f32; 128];
    src[64 + 32 + 5] = -1.0e7;
    let mut dst = vec![0u8; 4 * 34];
    let err = quantize_rows(GgmlType::Q8_0, &src, 64, &mut dst).unwrap_err();
    match err {
        QuantError::ScaleOverflow {
            ty,
            block,
            row,
            block_in_row,
            field,
            value,
        } => {
            assert_eq!(
                (ty, block, row, block_in_row, field),
                (GgmlType::Q8_0, 3, 1, 1, "d")
            );
            assert_eq!(value, 1.0e7 / 127.0);
        }
        other => panic!("unexpected {other:?}"),
    }
    // Just inside the fp16 range is fine: 65504 * 127.
    let mut src = vec![0.0f32; 32];
    src[0] = 65504.0 * 127.0;
    quantize_rows(GgmlType::Q8_0, &src, 32, &mut [0; 34]).unwrap();
    // K-quants and min-carrying formats overflow too.
    let big: Vec<f32> = (0..256)
        .map(|i| if i % 2 == 0 { 1.0e9 } else { -1.0e9 })
        .collect();
    for ty in [
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::Q5_0,
        GgmlType::Q4_1,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::IQ4_NL,
        GgmlType::IQ4_XS,
    ] {
        let mut dst = vec![0u8; row_bytes(ty, 256).unwrap()];
        let err = quantize_rows(ty, &big, 256, &mut dst).unwrap_err();
        assert!(
            matches!(err, QuantError::ScaleOverflow { row: 0, .. }),
            "{ty}: {err}"
        );
        // And with an importance matrix, for every type that takes one.
        let ones = vec![1.0f32; 256];
        let err = quantize_rows_imatrix(ty, &big, 256, &ones, &mut dst).unwrap_err();
        assert!(
            matches!(err, QuantError::ScaleOverflow { row: 0, .. }),
            "{ty} imatrix: {err}"
        );
    }
}

#[test]
fn non_finite_inputs_are_refused_by_block_formats() {
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let mut src = vec![1.0f32; 256];
        src[200] = bad;
        for ty in QUANTS {
            let mut dst = vec![0u8; row_bytes(ty, 256).unwrap()];
            let err = quantize_rows(ty, &src, 256, &mut dst).unwrap_err();
            assert!(
                matches!(err, QuantError::NonFiniteInput { index: 200, .. }),
                "{ty}: {err}"
            );
        }
        // Float formats carry them.
        for ty in FLOATS {
            let mut dst = vec![0u8; row_bytes(ty, 256).unwrap()];
            quantize_rows(ty, &src, 256, &mut dst).unwrap();
            let mut back = vec![0.0; 256];
            dequantize_rows(ty, &dst, 256, &mut back).unwrap();
            assert_eq!(back[200].is_nan(), bad.is_nan(), "{ty}");
            if !bad.is_nan() {
                assert_eq!(back[200], bad, "{ty}");
            }
        }
    }
}

#[test]
fn f16_encode_refuses_overflow() {
    let src = [1.0f32, 65519.0, 65520.0, 2.0];
    let mut dst = [0u8; 8];
    let err = quantize_rows(GgmlType::F16, &src, 1, &mut dst).unwrap_err();
    assert_eq!(
        err,
        QuantError::F16Overflow {
            index: 2,
            value: 65520.0
        }
    );
    quantize_rows(GgmlType::F16, &src[..2], 1, &mut dst[..4]).unwrap();
    assert_eq!(half::f16::from_le_bytes([dst[2], dst[3]]).to_f32(), 65504.0);
}

#[test]
fn materialize_counts_f16_overflows_and_keeps_the_value() {
    let values = [
        1.0f32,
        70000.0,
        -1.0e6,
        65504.0,
        65519.0,
        65520.0,
        f32::INFINITY,
        f32::NAN,
        1.0 + 1.0 / 4096.0,
    ];
    let src: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut out = [0.0f32; 9];
    let stats = materialize_rows(GgmlType::F32, &src, 9, TorchDtype::Float16, &mut out).unwrap();
    assert_eq!(stats.f16_overflows, 3);
    assert_eq!(
        stats.first_f16_overflow,
        Some(F16OverflowAt {
            index: 1,
            value: 70000.0
        })
    );
    assert!(!stats.is_clean());
    assert_eq!(
        &out[..7],
        &[
            1.0,
            70000.0,
            -1.0e6,
            65504.0,
            65504.0,
            65520.0,
            f32::INFINITY
        ]
    );
    assert!(out[7].is_nan());
    assert_eq!(out[8], 1.0, "1 + 2^-12 rounds to 1 in fp16");

    // Float32 and BFloat16 never count; bf16 has the f32 range.
    let stats = materialize_rows(GgmlType::F32, &src, 9, TorchDtype::BFloat16, &mut out).unwrap();
    assert!(stats.is_clean());
    assert_eq!(out[1], 70144.0);
    let stats = materialize_rows(GgmlType::F32, &src, 9, TorchDtype::Float32, &mut out).unwrap();
    assert!(stats.is_clean());
    assert_eq!(out[8], 1.0 + 1.0 / 4096.0);

    // Streaming: merge chunk stats with element offsets.
    let mut total = MaterializeStats::default();
    let mut first_chunk = [0.0f32; 9];
    let clean = [0u8; 36];
    let s1 = materialize_rows(
        GgmlType::F32,
        &clean,
        9,
        TorchDtype::Float16,
        &mut first_chunk,
    )
    .unwrap();
    total.merge(&s1, 0);
    let s2 = materialize_rows(GgmlType::F32, &src, 9, TorchDtype::Float16, &mut out).unwrap();
    total.merge(&s2, 9);
    total.merge(&s2, 18);
    assert_eq!(total.f16_overflows, 6);
    assert_eq!(total.first_f16_overflow.unwrap().index, 10);
}

#[test]
fn materialize_of_a_quantized_row_applies_the_dtype_after_decoding() {
    let mut rng = Rng(5);
    let src: Vec<f32> = (0..256).map(|_| rng.gauss()).collect();
    let mut q = vec![0u8; 210];
    quantize_rows(GgmlType::Q6_K, &src, 256, &mut q).unwrap();
    let mut plain = vec![0.0; 256];
    dequantize_rows(GgmlType::Q6_K, &q, 256, &mut plain).unwrap();
    let mut bf = vec![0.0; 256];
    materialize_rows(GgmlType::Q6_K, &q, 256, TorchDtype::BFloat16, &mut bf).unwrap();
    for (p, b) in plain.iter().zip(&bf) {
        assert_eq!(half::bf16::from_f32(*p).to_f32(), *b);
    }
}

#[test]
fn bf16_rounds_to_nearest_even() {
    let one = 1.0f32.to_bits();
    let cases = [
        (one + 0x8000, 1.0f32),                         // tie, even below
        (one + 0x18000, f32::from_bits(one + 0x20000)), // tie, odd below -> up
        (one + 0x8001, f32::from_bits(one + 0x10000)),  // above the tie
        (one + 0x7fff, 1.0),                            // below the tie
        ((-1.0f32).to_bits() + 0x8000, -1.0),           // negative tie
        (0x7f7f_ffff, f32::INFINITY),                   // f32::MAX rounds up to inf
    ];
    for (bits, expect) in cases {
        let mut out = [0.0f32];
        let src = f32::from_bits(bits).to_le_bytes();
        materialize_rows(GgmlType::F32, &src, 1, TorchDtype::BFloat16, &mut out).unwrap();
        assert_eq!(out[0], expect, "{:#x}", bits);
        let mut enc = [0u8; 2];
        quantize_rows(GgmlType::BF16, &[f32::from_bits(bits)], 1, &mut enc).unwrap();
        assert_eq!(
            u16::from_le_bytes(enc) as u32,
            expect.to_bits() >> 16,
            "{:#x}",
            bits
        );
    }
    // NaN stays NaN (quiet bit set, as ggml does).
    let mut enc = [0u8; 2];
    quantize_rows(GgmlType::BF16, &[f32::from_bits(0x7f80_0001)], 1, &mut enc).unwrap();
    assert_eq!(u16::from_le_bytes(enc), 0x7fc0);
}

#[test]
fn f16_rounds_to_nearest_even() {
    let one = 1.0f32.to_bits();
    let step = 1u32 << 13; // one fp16 ulp at 1.0 in f32 mantissa units
    let cases = [
        (one + step / 2, 1.0f32),
        (one + 3 * step / 2, f32::from_bits(one + 2 * step)),
        (one + step / 2 + 1, f32::from_bits(one + step)),
    ];
    for (bits, expect) in cases {
        let mut out = [0.0f32];
        materialize_rows(
            GgmlType::F32,
            &f32::from_bits(bits).to_le_bytes(),
            1,
            TorchDtype::Float16,
            &mut out,
        )
        .unwrap();
        assert_eq!(out[0], expect, "{:#x}", bits);
    }
}

#[test]
fn nearest_int_matches_ggml_ties_to_even() {
    assert_eq!(nearest_int(2.5), 2);
    assert_eq!(nearest_int(3.5), 4);
    assert_eq!(nearest_int(-2.5), -2);
    assert_eq!(nearest_int(-0.4), 0);
    assert_eq!(nearest_int(4_194_303.0), 4_194_303);
    assert_eq!(nearest_int(-4_194_303.0), -4_194_303);
    // Out of ggml's asserted range: no panic.
    let _ = nearest_int(1.0e30);
    let _ = nearest_int(f32::NAN);
}

#[test]
fn torch_dtype_parses_and_displays() {
    for (s, d) in [
        ("float32", TorchDtype::Float32),
        ("f32", TorchDtype::Float32),
        ("bfloat16", TorchDtype::BFloat16),
        ("BF16", TorchDtype::BFloat16),
        ("float16", TorchDtype::Float16),
        ("f16", TorchDtype::Float16),
        ("torch.float16", TorchDtype::Float16),
    ] {
        assert_eq!(s.parse::<TorchDtype>().unwrap(), d, "{s}");
        assert_eq!(d.to_string().parse::<TorchDtype>().unwrap(), d);
    }
    assert_eq!(TorchDtype::BFloat16.to_string(), "bfloat16");
    let err = "float64".parse::<TorchDtype>().unwrap_err();
    assert!(err.to_string().contains("float64"));
}

/// Rows of the shapes the importance-weighted searches meet: gaussian,
/// heavy-tailed, all positive, with zero runs, tiny and large magnitudes.
fn varied_rows(rng: &mut Rng, ncols: usize) -> Vec<f32> {
    let mut out = Vec::new();
    for kind in 0..8 {
        for c in 0..ncols {
            let g = rng.gauss();
            out.push(match kind {
                0 => 0.02 * g,
                1 => g * g * g,
                2 => g.abs() + 0.1,
                3 if c % 64 < 40 => 0.0,
                3 => g,
                4 => 1.0e-6 * g,
                5 => 3.0e3 * g,
                6 => -g.abs(),
                _ => (c % 32) as f32 - 16.0,
            });
        }
    }
    out
}

fn importance(rng: &mut Rng, ncols: usize) -> Vec<f32> {
    (0..ncols)
        .map(|c| {
            if c % 7 == 3 {
                0.0
            } else {
                let g = rng.gauss();
                (g * g * g * g) + 1e-3
            }
        })
        .collect()
}

#[test]
fn imatrix_argument_errors_are_typed() {
    let src = vec![0.5f32; 512];
    for ty in QUANTS.iter().chain(&FLOATS).copied() {
        let mut dst = vec![0u8; 2 * row_bytes(ty, 256).unwrap()];
        // Wrong length, for every type (also those that ignore the matrix).
        for len in [0, 255, 257, 512] {
            let err = quantize_rows_imatrix(ty, &src, 256, &vec![1.0; len], &mut dst).unwrap_err();
            assert_eq!(
                err,
                QuantError::ImatrixLength {
                    ty,
                    expected: 256,
                    actual: len
                },
                "{ty}"
            );
            assert!(err.is_bad_input());
        }
        // Non-finite or negative importance.
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -1.0, -1e-30] {
            let mut im = vec![1.0f32; 256];
            im[77] = bad;
            let err = quantize_rows_imatrix(ty, &src, 256, &im, &mut dst).unwrap_err();
            match err {
                QuantError::BadImportance {
                    ty: t,
                    index: 77,
                    value,
                } => {
                    assert_eq!(t, ty);
                    assert_eq!(value.to_bits(), bad.to_bits());
                }
                other => panic!("{ty}: {other:?}"),
            }
            let msg = err.to_string();
            assert!(msg.contains("77") && msg.contains(&ty.to_string()), "{msg}");
        }
        // -0.0 and 0.0 are valid importances.
        let mut im = vec![0.0f32; 256];
        im[3] = -0.0;
        quantize_rows_imatrix(ty, &src, 256, &im, &mut dst).unwrap();
        // Geometry is checked first, as in quantize_rows.
        let err = quantize_rows_imatrix(ty, &src, 256, &[1.0; 3], &mut dst[1..]).unwrap_err();
        assert!(matches!(err, QuantError::ByteLength { .. }), "{ty}: {err}");
    }
    // Non-finite inputs are refused with an importance matrix too.
    let mut bad = vec![1.0f32; 512];
    bad[300] = f32::NAN;
    for ty in QUANTS {
        let mut dst = vec![0u8; 2 * row_bytes(ty, 256).unwrap()];
        let err = quantize_rows_imatrix(ty, &bad, 256, &[1.0; 256], &mut dst).unwrap_err();
        assert!(
            matches!(err, QuantError::NonFiniteInput { index: 300, .. }),
            "{ty}: {err}"
        );
    }
}

#[test]
fn types_that_ignore_the_imatrix_write_the_plain_bytes() {
    let mut rng = Rng(11);
    let src = varied_rows(&mut rng, 256);
    let im = importance(&mut rng, 256);
    for ty in [GgmlType::Q8_0, GgmlType::F16, GgmlType::BF16, GgmlType::F32] {
        let n = src.len() / 256 * row_bytes(ty, 256).unwrap();
        let (mut a, mut b) = (vec![0u8; n], vec![0u8; n]);
        quantize_rows(ty, &src, 256, &mut a).unwrap();
        quantize_rows_imatrix(ty, &src, 256, &im, &mut b).unwrap();
        assert_eq!(a, b, "{ty}");
    }
}

/// Importance-weighted bytes are a function of each row alone, unchanged
/// by exact power-of-two scaling of the matrix, different from the plain
/// bytes, and decode to values close to the input.
#[test]
fn imatrix_encoding_properties() {
    let ncols = 512;
    let mut rng = Rng(2024);
    let src = varied_rows(&mut rng, ncols);
    let rows = src.len() / ncols;
    let im = importance(&mut rng, ncols);
    let im4: Vec<f32> = im.iter().map(|v| v * 4.0).collect();
    let im_quarter: Vec<f32> = im.iter().map(|v| v * 0.25).collect();
    for ty in IMATRIX_TYPES {
        let rb = row_bytes(ty, ncols).unwrap();
        let mut all = vec![0u8; rows * rb];
        quantize_rows_imatrix(ty, &src, ncols, &im, &mut all).unwrap();
        for r in 0..rows {
            let mut one = vec![0u8; rb];
            let row = &src[r * ncols..(r + 1) * ncols];
            quantize_rows_imatrix(ty, row, ncols, &im, &mut one).unwrap();
            assert_eq!(one, all[r * rb..(r + 1) * rb], "{ty} row {r}");
        }
        for scaled in [&im4, &im_quarter] {
            let mut again = vec![0u8; rows * rb];
            quantize_rows_imatrix(ty, &src, ncols, scaled, &mut again).unwrap();
            assert_eq!(again, all, "{ty}: power-of-two scaling changed bytes");
        }
        let mut plain = vec![0u8; rows * rb];
        quantize_rows(ty, &src, ncols, &mut plain).unwrap();
        assert_ne!(plain, all, "{ty}: the importance matrix changed nothing");
        let mut back = vec![0.0f32; src.len()];
        dequantize_rows(ty, &all, ncols, &mut back).unwrap();
        assert!(back.iter().all(|v| v.is_finite()), "{ty}");
        // Gaussian row: relative RMS error within what the format allows.
        let (x, y) = (&src[..ncols], &back[..ncols]);
        let rms = (x.iter().map(|v| v * v).sum::<f32>() / ncols as f32).sqrt();
        let err =
            (x.iter().zip(y).map(|(a, b)| (a - b) * (a - b)).sum::<f32>() / ncols as f32).sqrt();
        assert!(err < 0.5 * rms, "{ty}: rel rms error {}", err / rms);
    }
}

#[test]
fn zero_importance_and_zero_rows_are_fine() {
    for ty in IMATRIX_TYPES {
        let rb = row_bytes(ty, 256).unwrap();
        let mut rng = Rng(5);
        let src: Vec<f32> = (0..512)
            .map(|i| if i < 256 { 0.0 } else { rng.gauss() })
            .collect();
        let mut dst = vec![0xAAu8; 2 * rb];
        quantize_rows_imatrix(ty, &src, 256, &[0.0; 256], &mut dst).unwrap();
        let mut back = vec![1.0f32; 512];
        dequantize_rows(ty, &dst, 256, &mut back).unwrap();
        assert!(back[..256].iter().all(|v| *v == 0.0), "{ty}: zero row");
        assert!(back.iter().all(|v| v.is_finite()), "{ty}");
    }
}

#[test]
fn weighted_block_encode_checks_lengths() {
    fn check<F: WeightedBlockFormat>() {
        let x = vec![1.0f32; F::QK];
        assert!(F::encode_weighted(&x, &x, 1.0).is_ok(), "{}", F::TYPE);
        for (src, qw) in [(F::QK + 1, F::QK), (F::QK, F::QK - 1)] {
            let err = F::encode_weighted(&vec![1.0; src], &vec![1.0; qw], 1.0).unwrap_err();
            assert!(
                matches!(err, EncodeError::Length(QuantError::BlockLength { .. })),
                "{}",
                F::TYPE
            );
        }
    }
    check::<Q4_0>();
    check::<Q4_1>();
    check::<Q5_0>();
    check::<Q5_1>();
    check::<Q2K>();
    check::<Q3K>();
    check::<Q4K>();
    check::<Q5K>();
    check::<Q6K>();
    check::<Iq4Nl>();
    check::<Iq4Xs>();
}

#[test]
fn best_index_int8_picks_the_nearest_level_ties_up() {
    let v = &KVALUES_IQ4NL;
    assert_eq!(best_index_int8(v, -1000.0), 0);
    assert_eq!(best_index_int8(v, -127.0), 0);
    assert_eq!(best_index_int8(v, 113.0), 15);
    assert_eq!(best_index_int8(v, 1e9), 15);
    assert_eq!(best_index_int8(v, 0.0), 8); // -10 and 1: 1 is nearer
    assert_eq!(best_index_int8(v, -4.5), 8); // tie between -10 and 1 goes up
    assert_eq!(best_index_int8(v, -4.6), 7);
    assert_eq!(best_index_int8(v, f32::NAN), 15); // no panic
    for (i, &level) in v.iter().enumerate() {
        assert_eq!(best_index_int8(v, level as f32), i);
    }
}

#[test]
fn packed_scales_unpack_as_ggml_does() {
    // Q3_K: packing any 16 6-bit scales and unpacking gives them back.
    let mut rng = Rng(17);
    for _ in 0..50 {
        let ls: [i32; 16] = std::array::from_fn(|_| (rng.next_u64() % 64) as i32);
        let sc = BlockQ3K::pack_scales(&ls);
        for (j, l) in ls.iter().enumerate() {
            assert_eq!(q3k_scale(j, &sc) as i32, l - 32, "sub-block {j}");
        }
    }
    // Q3_K decode, against the layout written out weight by weight: sub-block
    // k / 16, low bits in byte 32 * (k / 128) + k % 32 at shift
    // 2 * ((k % 128) / 32), high bit k / 32 of hmask byte k % 32.
    for _ in 0..20 {
        let block = Q3K::read(&rng.bytes(110)).unwrap();
        let mut y = [0.0f32; 256];
        Q3K::decode(&block, &mut y).unwrap();
        let d = half::f16::from_le_bytes(block.d).to_f32();
        for (k, v) in y.iter().enumerate() {
            let low = (block.qs[32 * (k / 128) + k % 32] >> (2 * ((k % 128) / 32))) & 3;
            let high = (block.hmask[k % 32] >> (k / 32)) & 1;
            let q = low as i32 - if high == 1 { 0 } else { 4 };
            let want = d * q3k_scale(k / 16, &block.scales) as f32 * q as f32;
            assert_eq!(v.to_bits(), want.to_bits(), "weight {k}");
        }
    }
    // IQ4_XS: scale(ib) reassembles the nibble and the 2-bit pair.
    let block = BlockIq4Xs {
        d: [0; 2],
        scales_h: (0b11_10_01_00_11_10_01_00u16).to_le_bytes(),
        scales_l: [0x21, 0x43, 0x65, 0x87],
        qs: [0; 128],
    };
    let want = [0x01, 0x12, 0x23, 0x34, 0x05, 0x16, 0x27, 0x38];
    for (ib, w) in want.iter().enumerate() {
        assert_eq!(block.scale(ib), *w, "sub-block {ib}");
    }
}

//! MoE expert tensors (`fixtures/gguf-variants/moe.gguf`, written with
//! gguf-py by `scripts/make_gguf_variants.py`): keep mode gives each 3-D
//! quantized expert tensor one sidecar whose experts un-interleave to the
//! source bytes, `verify` passes on every expert, the kernels' expert
//! selection equals the 2-D GEMV of that expert's source bytes, and the
//! plan, manifest and `inspect` show the expert count.

mod common;

use common::{assert_deterministic, convert, convert_into, fixture, manifest, stderr};
use kernels::aligned::AlignedBytes;
use kernels::{Exec, Gemv, GgmlExperts, GgmlMatrix, Isa, QuantFormat, RowLayout, Workspace};
use model_sources::Catalogue;
use weights_file::{interleave, SidecarShape, WeightsFile};

const MODEL: &str = "gguf-variants/moe.gguf";

/// The quantized expert tensors of the fixture: (name, experts, N, K).
const EXPERTS: [(&str, u64, u64, u64); 3] = [
    ("blk.0.ffn_gate_exps.weight", 4, 12, 256),
    ("blk.0.ffn_up_exps.weight", 4, 12, 256),
    ("blk.1.ffn_gate_exps.weight", 4, 5, 1024),
];

fn entry<'m>(m: &'m serde_json::Value, name: &str) -> &'m serde_json::Value {
    m["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["tensor"] == name)
        .unwrap_or_else(|| panic!("{name} not in the manifest"))
}

#[test]
fn expert_sidecars_unpack_to_the_source_bytes_expert_by_expert() {
    let tmp = tempfile::tempdir().unwrap();
    let src = Catalogue::open(&fixture(MODEL)).unwrap();
    for factor in [4usize, 8] {
        let out = tmp.path().join(format!("r{factor}"));
        let o = convert_into(
            &fixture(MODEL),
            &out,
            &["--interleave", &factor.to_string()],
        );
        assert!(o.status.success(), "R{factor}: {}", stderr(&o));
        let m = manifest(&out);
        for (name, e, n, k) in EXPERTS {
            let en = entry(&m, name);
            assert_eq!(en["layout"], format!("ggml_r{factor}"), "{name}");
            assert_eq!(en["details"]["experts"], e, "{name}");
            let file = en["file"].as_str().unwrap();
            let bytes = std::fs::read(out.join(file)).unwrap();
            let f = WeightsFile::parse(&bytes).unwrap();
            let h = f.header();
            assert_eq!(h.sidecar_shape(), Some(SidecarShape::experts(e, n, k)));
            assert_eq!(h.interleave().unwrap().factor(), factor);
            let t = src.get(name).unwrap();
            let source = src.data(t);
            let ty = t.dtype.ggml().unwrap();
            let (eb, rb, bb) = (
                source.len() / e as usize,
                source.len() / (e * n) as usize,
                ty.type_size(),
            );
            assert_eq!(f.data().len(), source.len(), "{name}: same size");
            for x in 0..e as usize {
                let stored = &f.data()[x * eb..(x + 1) * eb];
                let want = &source[x * eb..(x + 1) * eb];
                let mut un = vec![0u8; eb];
                interleave::unpack(stored, n as usize, rb, bb, factor, &mut un).unwrap();
                assert!(
                    un == want,
                    "{name} R{factor} expert {x}: unpacked bytes differ"
                );
                if n as usize >= factor {
                    assert!(stored != want, "{name} R{factor} expert {x}: interleaved");
                }
            }
        }
        // The float expert tensor stays, and says why.
        let down = entry(&m, "blk.0.ffn_down_exps.weight");
        assert_eq!(down["layout"], "source");
        assert_eq!(
            down["details"]["reason"],
            "3-D float expert tensor: --qtype quantizes 2-D matrices only"
        );
    }
}

/// The Q4_K expert tensor holds ggml's own bytes (the `quantized` rows of
/// `fixtures/ggml-vectors/q4_k.gguf`): its experts, un-interleaved and
/// concatenated, are those bytes.
#[test]
fn q4_k_experts_are_ggmls_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let o = convert_into(&fixture(MODEL), &out, &["--interleave", "4"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let vectors = Catalogue::open(&fixture("ggml-vectors/q4_k.gguf")).unwrap();
    let ggml = vectors.data(vectors.get("quantized").unwrap());
    let m = manifest(&out);
    let file = entry(&m, "blk.1.ffn_gate_exps.weight")["file"]
        .as_str()
        .unwrap()
        .to_string();
    let bytes = std::fs::read(out.join(file)).unwrap();
    let f = WeightsFile::parse(&bytes).unwrap();
    let (eb, rb) = (5 * 576, 576);
    let mut all = Vec::new();
    for stored in f.data().chunks(eb) {
        let mut un = vec![0u8; eb];
        interleave::unpack(stored, 5, rb, 144, 4, &mut un).unwrap();
        all.extend_from_slice(&un);
    }
    assert!(all == ggml, "un-interleaved experts = ggml's Q4_K rows");
}

/// `convert verify` runs every expert of every expert sidecar on every ISA.
#[test]
fn verify_passes_on_every_expert() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let o = convert_into(&fixture(MODEL), &out, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = convert(["verify".as_ref(), out.as_os_str()]);
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(o.status.success(), "{text}{}", stderr(&o));
    for (name, e, n, k) in EXPERTS {
        let rows: Vec<&str> = text.lines().filter(|l| l.starts_with(name)).collect();
        assert_eq!(
            rows.len(),
            kernels::available().len(),
            "{name}: one row per ISA\n{text}"
        );
        for r in rows {
            assert!(r.contains(&format!("{e}x{n}x{k} (experts)")), "{r}");
            assert!(r.contains("pass"), "{r}");
        }
    }
    // A flipped scale byte inside the last expert fails verify (exit 1).
    let m = manifest(&out);
    let file = entry(&m, "blk.0.ffn_gate_exps.weight")["file"]
        .as_str()
        .unwrap()
        .to_string();
    let path = out.join(&file);
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 34; // the last Q8_0 block (a tail row of expert 3)
    bytes[last..last + 2].copy_from_slice(&0x7C00u16.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let o = convert(["verify".as_ref(), "--no-hash".as_ref(), out.as_os_str()]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(stderr(&o).contains(&file), "{}", stderr(&o));
}

/// The kernels' expert selection over the sidecar's bytes equals, on every
/// tier, the scalar 2-D GEMV of that expert's plain source bytes.
#[test]
fn expert_selection_equals_the_2d_gemv_of_the_source_expert() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let o = convert_into(&fixture(MODEL), &out, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let src = Catalogue::open(&fixture(MODEL)).unwrap();
    let m = manifest(&out);
    for (name, e, n, k) in EXPERTS {
        let (e, n, k) = (e as usize, n as usize, k as usize);
        let file = entry(&m, name)["file"].as_str().unwrap().to_string();
        let bytes = AlignedBytes::copy_of(&std::fs::read(out.join(file)).unwrap());
        let f = WeightsFile::parse(bytes.as_slice()).unwrap();
        let ex = GgmlExperts::from_file(&f).unwrap();
        assert_eq!((ex.experts(), ex.rows(), ex.cols()), (e, n, k));
        assert!(
            GgmlMatrix::from_file(&f).is_err(),
            "{name}: not a 2-D matrix"
        );
        let t = src.get(name).unwrap();
        let format = QuantFormat::from_ggml(t.dtype.ggml().unwrap()).unwrap();
        let source = src.data(t);
        let eb = source.len() / e;
        let x: Vec<f32> = (0..k)
            .map(|i| ((i * 7919) % 101) as f32 / 50.0 - 1.0)
            .collect();
        let mut ws = Workspace::new();
        for xe in 0..e {
            let plain = GgmlMatrix::new(
                format,
                RowLayout::RowMajor,
                n,
                k,
                &source[xe * eb..(xe + 1) * eb],
            )
            .unwrap();
            let mut want = vec![0f32; n];
            plain
                .gemv(&x, &mut want, &mut ws, Exec::new(Isa::Scalar, false))
                .unwrap();
            for isa in kernels::available() {
                let mut got = vec![f32::NAN; n];
                ex.gemv_expert(xe, &x, &mut got, &mut ws, Exec::new(isa, true))
                    .unwrap();
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{name} expert {xe} {isa}");
            }
        }
    }
}

/// The plan, `inspect` of the source and of the bundle show the experts;
/// the bundle is the same to the byte for any thread count.
#[test]
fn plan_and_inspect_show_the_experts_and_output_is_deterministic() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let o = convert([fixture(MODEL).as_os_str(), out.as_os_str()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let plan = String::from_utf8_lossy(&o.stdout).to_string() + &stderr(&o);
    assert!(plan.contains("Q8_0 R8 sidecar, 4 experts"), "{plan}");
    let o = convert(["inspect".as_ref(), fixture(MODEL).as_os_str()]);
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let line = text
        .lines()
        .find(|l| l.starts_with("blk.1.ffn_gate_exps.weight"))
        .unwrap();
    assert!(line.ends_with("expert sidecar (4 experts)"), "{line}");
    let o = convert(["inspect".as_ref(), out.as_os_str()]);
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let line = text
        .lines()
        .find(|l| l.starts_with("blk.0.ffn_up_exps"))
        .unwrap();
    assert!(line.ends_with("4 experts"), "{line}");
    let line = text.lines().find(|l| l.contains("4x256x12")).unwrap();
    assert!(
        line.ends_with("stays: 3-D float expert tensor: --qtype quantizes 2-D matrices only"),
        "{line}"
    );
    assert_deterministic(tmp.path(), MODEL, &["--interleave", "4"]);
}

/// `convert qdq` of an expert bundle exports every expert tensor as
/// ggml's dequantization of the source tensor, bit for bit.
#[test]
fn qdq_exports_every_expert() {
    use model_sources::gguf::GgufFile;
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let o = convert_into(&fixture(MODEL), &out, &["--interleave", "4"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let q = tmp.path().join("q");
    let src_path = fixture(MODEL);
    let o = convert([
        "qdq".as_ref(),
        out.as_os_str(),
        q.as_os_str(),
        "-q".as_ref(),
        "--format".as_ref(),
        "gguf".as_ref(),
        "--source".as_ref(),
        src_path.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let src = GgufFile::open(&src_path).unwrap();
    let got = GgufFile::open(&q.join("model.gguf")).unwrap();
    for (name, e, n, k) in EXPERTS {
        let s = src.tensors().iter().find(|t| t.name == name).unwrap();
        let t = got.tensors().iter().find(|t| t.name == name).unwrap();
        assert_eq!(t.dims, vec![k, n, e], "{name}");
        let mut want = vec![0f32; (e * n * k) as usize];
        ggml_quants::dequantize_rows(s.ggml_type, src.tensor_data(s), k as usize, &mut want)
            .unwrap();
        let got_vals: Vec<u32> = got
            .tensor_data(t)
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let want_bits: Vec<u32> = want.iter().map(|v| v.to_bits()).collect();
        assert!(got_vals == want_bits, "{name}: qdq = ggml's dequantization");
    }
}

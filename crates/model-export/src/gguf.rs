//! GGUF v3 with F32 tensors: the header (magic, version, counts), the
//! key/values, the tensor infos (dimensions in ggml `ne` order, the
//! innermost first), zero padding to the alignment, then each tensor's
//! bytes at its aligned offset.

use std::io::Write;

use model_sources::gguf::{Value, DEFAULT_ALIGNMENT, GGUF_MAGIC, MAX_DIMS};

use crate::{f32_bytes, ExportError, Sequence, TensorSpec};

/// The version written.
pub const VERSION: u32 = 3;
/// ggml's type id of F32.
const GGML_TYPE_F32: u32 = 0;

/// Writes F32 tensors to a GGUF stream.
#[derive(Debug)]
pub struct GgufWriter<W: Write> {
    w: W,
    seq: Sequence,
    alignment: u64,
}

fn string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(*x)),
        Value::String(s) => string(out, s),
        Value::Array(t, items) => {
            out.extend_from_slice(&t.id().to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for i in items {
                value(out, i);
            }
        }
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}

fn pad_to(len: u64, alignment: u64) -> u64 {
    len.div_ceil(alignment) * alignment - len
}

impl<W: Write> GgufWriter<W> {
    /// Write the header: `metadata` (in this order; `general.alignment`,
    /// when present as a u32, sets the alignment) and the infos of
    /// `tensors` (in this order).
    pub fn new(
        mut w: W,
        metadata: &[(String, Value)],
        tensors: &[TensorSpec],
    ) -> Result<Self, ExportError> {
        let seq = Sequence::new(tensors)?;
        let alignment = metadata
            .iter()
            .find(|(k, _)| k == "general.alignment")
            .and_then(|(_, v)| match v {
                Value::U32(a) if *a > 0 && a.is_power_of_two() => Some(u64::from(*a)),
                _ => None,
            })
            .unwrap_or(DEFAULT_ALIGNMENT);
        let mut h = Vec::new();
        h.extend_from_slice(&GGUF_MAGIC.to_le_bytes());
        h.extend_from_slice(&VERSION.to_le_bytes());
        h.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
        h.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
        for (k, v) in metadata {
            string(&mut h, k);
            h.extend_from_slice(&v.value_type().id().to_le_bytes());
            value(&mut h, v);
        }
        let mut offset = 0u64;
        for (spec, (_, n)) in tensors.iter().zip(&seq.tensors) {
            if spec.shape.is_empty() || spec.shape.len() > MAX_DIMS {
                return Err(ExportError::Unsupported {
                    name: spec.name.clone(),
                    why: format!(
                        "{} dimensions (GGUF holds 1 to {MAX_DIMS})",
                        spec.shape.len()
                    ),
                });
            }
            string(&mut h, &spec.name);
            h.extend_from_slice(&(spec.shape.len() as u32).to_le_bytes());
            for d in spec.shape.iter().rev() {
                h.extend_from_slice(&d.to_le_bytes());
            }
            h.extend_from_slice(&GGML_TYPE_F32.to_le_bytes());
            h.extend_from_slice(&offset.to_le_bytes());
            let bytes = n * 4;
            offset = offset
                .checked_add(bytes + pad_to(bytes, alignment))
                .ok_or_else(|| ExportError::TooLarge(spec.name.clone()))?;
        }
        let pad = pad_to(h.len() as u64, alignment) as usize;
        h.resize(h.len() + pad, 0);
        w.write_all(&h)?;
        Ok(GgufWriter { w, seq, alignment })
    }

    /// The values of the next tensor (row-major).
    pub fn write_tensor(&mut self, values: &[f32]) -> Result<(), ExportError> {
        let n = self.seq.take(values.len())?;
        self.w.write_all(&f32_bytes(values))?;
        let pad = pad_to(n * 4, self.alignment);
        self.w.write_all(&vec![0u8; pad as usize])?;
        Ok(())
    }

    /// Check every tensor was written; return the sink.
    pub fn finish(mut self) -> Result<W, ExportError> {
        self.seq.check_done()?;
        self.w.flush()?;
        Ok(self.w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use model_sources::gguf::{GgufFile, ValueType};

    #[test]
    fn the_project_reader_reads_what_we_write() {
        let meta = vec![
            (
                "general.architecture".to_string(),
                Value::String("llama".into()),
            ),
            ("llama.block_count".to_string(), Value::U32(1)),
            ("x.eps".to_string(), Value::F32(1e-5)),
            (
                "tokenizer.ggml.tokens".to_string(),
                Value::Array(
                    ValueType::String,
                    vec![Value::String("a".into()), Value::String("bc".into())],
                ),
            ),
        ];
        let specs = vec![
            TensorSpec {
                name: "w".into(),
                shape: vec![3, 5],
            },
            TensorSpec {
                name: "n".into(),
                shape: vec![7],
            },
        ];
        let mut g = GgufWriter::new(Vec::new(), &meta, &specs).unwrap();
        let w: Vec<f32> = (0..15).map(|i| i as f32 * 0.5 - 3.0).collect();
        let n: Vec<f32> = (0..7).map(|i| 1.0 / (i as f32 + 1.0)).collect();
        g.write_tensor(&w).unwrap();
        g.write_tensor(&n).unwrap();
        let bytes = g.finish().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.gguf");
        std::fs::write(&p, &bytes).unwrap();
        let f = GgufFile::open(&p).unwrap();
        assert_eq!(f.metadata(), &meta[..]);
        let infos = f.tensors();
        assert_eq!(infos[0].shape(), vec![3, 5]);
        assert_eq!(infos[1].dims, vec![7]);
        assert_eq!(infos[1].offset % 32, 0);
        let back = |i: usize| -> Vec<f32> {
            f.tensor_data(&infos[i])
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect()
        };
        assert_eq!(back(0), w);
        assert_eq!(back(1), n);
    }

    #[test]
    fn five_dimensions_are_refused() {
        let specs = vec![TensorSpec {
            name: "x".into(),
            shape: vec![1, 1, 1, 1, 1],
        }];
        assert!(matches!(
            GgufWriter::new(Vec::new(), &[], &specs),
            Err(ExportError::Unsupported { .. })
        ));
    }
}

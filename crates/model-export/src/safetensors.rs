//! safetensors: an 8-byte little-endian header length, the JSON header
//! (padded with spaces to a multiple of 8), then the tensors' bytes back to
//! back in header order.

use std::io::Write;

use serde_json::{json, Map, Value};

use crate::{f32_bytes, ExportError, Sequence, TensorSpec};

/// Writes F32 tensors to a safetensors stream.
#[derive(Debug)]
pub struct SafetensorsWriter<W: Write> {
    w: W,
    seq: Sequence,
}

impl<W: Write> SafetensorsWriter<W> {
    /// Write the header of `tensors` (in this order) with `metadata` as
    /// `__metadata__` (string values only, as the format requires).
    pub fn new(
        mut w: W,
        tensors: &[TensorSpec],
        metadata: &[(String, String)],
    ) -> Result<Self, ExportError> {
        let seq = Sequence::new(tensors)?;
        let mut header = Map::new();
        if !metadata.is_empty() {
            let m: Map<String, Value> = metadata
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect();
            header.insert("__metadata__".into(), Value::Object(m));
        }
        let mut offset = 0u64;
        for (spec, (_, n)) in tensors.iter().zip(&seq.tensors) {
            let end = offset
                .checked_add(n * 4)
                .ok_or_else(|| ExportError::TooLarge(spec.name.clone()))?;
            header.insert(
                spec.name.clone(),
                json!({ "dtype": "F32", "shape": spec.shape, "data_offsets": [offset, end] }),
            );
            offset = end;
        }
        let mut text = Value::Object(header).to_string().into_bytes();
        while !text.len().is_multiple_of(8) {
            text.push(b' ');
        }
        w.write_all(&(text.len() as u64).to_le_bytes())?;
        w.write_all(&text)?;
        Ok(SafetensorsWriter { w, seq })
    }

    /// The values of the next tensor.
    pub fn write_tensor(&mut self, values: &[f32]) -> Result<(), ExportError> {
        self.seq.take(values.len())?;
        self.w.write_all(&f32_bytes(values))?;
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

    #[test]
    fn the_safetensors_crate_reads_what_we_write() {
        let specs = vec![
            TensorSpec {
                name: "b.weight".into(),
                shape: vec![2, 3],
            },
            TensorSpec {
                name: "a.bias".into(),
                shape: vec![1],
            },
        ];
        let mut w = SafetensorsWriter::new(
            Vec::new(),
            &specs,
            &[("format".to_string(), "pt".to_string())],
        )
        .unwrap();
        w.write_tensor(&[1.0, -2.0, 3.5, 0.0, f32::MIN_POSITIVE, 7.0])
            .unwrap();
        assert!(matches!(
            w.write_tensor(&[1.0, 2.0]),
            Err(ExportError::Length { .. })
        ));
        w.write_tensor(&[-0.25]).unwrap();
        let bytes = w.finish().unwrap();
        let st = ::safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let b = st.tensor("b.weight").unwrap();
        assert_eq!(b.shape(), &[2, 3]);
        assert_eq!(b.dtype(), ::safetensors::Dtype::F32);
        let vals: Vec<f32> = b
            .data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(vals, [1.0, -2.0, 3.5, 0.0, f32::MIN_POSITIVE, 7.0]);
        assert_eq!(
            st.tensor("a.bias").unwrap().data(),
            (-0.25f32).to_le_bytes()
        );
        let (_, meta) = ::safetensors::SafeTensors::read_metadata(&bytes).unwrap();
        assert_eq!(
            meta.metadata()
                .as_ref()
                .unwrap()
                .get("format")
                .map(String::as_str),
            Some("pt")
        );
    }

    #[test]
    fn finish_refuses_a_missing_tensor() {
        let specs = vec![TensorSpec {
            name: "x".into(),
            shape: vec![4],
        }];
        let w = SafetensorsWriter::new(Vec::new(), &specs, &[]).unwrap();
        assert!(matches!(
            w.finish(),
            Err(ExportError::Incomplete { missing: 1 })
        ));
    }
}

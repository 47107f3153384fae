//! Streaming writers of f32 tensors in the two formats users evaluate
//! models with: GGUF (llama.cpp) and safetensors (Hugging Face).
//!
//! Both take the list of tensors first (their headers name every offset),
//! then the values of one tensor at a time, in that order, so memory stays
//! at one tensor whatever the model's size. The byte layouts are in
//! `docs/FORMAT.md` §qdq.

#![deny(missing_docs)]

pub mod gguf;
pub mod safetensors;

/// A tensor to write: its name and row-major shape (outermost first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    /// Name in the file.
    pub name: String,
    /// Row-major shape, outermost first.
    pub shape: Vec<u64>,
}

impl TensorSpec {
    /// Number of values, `None` on overflow.
    pub fn elements(&self) -> Option<u64> {
        self.shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d))
    }
}

/// What can go wrong while writing.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The sink failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// A shape whose byte size overflows u64.
    #[error("tensor {0}: its size overflows")]
    TooLarge(String),
    /// The format cannot hold this tensor (e.g. more than 4 GGUF dimensions).
    #[error("tensor {name}: {why}")]
    Unsupported {
        /// Tensor name.
        name: String,
        /// Why.
        why: String,
    },
    /// Values of the wrong length, or more tensors than announced.
    #[error("tensor {name}: expected {expected} values, got {got}")]
    Length {
        /// Tensor name (or `"<none>"` past the last).
        name: String,
        /// Announced.
        expected: u64,
        /// Given.
        got: u64,
    },
    /// `finish` before every tensor was written.
    #[error("{missing} announced tensors were never written")]
    Incomplete {
        /// How many.
        missing: usize,
    },
}

/// Little-endian bytes of `values`.
fn f32_bytes(values: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * 4);
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

/// Shared bookkeeping: the announced tensors and which comes next.
#[derive(Debug)]
struct Sequence {
    tensors: Vec<(String, u64)>,
    next: usize,
}

impl Sequence {
    fn new(specs: &[TensorSpec]) -> Result<Self, ExportError> {
        let tensors = specs
            .iter()
            .map(|s| {
                let n = s
                    .elements()
                    .filter(|n| n.checked_mul(4).is_some())
                    .ok_or_else(|| ExportError::TooLarge(s.name.clone()))?;
                Ok((s.name.clone(), n))
            })
            .collect::<Result<_, ExportError>>()?;
        Ok(Sequence { tensors, next: 0 })
    }

    fn take(&mut self, got: usize) -> Result<u64, ExportError> {
        let Some((name, n)) = self.tensors.get(self.next) else {
            return Err(ExportError::Length {
                name: "<none>".into(),
                expected: 0,
                got: got as u64,
            });
        };
        if *n != got as u64 {
            return Err(ExportError::Length {
                name: name.clone(),
                expected: *n,
                got: got as u64,
            });
        }
        self.next += 1;
        Ok(*n)
    }

    fn check_done(&self) -> Result<(), ExportError> {
        match self.tensors.len() - self.next {
            0 => Ok(()),
            missing => Err(ExportError::Incomplete { missing }),
        }
    }
}

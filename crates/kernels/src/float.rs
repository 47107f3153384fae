//! Plain FP16 / FP32 matrices: an f32 GEMV (`y_n = sum_k w_nk * x_k`,
//! sequential in `k`, products rounded then added) for `convert verify`.
//! There is one (scalar) implementation: these files are not a kernel
//! target of this crate.

use weights_file::{Precision, WeightsFile};

use crate::dispatch::{split_rows, Exec};
use crate::error::{check_len, KernelError};
use crate::gemv::{Dims, Gemv, GemvResult};
use crate::workspace::Workspace;

/// Element type of a plain matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloatType {
    /// IEEE half.
    F16,
    /// IEEE single.
    F32,
}

/// A plain row-major float matrix `[N, K]` (1-D tensors are `[1, K]`, more
/// dims fold into rows).
#[derive(Debug, Clone, Copy)]
pub struct FloatMatrix<'a> {
    ty: FloatType,
    n: usize,
    k: usize,
    data: &'a [u8],
}

impl<'a> FloatMatrix<'a> {
    /// A matrix over `data`.
    pub fn new(ty: FloatType, n: usize, k: usize, data: &'a [u8]) -> Result<Self, KernelError> {
        let es = match ty {
            FloatType::F16 => 2,
            FloatType::F32 => 4,
        };
        let bytes = n
            .checked_mul(k)
            .and_then(|v| v.checked_mul(es))
            .ok_or_else(|| KernelError::Shape(format!("{n} x {k} overflows")))?;
        check_len("float data", bytes, data.len())?;
        Ok(FloatMatrix { ty, n, k, data })
    }

    /// The matrix of a plain FP16 / FP32 container.
    pub fn from_file(f: &WeightsFile<'a>) -> Result<Self, KernelError> {
        let h = f.header();
        let ty = match h.precision() {
            Some(Precision::Fp16) => FloatType::F16,
            Some(Precision::Fp32) => FloatType::F32,
            _ => {
                return Err(KernelError::Unsupported(format!(
                    "precision {:#x} is not FP16/FP32",
                    h.precision
                )))
            }
        };
        let shape = h.shape();
        let dim = |d: u64| usize::try_from(d).map_err(|_| KernelError::Shape("dims".into()));
        let k = dim(*shape.last().unwrap_or(&1))?;
        let mut n = 1usize;
        for &d in &shape[..shape.len().saturating_sub(1)] {
            n = n
                .checked_mul(dim(d)?)
                .ok_or_else(|| KernelError::Shape("dims overflow".into()))?;
        }
        Self::new(ty, n, k, f.data())
    }

    /// The element type.
    pub fn float_type(&self) -> FloatType {
        self.ty
    }

    /// Weight `(row, col)` as f32 (exact).
    pub fn at(&self, row: usize, col: usize) -> f32 {
        let i = row * self.k + col;
        match self.ty {
            FloatType::F16 => {
                ggml_quants::float::fp16_to_f32([self.data[2 * i], self.data[2 * i + 1]])
            }
            FloatType::F32 => f32::from_le_bytes([
                self.data[4 * i],
                self.data[4 * i + 1],
                self.data[4 * i + 2],
                self.data[4 * i + 3],
            ]),
        }
    }

    /// Row `row`'s weights as f32 (exact) into `out` (`k` values): what
    /// [`FloatMatrix::at`] gives for each column, a row at a time.
    pub fn row_into(&self, row: usize, out: &mut [f32]) {
        let k = self.k;
        assert!(
            row < self.n && out.len() == k,
            "row {row} into {} values",
            out.len()
        );
        match self.ty {
            FloatType::F16 => ggml_quants::float::fp16_slice_to_f32(
                &self.data[2 * k * row..2 * k * (row + 1)],
                out,
            ),
            FloatType::F32 => {
                let bytes = &self.data[4 * k * row..4 * k * (row + 1)];
                for (o, b) in out.iter_mut().zip(bytes.as_chunks::<4>().0) {
                    *o = f32::from_le_bytes(*b);
                }
            }
        }
    }

    /// `sum_c w[row][c] * x[c]` in f32, sequential in `c` (`w` is the
    /// row's values in `buf`).
    fn row_dot(&self, row: usize, x: &[f32], buf: &mut [f32]) -> f32 {
        self.row_into(row, buf);
        let mut acc = 0f32;
        for (&w, &xv) in buf.iter().zip(x) {
            acc += w * xv;
        }
        acc
    }
}

impl Gemv for FloatMatrix<'_> {
    fn dims(&self) -> Dims {
        Dims::new(self.n, self.k, self.data.len())
    }
    /// `exec.isa` is ignored (one scalar implementation); one row of `X`
    /// after the other (no activations to share).
    fn gemm_sized(
        &self,
        m: usize,
        x: &[f32],
        y: &mut [f32],
        _: &mut Workspace,
        exec: Exec,
    ) -> GemvResult {
        let (k, n) = (self.k, self.n);
        for i in 0..m {
            let xr = &x[i * k..(i + 1) * k];
            split_rows(&mut y[i * n..(i + 1) * n], 1, exec, |first, ys| {
                let mut buf = vec![0f32; k];
                for (i, o) in ys.iter_mut().enumerate() {
                    *o = self.row_dot(first + i, xr, &mut buf);
                }
            });
        }
        Ok(())
    }
}

//! [`Matrix`]: any matrix a container can hold, chosen by its precision.

use crate::error::KernelError;
use crate::float::FloatMatrix;
use crate::gemv::Gemv;
use crate::ggml::GgmlMatrix;
use crate::panel::PanelMatrix;

/// Any matrix a container can hold.
#[derive(Debug, Clone)]
pub enum Matrix<'a> {
    /// A ggml sidecar (or plain ggml rows).
    Ggml(GgmlMatrix<'a>),
    /// A CQ4 packed-panel tensor.
    Panel(Box<PanelMatrix<'a>>),
    /// A plain FP16 / FP32 tensor.
    Float(FloatMatrix<'a>),
}

impl<'a> Matrix<'a> {
    /// The matrix of a parsed container, by its precision.
    pub fn from_file(f: &weights_file::WeightsFile<'a>) -> Result<Self, KernelError> {
        use weights_file::Precision;
        match f.header().precision() {
            Some(Precision::Ggml(_)) => GgmlMatrix::from_file(f).map(Matrix::Ggml),
            Some(Precision::Cq(_)) => PanelMatrix::from_file(f).map(|m| Matrix::Panel(Box::new(m))),
            Some(Precision::Fp16 | Precision::Fp32) => FloatMatrix::from_file(f).map(Matrix::Float),
            _ => Err(KernelError::Unsupported(format!(
                "precision {:#x}",
                f.header().precision
            ))),
        }
    }

    /// The matrix as a `dyn Gemv`.
    pub fn as_gemv(&self) -> &dyn Gemv {
        match self {
            Matrix::Ggml(m) => m,
            Matrix::Panel(m) => m.as_ref(),
            Matrix::Float(m) => m,
        }
    }
}

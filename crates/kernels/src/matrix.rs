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
    /// The matrix stored in `bytes`, a whole `.weights` file (typically a
    /// memory map of it): the container is parsed and validated
    /// ([`weights_file::WeightsFile::parse`]), then viewed as
    /// [`Matrix::from_file`] does. Nothing is copied; the view borrows
    /// `bytes`. Raw files (integers, bool, f64, fp8) and 3-D expert
    /// sidecars ([`crate::GgmlExperts`]) are [`KernelError::Unsupported`] /
    /// [`KernelError::Shape`].
    pub fn parse(bytes: &'a [u8]) -> Result<Self, KernelError> {
        let f = weights_file::WeightsFile::parse(bytes)
            .map_err(|e| KernelError::Container(e.to_string()))?;
        Self::from_file(&f)
    }

    /// What the matrix holds, as `convert verify` names it: `Q4_K r8`,
    /// `Q8_0 row_major`, `CQ4 hadamard`, `CQ4 orthogonal`, `FP16`, `FP32`.
    pub fn kind(&self) -> String {
        match self {
            Matrix::Ggml(m) => format!("{} {}", m.format().ggml_type(), m.layout().name()),
            Matrix::Panel(m) => match m.family() {
                weights_file::panel::RotationFamily::Hadamard => "CQ4 hadamard".into(),
                weights_file::panel::RotationFamily::Orthogonal => "CQ4 orthogonal".into(),
            },
            Matrix::Float(m) => format!("{:?}", m.float_type()).to_uppercase(),
        }
    }

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

//! The crate's one error type.

use std::fmt;

use crate::isa::Isa;

/// Why a kernel call or a matrix view could not be set up.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum KernelError {
    /// A buffer does not have the length the shape requires.
    Length {
        /// Which buffer (`x`, `y`, `data`, `scales`, ...).
        what: &'static str,
        /// Required length (elements or bytes, as the buffer holds).
        expected: usize,
        /// Actual length.
        got: usize,
    },
    /// An impossible or unsupported shape or header.
    Shape(String),
    /// A precision / layout the kernels do not implement.
    Unsupported(String),
    /// The CPU (or the `CONVERT_FORCE_ISA` cap) does not allow this ISA.
    IsaUnavailable(Isa),
    /// Activations that cannot be quantized (non-finite values, a Q8_0 block
    /// scale beyond fp16).
    Activation(String),
    /// Invalid data in a panel tensor's scales blob.
    Panel(String),
    /// Bytes that are not a valid `.weights` container
    /// ([`crate::Matrix::parse`]).
    Container(String),
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelError::Length {
                what,
                expected,
                got,
            } => write!(f, "{what}: expected length {expected}, got {got}"),
            KernelError::Shape(s) => write!(f, "bad shape: {s}"),
            KernelError::Unsupported(s) => write!(f, "unsupported: {s}"),
            KernelError::IsaUnavailable(isa) => {
                write!(f, "ISA {} is not available on this CPU", isa.name())
            }
            KernelError::Activation(s) => write!(f, "activations: {s}"),
            KernelError::Panel(s) => write!(f, "panel tensor: {s}"),
            KernelError::Container(s) => write!(f, "container: {s}"),
        }
    }
}

impl std::error::Error for KernelError {}

impl KernelError {
    /// True when the error comes from the matrix bytes or shape given (a
    /// corrupt or unsupported file, activations that cannot be quantized),
    /// false when a caller passed buffers of the wrong length or asked for
    /// an ISA the CPU lacks.
    pub fn is_bad_input(&self) -> bool {
        !matches!(
            self,
            KernelError::Length { .. } | KernelError::IsaUnavailable(_)
        )
    }
}

/// `Err(Length)` unless `got == expected`.
pub fn check_len(what: &'static str, expected: usize, got: usize) -> Result<(), KernelError> {
    if expected == got {
        Ok(())
    } else {
        Err(KernelError::Length {
            what,
            expected,
            got,
        })
    }
}

//! A byte buffer whose start is 64-byte aligned (what an mmap of a sidecar
//! file gives the kernels: page-aligned file, 64-aligned data region), in
//! safe code: over-allocate and start at the first aligned byte.

/// Owned bytes starting at a 64-byte boundary.
#[derive(Debug, Clone)]
pub struct AlignedBytes {
    buf: Vec<u8>,
    start: usize,
    len: usize,
}

/// The alignment [`AlignedBytes`] guarantees.
pub const ALIGN: usize = 64;

impl AlignedBytes {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> Self {
        let buf = vec![0u8; len + ALIGN];
        let start = buf.as_ptr().align_offset(ALIGN).min(ALIGN);
        AlignedBytes { buf, start, len }
    }

    /// A copy of `bytes`.
    pub fn copy_of(bytes: &[u8]) -> Self {
        let mut a = Self::zeroed(bytes.len());
        a.as_mut_slice().copy_from_slice(bytes);
        a
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.buf[self.start..self.start + self.len]
    }

    /// The bytes, mutable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.start + self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned() {
        for n in [0, 1, 63, 64, 1000] {
            let a = AlignedBytes::copy_of(&vec![7u8; n]);
            assert_eq!(a.as_slice().as_ptr() as usize % ALIGN, 0);
            assert_eq!(a.as_slice().len(), n);
        }
    }
}

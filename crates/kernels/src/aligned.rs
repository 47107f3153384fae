//! A buffer whose start is 64-byte aligned (what an mmap of a sidecar file
//! gives the kernels: page-aligned file, 64-aligned data region), in safe
//! code: over-allocate and start at the first aligned element.

/// Owned values starting at a 64-byte boundary.
#[derive(Debug, Clone)]
pub struct Aligned<T> {
    buf: Vec<T>,
    start: usize,
    len: usize,
}

/// Owned bytes starting at a 64-byte boundary.
pub type AlignedBytes = Aligned<u8>;

/// The alignment [`Aligned`] guarantees.
pub const ALIGN: usize = 64;

impl<T: Copy + Default> Aligned<T> {
    /// `len` default values (zeros for numbers).
    pub fn zeroed(len: usize) -> Self {
        const { assert!(ALIGN.is_multiple_of(std::mem::size_of::<T>())) };
        let pad = ALIGN / std::mem::size_of::<T>();
        let buf = vec![T::default(); len + pad];
        // (In elements of T: at most `pad` of them reach the next boundary.)
        let start = buf.as_ptr().align_offset(ALIGN).min(pad);
        Aligned { buf, start, len }
    }

    /// A copy of `values`.
    pub fn copy_of(values: &[T]) -> Self {
        let mut a = Self::zeroed(values.len());
        a.as_mut_slice().copy_from_slice(values);
        a
    }

    /// The values.
    pub fn as_slice(&self) -> &[T] {
        &self.buf[self.start..self.start + self.len]
    }

    /// The values, mutable.
    pub fn as_mut_slice(&mut self) -> &mut [T] {
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
            let f = Aligned::<f32>::copy_of(&vec![1.5f32; n]);
            assert_eq!(f.as_slice().as_ptr() as usize % ALIGN, 0);
            assert_eq!(f.as_slice(), &vec![1.5f32; n][..]);
        }
    }
}

//! What identifies the source (`docs/FORMAT.md` §source digest), with
//! every source byte hashed once: each tensor's data range has its own
//! sha256 (the manifest entry's `source_sha256`, what `--resume`
//! compares), the rest of each file (headers, metadata, padding: every
//! byte no tensor covers) one sha256, and the file's `digest` is the sha256
//! of [`TAG`], that hash and the tensors' hashes in manifest order.
//!
//! Reads go through the source map in windows of [`WINDOW`] bytes, each
//! handed back to the system once hashed ([`Catalogue::release`]), so
//! hashing adds at most a window per thread to the resident set.

use std::sync::atomic::{AtomicBool, Ordering};

use model_sources::{Catalogue, Tensor};
use sha256x2::Sha256;

use crate::outdir::hex;

/// Bytes hashed between two releases of the mapped pages.
pub const WINDOW: usize = 8 << 20;

/// The first bytes of what a file digest hashes.
pub const TAG: &[u8] = b"convert source digest v1\n";

/// sha256 (hex) of tensor `t`'s data range.
pub fn tensor_sha256(cat: &Catalogue, t: &Tensor) -> String {
    let mut h = Sha256::new();
    let mut at = 0u64;
    for w in cat.data(t).chunks(WINDOW) {
        h.update(w);
        cat.release(t, at, at + w.len() as u64);
        at += w.len() as u64;
    }
    hex(&h.finalize())
}

/// sha256 (hex) of the data ranges of `tensors`, in their order: what
/// [`tensor_sha256`] gives each, computed two tensors at a time on one
/// thread (`sha256x2::update_pair`: two messages cost about 1.4 of one
/// where the CPU has SHA-NI). Each of two lanes hashes a tensor window by
/// window, releasing each window once hashed, and takes the next tensor
/// when its own ends; give the longest first, so that the short ones keep
/// the other lane busy beside it. Once `stop` is set it returns at the
/// next window, the hashes not made empty.
pub fn tensors_sha256(cat: &Catalogue, tensors: &[&Tensor], stop: &AtomicBool) -> Vec<String> {
    struct Lane {
        item: usize,
        hasher: Sha256,
        at: u64,
    }
    let mut out = vec![String::new(); tensors.len()];
    let mut next = 0usize;
    let mut take = || -> Option<Lane> {
        let item = next;
        next += 1;
        (item < tensors.len()).then(|| Lane {
            item,
            hasher: Sha256::new(),
            at: 0,
        })
    };
    let mut lanes = [take(), take()];
    // The window of a lane's tensor from `at` (empty at its end).
    let window = |l: &Lane| -> &[u8] {
        let data = cat.data(tensors[l.item]);
        let at = l.at as usize;
        &data[at..(at + WINDOW).min(data.len())]
    };
    while !stop.load(Ordering::Relaxed) {
        match &mut lanes {
            [Some(a), Some(b)] => {
                let (wa, wb) = (window(a), window(b));
                sha256x2::update_pair(&mut a.hasher, wa, &mut b.hasher, wb);
                for (l, w) in [(&mut *a, wa), (&mut *b, wb)] {
                    cat.release(tensors[l.item], l.at, l.at + w.len() as u64);
                    l.at += w.len() as u64;
                }
            }
            [Some(a), None] | [None, Some(a)] => {
                let w = window(a);
                a.hasher.update(w);
                cat.release(tensors[a.item], a.at, a.at + w.len() as u64);
                a.at += w.len() as u64;
            }
            [None, None] => break,
        }
        for lane in lanes.iter_mut() {
            if lane
                .as_ref()
                .is_some_and(|l| l.at >= cat.data(tensors[l.item]).len() as u64)
            {
                let done = lane.take().expect("checked just above");
                out[done.item] = hex(&done.hasher.finalize());
                *lane = take();
            }
        }
    }
    out
}

/// Indices (into `cat.tensors`, = manifest order) of the tensors of source
/// file `file`, in order.
pub fn file_tensors(cat: &Catalogue, file: usize) -> Vec<usize> {
    (0..cat.tensors.len())
        .filter(|&i| cat.tensors[i].file == file)
        .collect()
}

/// The byte ranges `(start, end)` of source file `file` that no tensor's
/// data covers, ascending.
pub fn rest_ranges(cat: &Catalogue, file: usize) -> Vec<(u64, u64)> {
    let mut covered: Vec<(u64, u64)> = cat
        .tensors
        .iter()
        .filter(|t| t.file == file && t.n_bytes > 0)
        .map(|t| (t.offset, t.offset + t.n_bytes))
        .collect();
    covered.sort_unstable();
    let len = cat.files[file].len();
    let mut out = Vec::new();
    let mut at = 0u64;
    for (s, e) in covered {
        if s > at {
            out.push((at, s.min(len)));
        }
        at = at.max(e);
    }
    if at < len {
        out.push((at, len));
    }
    out
}

/// sha256 (hex) of the bytes of [`rest_ranges`], concatenated in order.
pub fn rest_sha256(cat: &Catalogue, file: usize) -> String {
    let f = &cat.files[file];
    let bytes = f.bytes();
    let mut h = Sha256::new();
    for (s, e) in rest_ranges(cat, file) {
        let (s, e) = (s as usize, e as usize);
        for w in bytes[s..e].chunks(WINDOW) {
            h.update(w);
        }
        f.release(s as u64, (e - s) as u64);
    }
    hex(&h.finalize())
}

/// The digest of a source file from the sha256 of its rest and of each of
/// its tensors (manifest order), all lower-case hex: the sha256 of [`TAG`]
/// and the 32-byte values in that order. `None` when a hash is not 64 hex
/// digits.
pub fn file_digest<'a>(rest: &str, tensors: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let mut h = Sha256::new();
    h.update(TAG);
    h.update(&unhex(rest)?);
    for t in tensors {
        h.update(&unhex(t)?);
    }
    Some(hex(&h.finalize()))
}

/// The digest of source file `file`, every byte read here (what `qdq
/// --source` compares with the manifest).
pub fn compute_file_digest(cat: &Catalogue, file: usize) -> String {
    let tensors: Vec<String> = file_tensors(cat, file)
        .into_iter()
        .map(|i| tensor_sha256(cat, &cat.tensors[i]))
        .collect();
    file_digest(&rest_sha256(cat, file), tensors.iter().map(String::as_str))
        .expect("hashes made here are 64 hex digits")
}

/// 64 lower-case hex digits as 32 bytes.
fn unhex(s: &str) -> Option<[u8; 32]> {
    let b = s.as_bytes();
    if b.len() != 64 {
        return None;
    }
    let nib = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = nib(b[2 * i])? << 4 | nib(b[2 * i + 1])?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_is_sha256_of_tag_and_raw_hashes() {
        let h = |b: &[u8]| hex(&Sha256::digest(b));
        let (r, a, b) = (h(b"rest"), h(b"a"), h(b"b"));
        let mut raw = TAG.to_vec();
        for x in [&r, &a, &b] {
            raw.extend(unhex(x).unwrap());
        }
        assert_eq!(file_digest(&r, [a.as_str(), b.as_str()]).unwrap(), h(&raw));
        // Order matters; bad hex is refused.
        assert_ne!(
            file_digest(&r, [b.as_str(), a.as_str()]),
            file_digest(&r, [a.as_str(), b.as_str()])
        );
        assert_eq!(file_digest("00", [a.as_str()]), None);
        assert_eq!(file_digest(&r.to_uppercase(), [a.as_str()]), None);
        assert_eq!(unhex(&a).map(|x| hex(&x)), Some(a.clone()));
    }
}

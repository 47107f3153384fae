//! What identifies the source (`docs/FORMAT.md` §source digest), with
//! every source byte hashed once: each tensor's data range has its own
//! sha256 (the manifest entry's `source_sha256`, what `--resume`
//! compares), the rest of each file (headers, metadata, padding: every
//! byte no tensor covers) one sha256, and the file's `digest` is the sha256
//! of [`TAG`], that hash and the tensors' hashes in manifest order.
//!
//! Reads go through the source map in steps (of [`WINDOW`] bytes with two
//! lanes, 1 MiB per lane with sixteen: [`hash_lanes`]), handed back to the
//! system ([`Catalogue::release`]) once a lane has hashed a step's worth
//! since its last release, so hashing adds under 32 MiB per thread to the
//! resident set.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result};
use model_sources::mmap::MappedFile;
use model_sources::{Catalogue, Tensor};
use rayon::prelude::*;
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
/// [`tensor_sha256`] gives each, several at a time on one thread
/// ([`hash_lanes`]), each range's pages released once hashed. Give the
/// longest first, so that the short ones keep the other lanes busy beside
/// it. Once `stop` is set it returns at the next step, the hashes not made
/// empty.
pub fn tensors_sha256(cat: &Catalogue, tensors: &[&Tensor], stop: &AtomicBool) -> Vec<String> {
    let data: Vec<&[u8]> = tensors.iter().map(|t| cat.data(t)).collect();
    hash_lanes(&data, |i, s, e| cat.release(tensors[i], s, e), stop)
}

/// sha256 (hex) of the files `names` of folder `dir` (in that order),
/// read through their maps in `groups` groups of about equal bytes on the
/// current rayon pool, each group [`hash_lanes`] on one thread. For files
/// written without their hash (`OutputDir::create_unhashed`).
pub fn files_sha256(dir: &Path, names: &[&str], groups: usize) -> Result<Vec<String>> {
    let maps = names
        .iter()
        .map(|n| {
            MappedFile::open(&dir.join(n))
                .with_context(|| format!("cannot read {n} back to hash it"))
        })
        .collect::<Result<Vec<_>>>()?;
    let parts = balanced_groups((0..maps.len()).collect(), |i| maps[i].len(), groups);
    let stop = AtomicBool::new(false);
    let mut out = vec![String::new(); maps.len()];
    let hashed: Vec<(usize, String)> = parts
        .par_iter()
        .with_max_len(1)
        .flat_map_iter(|items| {
            let data: Vec<&[u8]> = items.iter().map(|&i| maps[i].bytes()).collect();
            let h = hash_lanes(&data, |k, s, e| maps[items[k]].release(s, e - s), &stop);
            items.iter().copied().zip(h)
        })
        .collect();
    for (i, h) in hashed {
        out[i] = h;
    }
    Ok(out)
}

/// `items` in `groups` groups of about equal total `size` (at least one
/// group): the largest first, each to the group with the least so far;
/// within a group the items stay largest first, as [`hash_lanes`] wants
/// them.
pub fn balanced_groups(
    mut items: Vec<usize>,
    size: impl Fn(usize) -> u64,
    groups: usize,
) -> Vec<Vec<usize>> {
    items.sort_by_key(|&i| std::cmp::Reverse(size(i)));
    let mut parts: Vec<(u64, Vec<usize>)> = vec![(0, Vec::new()); groups.max(1)];
    for i in items {
        let lightest = parts
            .iter_mut()
            .min_by_key(|p| p.0)
            .expect("at least one group");
        lightest.0 += size(i);
        lightest.1.push(i);
    }
    parts.into_iter().map(|p| p.1).collect()
}

/// Bytes of each lane's message hashed per step when sixteen lanes run
/// ([`sha256x2::update_many`]): sixteen steps in flight are 16 MiB.
const MANY_STEP: usize = 1 << 20;

/// sha256 (hex) of each of `items`, several at a time on this thread:
/// sixteen where the CPU hashes sixteen messages at once
/// ([`sha256x2::many_supported`]: AVX-512, ~2.2x one message's rate on the
/// core measured), else two (`sha256x2::update_pair`: two messages cost
/// about 1.4 of one where the CPU has SHA-NI). Each lane hashes its item
/// step by step, all lanes the same whole blocks per step, calls
/// `release(item, start, end)` for what it hashed, and takes the next item
/// when its own ends. Once `stop` is set it returns at the next step, the
/// hashes not made empty.
fn hash_lanes(
    items: &[&[u8]],
    release: impl Fn(usize, u64, u64),
    stop: &AtomicBool,
) -> Vec<String> {
    struct Lane {
        item: usize,
        hasher: Sha256,
        at: usize,
        /// Bytes `..freed` were handed back (`release`), in pieces of at
        /// least `step` bytes: a step is as short as the shortest lane's
        /// rest, and a release per step was one `madvise` (with its TLB
        /// shootdown) per few pages.
        freed: usize,
    }
    let mut out = vec![String::new(); items.len()];
    let mut next = 0usize;
    let mut take = || -> Option<Lane> {
        let item = next;
        next += 1;
        (item < items.len()).then(|| Lane {
            item,
            hasher: Sha256::new(),
            at: 0,
            freed: 0,
        })
    };
    let (lanes_n, step) = if sha256x2::many_supported() {
        (sha256x2::MANY, MANY_STEP)
    } else {
        (2, WINDOW)
    };
    let mut lanes: Vec<Option<Lane>> = (0..lanes_n).map(|_| take()).collect();
    let left = |l: &Lane| items[l.item].len() - l.at;
    while !stop.load(Ordering::Relaxed) {
        // A lane whose item has less than a block left hashes it, ends it
        // and takes the next item (every step is whole blocks).
        for slot in lanes.iter_mut() {
            while let Some(l) = slot.as_mut().filter(|l| left(l) < 64) {
                let data = items[l.item];
                l.hasher.update(&data[l.at..]);
                release(l.item, l.freed as u64, data.len() as u64);
                let done = slot.take().expect("matched just above");
                out[done.item] = hex(&done.hasher.finalize());
                *slot = take();
            }
        }
        let mut live: Vec<&mut Lane> = lanes.iter_mut().flatten().collect();
        // The same whole blocks for every lane (at least one each).
        let Some(len) = live.iter().map(|l| left(l) / 64 * 64).min() else {
            break;
        };
        let len = len.min(step);
        let pieces: Vec<&[u8]> = live
            .iter()
            .map(|l| &items[l.item][l.at..l.at + len])
            .collect();
        let mut hashers: Vec<&mut Sha256> = live.iter_mut().map(|l| &mut l.hasher).collect();
        sha256x2::update_many(&mut hashers, &pieces);
        for l in live.iter_mut() {
            l.at += len;
            if l.at - l.freed >= step {
                release(l.item, l.freed as u64, l.at as u64);
                l.freed = l.at;
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

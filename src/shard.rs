//! Scale-out (`docs/SCALE_OUT.md`): `--shard I/N` splits the work of one
//! conversion into N parts balanced by estimated CPU cost, and the partial
//! manifests each shard writes (`manifest.shard-I-of-N.json`), which
//! `convert merge` turns into the bundle's `manifest.json`.
//!
//! Everything a shard needs is derived from the source headers and the
//! options, so N processes that never talk to each other agree on it: the
//! plan (`plan.rs`), the work items (one per planned tensor, per non-tensor
//! file, per source file to hash), their costs, the partition (greedy
//! longest-processing-time, ties by name) and a fingerprint of all of it
//! (`plan_sha256`) that merge compares across shards.

use model_sources::Catalogue;
use serde::{Deserialize, Serialize};
use sha256x2::Sha256;

use crate::extra::ExtraContent;
use crate::manifest::{source_name, Tool};
pub use crate::manifest::{
    IndexedEntry, IndexedExtra, ShardManifest, ShardSpec, SourceHash, Totals,
    SHARD_FORMAT as FORMAT, SHARD_FORMAT_VERSION as FORMAT_VERSION,
};
use crate::options::Options;
use crate::plan::{self, Action, Plan};

/// What a work item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemKind {
    /// `plan.jobs[index]`.
    Tensor,
    /// `plan.extra[index]` (engine manifests excluded: merge writes them).
    Extra,
    /// The sha256 of the non-tensor bytes of source file
    /// `cat.files[index]` (part of its digest).
    SourceHash,
}

/// One unit of work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// What it is.
    pub kind: ItemKind,
    /// Index in its list.
    pub index: usize,
    /// Tensor, file or source-file name (ties of the partition).
    pub name: String,
    /// Estimated CPU nanoseconds ([`cost`]).
    pub cost: u64,
}

/// Estimated CPU nanoseconds of the cost model (`docs/SCALE_OUT.md`
/// §cost): per source byte read and hashed, per output byte written, per
/// weight quantized and per multiply-add of a rotation. Measured on this
/// project's benchmark machine (docs/BENCHMARKS.md) and rounded; only the
/// ratios matter for the balance.
pub mod cost {
    /// sha256 of one byte (SHA-NI: ~1.2 GB/s).
    pub const HASH_BYTE: f64 = 0.85;
    /// Reading, decoding or copying one source byte.
    pub const READ_BYTE: f64 = 1.0;
    /// Writing (and hashing, and verifying) one output byte.
    pub const WRITE_BYTE: f64 = 3.0;
    /// Quantizing one weight to CQ4 (Hadamard family) or a ggml type.
    pub const QUANT_WEIGHT: f64 = 13.0;
    /// One multiply-add of a dense orthogonal rotation (K per weight).
    pub const ROTATION_MAC: f64 = 0.065;
    /// Fixed cost of any item (open, create, rename).
    pub const ITEM: f64 = 20_000.0;
}

/// The estimated cost of planned tensor `job` (its action decides it).
pub fn job_cost(job: &plan::Job) -> u64 {
    let t = job.tensor;
    let weights = t.n_elements() as f64;
    let src = t.n_bytes as f64;
    let out = plan::file_bytes(t, job.action) as f64;
    // Every tensor's source bytes are hashed (manifest `source_sha256`).
    let mut c = cost::ITEM + src * cost::HASH_BYTE;
    c += match job.action {
        Action::Source(_) | Action::Skip(_) => 0.0,
        Action::Raw(_) => src * cost::READ_BYTE + out * cost::WRITE_BYTE,
        Action::Plain => src * cost::READ_BYTE + out * cost::WRITE_BYTE,
        Action::Sidecar { requantize, .. } => {
            let q = if requantize {
                weights * cost::QUANT_WEIGHT
            } else {
                0.0
            };
            src * cost::READ_BYTE + out * cost::WRITE_BYTE + q
        }
        Action::Panels { family, .. } => {
            let rot = match family {
                cq4::Family::Hadamard => 0.0,
                cq4::Family::Orthogonal => weights * t.ncols() as f64 * cost::ROTATION_MAC,
            };
            src * cost::READ_BYTE + out * cost::WRITE_BYTE + weights * cost::QUANT_WEIGHT + rot
        }
    };
    c as u64
}

/// Every work item of a conversion, in a fixed order (tensors, extra
/// files, source hashes).
pub fn items(cat: &Catalogue, plan: &Plan) -> Vec<Item> {
    let mut v: Vec<Item> = plan
        .jobs
        .iter()
        .enumerate()
        .map(|(i, j)| Item {
            kind: ItemKind::Tensor,
            index: i,
            name: j.tensor.name.clone(),
            cost: job_cost(j),
        })
        .collect();
    for (i, x) in plan.extra.iter().enumerate() {
        let bytes = match &x.content {
            ExtraContent::EngineManifest => continue,
            ExtraContent::Bytes(b) => b.len() as u64,
            // Header-only estimates: a copy is read once; the GGUF
            // metadata is about the size of the source's key/values.
            ExtraContent::Copy(p) => std::fs::symlink_metadata(p).map_or(0, |m| m.len()),
            ExtraContent::GgufMetadata => 64 * cat.gguf_metadata.len() as u64,
        };
        v.push(Item {
            kind: ItemKind::Extra,
            index: i,
            name: x.name.clone(),
            cost: (cost::ITEM + bytes as f64 * (cost::READ_BYTE + cost::WRITE_BYTE)) as u64,
        });
    }
    for (i, f) in cat.files.iter().enumerate() {
        // The file's bytes no tensor covers (the tensors' are hashed by
        // their jobs).
        let rest: u64 = crate::digest::rest_ranges(cat, i)
            .iter()
            .map(|(s, e)| e - s)
            .sum();
        v.push(Item {
            kind: ItemKind::SourceHash,
            index: i,
            name: source_name(cat, f.path()),
            cost: (cost::ITEM + rest as f64 * cost::HASH_BYTE) as u64,
        });
    }
    v
}

/// The shard of each item (same order as `items`): greedy
/// longest-processing-time. Items by decreasing cost (ties: name, then
/// kind and index), each to the shard with the least cost so far (ties:
/// the lowest shard index). Deterministic, and within 4/3 of the best
/// possible makespan.
pub fn partition(items: &[Item], count: usize) -> Vec<usize> {
    let count = count.max(1);
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (&items[a], &items[b]);
        y.cost
            .cmp(&x.cost)
            .then_with(|| x.name.cmp(&y.name))
            .then_with(|| x.kind.cmp(&y.kind))
            .then_with(|| x.index.cmp(&y.index))
    });
    let mut load = vec![0u64; count];
    let mut shard = vec![0usize; items.len()];
    for i in order {
        let (best, _) = load
            .iter()
            .enumerate()
            .min_by_key(|&(s, &l)| (l, s))
            .expect("count >= 1");
        shard[i] = best;
        load[best] = load[best].saturating_add(items[i].cost);
    }
    shard
}

/// The estimated cost of each shard.
pub fn loads(items: &[Item], shard: &[usize], count: usize) -> Vec<u64> {
    let mut load = vec![0u64; count.max(1)];
    for (it, &s) in items.iter().zip(shard) {
        load[s] = load[s].saturating_add(it.cost);
    }
    load
}

/// sha256 of everything every shard must agree on: the tool, the options,
/// the source's headers (files, sizes, tensors, offsets) and the plan
/// (each tensor's action, file and transform; the extra files) and the
/// work items with their costs.
pub fn plan_sha256(cat: &Catalogue, plan: &Plan, opts: &Options, items: &[Item]) -> String {
    let mut h = Sha256::new();
    let mut put = |s: &str| {
        h.update(&(s.len() as u64).to_le_bytes());
        h.update(s.as_bytes());
    };
    let tool = Tool::this();
    put(&tool.name);
    put(&tool.version);
    put(&opts.to_json().to_string());
    for f in &cat.files {
        let name = source_name(cat, f.path());
        put(&format!("file {name} {}", f.len()));
    }
    for (t, j) in cat.tensors.iter().zip(&plan.jobs) {
        put(&format!(
            "tensor {} {:?} {} {} {} {} | {} | {} | {:?} | {}",
            t.name,
            t.shape,
            t.dtype,
            t.role.as_str(),
            t.file,
            t.offset,
            j.action.describe(),
            j.file,
            j.transform,
            j.engine
                .as_ref()
                .map(|e| format!("{} {:?}", e.hf_name, e.record))
                .unwrap_or_default(),
        ));
    }
    for x in &plan.extra {
        put(&format!("extra {} {}", x.name, x.what));
    }
    for it in items {
        put(&format!(
            "item {:?} {} {} {}",
            it.kind, it.index, it.name, it.cost
        ));
    }
    crate::outdir::hex(&h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(name: &str, cost: u64) -> Item {
        Item {
            kind: ItemKind::Tensor,
            index: 0,
            name: name.into(),
            cost,
        }
    }

    #[test]
    fn spec_parsing() {
        use crate::cli::parse_spec;
        assert_eq!(parse_spec("0/1"), Ok(ShardSpec { index: 0, count: 1 }));
        assert_eq!(parse_spec("6/7"), Ok(ShardSpec { index: 6, count: 7 }));
        for bad in ["", "1", "7/7", "1/0", "-1/3", "a/3", "1/b", "0/100001"] {
            assert!(parse_spec(bad).is_err(), "{bad}");
        }
        assert!(parse_spec("3/3").unwrap_err().contains("0-based"));
        assert_eq!(
            ShardSpec { index: 2, count: 7 }.manifest_name(),
            "manifest.shard-2-of-7.json"
        );
    }

    #[test]
    fn lpt_balances_by_cost_not_count() {
        // One big item and four small ones: the big one alone on a shard.
        let items = vec![
            item("a", 1),
            item("b", 1),
            item("big", 100),
            item("c", 1),
            item("d", 1),
        ];
        let s = partition(&items, 2);
        assert_eq!(s, vec![1, 1, 0, 1, 1]);
        assert_eq!(loads(&items, &s, 2), vec![100, 4]);
        // Ties broken by name: equal costs alternate in name order.
        let items = vec![item("y", 5), item("x", 5), item("z", 5)];
        assert_eq!(partition(&items, 2), vec![1, 0, 0]);
        // More shards than items: the rest are empty, nothing is lost.
        let s = partition(&items, 7);
        let mut used = s.clone();
        used.sort_unstable();
        used.dedup();
        assert_eq!(used.len(), 3);
        assert!(s.iter().all(|&x| x < 7));
    }

    #[test]
    fn lpt_is_within_four_thirds_of_the_lower_bound() {
        let items: Vec<Item> = (0..200u64)
            .map(|i| item(&format!("t{i:03}"), (i * 7919) % 1000 + 1))
            .collect();
        for n in [2, 3, 7, 16] {
            let s = partition(&items, n);
            let l = loads(&items, &s, n);
            let total: u64 = l.iter().sum();
            let max = *l.iter().max().unwrap();
            let biggest = items.iter().map(|i| i.cost).max().unwrap();
            let bound = (total.div_ceil(n as u64)).max(biggest);
            assert!(max * 3 <= bound * 4, "n={n}: {max} vs lower bound {bound}");
            assert_eq!(total, items.iter().map(|i| i.cost).sum::<u64>());
        }
    }
}

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

use std::fmt;

use model_sources::Catalogue;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::extra::ExtraContent;
use crate::manifest::{Entry, ExtraFile, SkippedFile, Source, Tool};
use crate::options::Options;
use crate::plan::{self, Action, Plan};

/// Value of a partial manifest's `format` field.
pub const FORMAT: &str = "convert-bundle-shard";
/// Bumped on incompatible partial-manifest changes.
pub const FORMAT_VERSION: u32 = 1;
/// Largest N of `--shard I/N`.
pub const MAX_SHARDS: usize = 100_000;
/// Prefix of every partial manifest's file name.
pub const PARTIAL_PREFIX: &str = "manifest.shard-";

/// `--shard I/N`: shard `index` (0-based) of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardSpec {
    /// 0-based: 0 ..= count - 1.
    pub index: usize,
    /// Number of shards.
    pub count: usize,
}

impl fmt::Display for ShardSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// Parse `I/N` (clap value parser): 0 <= I < N <= [`MAX_SHARDS`].
pub fn parse_spec(s: &str) -> Result<ShardSpec, String> {
    let (i, n) = s
        .split_once('/')
        .ok_or_else(|| format!("{s:?}: expected I/N, e.g. 0/4 (I is 0-based)"))?;
    let num = |v: &str, what: &str| {
        v.trim()
            .parse::<usize>()
            .map_err(|_| format!("{s:?}: {what} {v:?} is not a non-negative integer"))
    };
    let (index, count) = (num(i, "I")?, num(n, "N")?);
    if count == 0 || count > MAX_SHARDS {
        return Err(format!("{s:?}: N must be in 1..={MAX_SHARDS}"));
    }
    if index >= count {
        return Err(format!(
            "{s:?}: I is 0-based and must be below N (0..={}); for a 1-based index use I-1 (Slurm: $((SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN)))",
            count - 1
        ));
    }
    Ok(ShardSpec { index, count })
}

impl ShardSpec {
    /// `manifest.shard-I-of-N.json`.
    pub fn manifest_name(self) -> String {
        format!("{PARTIAL_PREFIX}{}-of-{}.json", self.index, self.count)
    }
}

/// What a work item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemKind {
    /// `plan.jobs[index]`.
    Tensor,
    /// `plan.extra[index]` (engine manifests excluded: merge writes them).
    Extra,
    /// The sha256 of source file `cat.files[index]`.
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
    use crate::convert::source_name;
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
        v.push(Item {
            kind: ItemKind::SourceHash,
            index: i,
            name: source_name(cat, f.path()),
            cost: (cost::ITEM + f.len() as f64 * cost::HASH_BYTE) as u64,
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
        h.update((s.len() as u64).to_le_bytes());
        h.update(s.as_bytes());
    };
    let tool = Tool::this();
    put(&tool.name);
    put(&tool.version);
    put(&opts.to_json().to_string());
    for f in &cat.files {
        let name = crate::convert::source_name(cat, f.path());
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

/// How many of each item the whole bundle has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    /// Manifest tensor entries.
    pub tensors: usize,
    /// Plan extra files (engine manifests excluded).
    pub extra_files: usize,
    /// Source files.
    pub source_files: usize,
}

/// A tensor entry and its index in the manifest.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IndexedEntry {
    /// Position in the manifest's `tensors`.
    pub index: usize,
    /// The entry.
    #[serde(flatten)]
    pub entry: Entry,
}

/// An extra file and its index in the plan.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IndexedExtra {
    /// Position in the plan's extra files.
    pub index: usize,
    /// The file.
    #[serde(flatten)]
    pub file: ExtraFile,
}

/// The sha256 of source file `index`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SourceHash {
    /// Position in the manifest's `source.files`.
    pub index: usize,
    /// Lower-case hex sha256 of the whole file.
    pub sha256: String,
}

/// `manifest.shard-I-of-N.json` (`docs/FORMAT.md` §partial manifests).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShardManifest {
    /// Always [`FORMAT`].
    pub format: String,
    /// [`FORMAT_VERSION`].
    pub format_version: u32,
    /// Which shard.
    pub shard: ShardSpec,
    /// [`plan_sha256`].
    pub plan_sha256: String,
    /// The tool that wrote it.
    pub tool: Tool,
    /// The source; `files[i].sha256` is empty unless this shard hashed it.
    pub source: Source,
    /// The options, as in the final manifest.
    pub options: serde_json::Value,
    /// The final manifest's `skipped_files`.
    #[serde(default)]
    pub skipped_files: Vec<SkippedFile>,
    /// Sizes of the lists of the whole bundle.
    pub totals: Totals,
    /// Engine layout: the model type the engine manifests are made for
    /// (merge writes them from every shard's entries).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub engine_model_type: Option<String>,
    /// This shard's estimated cost (CPU ns) and the whole bundle's.
    pub estimated_cpu_ns: u64,
    /// The whole bundle's estimated cost (CPU ns).
    pub estimated_total_cpu_ns: u64,
    /// The tensor entries this shard made.
    pub tensors: Vec<IndexedEntry>,
    /// The extra files this shard wrote.
    pub extra_files: Vec<IndexedExtra>,
    /// The source files this shard hashed.
    pub source_hashes: Vec<SourceHash>,
}

impl ShardManifest {
    /// Pretty JSON with a trailing newline.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("shard manifest serializes");
        s.push('\n');
        s
    }

    /// Every file this shard wrote (tensor files and extra files).
    pub fn file_names(&self) -> impl Iterator<Item = &str> + '_ {
        self.tensors
            .iter()
            .filter_map(|e| e.entry.file.as_deref())
            .chain(self.extra_files.iter().map(|x| x.file.file.as_str()))
    }
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

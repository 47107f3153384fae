//! One writer per output layout. Each takes a [`Job`] and the shared
//! [`Ctx`], writes one file into the staging folder and returns its
//! manifest entry.

mod panels;
mod plain;
pub mod sidecar;

use anyhow::Result;
use model_sources::Catalogue;

use crate::manifest::Entry;
use crate::options::Options;
use crate::outdir::OutputDir;
use crate::plan::{Action, Job};

/// What every job shares.
pub struct Ctx<'a> {
    /// The source.
    pub cat: &'a Catalogue,
    /// The options.
    pub opts: &'a Options,
    /// Where files go.
    pub out: &'a OutputDir,
    /// `--input-scales auto`: the data-free importance estimate.
    pub estimate: Option<&'a crate::importance::Estimate>,
    /// Whether the jobs of [`hashes_own_source`] hash their source tensor
    /// (their entry's `source_sha256`): beside the hash of what they write,
    /// two messages at a time. Otherwise the caller has the hashes.
    pub hash_source: bool,
    /// Whether each file's self-check follows its job (the default; not
    /// with `--no-verify`). A sidecar of moved blocks is checked against
    /// its source tensor, so its writer keeps the tensor's pages mapped for
    /// the check instead of releasing them as it goes (the check would
    /// fault them back in; the caller releases them after the check).
    pub checked: bool,
    /// Set by a writer once the part of its job that runs on every thread
    /// is done (a CQ4 matrix: its encoding; what is left runs on one
    /// thread): the scheduler starts the other jobs then, beside the rest
    /// of this one. `None` for jobs run among the others.
    pub parallel_done: Option<&'a std::sync::atomic::AtomicBool>,
}

/// CQ4 source tensors of at least this many bytes are hashed beside their
/// encoder even where sixteen lanes run: in the sixteen-lane group (whose
/// lanes step the same blocks) a tensor much longer than the others runs
/// alone most of its length, at one message's rate, after a second read
/// of its pages (all CQ4 sources there: 2.87 against 2.61 s on an Ice
/// Lake, session 25; the sources under 64 MiB there: -2 % on a Zen 5,
/// session 26).
pub const SELF_HASHED_PANELS: u64 = 64 << 20;

/// Jobs that, with [`Ctx::hash_source`], hash their source tensor as they
/// read it: CQ4 matrices whose rows are encoded in file order (each chunk
/// hashed while its pages are mapped for the encoder, instead of one more
/// pass over the source); and the sidecars of moved blocks, whose output
/// is as long as the tensor and written in step with reading it. Where the
/// CPU hashes sixteen messages at once ([`sha256x2::many_supported`]), the
/// sidecars' tensors and the CQ4 tensors under [`SELF_HASHED_PANELS`]
/// bytes are hashed sixteen at a time beside the jobs instead
/// (`digest::tensors_sha256`: ~2.2x the rate of hashing each beside its
/// file on an Ice Lake, 1.8x on a Zen 5; docs/BENCHMARKS.md, sessions 25
/// and 26).
pub fn hashes_own_source(job: &Job) -> bool {
    match job.action {
        Action::Sidecar {
            requantize: false, ..
        } => !sha256x2::many_supported(),
        Action::Panels { .. } => {
            job.transform.unpermute_heads.is_none()
                && (!sha256x2::many_supported() || job.tensor.n_bytes >= SELF_HASHED_PANELS)
        }
        _ => false,
    }
}

impl Ctx<'_> {
    /// `tensor 'name' in file` for messages.
    pub fn at(&self, job: &Job) -> String {
        format!(
            "tensor '{}' in {}",
            job.tensor.name,
            self.cat.file_of(job.tensor).display()
        )
    }
}

/// A CQ4 job's importance vector and where it comes from: its `--imatrix`
/// entry, else its `--hessians` entry's diagonal, else the data-free
/// estimate (`--input-scales auto`), else none (FORMAT.md §CQ4.16).
pub fn importance<'a>(ctx: &Ctx<'a>, job: &'a Job<'a>) -> Option<(&'a [f32], &'static str)> {
    if !matches!(job.action, Action::Panels { .. }) {
        return None;
    }
    match (job.imatrix, &job.hessian, ctx.estimate) {
        (Some(a), _, _) => Some((a, "imatrix")),
        (None, Some(h), _) => Some((&h.diag, "hessians")),
        (None, None, Some(e)) => e.get(&job.tensor.name).map(|a| (a, "estimate")),
        (None, None, None) => None,
    }
}

/// sha256 of an importance vector's f32 little-endian bytes: what the
/// manifest records, so `--resume` sees when another tensor's change moved
/// the estimate of this one.
pub fn importance_sha256(a: &[f32]) -> String {
    let bytes: Vec<u8> = a.iter().flat_map(|v| v.to_le_bytes()).collect();
    crate::outdir::sha256(&bytes)
}

/// Run one job. Tensors that stay in the source get their entry here; the
/// caller fills in the source file's hash.
pub fn run(ctx: &Ctx, job: &Job) -> Result<Entry> {
    let mut entry = write(ctx, job)?;
    if let Some(e) = &job.engine {
        entry.hf_name = Some(e.hf_name.clone());
        entry.transforms = e.record.clone();
    }
    Ok(entry)
}

fn write(ctx: &Ctx, job: &Job) -> Result<Entry> {
    let t = job.tensor;
    match job.action {
        Action::Plain => plain::write_plain(ctx, job),
        Action::Raw(ty) => plain::write_raw(ctx, job, ty),
        Action::Sidecar {
            ty,
            interleave,
            requantize,
        } => sidecar::write(ctx, job, ty, interleave, requantize),
        Action::Panels { family, bundle } => panels::write(ctx, job, family, bundle),
        Action::Skip(why) => Ok(Entry {
            details: Some(serde_json::json!({ "skipped": why })),
            ..Entry::new(t, None, t.dtype.to_string(), "skipped", None, None)
        }),
        Action::Source(why) => {
            if ctx.opts.dtype == ggml_quants::TorchDtype::Float16 && t.dtype.is_float() {
                // Nothing is materialized, but the bundle promises the
                // tensor in the requested dtype: check that it fits.
                crate::materialize::values(ctx.cat, t, ctx.opts.dtype, job.transform, |_| Ok(()))?;
            }
            Ok(Entry::new(
                t,
                None,
                t.dtype.to_string(),
                "source",
                None,
                Some(serde_json::json!({ "offset": t.offset, "reason": why.to_string() })),
            ))
        }
    }
}

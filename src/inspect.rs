//! `convert inspect`: headers, flags and region layout of `.weights` files,
//! or the file table of a bundle.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use weights_file::{flags, WeightsFile};

use crate::cli::InspectArgs;
use crate::failure::bad_input;
use crate::manifest::Manifest;

pub fn run(args: &InspectArgs) -> Result<()> {
    let p = &args.path;
    let text = if p.is_dir() && p.join(crate::outdir::MANIFEST).is_file() {
        inspect_dir(p, args.json)?
    } else if p.is_dir() || !is_container(p)? {
        inspect_source(p, args.json)?
    } else {
        inspect_file(p, args.json)?
    };
    print!("{text}");
    Ok(())
}

/// `, arch` (or nothing).
fn arch_suffix(a: Option<&str>) -> String {
    a.map(|a| format!(", {a}")).unwrap_or_default()
}

/// `AxBxC`.
fn shape_text(shape: &[u64]) -> String {
    shape
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join("x")
}

/// Width of a table's name column: the longest name, at least 4.
fn first_column_width(lengths: impl Iterator<Item = usize>) -> usize {
    lengths.max().unwrap_or(4).max(4)
}

/// True when the file starts with the container magic or is named `*.weights`.
fn is_container(path: &Path) -> Result<bool> {
    use std::io::Read;
    let mut magic = [0u8; 4];
    if path.is_dir() {
        return Ok(false);
    }
    let mut f = model_sources::mmap::open_regular(path).map_err(|e| bad_input(e.to_string()))?;
    let n = f
        .read(&mut magic)
        .with_context(|| format!("cannot read {}", path.display()))?;
    Ok((n == 4 && magic == *b"CACT") || path.extension().is_some_and(|e| e == "weights"))
}

/// What default keep mode does with `t`: "sidecar", or why it stays in the
/// source (e.g. "IQ2_XXS: no sidecar kernel").
fn keep_mode(t: &model_sources::Tensor) -> String {
    match (
        crate::plan::kept_sidecar_type(t),
        crate::plan::sidecar_shape(t),
    ) {
        (Some(_), Some(s)) if s.experts.is_some() => {
            format!("expert sidecar ({} experts)", s.count())
        }
        (Some(_), _) => "sidecar".into(),
        _ => format!("stays: {}", crate::plan::Stay::of(t)),
    }
}

/// A model source (GGUF, safetensors, HF folder): its tensors, read from the
/// headers only (no tensor data is touched).
fn inspect_source(path: &Path, json: bool) -> Result<String> {
    let cat = model_sources::Catalogue::open(path)?;
    if json {
        let tensors: Vec<serde_json::Value> = cat
            .tensors
            .iter()
            .map(|t| {
                serde_json::json!({
                    "name": t.name, "role": t.role.as_str(), "shape": t.shape,
                    "dtype": t.dtype.to_string(), "file": cat.file_of(t).display().to_string(),
                    "offset": t.offset, "bytes": t.n_bytes, "keep_mode": keep_mode(t),
                })
            })
            .collect();
        let v = serde_json::json!({
            "source": path.display().to_string(),
            "kind": format!("{:?}", cat.kind),
            "architecture": cat.architecture,
            "tied_embeddings": cat.tied_embeddings,
            "metadata_keys": cat.gguf_metadata.len(),
            "tensors": tensors,
        });
        return Ok(serde_json::to_string_pretty(&v)? + "\n");
    }
    let mut s = String::new();
    writeln!(
        s,
        "source: {} ({:?}{}), {} tensors, {} metadata keys, tied embeddings: {}",
        path.display(),
        cat.kind,
        arch_suffix(cat.architecture.as_deref()),
        cat.tensors.len(),
        cat.gguf_metadata.len(),
        cat.tied_embeddings
    )?;
    let w = first_column_width(cat.tensors.iter().map(|t| t.name.len()));
    writeln!(
        s,
        "{:<w$}  {:<15}  {:<14}  {:<7}  {:>12}  {:>10}  keep mode",
        "tensor", "role", "shape", "dtype", "offset", "bytes"
    )?;
    for t in &cat.tensors {
        let shape = shape_text(&t.shape);
        writeln!(
            s,
            "{:<w$}  {:<15}  {:<14}  {:<7}  {:>12}  {:>10}  {}",
            t.name,
            t.role.as_str(),
            shape,
            t.dtype.to_string(),
            t.offset,
            t.n_bytes,
            keep_mode(t)
        )?;
    }
    Ok(s)
}

fn read_file(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut f = model_sources::mmap::open_regular(path).map_err(|e| bad_input(e.to_string()))?;
    let mut b = Vec::new();
    f.read_to_end(&mut b)
        .with_context(|| format!("cannot read {}", path.display()))?;
    Ok(b)
}

/// Geometry and scales sub-regions (absolute offsets) of a CQ4 panel file.
fn panel_details(h: &weights_file::Header, scales_offset: u64) -> Result<serde_json::Value> {
    use weights_file::panel::{PanelGeometry, RotationFamily, RotationRegions};
    let g = PanelGeometry::new(
        h.dims[0] as usize,
        h.dims[1] as usize,
        h.group_size as usize,
    )
    .map_err(|e| bad_input(format!("impossible panel geometry: {e}")))?;
    let family = h
        .rotation_family()
        .ok_or_else(|| bad_input("not a CQ4 packed-panel file"))?;
    let sl = g.scales_layout(family);
    let at = |r: weights_file::panel::Region| serde_json::json!({ "offset": scales_offset + r.offset as u64, "bytes": r.len });
    let mut scales = serde_json::json!({
        "codebook fp16[16]": at(sl.codebook),
        "input_scale fp16[K]": at(sl.input_scale),
        "recip fp16[K]": at(sl.recip),
        "norms fp16[N][ng]": at(sl.norms),
        "padding": at(sl.pad),
        "folded fp32[SB64][ng][64]": at(sl.folded),
    });
    match sl.rotation {
        RotationRegions::Hadamard { left, right, perm } => {
            scales["left i8[128]"] = at(left);
            scales["right i8[128]"] = at(right);
            scales["perm u32[128]"] = at(perm);
        }
        RotationRegions::Orthogonal { r, r_t } => {
            scales["R fp16[K][K]"] = at(r);
            scales["R^T fp16[K][K]"] = at(r_t);
        }
    }
    Ok(serde_json::json!({
        "family": if family == RotationFamily::Orthogonal { "orthogonal" } else { "hadamard" },
        "sb64": g.sb64(),
        "padded_N": g.padded_n(),
        "panel": "[SB64][ng][gs/4][128 B]: 64 channels x 4 K per 128-byte block, low nibble first",
        "superblock_bytes": g.superblock_bytes(),
        "scales": scales,
    }))
}

/// The JSON description of one file.
pub fn describe_file_json(name: &str, bytes: &[u8]) -> Result<serde_json::Value> {
    let f =
        WeightsFile::parse(bytes).with_context(|| format!("{name}: not a valid .weights file"))?;
    let h = f.header();
    let l = f.layout;
    let precision = h.precision().map(|p| p.name()).unwrap_or_default();
    let mut details = serde_json::Value::Null;
    if h.rotation_family().is_some() {
        details = panel_details(&h, l.scales_offset)?;
    }
    if let (Some(ty), Some(shape)) = (h.precision().and_then(|p| p.ggml_type()), h.sidecar_shape())
    {
        let factor = h.interleave().map_or(1, |i| i.factor());
        details = crate::writers::sidecar::details(ty, factor, shape);
    }
    Ok(serde_json::json!({
        "file": name,
        "file_bytes": bytes.len(),
        "header": {
            "magic": "CACT",
            "flags": h.flags,
            "flag_names": flags::names(h.flags),
            "alignment": h.alignment,
            "ndim": h.ndim,
            "dims": h.stored_dims(),
            "precision": h.precision,
            "precision_name": precision,
            "data_bytes": h.data_bytes,
            "scales_bytes": h.scales_bytes,
            "group_size": h.group_size,
            "num_groups": h.num_groups,
            "original_N": h.original_n,
        },
        "regions": [
            {"name": "header", "offset": 0, "bytes": l.header_len},
            {"name": "padding", "offset": l.header_len, "bytes": l.scales_offset - l.header_len},
            {"name": "scales", "offset": l.scales_offset, "bytes": l.scales_bytes},
            {"name": "padding", "offset": l.scales_offset + l.scales_bytes, "bytes": l.data_offset - l.scales_offset - l.scales_bytes},
            {"name": "data", "offset": l.data_offset, "bytes": l.data_bytes},
        ],
        "layout": details,
    }))
}

fn inspect_file(path: &Path, json: bool) -> Result<String> {
    let bytes = read_file(path)?;
    let name = path.display().to_string();
    let d = describe_file_json(&name, &bytes).map_err(|e| bad_input(format!("{e:#}")))?;
    if json {
        return Ok(serde_json::to_string_pretty(&d)? + "\n");
    }
    let h = &d["header"];
    let mut s = String::new();
    writeln!(s, "file:         {} ({} bytes)", name, bytes.len())?;
    writeln!(s, "magic:        CACT")?;
    let names: Vec<String> = h["flag_names"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    writeln!(
        s,
        "flags:        {:#010x} {}",
        h["flags"].as_u64().unwrap_or(0),
        names.join(" | ")
    )?;
    for key in ["alignment", "ndim", "dims"] {
        writeln!(s, "{:<13} {}", format!("{key}:"), h[key])?;
    }
    writeln!(
        s,
        "precision:    {} ({})",
        h["precision"],
        h["precision_name"].as_str().unwrap_or("")
    )?;
    for key in [
        "data_bytes",
        "scales_bytes",
        "group_size",
        "num_groups",
        "original_N",
    ] {
        writeln!(s, "{:<13} {}", format!("{key}:"), h[key])?;
    }
    writeln!(s, "regions:")?;
    for r in d["regions"].as_array().into_iter().flatten() {
        let off = r["offset"].as_u64().unwrap_or(0);
        let len = r["bytes"].as_u64().unwrap_or(0);
        if len > 0 || r["name"] != "padding" {
            writeln!(
                s,
                "  {:<8} {:>10} .. {:<10} ({} bytes)",
                r["name"].as_str().unwrap_or(""),
                off,
                off + len,
                len
            )?;
        }
    }
    if let Some(obj) = d["layout"].as_object() {
        writeln!(s, "layout:")?;
        for (k, v) in obj {
            match v.as_object() {
                Some(sub) => {
                    writeln!(s, "  {k}:")?;
                    for (name, r) in sub {
                        let off = r["offset"].as_u64().unwrap_or(0);
                        let len = r["bytes"].as_u64().unwrap_or(0);
                        writeln!(
                            s,
                            "    {name:<27} {off:>10} .. {:<10} ({len} bytes)",
                            off + len
                        )?;
                    }
                }
                None => writeln!(
                    s,
                    "  {:<19} {}",
                    format!("{k}:"),
                    v.as_str().map_or(v.to_string(), str::to_string)
                )?,
            }
        }
    }
    Ok(s)
}

/// The bundle table's last column: why a tensor stays in the source
/// (`details.reason`), the expert count of an expert sidecar
/// (`details.experts`), else nothing.
fn entry_notes(e: &crate::manifest::Entry) -> String {
    let d = e.details.as_ref();
    if let Some(why) = d.and_then(|d| d["reason"].as_str()) {
        return format!("stays: {why}");
    }
    match d.and_then(|d| d["experts"].as_u64()) {
        Some(n) => format!("{n} experts"),
        None => String::new(),
    }
}

fn inspect_dir(dir: &Path, json: bool) -> Result<String> {
    let mpath = dir.join(crate::outdir::MANIFEST);
    let text = model_sources::mmap::read_regular(&mpath, 1 << 30)
        .map_err(|e| bad_input(format!("cannot read the bundle manifest: {e}")))?;
    let m: Manifest = serde_json::from_slice(&text)
        .map_err(|e| bad_input(format!("{}: invalid manifest: {e}", mpath.display())))?;
    if json {
        return Ok(serde_json::to_string_pretty(&m)? + "\n");
    }
    let mut s = String::new();
    writeln!(
        s,
        "bundle:  {} ({} v{}, written by {} {})",
        dir.display(),
        m.format,
        m.format_version,
        m.tool.name,
        m.tool.version
    )?;
    let files: Vec<String> = m
        .source
        .files
        .iter()
        .map(|f| format!("{} ({} bytes)", f.name, f.bytes))
        .collect();
    writeln!(
        s,
        "source:  {}{} [{}]  tied embeddings: {}",
        m.source.kind,
        arch_suffix(m.source.architecture.as_deref()),
        files.join(", "),
        m.source.tied_embeddings
    )?;
    writeln!(s, "options: {}", m.options)?;
    let w = first_column_width(
        m.tensors
            .iter()
            .map(|e| e.file.as_deref().unwrap_or("(source)").len()),
    );
    writeln!(
        s,
        "{:<w$}  {:<15}  {:<14}  {:<6}  {:<6}  {:<18}  {:>10}  notes",
        "file", "role", "shape", "source", "prec", "layout", "bytes"
    )?;
    for e in &m.tensors {
        let shape = shape_text(&e.shape);
        let line = format!(
            "{:<w$}  {:<15}  {:<14}  {:<6}  {:<6}  {:<18}  {:>10}  {}",
            e.file.as_deref().unwrap_or("(source)"),
            e.role,
            shape,
            e.source_dtype,
            e.precision,
            e.layout,
            e.bytes,
            entry_notes(e)
        );
        writeln!(s, "{}", line.trim_end())?;
    }
    for x in &m.extra_files {
        writeln!(s, "{:<w$}  {}  ({} bytes)", x.file, x.what, x.bytes)?;
    }
    Ok(s)
}

//! The report as one self-contained HTML page: `template.html` with its
//! `{{slot}}`s filled. Every string that comes from a file (tensor names,
//! types, options, perplexity rows) goes through [`esc`].

use std::fmt::Write as _;

use super::{svg, Report, TensorRow};

/// The page skeleton (inline CSS, no script).
const TEMPLATE: &str = include_str!("template.html");

/// HTML-escape text for element content and quoted attribute values.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c if c.is_control() && c != '\n' && c != '\t' => {
                let _ = write!(o, "&#x{:x};", c as u32);
            }
            c => o.push(c),
        }
    }
    o
}

/// Fill `{{slot}}`s of `template` from `slots`; a slot without a value is a
/// bug (`None`).
fn fill(template: &str, slots: &[(&str, String)]) -> Option<String> {
    let mut out = String::with_capacity(template.len() * 2);
    let mut rest = template;
    while let Some(i) = rest.find("{{") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let j = after.find("}}")?;
        let key = &after[..j];
        out.push_str(&slots.iter().find(|(k, _)| *k == key)?.1);
        rest = &after[j + 2..];
    }
    out.push_str(rest);
    Some(out)
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.digits$}"))
}

fn mib(bytes: u64) -> String {
    format!("{:.2} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// A table from a header and rows of already escaped cells; `numeric`
/// columns are right-aligned.
fn table(id: &str, header: &[&str], numeric: &[bool], rows: &[(bool, Vec<String>)]) -> String {
    let mut s = format!(r#"<table id="{id}"><thead><tr>"#);
    for (h, &n) in header.iter().zip(numeric) {
        let _ = write!(s, "<th{}>{h}</th>", if n { r#" class="n""# } else { "" });
    }
    s.push_str("</tr></thead><tbody>");
    for (fail, cells) in rows {
        s.push_str(if *fail {
            r#"<tr class="fail">"#
        } else {
            "<tr>"
        });
        for (c, &n) in cells.iter().zip(numeric) {
            let _ = write!(s, "<td{}>{c}</td>", if n { r#" class="n""# } else { "" });
        }
        s.push_str("</tr>");
    }
    s.push_str("</tbody></table>\n");
    s
}

fn verdict(pass: bool) -> String {
    if pass {
        r#"<span class="pass">pass</span>"#.into()
    } else {
        r#"<span class="fail">FAIL</span>"#.into()
    }
}

fn summary(r: &Report) -> String {
    let s = &r.summary;
    let src = &r.source;
    let files: Vec<String> = src
        .files
        .iter()
        .map(|f| format!("<code>{}</code> ({} bytes)", esc(&f.name), f.bytes))
        .collect();
    let rows: Vec<(&str, String)> = vec![
        (
            "source",
            format!(
                "{} {}{}",
                esc(&src.kind),
                esc(src.architecture.as_deref().unwrap_or("")),
                if src.tied_embeddings {
                    " (tied embeddings)"
                } else {
                    ""
                }
            ),
        ),
        ("source files", files.join(", ")),
        (
            "source bytes",
            format!(
                r#"<span id="source-bytes">{}</span> ({})"#,
                s.source_bytes,
                mib(s.source_bytes)
            ),
        ),
        (
            "written by",
            format!("{} {}", esc(&r.tool.name), esc(&r.tool.version)),
        ),
        (
            "tensors",
            format!(
                r#"<span id="tensors">{}</span> ({} with a file)"#,
                s.tensors, s.tensor_files
            ),
        ),
        (
            "tensor bytes",
            format!(
                r#"<span id="total-bytes">{}</span> ({})"#,
                s.tensor_bytes,
                mib(s.tensor_bytes)
            ),
        ),
        ("other files", format!("{} bytes", s.extra_bytes)),
        (
            "bits per weight",
            format!(
                r#"<span id="bpw">{}</span> over {} weights"#,
                opt(s.bpw, 3),
                s.weights
            ),
        ),
        (
            "bits per matrix weight",
            format!("{} over {} weights", opt(s.matrix_bpw, 3), s.matrix_weights),
        ),
        (
            "reconstruction SQNR",
            if s.measured == 0 {
                r#"<span class="muted">not measured (give the source model with --source)</span>"#
                    .into()
            } else {
                format!("{} dB over {} tensors", opt(s.sqnr_db, 2), s.measured)
            },
        ),
        (
            "verify",
            format!(
                r#"<span id="verify">{}</span> on {}"#,
                verdict(s.verify_pass),
                esc(&isas(r).join(", "))
            ),
        ),
    ];
    let mut t = String::from(r#"<table id="summary"><tbody>"#);
    for (k, v) in rows {
        let _ = write!(t, "<tr><th>{k}</th><td>{v}</td></tr>");
    }
    t.push_str("</tbody></table>\n");
    t
}

fn isas(r: &Report) -> Vec<String> {
    r.verify
        .get("isas")
        .and_then(|v| v.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn kinds(r: &Report) -> String {
    let rows: Vec<(bool, Vec<String>)> = r
        .kinds
        .iter()
        .map(|k| {
            (
                false,
                vec![
                    esc(&k.kind),
                    esc(&k.role),
                    k.tensors.to_string(),
                    k.weights.to_string(),
                    k.bytes.to_string(),
                    opt(k.bpw, 3),
                    opt(k.sqnr_db, 2),
                ],
            )
        })
        .collect();
    table(
        "kinds",
        &[
            "kind",
            "role",
            "tensors",
            "weights",
            "bytes",
            "bits/weight",
            "SQNR dB",
        ],
        &[false, false, true, true, true, true, true],
        &rows,
    )
}

fn verify_cell(t: &TensorRow) -> String {
    let Some(v) = &t.verify else {
        return r#"<span class="muted">-</span>"#.into();
    };
    if v.isas.is_empty() {
        return verdict(v.pass);
    }
    let parts: Vec<String> = v
        .isas
        .iter()
        .map(|i| {
            format!(
                "{} {}{}",
                esc(&i.isa),
                verdict(i.pass),
                i.e2e_rel_l2
                    .map(|e| format!(r#" <span class="muted">{e:.1e}</span>"#))
                    .unwrap_or_default()
            )
        })
        .collect();
    let mut s = parts.join("<br>");
    if !v.pass && v.isas.iter().all(|i| i.pass) {
        s.push_str("<br>");
        s.push_str(&verdict(false));
    }
    s
}

fn tensors(r: &Report) -> String {
    let rows: Vec<(bool, Vec<String>)> = r
        .tensors
        .iter()
        .map(|t| {
            let shape: Vec<String> = t.shape.iter().map(u64::to_string).collect();
            let e = t.error.as_ref();
            (
                t.verify.as_ref().is_some_and(|v| !v.pass),
                vec![
                    format!("<code>{}</code>", esc(&t.tensor)),
                    t.layer.map_or_else(String::new, |l| l.to_string()),
                    esc(&t.kind),
                    shape.join(" x "),
                    esc(&t.source_dtype),
                    esc(&t.precision),
                    esc(&t.layout),
                    t.bytes.to_string(),
                    opt(t.bpw, 3),
                    e.map_or_else(|| "-".into(), |e| opt(e.rel_l2, 4)),
                    e.map_or_else(|| "-".into(), |e| opt(e.sqnr_db, 2)),
                    verify_cell(t),
                ],
            )
        })
        .collect();
    table(
        "tensors",
        &[
            "tensor",
            "layer",
            "kind",
            "shape",
            "source",
            "precision",
            "layout",
            "bytes",
            "bits/weight",
            "rel. L2 error",
            "SQNR dB",
            "verify (ISA, e2e rel. L2)",
        ],
        &[
            false, true, false, false, false, false, false, true, true, true, true, false,
        ],
        &rows,
    )
}

fn charts(r: &Report) -> String {
    let mut s = String::new();
    // Error per layer, one series per kind of layered tensors.
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for t in &r.tensors {
        let (Some(layer), Some(db)) = (t.layer, t.error.and_then(|e| e.sqnr_db)) else {
            continue;
        };
        match series.iter_mut().find(|(k, _)| *k == t.kind) {
            Some((_, p)) => p.push((layer as f64, db)),
            None => series.push((t.kind.clone(), vec![(layer as f64, db)])),
        }
    }
    for (_, p) in &mut series {
        p.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    if r.summary.measured == 0 {
        s.push_str(
            r#"<p class="muted">Reconstruction errors need the source model: <code>convert report BUNDLE --source MODEL</code>.</p>"#,
        );
    } else {
        s.push_str(&svg::lines(
            "Reconstruction SQNR per layer and tensor kind",
            "layer",
            "SQNR dB (higher is better)",
            &series,
        ));
    }
    let mut by_bytes: Vec<(String, f64, String)> = r
        .kinds
        .iter()
        .filter(|k| k.bytes > 0)
        .map(|k| {
            (
                k.kind.clone(),
                k.bytes as f64,
                format!("{} ({} b/w)", mib(k.bytes), opt(k.bpw, 2)),
            )
        })
        .collect();
    by_bytes.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    s.push_str(&svg::bars("Bytes per tensor kind", &by_bytes));
    if let Some(h) = &r.error_histogram {
        s.push_str(&svg::histogram(
            "Element errors (w' - w) / RMS(w), all measured tensors",
            // The counts go under the axis: in the title they ran past the
            // chart's width.
            &format!(
                "error relative to the tensor's RMS ({} below, {} above the range)",
                h.below, h.above
            ),
            h.lo,
            h.hi,
            &h.bins,
        ));
    }
    s
}

fn perplexity(r: &Report) -> String {
    let Some(p) = &r.perplexity else {
        return String::new();
    };
    let mut s = String::from("<h2>Perplexity</h2>\n");
    let mut about = Vec::new();
    if let Some(m) = &p.model {
        about.push(format!("model {}", esc(m)));
    }
    if let Some(t) = &p.text {
        about.push(format!("text {}", esc(t)));
    }
    if let (Some(c), Some(x)) = (p.chunks, p.ctx) {
        about.push(format!("{c} chunks of {x} tokens"));
    }
    if !about.is_empty() {
        let _ = writeln!(s, r#"<p class="muted">{}</p>"#, about.join("; "));
    }
    let rows: Vec<(bool, Vec<String>)> = p
        .rows
        .iter()
        .map(|row| {
            (
                false,
                vec![
                    esc(&row.row),
                    esc(row.file_type.as_deref().unwrap_or("")),
                    opt(row.size_mib, 1),
                    opt(row.bpw, 3),
                    format!("{:.2}", row.ppl),
                    opt(row.ppl_err, 2),
                    esc(row.what.as_deref().unwrap_or("")),
                ],
            )
        })
        .collect();
    s.push_str(&table(
        "perplexity",
        &["row", "file type", "MiB", "bits/weight", "PPL", "±", "what"],
        &[false, false, true, true, true, true, false],
        &rows,
    ));
    let items: Vec<(String, f64, String)> = p
        .rows
        .iter()
        .map(|row| (row.row.clone(), row.ppl, format!("{:.2}", row.ppl)))
        .collect();
    s.push_str(&svg::bars("Perplexity (lower is better)", &items));
    s
}

/// The page.
pub fn render(r: &Report) -> String {
    let title = format!(
        "convert report: {}",
        std::path::Path::new(&r.bundle)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| r.bundle.clone())
    );
    let options = serde_json::to_string_pretty(&r.options).unwrap_or_default();
    let slots = [
        (
            "generator",
            esc(&format!("convert {}", env!("CARGO_PKG_VERSION"))),
        ),
        ("title", esc(&title)),
        (
            "subtitle",
            format!(
                "bundle {} · source {} · {} tensors",
                esc(&r.bundle),
                esc(&r.source.kind),
                r.summary.tensors
            ),
        ),
        ("summary", summary(r)),
        ("kinds", kinds(r)),
        ("charts", charts(r)),
        ("perplexity", perplexity(r)),
        ("tensors", tensors(r)),
        ("options", format!("<pre>{}</pre>", esc(&options))),
    ];
    fill(TEMPLATE, &slots).unwrap_or_else(|| "<!DOCTYPE html><p>template slot missing</p>".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_quotes_and_controls() {
        assert_eq!(
            esc(r#"<script>alert("x")</script>&'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;"
        );
        assert_eq!(esc("a\u{1b}b"), "a&#x1b;b");
        assert_eq!(esc("blk.0.attn_q.weight"), "blk.0.attn_q.weight");
    }

    #[test]
    fn every_template_slot_is_filled() {
        let keys = [
            "generator",
            "title",
            "subtitle",
            "summary",
            "kinds",
            "charts",
            "perplexity",
            "tensors",
            "options",
        ];
        let slots: Vec<(&str, String)> = keys.iter().map(|k| (*k, format!("<{k}>"))).collect();
        let page = fill(TEMPLATE, &slots).expect("all slots known");
        assert!(!page.contains("{{"), "unfilled slot");
        for k in keys {
            assert!(page.contains(&format!("<{k}>")), "{k}");
        }
        assert!(
            fill(TEMPLATE, &slots[1..]).is_none(),
            "a missing slot is noticed"
        );
        assert!(!TEMPLATE.contains("<script"), "no script in the page");
        assert!(!TEMPLATE.contains("http"), "nothing fetched");
    }
}

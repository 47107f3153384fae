//! Inline SVG charts, written as text (no script, no fonts fetched). Every
//! label goes through [`esc`]; numbers are formatted here.

use std::fmt::Write as _;

use super::html::esc;

/// Series colours, in order (colour-blind friendly, Okabe-Ito).
const PALETTE: [&str; 8] = [
    "#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#000000",
];

fn colour(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// `(lo, hi)` widened to round numbers and never empty.
fn nice_range(lo: f64, hi: f64) -> (f64, f64) {
    let (lo, hi) = if (hi - lo).abs() < 1e-9 {
        (lo - 1.0, hi + 1.0)
    } else {
        (lo, hi)
    };
    let step = ticks_step(hi - lo);
    ((lo / step).floor() * step, (hi / step).ceil() * step)
}

fn ticks_step(span: f64) -> f64 {
    let raw = span / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let r = raw / mag;
    let m = if r <= 1.0 {
        1.0
    } else if r <= 2.0 {
        2.0
    } else if r <= 5.0 {
        5.0
    } else {
        10.0
    };
    m * mag
}

fn fmt_tick(v: f64) -> String {
    if v.abs() >= 100.0 || v == v.round() {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// A scatter-and-line chart: one series per name, points `(x, y)`.
pub fn lines(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> String {
    let (w, h, left, right, top, bottom) = (720.0, 340.0, 60.0, 190.0, 30.0, 45.0);
    let pts = series.iter().flat_map(|(_, p)| p.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="chart" role="img" width="{w}" height="{h}" viewBox="0 0 {w} {h}"><title>{t}</title><text x="{left}" y="18" class="ct">{t}</text>"#,
        t = esc(title)
    );
    if x0 > x1 {
        let _ = write!(s, r#"<text x="{left}" y="80">no data</text></svg>"#);
        return s;
    }
    let (x0, x1) = if x0 == x1 {
        (x0 - 0.5, x1 + 0.5)
    } else {
        (x0, x1)
    };
    let (y0, y1) = nice_range(y0, y1);
    let pw = w - left - right;
    let ph = h - top - bottom;
    let px = |x: f64| left + (x - x0) / (x1 - x0) * pw;
    let py = |y: f64| top + ph - (y - y0) / (y1 - y0) * ph;
    axes(&mut s, left, top, pw, ph);
    let step = ticks_step(y1 - y0);
    let mut t = y0;
    while t <= y1 + step * 1e-6 {
        let y = py(t);
        let _ = write!(
            s,
            r##"<line x1="{left}" x2="{x2:.1}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{tx:.1}" y="{ty:.1}" text-anchor="end" class="tk">{v}</text>"##,
            x2 = left + pw,
            tx = left - 4.0,
            ty = y + 4.0,
            v = fmt_tick(t)
        );
        t += step;
    }
    let xstep = ticks_step(x1 - x0).max(1.0);
    let mut t = (x0 / xstep).ceil() * xstep;
    while t <= x1 + 1e-9 {
        let _ = write!(
            s,
            r#"<text x="{x:.1}" y="{y:.1}" text-anchor="middle" class="tk">{v}</text>"#,
            x = px(t),
            y = top + ph + 15.0,
            v = fmt_tick(t)
        );
        t += xstep;
    }
    label_axes(&mut s, x_label, y_label, left, top, pw, ph);
    for (i, (name, p)) in series.iter().enumerate() {
        let c = colour(i);
        // Past the palette's 8 colours a series is dashed with hollow
        // markers, so no two series look alike (Gemma has 11 kinds).
        let second = i >= PALETTE.len();
        let (dash, dot) = if second {
            (
                r#" stroke-dasharray="5,3""#,
                format!(r#"fill="white" stroke="{c}""#),
            )
        } else {
            ("", format!(r#"fill="{c}""#))
        };
        let path: Vec<String> = p
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        let _ = write!(
            s,
            r#"<polyline fill="none" stroke="{c}" stroke-width="1.5"{dash} points="{}"/>"#,
            path.join(" ")
        );
        for &(x, y) in p {
            let _ = write!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" {dot}><title>{} layer {} : {:.2}</title></circle>"#,
                px(x),
                py(y),
                esc(name),
                fmt_tick(x),
                y
            );
        }
        let ly = top + 14.0 * i as f64 + 6.0;
        let lx = left + pw + 12.0;
        let _ = write!(
            s,
            r#"<line x1="{lx}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="{c}" stroke-width="2"{dash}/><circle cx="{:.1}" cy="{:.1}" r="3" {dot}/><text x="{:.1}" y="{:.1}" class="tk">{}</text>"#,
            lx + 10.0,
            ly - 3.0,
            ly - 3.0,
            lx + 5.0,
            ly - 3.0,
            lx + 14.0,
            ly + 1.0,
            esc(name)
        );
    }
    s.push_str("</svg>");
    s
}

fn axes(s: &mut String, left: f64, top: f64, pw: f64, ph: f64) {
    let _ = write!(
        s,
        r##"<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fafafa" stroke="#999"/>"##
    );
}

fn label_axes(s: &mut String, x: &str, y: &str, left: f64, top: f64, pw: f64, ph: f64) {
    let _ = write!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" class="al">{}</text><text transform="translate(14 {:.1}) rotate(-90)" text-anchor="middle" class="al">{}</text>"#,
        left + pw / 2.0,
        top + ph + 36.0,
        esc(x),
        top + ph / 2.0,
        esc(y)
    );
}

/// Horizontal bars: one per `(label, value)`, `value_text` written beside.
pub fn bars(title: &str, items: &[(String, f64, String)]) -> String {
    let (w, left, right, row) = (720.0, 190.0, 150.0, 18.0);
    let h = 40.0 + row * items.len().max(1) as f64;
    let max = items.iter().map(|i| i.1).fold(0.0, f64::max);
    let pw = w - left - right;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="chart" role="img" width="{w}" height="{h}" viewBox="0 0 {w} {h}"><title>{t}</title><text x="10" y="18" class="ct">{t}</text>"#,
        t = esc(title)
    );
    for (i, (label, v, text)) in items.iter().enumerate() {
        let y = 30.0 + row * i as f64;
        let bw = if max > 0.0 { v / max * pw } else { 0.0 };
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end" class="tk">{}</text><rect x="{left}" y="{y:.1}" width="{bw:.1}" height="{:.1}" fill="{}"/><text x="{:.1}" y="{:.1}" class="tk">{}</text>"#,
            left - 6.0,
            y + 12.0,
            esc(label),
            row - 4.0,
            colour(i),
            left + bw + 6.0,
            y + 12.0,
            esc(text)
        );
    }
    s.push_str("</svg>");
    s
}

/// A histogram of `bins` over `[lo, hi]` (counts on a log scale, so the
/// tails show), with the out-of-range counts in the title.
pub fn histogram(title: &str, x_label: &str, lo: f64, hi: f64, bins: &[u64]) -> String {
    let (w, h, left, right, top, bottom) = (720.0, 300.0, 60.0, 30.0, 30.0, 45.0);
    let pw = w - left - right;
    let ph = h - top - bottom;
    let max = bins.iter().copied().max().unwrap_or(0);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="chart" role="img" width="{w}" height="{h}" viewBox="0 0 {w} {h}"><title>{t}</title><text x="{left}" y="18" class="ct">{t}</text>"#,
        t = esc(title)
    );
    axes(&mut s, left, top, pw, ph);
    let lmax = ((max as f64) + 1.0).log10().max(1e-9);
    let bw = pw / bins.len().max(1) as f64;
    for (i, &c) in bins.iter().enumerate() {
        let bh = ((c as f64) + 1.0).log10() / lmax * ph;
        let b_lo = lo + (hi - lo) * i as f64 / bins.len() as f64;
        let _ = write!(
            s,
            r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{bh:.1}" fill="#0072b2"><title>[{b_lo:.3}, {:.3}): {c}</title></rect>"##,
            left + bw * i as f64,
            top + ph - bh,
            (bw - 1.0).max(0.5),
            b_lo + (hi - lo) / bins.len() as f64
        );
    }
    for t in [lo, (lo + hi) / 2.0, hi] {
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" class="tk">{}</text>"#,
            left + (t - lo) / (hi - lo) * pw,
            top + ph + 15.0,
            fmt_tick(t)
        );
    }
    let _ = write!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="end" class="tk">{max}</text>"#,
        left - 4.0,
        top + 10.0
    );
    label_axes(&mut s, x_label, "count (log)", left, top, pw, ph);
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_escaped_and_points_drawn() {
        let s = lines(
            "t<",
            "x",
            "y",
            &[("<script>".into(), vec![(0.0, 1.0), (1.0, 2.0)])],
        );
        assert!(!s.contains("<script>"), "{s}");
        assert!(s.contains("&lt;script&gt;"));
        // One marker per point (with its <title>), one in the legend.
        assert_eq!(s.matches("</circle>").count(), 2);
        assert_eq!(s.matches("<circle").count(), 3);
        let b = bars(
            "b",
            &[
                ("a&b".into(), 2.0, "2 B".into()),
                ("c".into(), 1.0, "1 B".into()),
            ],
        );
        assert!(b.contains("a&amp;b"));
        assert_eq!(b.matches("<rect").count(), 2);
        let h = histogram("h", "x", -0.5, 0.5, &[0, 3, 9, 0]);
        assert_eq!(h.matches("<rect").count(), 5, "frame + 4 bins");
    }

    #[test]
    fn ranges_are_round_and_never_empty() {
        assert_eq!(nice_range(3.0, 3.0), (2.0, 4.0));
        let (lo, hi) = nice_range(17.3, 42.1);
        assert!(lo <= 17.3 && hi >= 42.1 && lo == lo.round() && hi == hi.round());
    }
}

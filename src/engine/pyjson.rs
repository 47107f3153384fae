//! JSON and numbers as the engine's Python converter writes them
//! (`json.dumps(..., indent=2, sort_keys=...)`, `str(float)`), so the
//! engine's files compare byte for byte with what it makes.

use serde_json::Value;

/// Python's `repr` / `str` of a float: the shortest digits that round-trip,
/// positional for exponents -4..16 (always with a `.0` or fraction),
/// otherwise `d.ddde+XX` / `e-XX` with at least two exponent digits.
pub fn py_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    // Rust's `{:e}` is the shortest round-trip digits: "1.5e-7", "1e4".
    let e = format!("{v:e}");
    let (mant, exp) = e.split_once('e').expect("exponent form");
    let exp: i32 = exp.parse().expect("exponent");
    let (sign, mant) = match mant.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mant),
    };
    let digits: String = mant.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exp) {
        let point = exp + 1; // digits before the decimal point
        let s = if point <= 0 {
            format!("0.{}{}", "0".repeat((-point) as usize), digits)
        } else if point as usize >= digits.len() {
            format!("{}{}.0", digits, "0".repeat(point as usize - digits.len()))
        } else {
            let (a, b) = digits.split_at(point as usize);
            format!("{a}.{b}")
        };
        format!("{sign}{s}")
    } else {
        let m = if digits.len() == 1 {
            digits
        } else {
            format!("{}.{}", &digits[..1], &digits[1..])
        };
        let es = if exp < 0 { "-" } else { "+" };
        format!("{sign}{m}e{es}{:02}", exp.abs())
    }
}

/// A JSON number as Python prints it (integers as integers).
pub fn py_number(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() {
        i.to_string()
    } else if let Some(u) = n.as_u64() {
        u.to_string()
    } else {
        py_float(n.as_f64().unwrap_or(f64::NAN))
    }
}

fn push_str(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if ensure_ascii && !c.is_ascii() => {
                let mut buf = [0u16; 2];
                for u in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{u:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `json.dumps(v, indent=2, sort_keys=sort_keys, ensure_ascii=ensure_ascii)`.
pub fn dumps(v: &Value, sort_keys: bool, ensure_ascii: bool) -> String {
    let mut out = String::new();
    write(&mut out, v, 0, sort_keys, ensure_ascii);
    out
}

fn write(out: &mut String, v: &Value, depth: usize, sort: bool, ascii: bool) {
    let pad = |out: &mut String, d: usize| {
        out.push('\n');
        out.push_str(&"  ".repeat(d));
    };
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&py_number(n)),
        Value::String(s) => push_str(out, s, ascii),
        Value::Array(a) if a.is_empty() => out.push_str("[]"),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                pad(out, depth + 1);
                write(out, x, depth + 1, sort, ascii);
            }
            pad(out, depth);
            out.push(']');
        }
        Value::Object(m) if m.is_empty() => out.push_str("{}"),
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            if sort {
                keys.sort();
            }
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                pad(out, depth + 1);
                push_str(out, k, ascii);
                out.push_str(": ");
                write(out, &m[k], depth + 1, sort, ascii);
            }
            pad(out, depth);
            out.push('}');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_as_python_prints_them() {
        for (v, want) in [
            (1e-5, "1e-05"),
            (1e-6, "1e-06"),
            (10000.0, "10000.0"),
            (0.02, "0.02"),
            (1.0, "1.0"),
            (0.0001, "0.0001"),
            (1e16, "1e+16"),
            (123456789012345.0, "123456789012345.0"),
            (1.5e-7, "1.5e-07"),
            (-2.5, "-2.5"),
            (500000.0, "500000.0"),
            (0.1, "0.1"),
            (3.0e-4, "0.0003"),
        ] {
            assert_eq!(py_float(v), want, "{v}");
        }
    }

    #[test]
    fn json_like_python() {
        let v = serde_json::json!({"b": [1, 2.5, "x"], "a": {"c": null}, "e": [], "u": "é\n"});
        assert_eq!(
            dumps(&v, true, true),
            "{\n  \"a\": {\n    \"c\": null\n  },\n  \"b\": [\n    1,\n    2.5,\n    \"x\"\n  ],\n  \"e\": [],\n  \"u\": \"\\u00e9\\n\"\n}"
        );
        assert!(dumps(&v, false, false).contains("\"u\": \"é\\n\""));
    }
}

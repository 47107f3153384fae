//! Exit codes: 2 for bad input, 1 for internal failures, 128 + signal when
//! interrupted; and the one-line rendering of an error.

use std::error::Error as StdError;
use std::fmt;

/// An error caused by the user's input (arguments or files), exit code 2.
#[derive(Debug)]
pub struct BadInput(pub String);

impl fmt::Display for BadInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl StdError for BadInput {}

/// Shorthand: `Err(bad_input(...))?`.
pub fn bad_input(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(BadInput(msg.into()))
}

/// The run was stopped by a signal (exit code 128 + signal).
#[derive(Debug)]
pub struct Interrupted(pub i32);

impl fmt::Display for Interrupted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "interrupted by {}", signal_name(self.0))
    }
}

impl StdError for Interrupted {}

/// `SIGINT`, `SIGTERM`, ... for the signals `convert` handles.
pub fn signal_name(sig: i32) -> String {
    match sig {
        signal_hook::consts::SIGINT => "SIGINT".into(),
        signal_hook::consts::SIGTERM => "SIGTERM".into(),
        signal_hook::consts::SIGHUP => "SIGHUP".into(),
        s => format!("signal {s}"),
    }
}

/// What an error in the chain says about its cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// The input is at fault: exit 2.
    BadInput,
    /// The machine or `convert` itself: exit 1.
    Internal,
    /// A signal stopped the run.
    Interrupted(i32),
}

/// Ask an error what it is. Every library of the workspace has one error
/// type per failure domain and each of them classifies itself
/// (`is_bad_input`); this function only routes the question to the type.
fn class_of(e: &(dyn StdError + 'static)) -> Option<Class> {
    let bad = |b: bool| Some(if b { Class::BadInput } else { Class::Internal });
    if e.is::<BadInput>() {
        return Some(Class::BadInput);
    }
    if let Some(i) = e.downcast_ref::<Interrupted>() {
        return Some(Class::Interrupted(i.0));
    }
    if let Some(e) = e.downcast_ref::<model_sources::SourceError>() {
        return bad(e.is_bad_input());
    }
    if let Some(e) = e.downcast_ref::<ggml_quants::QuantError>() {
        return bad(e.is_bad_input());
    }
    if let Some(e) = e.downcast_ref::<weights_file::ContainerError>() {
        return bad(e.is_bad_input());
    }
    if let Some(e) = e.downcast_ref::<weights_file::interleave::InterleaveError>() {
        return bad(e.is_bad_input());
    }
    if let Some(e) = e.downcast_ref::<weights_file::panel::PanelError>() {
        return bad(e.is_bad_input());
    }
    if let Some(e) = e.downcast_ref::<cq4::Cq4Error>() {
        return bad(e.is_bad_input());
    }
    if let Some(e) = e.downcast_ref::<kernels::KernelError>() {
        return bad(e.is_bad_input());
    }
    None
}

/// The class of the first error in the chain that knows its class
/// (outermost first); internal when none does.
pub fn classify(err: &anyhow::Error) -> Class {
    err.chain().find_map(class_of).unwrap_or(Class::Internal)
}

/// The process exit code of an error.
pub fn exit_code(err: &anyhow::Error) -> u8 {
    match classify(err) {
        Class::BadInput => 2,
        Class::Internal => 1,
        Class::Interrupted(sig) => (128 + sig).clamp(0, 255) as u8,
    }
}

/// Make `s` safe to print as one line: control characters (including CR,
/// LF, tab, ESC), Unicode line and paragraph separators and other
/// invisible format characters are escaped as `\u{..}`. Names and keys
/// from hostile files end up in messages, so every message goes through
/// this before it is printed.
pub fn one_line(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        let escape = c.is_control()
            || matches!(c, '\u{2028}' | '\u{2029}' | '\u{85}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}');
        if escape {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_escapes_every_line_break() {
        let s = one_line("a\nb\rc\u{2028}d\u{2029}e\u{85}f\u{1b}[31mg\u{202e}h");
        assert!(!s.contains(['\n', '\r', '\u{2028}', '\u{2029}', '\u{85}', '\u{1b}']));
        assert_eq!(s.lines().count(), 1);
        assert!(s.contains("\\u{2028}"), "{s}");
        assert_eq!(
            one_line("blk.0.attn_q.weight ünïcode"),
            "blk.0.attn_q.weight ünïcode"
        );
    }

    /// Every library error type of the workspace is routed to its own
    /// classification (one value of each; a new error type must be added
    /// to `class_of` and here).
    #[test]
    fn every_library_error_type_classifies_itself() {
        use anyhow::Context;
        let bad: Vec<anyhow::Error> = vec![
            anyhow::Error::new(cq4::Cq4Error::NonFinite { row: 0, col: 0 }),
            anyhow::Error::new(ggml_quants::QuantError::NonFiniteInput {
                ty: ggml_quants::GgmlType::Q8_0,
                index: 0,
                value: f32::NAN,
            }),
            anyhow::Error::new(weights_file::ContainerError::BadAlignment(3)),
            anyhow::Error::new(weights_file::interleave::InterleaveError::ZeroBlockBytes),
            anyhow::Error::new(weights_file::panel::PanelError::ZeroRows),
            anyhow::Error::new(kernels::KernelError::Shape("x".into())),
        ];
        for e in bad {
            let e = e.context("tensor 'x' in y");
            assert_eq!(classify(&e), Class::BadInput, "{e:#}");
            assert_eq!(exit_code(&e), 2);
        }
        let internal = anyhow::Error::new(cq4::Cq4Error::BufferLength {
            what: "x",
            expected: 1,
            got: 2,
        });
        assert_eq!(exit_code(&internal), 1);
        let io = Err::<(), _>(std::io::Error::other("disk full"))
            .context("cannot write out/x.weights")
            .unwrap_err();
        assert_eq!(exit_code(&io), 1);
        assert_eq!(exit_code(&anyhow::Error::new(Interrupted(2))), 130);
        assert_eq!(exit_code(&anyhow::Error::new(Interrupted(15))), 143);
    }
}

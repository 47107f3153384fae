//! The engine's tokenizer files (`vocab.txt`, `merges.txt`,
//! `special_tokens.json`, `tokenizer_config.txt`, `chat_template.jinja2`),
//! from a Hugging Face folder (`tokenizer.json` + `tokenizer_config.json`,
//! else `tokenizer.model`, else `vocab.json` + `merges.txt`) or from a
//! GGUF's `tokenizer.ggml.*` keys. `docs/FORMAT.md` §engine layout,
//! "Tokenizer files", gives the rules and where they differ from the
//! engine's own converter.
//!
//! Everything is first gathered into a [`Vocab`] (tokens by id, scores,
//! merges, the special tokens in the order the engine lists them), then
//! written by one of the engine's two routes: [`Route::Bpe`] (its
//! `tokenizer.json` route, also used for byte-level BPE GGUFs) or
//! [`Route::SentencePiece`] (its `.model` route, also used for
//! SentencePiece GGUFs, which carry scores but no merges).

use std::path::{Path, PathBuf};

use anyhow::Result;
use model_sources::gguf::Value as GgufValue;
use model_sources::Catalogue;
use serde_json::{json, Map, Value};

use crate::engine::pyjson::{dumps, py_float};
use crate::failure::bad_input;

/// The largest tokenizer file read (Gemma 3's `tokenizer.json` is 33 MB).
const MAX_TOKENIZER_BYTES: u64 = 256 << 20;

/// Tokens the engine converter counts as tool-calling tokens, with
/// [`FUNCTION_TOKENS`] (exact matches among `tokenizer_config.json`'s added
/// tokens).
const TOOL_TOKENS: &[&str] = &[
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<tools>",
    "</tools>",
    "<think>",
    "</think>",
];

/// Function-calling tokens: tool tokens, and special in Gemma vocabularies.
const FUNCTION_TOKENS: &[&str] = &[
    "<start_function_declaration>",
    "<end_function_declaration>",
    "<start_function_call>",
    "<end_function_call>",
    "<start_function_response>",
    "<end_function_response>",
    "<escape>",
];

/// Gemma's turn tokens, listed as special (then [`FUNCTION_TOKENS`]) when
/// the vocabulary has them.
const GEMMA_TOKENS: &[&str] = &[
    "<start_of_turn>",
    "<end_of_turn>",
    "<start_of_image>",
    "<end_of_image>",
];

/// A tool token of the engine's list ([`TOOL_TOKENS`] then
/// [`FUNCTION_TOKENS`]).
fn is_tool_token(t: &str) -> bool {
    TOOL_TOKENS.contains(&t) || FUNCTION_TOKENS.contains(&t)
}

/// Which of the engine converter's writers makes the files.
#[derive(Debug, Clone, PartialEq)]
pub enum Route {
    /// BPE (or WordPiece) with merges: `tokenizer_type=bpe`.
    Bpe {
        /// `normalizer=` value.
        normalizer: &'static str,
        /// `decoder=` value.
        decoder: &'static str,
        /// `byte_fallback=` value.
        byte_fallback: bool,
    },
    /// A Unigram `tokenizer.json`: `ID\tTOKEN\tSCORE` lines,
    /// `tokenizer_type=sentencepiece`, `sp_model_type=unigram`.
    Unigram,
    /// SentencePiece BPE with scores and no merges (a `tokenizer.model`, or
    /// a GGUF of `tokenizer.ggml.model = llama`).
    SentencePiece {
        /// `sp_add_dummy_prefix=` value.
        add_dummy_prefix: bool,
    },
}

/// A tokenizer, as the engine's files describe it.
#[derive(Debug, Clone)]
pub struct Vocab {
    /// How the files are written.
    pub route: Route,
    /// Token of each id (`""`: no token).
    pub tokens: Vec<String>,
    /// Score of each id (Unigram and SentencePiece).
    pub scores: Vec<f64>,
    /// BPE merges, `"a b"`.
    pub merges: Vec<String>,
    /// `eos_token_id`, `pad_token_id`, `bos_token_id`, `unk_token_id`, in
    /// the order they were found.
    pub ids: Vec<(&'static str, u64)>,
    /// `special_tokens`: id -> token, in insertion order.
    pub special: Vec<(u64, String)>,
    /// `additional_special_tokens`: (token, id).
    pub additional: Vec<(String, u64)>,
    /// Tool-calling tokens found.
    pub tool_tokens: usize,
    /// `model_max_length`.
    pub model_max_length: u64,
    /// The chat template.
    pub chat_template: Option<String>,
}

impl Vocab {
    fn put_special(&mut self, id: u64, token: &str) {
        match self.special.iter_mut().find(|(i, _)| *i == id) {
            Some(e) => e.1 = token.to_string(),
            None => self.special.push((id, token.to_string())),
        }
    }

    fn put_id(&mut self, key: &'static str, id: u64) {
        if !self.ids.iter().any(|(k, _)| *k == key) {
            self.ids.push((key, id));
        }
    }

    fn id(&self, key: &str) -> Option<u64> {
        self.ids.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    fn lookup(&self, token: &str) -> Option<u64> {
        self.tokens
            .iter()
            .position(|t| !t.is_empty() && t == token)
            .map(|i| i as u64)
    }

    fn push_additional(&mut self, token: &str, id: u64) {
        if !self.additional.iter().any(|(t, i)| t == token && *i == id) {
            self.additional.push((token.to_string(), id));
        }
    }

    /// Grow the token list to cover every special id and write the special
    /// tokens into it (so `vocab.txt` is self-contained).
    fn settle(&mut self) {
        if let Some(max) = self.special.iter().map(|(i, _)| *i).max() {
            if max as usize >= self.tokens.len() {
                self.tokens.resize(max as usize + 1, String::new());
            }
        }
        for (id, tok) in &self.special {
            self.tokens[*id as usize] = tok.clone();
        }
    }

    /// The files, as (name, bytes), for model family `family`.
    pub fn files(&self, family: &str) -> Vec<(&'static str, Vec<u8>)> {
        let mut out = vec![
            ("vocab.txt", self.vocab_txt().into_bytes()),
            ("merges.txt", self.merges_txt().into_bytes()),
            ("special_tokens.json", self.special_json().into_bytes()),
            (
                "tokenizer_config.txt",
                self.tokenizer_config(family).into_bytes(),
            ),
        ];
        if let Some(t) = &self.chat_template {
            out.push(("chat_template.jinja2", t.clone().into_bytes()));
        }
        out
    }

    fn vocab_txt(&self) -> String {
        let mut s = String::new();
        for (id, tok) in self.tokens.iter().enumerate() {
            match self.route {
                Route::SentencePiece { .. } => {
                    let score = self.scores.get(id).copied().unwrap_or(0.0);
                    s.push_str(&format!("{id}\t{tok}\t{}\n", py_float(score)));
                }
                _ if tok.is_empty() => {}
                Route::Unigram => {
                    let score = self.scores.get(id).copied().unwrap_or(0.0);
                    s.push_str(&format!("{id}\t{tok}\t{}\n", py_float(score)));
                }
                Route::Bpe { .. } => s.push_str(&format!("{id}\t{tok}\n")),
            }
        }
        s
    }

    fn merges_txt(&self) -> String {
        let mut s = String::from("#version: 0.2\n");
        for m in &self.merges {
            s.push_str(m);
            s.push('\n');
        }
        s
    }

    fn special_map(&self) -> Value {
        Value::Object(
            self.special
                .iter()
                .map(|(id, t)| (id.to_string(), json!(t)))
                .collect(),
        )
    }

    fn additional_list(&self) -> Value {
        Value::Array(
            self.additional
                .iter()
                .map(|(t, id)| json!({ "token": t, "id": id }))
                .collect(),
        )
    }

    fn special_json(&self) -> String {
        let mut m = Map::new();
        match self.route {
            Route::SentencePiece { add_dummy_prefix } => {
                m.insert("vocab_size".into(), json!(self.tokens.len()));
                for key in [
                    "pad_token_id",
                    "eos_token_id",
                    "bos_token_id",
                    "unk_token_id",
                ] {
                    if let Some(id) = self.id(key) {
                        m.insert(key.into(), json!(id));
                    }
                }
                m.insert("model_max_length".into(), json!(self.model_max_length));
                m.insert("sp_model_type".into(), json!("bpe"));
                m.insert("sp_add_dummy_prefix".into(), json!(add_dummy_prefix));
                m.insert("sp_remove_extra_whitespaces".into(), json!(true));
                m.insert("sp_escape_whitespaces".into(), json!(true));
                m.insert("sp_byte_fallback".into(), json!(true));
                m.insert("special_tokens".into(), self.special_map());
                m.insert("additional_special_tokens".into(), self.additional_list());
            }
            _ => {
                for (k, v) in &self.ids {
                    m.insert((*k).into(), json!(v));
                }
                m.insert("vocab_size".into(), json!(self.tokens.len()));
                m.insert("model_max_length".into(), json!(self.model_max_length));
                m.insert("special_tokens".into(), self.special_map());
                m.insert("additional_special_tokens".into(), self.additional_list());
            }
        }
        if let Some(t) = &self.chat_template {
            m.insert("chat_template".into(), json!(t));
        }
        dumps(&Value::Object(m), false, false)
    }

    fn tokenizer_config(&self, family: &str) -> String {
        let mut s = format!("vocab_size={}\n", self.tokens.len());
        let line = |s: &mut String, k: &str, v: &dyn std::fmt::Display| {
            s.push_str(&format!("{k}={v}\n"));
        };
        let tf = |b: bool| if b { "true" } else { "false" };
        match &self.route {
            Route::SentencePiece { add_dummy_prefix } => {
                for key in [
                    "eos_token_id",
                    "pad_token_id",
                    "bos_token_id",
                    "unk_token_id",
                ] {
                    if let Some(id) = self.id(key) {
                        line(&mut s, key, &id);
                    }
                }
                line(&mut s, "model_max_length", &self.model_max_length);
                s.push_str("tokenizer_type=sentencepiece\nsp_model_type=bpe\n");
                line(&mut s, "sp_add_dummy_prefix", &tf(*add_dummy_prefix));
                s.push_str("sp_remove_extra_whitespaces=true\n");
                s.push_str("sp_escape_whitespaces=true\nsp_byte_fallback=true\n");
            }
            route => {
                for (k, v) in &self.ids {
                    line(&mut s, k, v);
                }
                line(&mut s, "model_type", &family);
                line(&mut s, "model_max_length", &self.model_max_length);
                let (kind, normalizer, decoder, byte_fallback) = match route {
                    Route::Bpe {
                        normalizer,
                        decoder,
                        byte_fallback,
                    } => ("bpe", *normalizer, *decoder, *byte_fallback),
                    _ => ("sentencepiece", "metaspace", "replace_metaspace", false),
                };
                line(&mut s, "tokenizer_type", &kind);
                s.push_str("vocab_format=id_tab_token\n");
                line(&mut s, "normalizer", &normalizer);
                line(&mut s, "decoder", &decoder);
                line(&mut s, "byte_fallback", &tf(byte_fallback));
                if *route == Route::Unigram {
                    s.push_str("sp_model_type=unigram\nsp_add_dummy_prefix=true\n");
                    s.push_str("sp_byte_fallback=false\n");
                }
            }
        }
        line(
            &mut s,
            "has_chat_template",
            &tf(self.chat_template.is_some()),
        );
        if self.tool_tokens > 0 {
            s.push_str("has_tool_support=true\n");
            line(&mut s, "tool_token_count", &self.tool_tokens);
        }
        s
    }
}

// ---- Hugging Face folders ------------------------------------------------

fn aux<'a>(cat: &'a Catalogue, name: &str) -> Option<&'a PathBuf> {
    cat.aux_files
        .iter()
        .find(|p| p.file_name().is_some_and(|n| n == name))
}

fn read_json(path: &Path) -> Result<Value> {
    let bytes = model_sources::mmap::read_regular(path, MAX_TOKENIZER_BYTES)?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|e| bad_input(format!("{}: not UTF-8 text: {e}", path.display())))?;
    serde_json::from_str(text)
        .map_err(|e| bad_input(format!("{}: not valid JSON: {e}", path.display())))
}

/// A token given as a string or as an AddedToken object.
fn token_text(v: &Value) -> Option<&str> {
    v.as_str()
        .or_else(|| v.get("content").and_then(Value::as_str))
}

/// The chat template of a Hugging Face folder: `chat_template.jinja`, else
/// `tokenizer_config.json`'s `chat_template` (a string, or a list of named
/// templates, of which "default" or the first is taken).
fn hf_chat_template(cat: &Catalogue, config: &Value) -> Result<Option<String>> {
    if let Some(p) = aux(cat, "chat_template.jinja") {
        let bytes = model_sources::mmap::read_regular(p, MAX_TOKENIZER_BYTES)?;
        let text = String::from_utf8(bytes)
            .map_err(|e| bad_input(format!("{}: not UTF-8 text: {e}", p.display())))?;
        return Ok(Some(text));
    }
    Ok(match config.get("chat_template") {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Array(list)) => list
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
            .or_else(|| list.first())
            .and_then(|t| t.get("template"))
            .and_then(Value::as_str)
            .map(str::to_string),
        _ => None,
    })
}

/// A sane `model_max_length`: the tokenizer's, unless absent or beyond
/// what the engine's `stoul` reads (transformers' "no limit" is 1e30),
/// then the model's context length, else 131072.
fn max_length(given: Option<u64>, context: Option<u64>) -> u64 {
    given
        .filter(|v| *v <= u64::from(u32::MAX))
        .or(context)
        .unwrap_or(131_072)
}

fn context_of(cat: &Catalogue) -> Option<u64> {
    let c = cat.hf_config.as_ref()?;
    c.get("text_config")
        .and_then(|t| t.get("max_position_embeddings"))
        .or_else(|| c.get("max_position_embeddings"))
        .and_then(Value::as_u64)
}

/// The tokenizer of a Hugging Face folder, for model family `family`;
/// `None` when the folder has no tokenizer.
pub fn from_hf(cat: &Catalogue, family: &str) -> Result<Option<Vocab>> {
    let config = match aux(cat, "tokenizer_config.json") {
        Some(p) => read_json(p)?,
        None => json!({}),
    };
    let special_map = match aux(cat, "special_tokens_map.json") {
        Some(p) => read_json(p)?,
        None => json!({}),
    };
    let tokenizer_json = match aux(cat, "tokenizer.json") {
        Some(p) => Some((p.clone(), read_json(p)?)),
        None => None,
    };
    let (path, tj) = match tokenizer_json {
        Some(x) => x,
        None => {
            if let Some(p) = aux(cat, "tokenizer.model") {
                return from_sentencepiece_model(cat, p, &config).map(Some);
            }
            match (aux(cat, "vocab.json"), aux(cat, "merges.txt")) {
                (Some(v), Some(m)) => (v.clone(), gpt2_files_as_tokenizer_json(v, m, &config)?),
                _ => return Ok(None),
            }
        }
    };
    let bad = |what: &str| bad_input(format!("{}: {what}", path.display()));
    let model = tj.get("model").cloned().unwrap_or(json!({}));
    let kind = model
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_ascii_uppercase();
    let added: Vec<(u64, String, bool)> = tj
        .get("added_tokens")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|t| {
                    Some((
                        t.get("id")?.as_u64()?,
                        t.get("content")?.as_str()?.to_string(),
                        t.get("special").and_then(Value::as_bool).unwrap_or(false),
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    // Tokens by id: the BPE model's own vocabulary; for the others, what
    // `get_vocab()` gives (the model's plus the added tokens).
    let mut pairs: Vec<(String, u64)> = Vec::new();
    let mut scores: Vec<f64> = Vec::new();
    match model.get("vocab") {
        Some(Value::Object(m)) => {
            for (tok, id) in m {
                let id = id
                    .as_u64()
                    .ok_or_else(|| bad(&format!("token {tok:?} has no integer id")))?;
                pairs.push((tok.clone(), id));
            }
        }
        Some(Value::Array(list)) => {
            for (id, e) in list.iter().enumerate() {
                let tok = e
                    .get(0)
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad(&format!("vocab entry {id} is not [piece, score]")))?;
                pairs.push((tok.to_string(), id as u64));
                scores.push(e.get(1).and_then(Value::as_f64).unwrap_or(0.0));
            }
        }
        _ => {}
    }
    if kind != "BPE" {
        pairs.extend(added.iter().map(|(id, t, _)| (t.clone(), *id)));
    }
    const MAX_TOKENS: u64 = 1 << 24;
    let size = pairs.iter().map(|(_, id)| id + 1).max().unwrap_or(0);
    if size > MAX_TOKENS {
        return Err(bad(&format!(
            "a token id of {} (more than {MAX_TOKENS} tokens)",
            size - 1
        )));
    }
    let mut tokens = vec![String::new(); size as usize];
    for (tok, id) in pairs {
        tokens[id as usize] = tok;
    }
    let unigram = kind == "UNIGRAM";
    const SENTENCEPIECE_FAMILIES: &[&str] =
        &["gemma", "gemma3n", "gemma4", "llama", "smol", "bert", "t5"];
    let sentencepiece = unigram || (kind != "BPE" && SENTENCEPIECE_FAMILIES.contains(&family));
    let merges = if !sentencepiece {
        merges_of(model.get("merges"))
    } else {
        Vec::new()
    };
    let route = if kind == "BPE" {
        let normalizer = tj.get("normalizer").unwrap_or(&Value::Null);
        let decoder = tj.get("decoder").unwrap_or(&Value::Null);
        let fallback = has_type(decoder, "ByteFallback");
        Route::Bpe {
            normalizer: if is_metaspace_normalizer(normalizer) {
                "metaspace"
            } else if fallback {
                "byte_level"
            } else {
                "none"
            },
            decoder: if is_replace_metaspace(decoder) {
                "replace_metaspace"
            } else if fallback {
                "byte_level"
            } else {
                "none"
            },
            byte_fallback: model
                .get("byte_fallback")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        }
    } else if sentencepiece {
        if unigram {
            Route::Unigram
        } else {
            // A WordPiece/WordLevel tokenizer of a SentencePiece family:
            // the engine writes it as Unigram-less SentencePiece.
            Route::SentencePiece {
                add_dummy_prefix: true,
            }
        }
    } else {
        Route::Bpe {
            normalizer: "none",
            decoder: "none",
            byte_fallback: false,
        }
    };
    let mut v = Vocab {
        route,
        tokens,
        scores: if unigram { scores } else { Vec::new() },
        merges,
        ids: Vec::new(),
        special: Vec::new(),
        additional: Vec::new(),
        tool_tokens: 0,
        model_max_length: max_length(
            config.get("model_max_length").and_then(Value::as_u64),
            context_of(cat),
        ),
        chat_template: hf_chat_template(cat, &config)?,
    };
    // `convert_tokens_to_ids`: added tokens first, then the model's.
    let to_id = |v: &Vocab, tok: &str| -> Option<u64> {
        added
            .iter()
            .find(|(_, t, _)| t == tok)
            .map(|(id, _, _)| *id)
            .or_else(|| v.lookup(tok))
    };
    let core = |key: &str| {
        config
            .get(key)
            .and_then(token_text)
            .or_else(|| special_map.get(key).and_then(token_text))
            .map(str::to_string)
    };
    for (key, name) in [
        ("eos_token_id", "eos_token"),
        ("pad_token_id", "pad_token"),
        ("bos_token_id", "bos_token"),
        ("unk_token_id", "unk_token"),
    ] {
        if let Some(tok) = core(name) {
            if let Some(id) = to_id(&v, &tok) {
                v.put_id(key, id);
                v.put_special(id, &tok);
            }
        }
    }
    for (key, tok) in [
        ("pad_token_id", "<pad>"),
        ("eos_token_id", "<eos>"),
        ("bos_token_id", "<bos>"),
        ("unk_token_id", "<unk>"),
    ] {
        if v.id(key).is_none() {
            if let Some(id) = v.lookup(tok) {
                v.put_id(key, id);
                v.put_special(id, tok);
            }
        }
    }
    let unk = v.id("unk_token_id");
    let listed = |c: &Value| -> Vec<String> {
        c.get("additional_special_tokens")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(token_text)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut additional = listed(&config);
    if additional.is_empty() {
        additional = listed(&special_map);
    }
    for tok in &additional {
        if let Some(id) = to_id(&v, tok).filter(|id| Some(*id) != unk) {
            v.put_special(id, tok);
            v.additional.push((tok.clone(), id));
        }
    }
    for (id, tok, _) in &added {
        v.put_special(*id, tok);
        v.push_additional(tok, *id);
    }
    let folder = cat
        .root
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    if family.contains("gemma") || folder.contains("gemma") {
        for tok in GEMMA_TOKENS.iter().chain(FUNCTION_TOKENS) {
            if let Some(id) = to_id(&v, tok) {
                v.put_special(id, tok);
            }
        }
    }
    if let Some(Value::Object(decoder)) = config.get("added_tokens_decoder") {
        let mut tools = Vec::new();
        for (id, info) in decoder {
            let (Ok(id), Some(content)) = (
                id.parse::<u64>(),
                info.get("content").and_then(Value::as_str),
            ) else {
                continue;
            };
            if is_tool_token(content) {
                if !tools.contains(&id) {
                    tools.push(id);
                }
                v.put_special(id, content);
            }
        }
        v.tool_tokens = tools.len();
    }
    for tok in listed(&config).iter().chain(listed(&special_map).iter()) {
        if let Some(id) = to_id(&v, tok).filter(|id| Some(*id) != unk) {
            v.put_special(id, tok);
            v.push_additional(tok, id);
        }
    }
    if v.special.iter().any(|(id, _)| *id >= MAX_TOKENS) {
        return Err(bad("a special token id beyond 2^24"));
    }
    v.settle();
    Ok(Some(v))
}

fn merges_of(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|m| match m {
                    Value::String(s) => Some(s.clone()),
                    Value::Array(parts) => Some(
                        parts
                            .iter()
                            .filter_map(Value::as_str)
                            .collect::<Vec<_>>()
                            .join(" "),
                    ),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

fn is_metaspace_normalizer(n: &Value) -> bool {
    n.get("type").and_then(Value::as_str) == Some("Replace")
        && n.get("pattern")
            .and_then(|p| p.get("String"))
            .and_then(Value::as_str)
            == Some(" ")
        && n.get("content").and_then(Value::as_str) == Some("\u{2581}")
}

fn has_type(d: &Value, ty: &str) -> bool {
    match d.get("type").and_then(Value::as_str) {
        Some(t) if t == ty => true,
        Some("Sequence") => d
            .get("decoders")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|x| has_type(x, ty))),
        _ => false,
    }
}

fn is_replace_metaspace(d: &Value) -> bool {
    match d.get("type").and_then(Value::as_str) {
        Some("Replace") => {
            d.get("pattern")
                .and_then(|p| p.get("String"))
                .and_then(Value::as_str)
                == Some("\u{2581}")
                && d.get("content").and_then(Value::as_str) == Some(" ")
        }
        Some("Sequence") => d
            .get("decoders")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(is_replace_metaspace)),
        _ => false,
    }
}

/// A GPT-2 style folder (`vocab.json` + `merges.txt`, no `tokenizer.json`)
/// seen as the `tokenizer.json` transformers would make of it: byte-level
/// BPE, added tokens from `tokenizer_config.json`.
fn gpt2_files_as_tokenizer_json(vocab: &Path, merges: &Path, config: &Value) -> Result<Value> {
    let vocab = read_json(vocab)?;
    let bytes = model_sources::mmap::read_regular(merges, MAX_TOKENIZER_BYTES)?;
    let text = String::from_utf8(bytes)
        .map_err(|e| bad_input(format!("{}: not UTF-8 text: {e}", merges.display())))?;
    let merges: Vec<Value> = text
        .lines()
        .filter(|l| !l.starts_with("#version") && !l.trim().is_empty())
        .map(|l| json!(l))
        .collect();
    let added: Vec<Value> = match config.get("added_tokens_decoder") {
        Some(Value::Object(d)) => d
            .iter()
            .filter_map(|(id, info)| {
                Some(json!({
                    "id": id.parse::<u64>().ok()?,
                    "content": info.get("content")?,
                    "special": info.get("special").cloned().unwrap_or(json!(false)),
                }))
            })
            .collect(),
        _ => Vec::new(),
    };
    Ok(json!({
        "model": { "type": "BPE", "vocab": vocab, "merges": merges },
        "added_tokens": added,
    }))
}

// ---- SentencePiece models ------------------------------------------------

/// A protobuf varint at `pos`.
fn varint(data: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *data.get(*pos)?;
        *pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// Skip a field of wire type `wire` at `pos`.
fn skip(data: &[u8], pos: &mut usize, wire: u64) -> Option<()> {
    let n = match wire {
        0 => {
            varint(data, pos)?;
            0
        }
        1 => 8,
        2 => usize::try_from(varint(data, pos)?).ok()?,
        5 => 4,
        _ => return None,
    };
    *pos = pos.checked_add(n).filter(|e| *e <= data.len())?;
    Some(())
}

/// The pieces of a SentencePiece `ModelProto`: (piece, score, type).
pub fn sentencepiece_pieces(data: &[u8]) -> Option<Vec<(String, f32, u64)>> {
    let mut pieces = Vec::new();
    let mut pos = 0;
    while pos < data.len() {
        let tag = varint(data, &mut pos)?;
        if tag >> 3 != 1 || tag & 7 != 2 {
            skip(data, &mut pos, tag & 7)?;
            continue;
        }
        let len = usize::try_from(varint(data, &mut pos)?).ok()?;
        let end = pos.checked_add(len).filter(|e| *e <= data.len())?;
        let msg = &data[pos..end];
        pos = end;
        let (mut piece, mut score, mut ty) = (None, 0.0f32, 1u64);
        let mut p = 0;
        while p < msg.len() {
            let tag = varint(msg, &mut p)?;
            match (tag >> 3, tag & 7) {
                (1, 2) => {
                    let n = usize::try_from(varint(msg, &mut p)?).ok()?;
                    let e = p.checked_add(n).filter(|e| *e <= msg.len())?;
                    piece = Some(String::from_utf8_lossy(&msg[p..e]).into_owned());
                    p = e;
                }
                (2, 5) => {
                    let b = msg.get(p..p + 4)?;
                    score = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                    p += 4;
                }
                (3, 0) => ty = varint(msg, &mut p)?,
                (_, w) => skip(msg, &mut p, w)?,
            }
        }
        if let Some(piece) = piece {
            pieces.push((piece, score, ty));
        }
    }
    Some(pieces)
}

/// The SentencePiece route for a folder with only a `tokenizer.model`.
fn from_sentencepiece_model(cat: &Catalogue, path: &Path, config: &Value) -> Result<Vocab> {
    let bytes = model_sources::mmap::read_regular(path, MAX_TOKENIZER_BYTES)?;
    let pieces = sentencepiece_pieces(&bytes).ok_or_else(|| {
        bad_input(format!(
            "{}: not a SentencePiece model (truncated or malformed protobuf)",
            path.display()
        ))
    })?;
    let mut v = Vocab {
        route: Route::SentencePiece {
            add_dummy_prefix: true,
        },
        tokens: pieces.iter().map(|p| p.0.clone()).collect(),
        scores: pieces.iter().map(|p| f64::from(p.1)).collect(),
        merges: Vec::new(),
        ids: Vec::new(),
        special: Vec::new(),
        additional: Vec::new(),
        tool_tokens: 0,
        model_max_length: max_length(
            config.get("model_max_length").and_then(Value::as_u64),
            context_of(cat),
        ),
        chat_template: hf_chat_template(cat, config)?,
    };
    for (key, tok, default) in [
        ("pad_token_id", "<pad>", 0),
        ("eos_token_id", "</s>", 1),
        ("bos_token_id", "<s>", 2),
        ("unk_token_id", "<unk>", 3),
    ] {
        let id = v.lookup(tok).unwrap_or(default);
        v.put_id(key, id);
        v.put_special(id, tok);
    }
    for tok in ["<tool_call>", "<tools>"] {
        if let Some(id) = v.lookup(tok) {
            v.put_special(id, tok);
            v.push_additional(tok, id);
            v.tool_tokens += 1;
        }
    }
    Ok(v)
}

// ---- GGUF ------------------------------------------------------------------

fn meta<'a>(cat: &'a Catalogue, key: &str) -> Option<&'a GgufValue> {
    cat.gguf_metadata
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

fn strings(v: Option<&GgufValue>) -> Option<Vec<String>> {
    match v? {
        GgufValue::Array(_, items) => items
            .iter()
            .map(|x| match x {
                GgufValue::String(s) => Some(s.clone()),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

fn numbers(v: Option<&GgufValue>) -> Option<Vec<f64>> {
    match v? {
        GgufValue::Array(_, items) => items
            .iter()
            .map(|x| match x {
                GgufValue::F32(f) => Some(f64::from(*f)),
                GgufValue::F64(f) => Some(*f),
                GgufValue::I32(i) => Some(f64::from(*i)),
                other => other.as_u64().map(|u| u as f64),
            })
            .collect(),
        _ => None,
    }
}

/// The GGUF token type of an unused filler (`[PADn]`).
const TYPE_UNUSED: f64 = 5.0;
/// Control (3) and user-defined (4) tokens are the special ones.
fn is_special_type(t: f64) -> bool {
    t == 3.0 || t == 4.0
}

/// The tokenizer of a GGUF, rebuilt from its `tokenizer.ggml.*` keys;
/// `None` when it has none, `Err` for a tokenizer model the engine has no
/// route for or inconsistent arrays.
pub fn from_gguf(cat: &Catalogue) -> Result<Option<Vocab>> {
    let file = cat.root.display().to_string();
    let Some(model) = meta(cat, "tokenizer.ggml.model") else {
        return Ok(None);
    };
    let model = match model {
        GgufValue::String(s) => s.clone(),
        _ => {
            return Err(bad_input(format!(
                "{file}: tokenizer.ggml.model is not a string"
            )))
        }
    };
    let bad = |what: String| bad_input(format!("{file}: {what}"));
    let mut tokens = strings(meta(cat, "tokenizer.ggml.tokens"))
        .ok_or_else(|| bad("tokenizer.ggml.tokens is missing or not an array of strings".into()))?;
    let types =
        numbers(meta(cat, "tokenizer.ggml.token_type")).unwrap_or_else(|| vec![1.0; tokens.len()]);
    if types.len() != tokens.len() {
        return Err(bad(format!(
            "tokenizer.ggml.token_type has {} entries for {} tokens",
            types.len(),
            tokens.len()
        )));
    }
    let mut scores = numbers(meta(cat, "tokenizer.ggml.scores")).unwrap_or_default();
    // llama.cpp pads the token list to the model's vocab_size with unused
    // `[PADn]` fillers; the tokenizer itself never had them.
    while let Some(last) = tokens.last() {
        let id = tokens.len() - 1;
        if types[id] == TYPE_UNUSED && *last == format!("[PAD{id}]") {
            tokens.pop();
        } else {
            break;
        }
    }
    scores.truncate(tokens.len());
    let id_of = |key: &str| {
        meta(cat, key)
            .and_then(GgufValue::as_u64)
            .filter(|id| (*id as usize) < tokens.len())
    };
    let add_space_prefix = match meta(cat, "tokenizer.ggml.add_space_prefix") {
        Some(GgufValue::Bool(b)) => *b,
        _ => true,
    };
    let byte_fallback = (0..=255u8).all(|b| tokens.iter().any(|t| *t == format!("<0x{b:02X}>")));
    let route = match model.as_str() {
        "gpt2" => {
            // Byte-level BPE, unless the vocabulary is SentencePiece-style
            // (`▁` word starts, no `Ġ`): llama.cpp stores a metaspace BPE
            // tokenizer.json (e.g. Gemma's without its .model) as gpt2 too.
            let metaspace = tokens.iter().any(|t| t.starts_with('\u{2581}'))
                && !tokens.iter().any(|t| t.starts_with('\u{120}'));
            Route::Bpe {
                normalizer: if metaspace { "metaspace" } else { "none" },
                decoder: if metaspace {
                    "replace_metaspace"
                } else {
                    "none"
                },
                byte_fallback: metaspace && byte_fallback,
            }
        }
        "llama" => {
            if scores.len() != tokens.len() {
                return Err(bad(format!(
                    "a SentencePiece tokenizer needs one score per token: {} scores for {} tokens",
                    scores.len(),
                    tokens.len()
                )));
            }
            Route::SentencePiece {
                add_dummy_prefix: add_space_prefix,
            }
        }
        other => {
            return Err(bad(format!(
                "tokenizer.ggml.model {other:?} has no engine tokenizer route (gpt2 and llama do)"
            )))
        }
    };
    let context = cat
        .architecture
        .as_ref()
        .and_then(|a| meta(cat, &format!("{a}.context_length")))
        .and_then(GgufValue::as_u64);
    let mut v = Vocab {
        route,
        tokens: Vec::new(),
        scores,
        merges: strings(meta(cat, "tokenizer.ggml.merges")).unwrap_or_default(),
        ids: Vec::new(),
        special: Vec::new(),
        additional: Vec::new(),
        tool_tokens: 0,
        model_max_length: max_length(None, context),
        chat_template: match meta(cat, "tokenizer.chat_template") {
            Some(GgufValue::String(s)) => Some(s.clone()),
            _ => None,
        },
    };
    for (key, gguf) in [
        ("eos_token_id", "tokenizer.ggml.eos_token_id"),
        ("pad_token_id", "tokenizer.ggml.padding_token_id"),
        ("bos_token_id", "tokenizer.ggml.bos_token_id"),
        ("unk_token_id", "tokenizer.ggml.unknown_token_id"),
    ] {
        if let Some(id) = id_of(gguf) {
            v.put_id(key, id);
            v.put_special(id, &tokens[id as usize]);
        }
    }
    for (id, tok) in tokens.iter().enumerate() {
        if is_special_type(types[id]) {
            v.put_special(id as u64, tok);
            v.push_additional(tok, id as u64);
            if is_tool_token(tok) {
                v.tool_tokens += 1;
            }
        }
    }
    v.tokens = tokens;
    v.settle();
    Ok(Some(v))
}

/// The tokenizer files of source `cat` for model family `family`, and
/// whether the source had a tokenizer.
pub fn files(cat: &Catalogue, family: &str) -> Result<Vec<(&'static str, Vec<u8>)>> {
    let vocab = if cat.gguf_metadata.is_empty() {
        from_hf(cat, family)?
    } else {
        from_gguf(cat)?
    };
    Ok(vocab.map(|v| v.files(family)).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentencepiece_protobuf_pieces() {
        // ModelProto { pieces: [{piece: "<unk>", score: 0.0, type: 2},
        // {piece: "▁a", score: -1.5}] } plus an unknown field 7.
        let mut d = vec![0x0a, 0x0e, 0x0a, 0x05];
        d.extend_from_slice(b"<unk>");
        d.extend_from_slice(&[0x15, 0, 0, 0, 0, 0x18, 0x02]);
        d.extend_from_slice(&[0x0a, 0x0b, 0x0a, 0x04]);
        d.extend_from_slice("\u{2581}a".as_bytes());
        d.push(0x15);
        d.extend_from_slice(&(-1.5f32).to_le_bytes());
        d.extend_from_slice(&[0x38, 0x01]);
        let p = sentencepiece_pieces(&d).unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p[0], ("<unk>".to_string(), 0.0, 2));
        assert_eq!(p[1], ("\u{2581}a".to_string(), -1.5, 1));
        // Truncations are refused, never read out of bounds.
        for n in 1..d.len() {
            let _ = sentencepiece_pieces(&d[..n]);
        }
        assert!(sentencepiece_pieces(&[0x0a, 0x7f]).is_none());
    }
}

#!/usr/bin/env python3
"""Make the tiny real-architecture fixtures of the GGUF -> Hugging Face
inversion tests: three Hugging Face folders with random weights and a real,
trained tokenizer, and the GGUF that llama.cpp's own convert_hf_to_gguf.py
makes of each (--outtype f32, so no value is rounded on the way).

  fixtures/models/tiny-llama3-hf/   LlamaForCausalLM, untied lm_head, llama3
                                    rope_scaling, byte-level BPE (Llama 3 style,
                                    tokenizer.ggml.model "gpt2" with merges)
  fixtures/models/tiny-llama3.gguf
  fixtures/models/tiny-qwen2-hf/    Qwen2ForCausalLM, q/k/v biases, tied
                                    embeddings, byte-level BPE (Qwen2 style),
                                    config vocab_size padded past the tokenizer
  fixtures/models/tiny-qwen2.gguf
  fixtures/models/tiny-gemma3-hf/   Gemma3ForCausalLM (gemma3_text): q/k norms,
                                    pre/post feed-forward norms, sliding-window
                                    layer_types, tied embeddings, SentencePiece
                                    BPE with byte fallback (tokenizer.model +
                                    the tokenizer.json transformers derives)
  fixtures/models/tiny-gemma3.gguf          from tokenizer.model (the normal route)
  fixtures/models/tiny-gemma3-tokjson.gguf  the same folder without tokenizer.model:
                                    the tokenizer.json route, the only one on
                                    which llama.cpp truncates token_embd

Every folder has config.json, generation_config.json, model.safetensors
(bfloat16), tokenizer.json, tokenizer_config.json (with a chat_template) and
special_tokens_map.json; the qwen2 folder also vocab.json + merges.txt, the
gemma3 folder tokenizer.model. Dimensions: hidden 128, 2 layers, 2 query
heads of head_dim 64, 1 KV head (GQA), intermediate 128, so every matmul has
K % 128 == 0.

Every GGUF tensor is an exact function of the HF one: weights are bf16,
which --outtype f32 widens exactly, and llama.cpp adds Gemma's 1 in f32,
where w + 1 of a bf16 w (|w| >= 2^-16) is exact, so w_GGUF - 1 gives the
HF value back bit for bit.

Deterministic: seeded numpy for every value, tokenizers trained on the text
below with fixed options (SentencePiece single-threaded, fixed seed), files
written by transformers' save_pretrained / json with fixed options. Running
it twice gives byte-identical files (scripts/check_tiny_models.py checks the
facts, `--out DIR` writes elsewhere so that two runs can be compared).

The one change made to llama.cpp's converter (applied at run time, its files
are not touched): a byte-level BPE vocab is identified by the sha256 of the
token ids of a fixed text, and a trained tiny vocab can match no known
model, so convert_hf_to_gguf.py refuses it ("BPE pre-tokenizer was not
recognized"). When, and only when, the hash is unknown, the pre-tokenizer
name of the model the tokenizer imitates is used instead (llama3:
"llama-bpe", qwen2: "qwen2", gemma3: "default"); it only sets the string
tokenizer.ggml.pre.

Run with the converter's venv (needs torch, transformers, tokenizers,
sentencepiece):
  target/llama.cpp/venv/bin/python scripts/make_tiny_models.py [--out DIR]
(scripts/llama-cpp --src unpacks the llama.cpp tree first if needed.)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SEED = 20250301

HIDDEN = 128
LAYERS = 2
HEADS = 2
KV_HEADS = 1
HEAD_DIM = 64
FFN = 128

# Training text for the tokenizers, written for this fixture.
CORPUS = """\
The converter reads a model once and writes kernel-ready files next to it.
A tiny model is enough to test every rule: names, shapes, norms and rows.
Weights are stored as rows of numbers; a matrix with 128 columns fits one group.
When the rows are permuted, the heads move in pairs, and the test must undo it.
We write the same bytes every time, so a second run changes nothing at all.
Tokens are pieces of text: a word, part of a word, a space, a digit or a byte.
The quick brown fox jumps over the lazy dog while the cat sleeps in the sun.
Pack my box with five dozen liquor jugs, then ship it before the night ends.
How vexingly quick daft zebras jump! Sphinx of black quartz, judge my vow.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 12 64 100 128 256 512 1024 2048 4096 32768.
Dates like 2024-05-17 and times like 12:30:45 appear in logs and reports.
Prices: $3.50, 12.99 euros, 7% off, 1/2 cup, 3 x 4 = 12, 2^10 = 1024.
Code looks like this: def main(args): return run(args.input, args.output)
and this: for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }
and this: if x is None: raise ValueError("missing value") else: print(x)
Paths such as /usr/local/bin and C:\\Users\\me\\model.bin show slashes.
A question? An answer. A list: first, second, third; then a pause... done.
Quotes "inside" and 'single' ones, brackets (round) [square] {curly} <angle>.
The model has layers, each layer has attention and a feed-forward block.
Attention uses queries, keys and values; the keys are shared by query heads.
The embedding table maps every token to a vector; the head maps back to logits.
Some models tie the two tables, others keep a separate output projection.
Normalization scales each vector by the inverse of its root mean square.
A sliding window limits how far back a layer may look; global layers see all.
Rotary position embeddings turn pairs of coordinates by angles that grow.
The scale of low frequencies is stretched so that long contexts still work.
Small files make tests fast, and fast tests get run often, which is the point.
Users ask questions and the assistant answers them, turn by turn, politely.
Hello! How are you today? I am fine, thank you. What can I do for you?
Please summarize the report in three sentences and list the open issues.
Translate to French: the weather is nice. Le temps est beau aujourd'hui.
Deutsch: Die Katze schl\u00e4ft. Espa\u00f1ol: \u00bfD\u00f3nde est\u00e1 la estaci\u00f3n? Caf\u00e9, na\u00efve, fa\u00e7ade.
Greek \u03b1\u03b2\u03b3 and Russian \u043f\u0440\u0438\u0432\u0435\u0442, Japanese \u6771\u4eac and \u3053\u3093\u306b\u3061\u306f, emoji \U0001F600 \U0001F680.
Tabs\tand  double  spaces   and trailing spaces matter to byte-level tokenizers.
It's, I'm, you're, we've, they'll, she'd, don't, can't, won't, isn't, aren't.
The rain in the plain stays mainly in the train station; again and again.
Reading, writing, testing, checking, converting, running, building, shipping.
Another another other others mother brother further together whether weather.
The end of one line is the start of the next, and the file ends with a newline.
"""


def corpus_lines() -> list[str]:
    return CORPUS.splitlines()


def rng_for(name: str) -> np.random.Generator:
    # One stream per fixture, independent of the order fixtures are made in.
    return np.random.default_rng([SEED, sum(name.encode()) * 1000003 % 2**31, len(name)])


def write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


# --------------------------------------------------------------------------
# tokenizers


def train_byte_level_bpe(split_regex: str, n_regular: int, ignore_merges: bool, nfc: bool):
    """A byte-level BPE of exactly n_regular tokens trained on CORPUS."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split_regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=n_regular,
        min_frequency=1,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator(corpus_lines(), trainer=trainer)
    if tok.get_vocab_size() != n_regular:
        raise SystemExit(f"BPE training gave {tok.get_vocab_size()} tokens, wanted {n_regular}")
    return tok


def added_token(content: str, special: bool = True) -> dict:
    return {"content": content, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False, "special": special}


# Llama 3's pre-tokenizer regex and Qwen2's (the same but one digit at a time).
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

LLAMA3_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{%- endif %}"
)

CHATML_TEMPLATE = (
    "{%- if messages[0]['role'] != 'system' %}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)

GEMMA3_TEMPLATE = (
    "{{ bos_token }}"
    "{%- for message in messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{ '<start_of_turn>model\\n' }}"
    "{%- endif -%}"
)


def finish_byte_level(tok, specials: list[tuple[str, bool]], out: Path, bos: str | None):
    """Append the added tokens, set the post-processor, write tokenizer.json;
    return the added_tokens_decoder of tokenizer_config.json."""
    from tokenizers import AddedToken, processors

    base = tok.get_vocab_size()
    for content, special in specials:
        t = AddedToken(content, single_word=False, lstrip=False, rstrip=False, normalized=False, special=special)
        if special:
            tok.add_special_tokens([t])
        else:
            tok.add_tokens([t])
    ids = {c: base + i for i, (c, _) in enumerate(specials)}
    for c, i in ids.items():
        assert tok.token_to_id(c) == i, (c, tok.token_to_id(c), i)
    if bos is not None:
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
                                          special_tokens=[(bos, ids[bos])]),
        ])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.save(str(out / "tokenizer.json"), pretty=True)
    return {str(ids[c]): added_token(c, s) for c, s in specials}


def llama3_tokenizer(out: Path, n_regular: int, n_special: int) -> dict:
    tok = train_byte_level_bpe(LLAMA3_SPLIT, n_regular, ignore_merges=True, nfc=False)
    named = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
             "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
             "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
    named += [f"<|reserved_special_token_{i}|>" for i in range(3, 3 + n_special - len(named))]
    decoder = finish_byte_level(tok, [(c, True) for c in named], out, bos="<|begin_of_text|>")
    write_json(out / "tokenizer_config.json", {
        "added_tokens_decoder": decoder,
        "bos_token": "<|begin_of_text|>",
        "chat_template": LLAMA3_TEMPLATE,
        "clean_up_tokenization_spaces": True,
        "eos_token": "<|eot_id|>",
        "extra_special_tokens": {},
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": 131072,
        "tokenizer_class": "PreTrainedTokenizerFast",
    })
    write_json(out / "special_tokens_map.json", {
        "bos_token": added_token("<|begin_of_text|>"), "eos_token": added_token("<|eot_id|>"),
    })
    base = n_regular
    return {"bos": base + 0, "eos": [base + 1, base + 8, base + 9], "eot": base + 9}


def qwen2_tokenizer(out: Path, n_regular: int) -> dict:
    tok = train_byte_level_bpe(QWEN2_SPLIT, n_regular, ignore_merges=False, nfc=True)
    specials = [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
                ("<tool_call>", False), ("</tool_call>", False)]
    decoder = finish_byte_level(tok, specials, out, bos=None)
    write_json(out / "tokenizer_config.json", {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "chat_template": CHATML_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "extra_special_tokens": {},
        "model_max_length": 32768,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    })
    write_json(out / "special_tokens_map.json", {
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "eos_token": added_token("<|im_end|>"),
        "pad_token": added_token("<|endoftext|>"),
    })
    # Qwen2 checkpoints also ship the slow tokenizer's two files.
    tj = json.loads((out / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = tj["model"]["vocab"]
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    (out / "merges.txt").write_text("#version: 0.2\n" + "".join(m + "\n" for m in merges), encoding="utf-8")
    return {"bos": n_regular, "eos": n_regular + 2, "pad": n_regular}


def gemma3_tokenizer(out: Path, n_pieces: int) -> dict:
    """A SentencePiece BPE model with byte fallback, trained on CORPUS the way
    Gemma's is configured (no dummy prefix, identity normalization, digits
    split, whitespace-only pieces allowed), and its transformers conversion."""
    import io

    import sentencepiece as spm

    spm.set_random_generator_seed(SEED)
    model = io.BytesIO()
    user_symbols = ["<start_of_turn>", "<end_of_turn>", "\n", "\t"]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus_lines()),
        model_writer=model,
        model_type="bpe",
        vocab_size=n_pieces,
        character_coverage=1.0,
        byte_fallback=True,
        split_digits=True,
        allow_whitespace_only_pieces=True,
        add_dummy_prefix=False,
        remove_extra_whitespaces=False,
        normalization_rule_name="identity",
        pad_id=0, eos_id=1, bos_id=2, unk_id=3,
        pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>", unk_piece="<unk>",
        user_defined_symbols=user_symbols,
        num_threads=1,
        input_sentence_size=0,
        shuffle_input_sentence=False,
        minloglevel=2,
    )
    (out / "tokenizer.model").write_bytes(model.getvalue())
    sp = spm.SentencePieceProcessor(model_file=str(out / "tokenizer.model"))
    if sp.get_piece_size() != n_pieces:
        raise SystemExit(f"SentencePiece training gave {sp.get_piece_size()} pieces, wanted {n_pieces}")
    ids = {s: sp.piece_to_id(s) for s in user_symbols}

    # sentencepiece 0.2.3's own sentencepiece_model_pb2 needs protobuf >= 5
    # (runtime_version); the converter venv pins protobuf 4.25, so give
    # transformers' slow->fast conversion the copy transformers ships.
    try:
        from sentencepiece import sentencepiece_model_pb2  # noqa: F401
    except ImportError:
        from transformers.utils import sentencepiece_model_pb2_new

        sys.modules["sentencepiece.sentencepiece_model_pb2"] = sentencepiece_model_pb2_new
    from transformers import GemmaTokenizerFast

    with tempfile.TemporaryDirectory() as tmp:
        t = GemmaTokenizerFast(vocab_file=str(out / "tokenizer.model"), add_bos_token=True, add_eos_token=False,
                               pad_token="<pad>", eos_token="<eos>", bos_token="<bos>", unk_token="<unk>",
                               additional_special_tokens=["<start_of_turn>", "<end_of_turn>"])
        t.chat_template = GEMMA3_TEMPLATE
        t.save_pretrained(tmp)
        shutil.copy(Path(tmp) / "tokenizer.json", out / "tokenizer.json")
        cfg = json.loads((Path(tmp) / "tokenizer_config.json").read_text(encoding="utf-8"))
        smap = json.loads((Path(tmp) / "special_tokens_map.json").read_text(encoding="utf-8"))
    cfg["chat_template"] = GEMMA3_TEMPLATE
    cfg["model_max_length"] = 32768
    write_json(out / "tokenizer_config.json", dict(sorted(cfg.items())))
    write_json(out / "special_tokens_map.json", smap)
    return {"pad": 0, "eos": 1, "bos": 2, "unk": 3, "sot": ids["<start_of_turn>"], "eot": ids["<end_of_turn>"]}


# --------------------------------------------------------------------------
# weights


def fill_weights(model, rng: np.random.Generator, gemma_norms: bool) -> None:
    """Seeded values for every parameter, in named_parameters() order, made
    bf16 by torch's round-to-nearest-even."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            shape = tuple(p.shape)
            if name.endswith("norm.weight"):
                if gemma_norms:
                    # HF Gemma norms multiply by (1 + w): offsets around 0.
                    v = (0.3 * rng.standard_normal(shape)).astype(np.float32)
                else:
                    v = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
            elif name.endswith(".bias"):
                v = (0.1 * rng.standard_normal(shape)).astype(np.float32)
            else:
                fan_in = shape[1] if len(shape) == 2 else 1
                v = (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)
            p.copy_(torch.from_numpy(v).to(torch.bfloat16))


def save_model(model_cls, config, out: Path, rng, gemma_norms: bool, generation: dict) -> None:
    import torch
    from transformers import GenerationConfig

    torch.manual_seed(0)  # only for the throw-away init; every value is overwritten
    config.dtype = torch.bfloat16
    model = model_cls(config).to(torch.bfloat16).eval()
    fill_weights(model, rng, gemma_norms)
    model.generation_config = GenerationConfig(**generation)
    model.save_pretrained(out, safe_serialization=True)
    # The folder loads in transformers with exactly these values, and runs.
    reloaded = model_cls.from_pretrained(out, dtype=torch.bfloat16).eval()
    mine = dict(model.named_parameters())
    theirs = dict(reloaded.named_parameters())
    if sorted(mine) != sorted(theirs) or any(not torch.equal(mine[k], theirs[k]) for k in mine):
        raise SystemExit(f"{out}: reloaded parameters differ from the ones saved")
    with torch.no_grad():
        logits = reloaded(torch.arange(8).reshape(1, 8)).logits
    if not torch.isfinite(logits).all():
        raise SystemExit(f"{out}: non-finite logits")


def make_llama3(out: Path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    n_regular, n_special = 496, 16
    ids = llama3_tokenizer(out, n_regular, n_special)
    config = LlamaConfig(
        vocab_size=n_regular + n_special, hidden_size=HIDDEN, intermediate_size=FFN,
        num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM, hidden_act="silu", max_position_embeddings=131072, rms_norm_eps=1e-5,
        rope_theta=500000.0,
        rope_scaling={"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                      "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        tie_word_embeddings=False, bos_token_id=ids["bos"], eos_token_id=ids["eos"],
        attention_bias=False, mlp_bias=False, architectures=["LlamaForCausalLM"],
    )
    save_model(LlamaForCausalLM, config, out, rng_for("llama3"), False,
               {"bos_token_id": ids["bos"], "eos_token_id": ids["eos"], "do_sample": True,
                "temperature": 0.6, "top_p": 0.9})


def make_qwen2(out: Path) -> None:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    n_regular = 600
    ids = qwen2_tokenizer(out, n_regular)
    config = Qwen2Config(
        vocab_size=640, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, hidden_act="silu",
        max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=1000000.0,
        tie_word_embeddings=True, use_sliding_window=False, sliding_window=None, max_window_layers=LAYERS,
        bos_token_id=ids["bos"], eos_token_id=ids["eos"], architectures=["Qwen2ForCausalLM"],
    )
    save_model(Qwen2ForCausalLM, config, out, rng_for("qwen2"), False,
               {"bos_token_id": ids["bos"], "eos_token_id": [ids["eos"], ids["pad"]],
                "pad_token_id": ids["pad"], "do_sample": True, "temperature": 0.7, "top_p": 0.8,
                "top_k": 20, "repetition_penalty": 1.05})


def make_gemma3(out: Path) -> None:
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    ids = gemma3_tokenizer(out, 700)
    config = Gemma3TextConfig(
        vocab_size=768, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
        hidden_activation="gelu_pytorch_tanh", max_position_embeddings=32768, rms_norm_eps=1e-6,
        rope_theta=1000000.0, rope_local_base_freq=10000.0, rope_scaling=None,
        query_pre_attn_scalar=HEAD_DIM, sliding_window=512,
        # The 5-sliding-1-global rule of Gemma 3 (what llama.cpp assumes, it
        # stores no pattern): with 2 layers both are sliding.
        layer_types=["sliding_attention", "sliding_attention"],
        final_logit_softcapping=None, attn_logit_softcapping=None, tie_word_embeddings=True,
        pad_token_id=ids["pad"], bos_token_id=ids["bos"], eos_token_id=[ids["eos"], ids["eot"]],
        architectures=["Gemma3ForCausalLM"],
    )
    save_model(Gemma3ForCausalLM, config, out, rng_for("gemma3"), True,
               {"bos_token_id": ids["bos"], "eos_token_id": [ids["eos"], ids["eot"]],
                "pad_token_id": ids["pad"], "cache_implementation": "hybrid", "do_sample": True,
                "top_k": 64, "top_p": 0.95})


# --------------------------------------------------------------------------
# llama.cpp's converter

SHIM = r"""
import runpy, sys
src, pre = sys.argv[1], sys.argv[2]
sys.argv = [src + "/convert_hf_to_gguf.py"] + sys.argv[3:]
sys.path.insert(0, src)
sys.path.insert(1, src + "/gguf-py")
import conversion.base as base
original = base.TextModel.get_vocab_base_pre
def get_vocab_base_pre(self, tokenizer):
    try:
        return original(self, tokenizer)
    except NotImplementedError:
        base.logger.warning("unknown BPE pre-tokenizer hash (a trained tiny vocab): using %r", pre)
        return pre
base.TextModel.get_vocab_base_pre = get_vocab_base_pre
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def llama_cpp_src() -> Path:
    out = subprocess.run([str(ROOT / "scripts" / "llama-cpp"), "--src"], check=True,
                         stdout=subprocess.PIPE, text=True).stdout.strip()
    return Path(out)


def convert(src: Path, hf: Path, gguf: Path, pre: str) -> None:
    gguf.unlink(missing_ok=True)
    subprocess.run([sys.executable, "-c", SHIM, str(src), pre, str(hf), "--outfile", str(gguf),
                    "--outtype", "f32"], check=True, stdout=subprocess.DEVNULL)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "fixtures" / "models",
                    help="folder to write into (default: fixtures/models)")
    ap.add_argument("--llama-cpp-src", type=Path, help="llama.cpp tree (default: scripts/llama-cpp --src)")
    args = ap.parse_args()
    src = args.llama_cpp_src or llama_cpp_src()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, make, pre in (("llama3", make_llama3, "llama-bpe"), ("qwen2", make_qwen2, "qwen2"),
                            ("gemma3", make_gemma3, "default")):
        hf = args.out / f"tiny-{name}-hf"
        if hf.exists():
            shutil.rmtree(hf)
        hf.mkdir()
        make(hf)
        convert(src, hf, args.out / f"tiny-{name}.gguf", pre)
        if name == "gemma3":
            # The same folder without tokenizer.model: llama.cpp's tokenizer.json route.
            with tempfile.TemporaryDirectory() as tmp:
                view = Path(tmp) / "tiny-gemma3-hf"
                view.mkdir()
                for f in sorted(hf.iterdir()):
                    if f.name != "tokenizer.model":
                        os.symlink(f.resolve(), view / f.name)
                convert(src, view, args.out / "tiny-gemma3-tokjson.gguf", pre)
        print(f"wrote {hf} and {args.out / f'tiny-{name}.gguf'}", file=sys.stderr)


if __name__ == "__main__":
    main()

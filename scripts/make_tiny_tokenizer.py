#!/usr/bin/env python3
"""Write a tiny Llama-style tokenizer (tokenizer.json + tokenizer_config.json)
into a Hugging Face model folder, for models that ship without one.

Why: llama.cpp's convert_hf_to_gguf.py refuses a folder without a tokenizer,
and llama-perplexity / llama-imatrix need one in the GGUF. The committed
fixture fixtures/models/tiny-llama-hf-bf16 has random weights and no
tokenizer; this gives it a valid one of exactly its vocab_size.

What it writes (plain JSON, standard library only, same bytes every run):
  - a BPE model with byte_fallback, the layout of the Llama / SentencePiece
    family in tokenizers' JSON: <unk>=0, <s>=1, </s>=2, the 256 byte tokens
    <0x00>..<0xFF>, single characters (the word marker U+2581, letters,
    digits, a few punctuation marks), then merged pieces: marker+letter,
    letter+letter, marker+letter+letter, in a fixed order, until the
    vocabulary has --vocab-size entries (259 + 69 + 1378 = 1706 at most);
  - the normalizer / decoder pair Llama-2's tokenizer.json uses (prepend and
    replace spaces by U+2581; decode by replace, byte fallback, fuse, strip),
    which is what gguf-py's LlamaHfVocab checks for;
  - tokenizer_config.json with bos/eos/unk and add_bos_token.

convert_hf_to_gguf.py takes it through its LlamaHfVocab path (tokenizer.ggml.model
"llama", every score -1000, as for any Llama folder that has a tokenizer.json
but no tokenizer.model).

Usage: make_tiny_tokenizer.py [--vocab-size N] OUT_DIR
"""

import argparse
import json
import string
import sys
from pathlib import Path

MARK = "\u2581"  # SentencePiece's word-start marker
SPECIALS = ["<unk>", "<s>", "</s>"]
SINGLES = [MARK] + list(string.ascii_lowercase) + list(string.ascii_uppercase) + list(string.digits) + list(".,!?'-")


def build_vocab(size: int) -> tuple[dict[str, int], list[list[str]]]:
    pieces = list(SPECIALS) + [f"<0x{b:02X}>" for b in range(256)] + list(SINGLES)
    low = string.ascii_lowercase
    # Merges in priority order; every merged piece is the concatenation of
    # two pieces already in the vocabulary.
    merges = [(MARK, a) for a in low]
    merges += [(a, b) for a in low for b in low]
    merges += [(MARK + a, b) for a in low for b in low]
    need = size - len(pieces)
    if need < 0:
        raise SystemExit(f"vocab size {size} is below the {len(pieces)} base tokens")
    if need > len(merges):
        raise SystemExit(f"vocab size {size} is above the {len(pieces) + len(merges)} this generator makes")
    chosen = merges[:need]
    pieces += [a + b for a, b in chosen]
    assert len(set(pieces)) == len(pieces) == size
    return {p: i for i, p in enumerate(pieces)}, [[a, b] for a, b in chosen]


def tokenizer_json(vocab: dict[str, int], merges: list[list[str]]) -> dict:
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": vocab[t],
                "content": t,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for t in SPECIALS
        ],
        "normalizer": {
            "type": "Sequence",
            "normalizers": [
                {"type": "Prepend", "prepend": MARK},
                {"type": "Replace", "pattern": {"String": " "}, "content": MARK},
            ],
        },
        "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [
                {"SpecialToken": {"id": "<s>", "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
            ],
            # <s> A B: no separator, so gguf-py's template parser has
            # nothing to guess (it warns on a second <s>).
            "pair": [
                {"SpecialToken": {"id": "<s>", "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
                {"Sequence": {"id": "B", "type_id": 1}},
            ],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [vocab["<s>"]], "tokens": ["<s>"]}},
        },
        "decoder": {
            "type": "Sequence",
            "decoders": [
                {"type": "Replace", "pattern": {"String": MARK}, "content": " "},
                {"type": "ByteFallback"},
                {"type": "Fuse"},
                {"type": "Strip", "content": " ", "start": 1, "stop": 0},
            ],
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": "<unk>",
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": True,
            "byte_fallback": True,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": merges,
        },
    }


def tokenizer_config() -> dict:
    # No add_prefix_space: transformers would then rebuild the fast tokenizer
    # from a SentencePiece tokenizer.model, which this folder does not have.
    return {
        "tokenizer_class": "LlamaTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": None,
        "add_bos_token": True,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 1000000000,
    }


def write_json(path: Path, obj: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab-size", type=int, default=1024)
    ap.add_argument("out_dir", type=Path)
    args = ap.parse_args()
    vocab, merges = build_vocab(args.vocab_size)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    write_json(args.out_dir / "tokenizer.json", tokenizer_json(vocab, merges))
    write_json(args.out_dir / "tokenizer_config.json", tokenizer_config())
    print(f"wrote {args.out_dir}/tokenizer.json ({len(vocab)} tokens, {len(merges)} merges) and tokenizer_config.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())

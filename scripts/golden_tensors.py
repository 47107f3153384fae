#!/usr/bin/env python3
"""Write fixtures/golden/tensors.json: every tensor of every fixture model as
the reference Python packages see it (gguf-py's GGUFReader for GGUF files,
the safetensors package's `deserialize` for safetensors), so the Rust
readers can be checked against an implementation that is not ours.

Usage: scripts/golden_tensors.py [--check]
Needs: pip install -r scripts/requirements.txt
"""
import hashlib
import importlib.metadata
import json
import pathlib
import sys

import gguf
import safetensors

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures"
OUT = FIX / "golden" / "tensors.json"


def gguf_tensors(path):
    r = gguf.GGUFReader(str(path))
    out = []
    for t in r.tensors:
        raw = bytes(t.data.tobytes())
        out.append({
            "name": t.name,
            # gguf-py reports ne order; the project's convention is row-major
            # outermost first, so reverse it.
            "shape": [int(d) for d in reversed(list(t.shape))],
            "dtype": t.tensor_type.name,
            "n_bytes": int(t.n_bytes),
            "sha256": hashlib.sha256(raw).hexdigest(),
        })
    return out


def st_tensors(path):
    out = []
    for name, info in safetensors.deserialize(path.read_bytes()):
        raw = bytes(info["data"])
        out.append({
            "name": name,
            "shape": [int(d) for d in info["shape"]],
            "dtype": info["dtype"].upper(),
            "n_bytes": len(raw),
            "sha256": hashlib.sha256(raw).hexdigest(),
        })
    return sorted(out, key=lambda t: t["name"])


def main():
    golden = {}
    files = sorted(FIX.glob("models/*.gguf")) + sorted(FIX.glob("ggml-vectors/*.gguf")) + sorted(
        FIX.glob("gguf-variants/*.gguf"))
    for p in files:
        golden[str(p.relative_to(FIX))] = gguf_tensors(p)
    for p in sorted(FIX.glob("models/*/*.safetensors")):
        golden[str(p.relative_to(FIX))] = st_tensors(p)
    text = json.dumps({
        "made_with": {"gguf": importlib.metadata.version("gguf"),
                      "safetensors": safetensors.__version__},
        "files": golden,
    }, indent=1, sort_keys=True) + "\n"
    if "--check" in sys.argv:
        if OUT.read_text() != text:
            sys.exit(f"{OUT} is out of date")
        print(f"{OUT}: up to date ({len(golden)} files)")
        return
    OUT.write_text(text)
    print(f"wrote {OUT} ({len(golden)} files, {sum(len(v) for v in golden.values())} tensors)")


if __name__ == "__main__":
    main()

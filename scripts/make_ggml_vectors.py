#!/usr/bin/env python3
"""Reference vectors made by ggml itself for the ggml block formats.

Writes, from ggml's own C code called through ctypes:

- fixtures/ggml-vectors/{q2_k,q3_k,iq4_nl,iq4_xs}.gguf: the same layout as
  the older files of that folder (tensors `input` F32 1024x20, `quantized`,
  `dequantized` F32; keys `vectors.type`, `vectors.row_names`,
  `vectors.producer`). `quantized` is `ggml_quantize_chunk(type, input, ...,
  imatrix=NULL)`, `dequantized` is the type traits' `to_float` of it.
- fixtures/ggml-imatrix/<type>.gguf for every type whose ggml quantizer takes
  importance weights (q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k q2_k q3_k iq4_nl
  iq4_xs) and for q8_0 (which ignores them): `input` (the same 20 rows), and
  per importance matrix NAME an `imatrix.NAME` F32 [1024] tensor and a
  `quantized.NAME` tensor = `ggml_quantize_chunk(type, input, ..., imatrix)`.
  The key `imatrix.names` lists the NAMEs in order.

The 20 input rows are not regenerated: they are read from the committed
fixtures/ggml-vectors/q8_0.gguf (and checked to be identical in every older
file), so every file shares them.

Which code path: `ggml_quantize_chunk` is what llama-quantize calls. With a
NULL imatrix it runs `quantize_row_*_ref` for every type here except
IQ4_NL and IQ4_XS, where it runs `quantize_iq4_nl(.., NULL)` /
`quantize_iq4_xs(.., NULL)`, i.e. `quantize_row_iq4_nl_impl(.., ntry=7)` with
weights x^2. For IQ4_NL that differs from `quantize_row_iq4_nl_ref` (ntry=-1,
no scale search, and a zero block keeps the previous block's quants); the
files hold what `ggml_quantize_chunk` writes. `quantize_row_iq4_xs_ref` is
`quantize_iq4_xs(.., NULL)`, so for IQ4_XS both agree.

The reference library (`libggml-base.so`) is built by this script, once, under
target/ggml-ref/ (git-ignored), from the llama.cpp tree vendored in the PyPI
source package llama-cpp-python==0.3.36 (vendor/llama.cpp), sha256 pinned in
SDIST_SHA256. It is fetched with
`pip download --no-deps --no-binary llama-cpp-python llama-cpp-python==0.3.36`
when target/ggml-ref/ has no copy. Build: CMake (pip package cmake==4.4.4 in
target/ggml-ref/build-venv), Release (-O3), target ggml-base only, flags in
CMAKE_ARGS: portable (GGML_NATIVE=OFF, every x86 SIMD extension OFF) and
-ffp-contract=off, so the library does plain SSE float32 arithmetic with no
fused multiply-add, like the shipped x86-64 llama-cpp-python wheel. The
script refuses a library whose disassembly contains any FMA instruction.

Before writing anything the script re-quantizes the older files' types
(q4_0 .. q6_k, f16, bf16) with the built library and requires their committed
`quantized` and `dequantized` tensors back byte for byte, so the new vectors
come from the same ggml as the old ones.

Deterministic: the same library and inputs give the same files (the random
importance matrices use numpy's PCG64 with fixed seeds).

Usage: "$(scripts/pyenv)" scripts/make_ggml_vectors.py [--check]
  (GGML_REF_DIR=DIR builds and uses the library under DIR instead.)
  --check: regenerate in memory and compare with the committed files
           (exit 1 on any difference) instead of writing them.
"""
import argparse
import ctypes
import hashlib
import os
import pathlib
import subprocess
import sys
import tarfile

import numpy as np
import gguf

ROOT = pathlib.Path(__file__).resolve().parent.parent
VECTORS = ROOT / "fixtures" / "ggml-vectors"
IMATRIX_DIR = ROOT / "fixtures" / "ggml-imatrix"
# Where the library is built (git-ignored); GGML_REF_DIR overrides it.
REF = pathlib.Path(os.environ.get("GGML_REF_DIR", ROOT / "target" / "ggml-ref"))

SDIST_NAME = "llama-cpp-python"
SDIST_VERSION = "0.3.36"
SDIST_FILE = f"llama_cpp_python-{SDIST_VERSION}.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
CMAKE_PIN = "cmake==4.4.4"
CMAKE_ARGS = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=ON",
    "-DGGML_NATIVE=OFF",
    "-DGGML_AVX=OFF",
    "-DGGML_AVX2=OFF",
    "-DGGML_AVX512=OFF",
    "-DGGML_FMA=OFF",
    "-DGGML_F16C=OFF",
    "-DGGML_BMI2=OFF",
    "-DGGML_SSE42=OFF",
    "-DGGML_OPENMP=OFF",
    "-DCMAKE_C_FLAGS=-ffp-contract=off",
    "-DCMAKE_CXX_FLAGS=-ffp-contract=off",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
]

ROWS = 20
NCOLS = 1024
T = gguf.GGMLQuantizationType

# Older files: type -> file name; re-made here only to check the library.
OLD_TYPES = {
    T.Q8_0: "q8_0", T.Q5_0: "q5_0", T.Q4_K: "q4_k", T.Q5_K: "q5_k",
    T.Q6_K: "q6_k", T.Q4_0: "q4_0", T.Q4_1: "q4_1", T.Q5_1: "q5_1",
    T.F16: "f16", T.BF16: "bf16",
}
NEW_TYPES = {T.Q2_K: "q2_k", T.Q3_K: "q3_k", T.IQ4_NL: "iq4_nl", T.IQ4_XS: "iq4_xs"}
IMATRIX_TYPES = {
    T.Q4_0: "q4_0", T.Q4_1: "q4_1", T.Q5_0: "q5_0", T.Q5_1: "q5_1",
    T.Q4_K: "q4_k", T.Q5_K: "q5_k", T.Q6_K: "q6_k", T.Q2_K: "q2_k",
    T.Q3_K: "q3_k", T.IQ4_NL: "iq4_nl", T.IQ4_XS: "iq4_xs", T.Q8_0: "q8_0",
}


def log(*a):
    print(*a, file=sys.stderr)


# ------------------------------------------------------------ the library

def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fma_count(lib):
    out = subprocess.run(["objdump", "-d", str(lib)], check=True,
                         capture_output=True, text=True).stdout
    return sum(1 for line in out.splitlines()
               if any(m in line for m in ("vfmadd", "vfmsub", "vfnmadd", "vfnmsub")))


def build_library():
    """Builds (once) target/ggml-ref/build/bin/libggml-base.so; returns its path."""
    REF.mkdir(parents=True, exist_ok=True)
    lib = REF / "build" / "bin" / "libggml-base.so"
    stamp = REF / "build" / ".stamp"
    want = "\n".join([SDIST_SHA256] + CMAKE_ARGS)
    if lib.exists() and stamp.exists() and stamp.read_text() == want:
        return lib
    sdist = REF / SDIST_FILE
    if not sdist.exists():
        log("downloading", SDIST_FILE)
        # Source only for this package; its build backend may come as wheels
        # (pip prepares the sdist's metadata, and building cmake from source
        # for that would take long).
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                        "--no-binary", SDIST_NAME, "-d", str(REF),
                        f"{SDIST_NAME}=={SDIST_VERSION}"], check=True)
    got = sha256(sdist)
    if got != SDIST_SHA256:
        sys.exit(f"{sdist}: sha256 {got}, expected {SDIST_SHA256}")
    src = REF / "src"
    if not (src / "ggml" / "src" / "ggml-quants.c").exists():
        log("unpacking vendor/llama.cpp")
        prefix = f"llama_cpp_python-{SDIST_VERSION}/vendor/llama.cpp/"
        with tarfile.open(sdist) as tar:
            members = []
            for m in tar.getmembers():
                if m.name.startswith(prefix) and len(m.name) > len(prefix):
                    m.name = m.name[len(prefix):]
                    members.append(m)
            tar.extractall(src, members=members, filter="data")
    venv = REF / "build-venv"
    cmake = venv / "bin" / "cmake"
    if not cmake.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q",
                        "--disable-pip-version-check", CMAKE_PIN], check=True)
    build = REF / "build"
    subprocess.run([str(cmake), "-S", str(src), "-B", str(build), *CMAKE_ARGS],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["nice", str(cmake), "--build", str(build), "--target",
                    "ggml-base", "-j2"], check=True, stdout=subprocess.DEVNULL)
    stamp.write_text(want)
    return lib


class Ggml:
    def __init__(self, lib_path):
        n = fma_count(lib_path)
        if n:
            sys.exit(f"{lib_path}: {n} FMA instructions; the reference must have none")
        self.lib = ctypes.CDLL(str(lib_path))
        self.lib.ggml_quantize_chunk.restype = ctypes.c_size_t
        self.lib.ggml_quantize_chunk.argtypes = [
            ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
            ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
        self.lib.ggml_get_type_traits.restype = ctypes.POINTER(TypeTraits)
        self.lib.ggml_get_type_traits.argtypes = [ctypes.c_int]
        self.lib.ggml_row_size.restype = ctypes.c_size_t
        self.lib.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]

    def quantize(self, ty, rows, imatrix=None):
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        nrows, ncols = rows.shape
        row_size = self.lib.ggml_row_size(int(ty), ncols)
        dst = np.zeros(nrows * row_size, dtype=np.uint8)
        im = None
        if imatrix is not None:
            imatrix = np.ascontiguousarray(imatrix, dtype=np.float32)
            assert imatrix.shape == (ncols,)
            im = imatrix.ctypes.data
        n = self.lib.ggml_quantize_chunk(int(ty), rows.ctypes.data, dst.ctypes.data,
                                         0, nrows, ncols, im)
        assert n == dst.size, (ty, n, dst.size)
        return dst.reshape(nrows, row_size)

    def dequantize(self, ty, data, ncols):
        traits = self.lib.ggml_get_type_traits(int(ty)).contents
        data = np.ascontiguousarray(data, dtype=np.uint8)
        nrows = data.shape[0]
        out = np.zeros((nrows, ncols), dtype=np.float32)
        traits.to_float(data.ctypes.data, out.ctypes.data, nrows * ncols)
        return out


TO_FLOAT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


class TypeTraits(ctypes.Structure):
    # struct ggml_type_traits (ggml/include/ggml.h of that tree)
    _fields_ = [
        ("type_name", ctypes.c_char_p),
        ("blck_size", ctypes.c_int64),
        ("blck_size_interleave", ctypes.c_int64),
        ("type_size", ctypes.c_size_t),
        ("is_quantized", ctypes.c_bool),
        ("to_float", TO_FLOAT),
        ("from_float_ref", ctypes.c_void_p),
    ]


# ------------------------------------------------------------ inputs

def read_vectors(path):
    r = gguf.GGUFReader(str(path))
    f = r.fields["vectors.row_names"]
    names = [bytes(f.parts[i]).decode() for i in f.data]
    tensors = {t.name: t for t in r.tensors}
    return names, tensors


def tensor_bytes(t):
    return np.asarray(t.data).reshape(-1).view(np.uint8).reshape(ROWS, -1)


def imatrices():
    """The importance matrices (mean x^2 per column, K = 1024), in order."""
    out = {}
    out["ones"] = np.ones(NCOLS, dtype=np.float32)
    rng = np.random.default_rng(20240601)
    # Positive, a few orders of magnitude, like a real imatrix of activations.
    out["random"] = rng.lognormal(0.0, 1.0, NCOLS).astype(np.float32)
    rng = np.random.default_rng(20240602)
    heavy = (rng.standard_t(1.5, NCOLS) ** 2).astype(np.float32)
    heavy[rng.random(NCOLS) < 0.15] = 0.0   # scattered zero columns
    heavy[256:288] = 0.0                     # one whole 32-block of zeros
    heavy[512:768] = np.where(np.arange(256) % 2 == 0, 0.0, heavy[512:768])
    out["heavy_zeros"] = heavy
    huge = np.ones(NCOLS, dtype=np.float32)
    huge[37] = 1.0e8
    out["huge_column"] = huge
    # Scale facts: x4 must give the bytes of `random`, x3 need not.
    out["random_x4"] = (out["random"] * np.float32(4)).astype(np.float32)
    out["random_x3"] = (out["random"] * np.float32(3)).astype(np.float32)
    return out


# ------------------------------------------------------------ writing

def type_name(ty):
    return ty.name


def write_vectors(path, ty, names, inp, q, deq, producer):
    w = gguf.GGUFWriter(str(path), "test-vectors")
    w.add_string("vectors.type", type_name(ty))
    w.add_array("vectors.row_names", names)
    w.add_string("vectors.producer", producer)
    w.add_tensor("input", inp)
    w.add_tensor("quantized", q, raw_dtype=ty)
    w.add_tensor("dequantized", deq)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_imatrix(path, ty, names, inp, ims, qs, producer):
    w = gguf.GGUFWriter(str(path), "test-vectors")
    w.add_string("vectors.type", type_name(ty))
    w.add_array("vectors.row_names", names)
    w.add_string("vectors.producer", producer)
    w.add_array("imatrix.names", list(ims))
    w.add_tensor("input", inp)
    for name, im in ims.items():
        w.add_tensor(f"imatrix.{name}", im)
        w.add_tensor(f"quantized.{name}", qs[name], raw_dtype=ty)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


PRODUCER = (f"ggml_quantize_chunk and type_traits.to_float of libggml-base from "
            f"{SDIST_NAME} {SDIST_VERSION} (sdist sha256 {SDIST_SHA256[:16]}...), "
            f"portable, no FMA; scripts/make_ggml_vectors.py")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()

    lib = build_library()
    log("library", lib, "FMA instructions:", fma_count(lib))
    g = Ggml(lib)

    names, base = read_vectors(VECTORS / "q8_0.gguf")
    inp = np.asarray(base["input"].data, dtype=np.float32).reshape(ROWS, NCOLS).copy()
    assert len(names) == ROWS

    # The built library reproduces every older file exactly.
    for ty, stem in OLD_TYPES.items():
        n2, t = read_vectors(VECTORS / f"{stem}.gguf")
        assert n2 == names, stem
        i2 = np.asarray(t["input"].data, dtype=np.float32).reshape(ROWS, NCOLS)
        assert i2.tobytes() == inp.tobytes(), f"{stem}: input rows differ"
        q = g.quantize(ty, inp)
        assert q.tobytes() == tensor_bytes(t["quantized"]).tobytes(), \
            f"{stem}: this library's bytes differ from the committed ones"
        d = g.dequantize(ty, q, NCOLS)
        d2 = np.asarray(t["dequantized"].data, dtype=np.float32).reshape(ROWS, NCOLS)
        assert d.tobytes() == d2.tobytes(), f"{stem}: dequantized differs"
    log("library reproduces the committed vectors of", len(OLD_TYPES), "types")

    outputs = {}
    for ty, stem in NEW_TYPES.items():
        q = g.quantize(ty, inp)
        d = g.dequantize(ty, q, NCOLS)
        path = VECTORS / f"{stem}.gguf"
        how = "quantize_iq4_nl(NULL), not quantize_row_iq4_nl_ref; " if ty == T.IQ4_NL else ""
        outputs[path] = lambda p, ty=ty, q=q, d=d, how=how: write_vectors(
            p, ty, names, inp, q, d,
            f"no importance matrix ({how}what llama-quantize writes); " + PRODUCER)

    ims = imatrices()
    for ty, stem in IMATRIX_TYPES.items():
        qs = {name: g.quantize(ty, inp, im) for name, im in ims.items()}
        for name, q in qs.items():
            assert np.isfinite(g.dequantize(ty, q, NCOLS)).all(), f"{stem} {name}: non-finite"
        assert qs["random_x4"].tobytes() == qs["random"].tobytes(), f"{stem}: x4 differs"
        if ty == T.Q8_0:
            ref = g.quantize(ty, inp)
            assert all(q.tobytes() == ref.tobytes() for q in qs.values()), "Q8_0 uses imatrix"
        else:
            ref = g.quantize(ty, inp)
            assert qs["ones"].tobytes() != ref.tobytes(), f"{stem}: ones == no imatrix"
        x3 = int((qs["random_x3"] != qs["random"]).sum())
        log(f"{stem}: x3 changes {x3} bytes")
        if ty == T.Q4_K:
            assert x3 > 0, "Q4_K: x3 gives identical bytes"
        path = IMATRIX_DIR / f"{stem}.gguf"
        outputs[path] = lambda p, ty=ty, qs=qs: write_imatrix(
            p, ty, names, inp, ims, qs,
            "quantized.NAME = ggml_quantize_chunk with imatrix.NAME; " + PRODUCER)

    bad = 0
    for path, write in outputs.items():
        if args.check:
            tmp = REF / "check" / path.name
            tmp.parent.mkdir(parents=True, exist_ok=True)
            write(tmp)
            same = path.exists() and tmp.read_bytes() == path.read_bytes()
            log(("same     " if same else "DIFFERENT"), path.relative_to(ROOT))
            bad += not same
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            write(path)
            log("wrote", path.relative_to(ROOT), path.stat().st_size, "bytes")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()

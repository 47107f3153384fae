"""Tables and JSON for scripts/bench-gemv-vs-ggml.

Reads RUN_DIR/{machine,ours,ggml}.tsv (records of crates/kernels/benches/gemv.rs
with GEMV_BENCH_TSV and of ggml_mulmat.c), keeps each cell's best round,
prints markdown tables with ours / ggml ratios and writes OUT.json.
Usage: python3 report.py RUN_DIR OUT.json
"""

import json
import sys
from pathlib import Path

TARGET = 1.2  # the bar for R4 / R8 against ggml's plain kernel
PLAIN_TARGET = 1.0  # and for plain row-major
LAYOUTS = ["row_major", "r4", "r8"]


def records(path):
    if not path.exists():
        return []
    return [
        line.rstrip("\n").split("\t")
        for line in path.read_text().splitlines()
        if line and not line.startswith("#")
    ]


def best(d, key, vals):
    old = d.get(key)
    d[key] = vals if old is None else [max(a, b) for a, b in zip(old, vals)]


def main():
    run, out_json = Path(sys.argv[1]), Path(sys.argv[2])
    machine = dict(r[:2] for r in records(run / "machine.tsv"))
    ours_gemv, ours_gemm, ggml_gemv, ggml_gemm = {}, {}, {}, {}
    # ggml's cold GB/s measured pass by pass beside ours (gemv.rs with
    # GEMV_BENCH_GGML_PEER): the cold ratios use it when present.
    ours_paired = {}
    ours_kernel, ggml_kernel = {}, {}
    for r in records(run / "ours.tsv"):
        ty, layout = r[1].split(" ", 1) if " " in r[1] else (r[1], "")
        if r[0] == "kernel":
            best(ours_kernel, (ty, layout), [float(r[3])])
        elif r[0] == "gemv":
            # gemv LAYOUT N K THREADS HOT COLD BW [HOT_BW [GGML_COLD PAIR_RATIO]]
            key = (ty, layout, int(r[2]), int(r[3]), int(r[4]))
            best(ours_gemv, key, [float(x) for x in r[5:9]])
            if len(r) > 10:
                best(ours_paired, key, [float(r[9]), float(r[10])])
        else:
            # gemm LAYOUT N K M THREADS GEMM GEMVS [ISA]
            isa = r[8] if len(r) > 8 else "?"
            best(ours_gemm, (ty, layout, int(r[2]), int(r[3]), int(r[4]), int(r[5]), isa), [float(x) for x in r[6:8]])
    for r in records(run / "ggml.tsv"):
        ty = r[1].upper()
        if r[0] == "kernel":
            best(ggml_kernel, ty, [float(r[3])])
        elif r[0] == "gemv":
            best(ggml_gemv, (ty, int(r[2]), int(r[3]), int(r[4])), [float(x) for x in r[5:8]])
        else:
            # gemm TYPE N K M THREADS GFs
            best(ggml_gemm, (ty, int(r[2]), int(r[3]), int(r[4]), int(r[5])), [float(r[6])])

    print("machine: " + "; ".join(f"{k} {v}" for k, v in machine.items()))
    print()
    print(
        f"GEMV GB/s of weight bytes (best pass, best of {machine.get('rounds', '?')} round(s)); "
        f"ours (ratio ours / ggml; 'miss' = R4/R8 below {TARGET}x, row_major below {PLAIN_TARGET}x); "
        "read BW = f32-sum GB/s beside the cold run, ours (R8 cell) / ggml; "
        "hot read = f32-sum GB/s over a buffer of the matrix's size, over and over (beside ours' R8 hot run): "
        "where the matrix sits in L3 it caps the hot cells of both sides; a miss marked 'above read' "
        "has its target above that rate (cold: above the read BW beside it, the higher of the two); 'cold X vs Y': ours X against ggml's Y measured in the same "
        "window, its passes alternating with ours (the ratio is X / Y; 'pairs': the median of each pair's ours / "
        "ggml's, over the host's rates in the window)"
    )
    print()
    head = ["type", "NxK", "thr"]
    for kind in ["hot", "cold"]:
        head += [f"{kind} ggml"] + [f"{kind} {lay}" for lay in LAYOUTS]
    head += ["read BW", "hot read"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * 3 + "---:|" * (len(head) - 3))
    cells, misses, above = [], [], []
    for (ty, n, k, t), g in sorted(ggml_gemv.items(), key=lambda kv: (kv[0][3], kv[0][0], kv[0][1] * kv[0][2], kv[0][1])):
        row = [ty, f"{n}x{k}", str(t)]
        cell = {"type": ty, "n": n, "k": k, "threads": t, "ggml": dict(zip(["hot", "cold", "bw"], g)), "ours": {}}
        o8 = ours_gemv.get((ty, "r8", n, k, t))
        hot_read = o8[3] if o8 and len(o8) > 3 else None
        if hot_read is not None:
            cell["hot_read_bw"] = hot_read
        for i, kind in enumerate(["hot", "cold"]):
            row.append(f"{g[i]:.1f}")
            for lay in LAYOUTS:
                o = ours_gemv.get((ty, lay, n, k, t))
                if o is None:
                    row.append("-")
                    continue
                cell["ours"].setdefault(lay, dict(zip(["hot", "cold", "bw", "hot_bw"], o)))
                ref = g[i]
                paired = ours_paired.get((ty, lay, n, k, t)) if kind == "cold" else None
                if paired:
                    ref = paired[0]
                    cell["ours"][lay]["ggml_cold_paired"] = ref
                    cell["ours"][lay]["pair_ratio_median"] = paired[1]
                ratio = o[i] / ref if ref > 0 else float("inf")
                cell.setdefault("ratio", {}).setdefault(lay, {})[kind] = round(ratio, 3)
                bar = PLAIN_TARGET if lay == "row_major" else TARGET
                miss = ratio < bar
                note = ""
                if miss:
                    # Reaching the bar would take more than the hot read rate,
                    # or (cold) more than the DRAM read rate either side's
                    # f32 sum measured beside its cold run.
                    cold_read = max(o[2], g[2])
                    if (kind == "hot" and hot_read is not None and bar * g[i] > hot_read) or (
                        kind == "cold" and bar * ref > cold_read
                    ):
                        note = " above read"
                        above.append(f"{ty} {lay} {n}x{k} {kind} {t}t")
                    misses.append(f"{ty} {lay} {n}x{k} {kind} {t}t {ratio:.2f}x{note}")
                vs = f" vs {ref:.1f}" if paired else ""
                med = f"; pairs {paired[1]:.2f}x" if paired else ""
                row.append(f"{o[i]:.1f}{vs} ({ratio:.2f}x{' miss' + note if miss else ''}{med})")
        row.append(f"{o8[2]:.1f} / {g[2]:.1f}" if o8 else f"- / {g[2]:.1f}")
        row.append(f"{hot_read:.1f}" if hot_read is not None else "-")
        print("| " + " | ".join(row) + " |")
        cells.append(cell)

    summary = {}
    for lay in LAYOUTS:
        for t in sorted({c["threads"] for c in cells}):
            rs = [c["ratio"][lay][kind] for c in cells if c["threads"] == t and lay in c.get("ratio", {}) for kind in ["hot", "cold"]]
            bar = PLAIN_TARGET if lay == "row_major" else TARGET
            summary[f"{lay}_{t}t"] = {"cells": len(rs), "at_target": sum(r >= bar for r in rs), "min": min(rs, default=None)}
    print()
    for key, s in summary.items():
        bar = PLAIN_TARGET if key.startswith("row_major") else TARGET
        print(f"{key}: {s['at_target']}/{s['cells']} cells >= {bar}x (min {s['min']}x)")
    print("misses: " + (", ".join(misses) if misses else "none"))
    print(f"of which the target is above the read rate beside it (hot: the matrix-sized sum; cold: the DRAM sum): {len(above)}")

    kernel = []
    if ours_kernel and ggml_kernel:
        print()
        print(
            "Kernel only (one thread, 8 rows x K = 2048, L1/L2-resident, called over and over): "
            "GB/s, ggml's vec_dot / ours (ratio)"
        )
        print()
        print("| type | ggml vec_dot | ours row_major | ours r8 |")
        print("|---|---:|---:|---:|")
        for ty, (g,) in sorted(ggml_kernel.items()):
            row = [ty, f"{g:.1f}"]
            entry = {"type": ty, "ggml": g}
            for lay in ["row_major", "r8"]:
                o = ours_kernel.get((ty, lay))
                row.append(f"{o[0]:.1f} ({o[0] / g:.2f}x)" if o else "-")
                if o:
                    entry[lay] = o[0]
            print("| " + " | ".join(row) + " |")
            kernel.append(entry)

    gemm = []
    ms = [1, 16, 64]
    shape_key = lambda nk: (nk[0] * nk[1], nk[0])
    if ours_gemm:
        print()
        print(
            "GEMM GF/s (2 M N K per call), hot, best pass: ours Gemv::gemm (its multi-row kernels) / "
            "ggml mul_mat of the same type (ratio); [ours through M separate GEMVs]"
        )
        print()
        print("| layout | tier | thr | NxK | " + " | ".join(f"M={m}" for m in ms) + " |")
        print("|---|---|---|---|" + "---:|" * len(ms))
        for (ty, lay, n, k, t, isa) in sorted(
            {(a, b, n, k, t, i) for (a, b, n, k, _, t, i) in ours_gemm if not a.startswith("CQ4")},
            key=lambda v: (v[0], v[1], v[5], v[4], shape_key((v[2], v[3]))),
        ):
            row = [f"{ty} {lay}", isa, str(t), f"{n}x{k}"]
            for m in ms:
                o, g = ours_gemm.get((ty, lay, n, k, m, t, isa)), ggml_gemm.get((ty, n, k, m, t))
                if o and g:
                    row.append(f"{o[0]:.1f} / {g[0]:.1f} ({o[0] / g[0]:.2f}x) [{o[1]:.1f}]")
                elif o:
                    row.append(f"{o[0]:.1f} / - [{o[1]:.1f}]")
                else:
                    row.append("-")
                if o:
                    gemm.append({"type": ty, "layout": lay, "isa": isa, "threads": t, "n": n, "k": k, "m": m,
                                 "ours_gemm": o[0], "ours_gemvs": o[1], "ggml": g[0] if g else None})
            print("| " + " | ".join(row) + " |")
        cq4 = sorted(
            {(n, k, t, i) for (a, _, n, k, _, t, i) in ours_gemm if a.startswith("CQ4")},
            key=lambda v: (v[3], v[2], shape_key((v[0], v[1]))),
        )
        if cq4:
            print()
            print(
                "CQ4 panel GEMM (Hadamard), GF/s, per tier: ours Gemv::gemm [ours through M GEMVs] "
                "| ggml Q4_0 / Q4_K mul_mat on the same shape and threads (ours / ggml)"
            )
            print()
            print("| tier | thr | NxK | " + " | ".join(f"M={m}" for m in ms) + " |")
            print("|---|---|---|" + "---:|" * len(ms))
            for (n, k, t, isa) in cq4:
                row = [isa, str(t), f"{n}x{k}"]
                for m in ms:
                    o = ours_gemm.get(("CQ4", "panels (Hadamard)", n, k, m, t, isa))
                    if not o:
                        row.append("-")
                        continue
                    cell = f"{o[0]:.1f} [{o[1]:.1f}]"
                    ref = {}
                    for gty in ["Q4_0", "Q4_K"]:
                        g = ggml_gemm.get((gty, n, k, m, t))
                        if g:
                            ref[gty] = g[0]
                            cell += f" \\| {gty} {g[0]:.1f} ({o[0] / g[0]:.2f}x)"
                    row.append(cell)
                    gemm.append({"type": "CQ4", "layout": "panels (Hadamard)", "isa": isa, "threads": t, "n": n, "k": k,
                                 "m": m, "ours_gemm": o[0], "ours_gemvs": o[1],
                                 "ggml_q4_0": ref.get("Q4_0"), "ggml_q4_k": ref.get("Q4_K")})
                print("| " + " | ".join(row) + " |")

    out_json.write_text(json.dumps({"machine": machine, "target": TARGET, "gemv": cells, "summary": summary, "misses": misses, "misses_above_read": above, "kernel": kernel, "gemm": gemm}, indent=1) + "\n")


if __name__ == "__main__":
    main()

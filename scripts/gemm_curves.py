#!/usr/bin/env python3
"""Writes device.gemm_curves into the GPU profiles (issue 15): GEMM efficiency by size and dtype.

Run from the repository root: `python3 scripts/gemm_curves.py` (rewrites profiles/*.json in place).

What it rests on (every figure below is cited or called an assumption in the curve's notes):
  * H100 SXM, per shape: XLA's published GEMM table for sm_90 (openxla/xla,
    xla/service/gpu/model/matmul_interpolator_data.h, kDefaultMatmulPTable, batch 1): 50 shapes
    256…4096 per dimension, achieved FLOP/s for bf16 and for f32 (XLA runs f32 dots as TF32 on
    sm_90, so its "f32" is our tf32). The curve's point at each m·n·k is the median over the shapes
    of that size.
  * Large GEMMs on other GPUs: Maximum Achievable Matmul FLOPS (stas00/ml-engineering,
    compute/accelerator/README.md, "Maximum Achievable Matmul FLOPS comparison table"): A100 SXM
    bf16 271.2 of 312 TFLOP/s (86.9 %).
  * Where no published per-shape table was found (A100, V100, T4, and f32 without TF32 anywhere),
    the curve is t(s) = max(t_H100(s), 2s / (peak × e_large)): a small GEMM takes at least the time
    the H100 table measured for its size (it is latency-bound there, not FLOP-bound), a large one
    runs at e_large of the device's peak. e_large is cited where it could be (A100) and an
    assumption otherwise, said so in the notes.
"""
import json
import os
import re
import statistics

# XLA sm_90 table, batch 1: m n k, bf16 TFLOP/s, f32 (TF32) TFLOP/s.
XLA_SM90 = """
1024 2048 256 139.5 82.3|256 2048 256 41.8 32.1|4096 512 512 238.8 116.7|512 256 512 21.8 15.65
256 2048 4096 285.9 119.9|4096 1024 512 343.7 144.7|2048 2048 2048 632.0 329.2|256 512 4096 91.7 46.4
256 1024 256 22.7 16.8|4096 4096 256 392.2 184.0|2048 512 2048 347.7 174.1|4096 4096 4096 783.3 401.6
512 4096 1024 373.3 162.1|512 256 4096 91.1 79.0|256 1024 4096 172.3 73.1|4096 2048 512 447.0 193.9
2048 256 1024 135.8 65.7|2048 1024 2048 523.3 254.6|512 256 256 11.46 9.73|1024 256 1024 68.3 39.7
4096 256 2048 304.7 178.7|1024 1024 2048 350.0 160.4|256 512 256 11.46 9.73|4096 1024 1024 488.1 259.1
1024 2048 1024 373.3 174.8|4096 4096 512 543.1 235.0|256 512 1024 39.1 21.9|512 2048 2048 342.4 157.3
256 4096 512 138.1 79.3|256 1024 1024 72.5 40.4|2048 256 512 77.3 45.0|1024 256 256 22.0 17.1
2048 256 4096 307.5 118.2|512 1024 2048 216.5 93.7|512 256 1024 39.3 22.5|256 256 2048 31.1 19.2
4096 512 256 142.5 80.9|2048 4096 1024 594.2 294.6|4096 4096 2048 738.7 325.0|512 512 2048 114.7 55.1
4096 512 4096 650.0 315.6|4096 1024 256 216.5 113.1|1024 4096 1024 490.3 225.9|256 4096 256 78.0 54.5
256 4096 4096 412.0 177.8|4096 1024 4096 738.5 291.1|1024 256 4096 169.7 69.8|256 2048 512 78.2 50.5
2048 256 256 43.6 31.7|4096 2048 256 304.0 132.1
"""

XLA_SOURCE = ("XLA's published GEMM table for sm_90 (openxla/xla xla/service/gpu/model/"
              "matmul_interpolator_data.h, kDefaultMatmulPTable, batch-1 entries; median per m·n·k)")
MAMF_SOURCE = ("stas00/ml-engineering compute/accelerator/README.md, Maximum Achievable Matmul FLOPS table: "
               "A100 SXM bf16 271.2 of 312 TFLOP/s (86.9 %)")


def h100_seconds():
    """Per m·n·k: the median time (s) of a bf16 and of a TF32 GEMM of that size on H100."""
    by_size = {}
    for entry in XLA_SM90.replace("\n", "|").split("|"):
        if not entry.strip():
            continue
        m, n, k, bf16, tf32 = map(float, entry.split())
        s = m * n * k
        by_size.setdefault(s, []).append((2 * s / (bf16 * 1e12), 2 * s / (tf32 * 1e12)))
    sizes = sorted(by_size)
    return sizes, {s: (statistics.median(t[0] for t in by_size[s]), statistics.median(t[1] for t in by_size[s]))
                   for s in sizes}


def curve(sizes, seconds_of, peak, e_large=None):
    eff = []
    for s in sizes:
        t = seconds_of(s)
        if e_large is not None:
            t = max(t, 2 * s / (peak * e_large))
        eff.append(round(min(1.0, 2 * s / (t * peak)), 4))
    return {"mnk": [int(s) for s in sizes], "efficiency": eff}


def curves_for(model, peaks):
    sizes, t = h100_seconds()
    bf16_t = lambda s: t[s][0]
    tf32_t = lambda s: t[s][1]
    f32_note = "assumption: a large f32 (no TF32) GEMM on the CUDA cores reaches 85 % of the f32 peak"
    if "H100" in model:
        return {
            "source": XLA_SOURCE + "; f32 without TF32 bounded by the TF32 times and the f32 peak",
            "f32": curve(sizes, tf32_t, peaks["f32"], 0.85),
            "tf32": curve(sizes, tf32_t, peaks["tf32"]),
            "bf16": curve(sizes, bf16_t, peaks["bf16"]),
            "f16": curve(sizes, bf16_t, peaks["f16"]),
            "notes": {"peak_flops.tf32": "NVIDIA H100 datasheet (SXM): TF32 989 TFLOPS with sparsity, 494.7 dense", "bf16": XLA_SOURCE, "f16": "assumption: as bf16 (same tensor-core rate on sm_90)",
                      "tf32": XLA_SOURCE + " (XLA runs f32 dots as TF32)", "f32": f32_note},
        }
    if "A100" in model:
        return {
            "source": "large GEMMs: " + MAMF_SOURCE + "; small GEMMs no faster than " + XLA_SOURCE,
            "f32": curve(sizes, tf32_t, peaks["f32"], 0.85),
            "tf32": curve(sizes, tf32_t, peaks["tf32"], 0.869),
            "bf16": curve(sizes, bf16_t, peaks["bf16"], 0.869),
            "f16": curve(sizes, bf16_t, peaks["f16"], 0.869),
            "notes": {"peak_flops.tf32": "NVIDIA A100 datasheet: TF32 312 TFLOPS with sparsity, 156 dense", "bf16": MAMF_SOURCE, "f16": "assumption: as bf16", "tf32": "assumption: TF32 reaches bf16's share",
                      "f32": f32_note, "small": "no published per-shape sm_80 table found: small sizes take the "
                                                "H100 table's time (latency-bound) — an assumption"},
        }
    if "V100" in model:
        return {
            "source": "assumption (no published per-shape table found): large f16 GEMMs at 80 % of the tensor-core "
                      "peak, f32 at 85 %; small GEMMs no faster than " + XLA_SOURCE,
            "f32": curve(sizes, tf32_t, peaks["f32"], 0.85),
            "f16": curve(sizes, bf16_t, peaks["f16"], 0.80),
            "bf16": curve(sizes, tf32_t, peaks["bf16"], 0.85),
            "notes": {"bf16": "Volta has no bf16 tensor cores: bf16 GEMMs run on the f32 CUDA cores, priced at the f32 "
                              "peak and curve (peak_flops.bf16 = the f32 peak, said so here)", "f32": f32_note},
        }
    if "T4" in model:
        return {
            "source": "assumption (no published per-shape table found): large f16 GEMMs at 60 % of the 65 TFLOP/s "
                      "tensor-core peak (the 70 W board throttles its clocks under load), f32 at 85 %; small GEMMs no "
                      "faster than " + XLA_SOURCE,
            "f32": curve(sizes, tf32_t, peaks["f32"], 0.85),
            "f16": curve(sizes, bf16_t, peaks["f16"], 0.60),
            "bf16": curve(sizes, tf32_t, peaks["bf16"], 0.85),
            "notes": {"bf16": "Turing has no bf16 tensor cores: bf16 GEMMs run on the f32 CUDA cores, priced at the f32 "
                              "peak and curve (peak_flops.bf16 = the f32 peak, said so here)", "f32": f32_note},
        }
    return None


TF32_PEAK = {"H100": 494.7e12, "A100": 156e12}  # dense TF32, NVIDIA datasheets (989 / 312 with sparsity)


def main():
    for name in sorted(os.listdir("profiles")):
        if not name.endswith(".json"):
            continue
        path = os.path.join("profiles", name)
        with open(path) as f:
            p = json.load(f)
        d = p["device"]
        peaks = d["peak_flops"]
        for gpu, tf32 in TF32_PEAK.items():
            if gpu in d["model"]:
                peaks["tf32"] = tf32
        if "V100" in d["model"] or "T4" in d["model"]:
            peaks["bf16"] = peaks["f32"]  # no bf16 tensor cores: the CUDA cores' rate, said so in the notes
        c = curves_for(d["model"], peaks)
        if c is None:
            continue
        d["gemm_curves"] = c
        with open(path, "w") as f:
            text = json.dumps(p, indent=2, ensure_ascii=False)
            # Lists of numbers on one line each, so a curve reads as a row.
            text = re.sub(r"\[\s*([-+\d.eE,\s]+?)\s*\]", lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text)
            f.write(text + "\n")
        print(f"{path}: gemm_curves for {d['model']}")


if __name__ == "__main__":
    main()

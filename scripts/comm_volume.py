#!/usr/bin/env python3
"""The decks' communication numbers, from runs (scripts/slides.sh writes data/comm.json with it).

  comm_volume.py DATA_DIR --step K --volume RUN[:ZERO_STAGE]… [--idle RUN…]

volume.RUN (a '-' in RUN written '_'): the bytes each device sends to other devices in training
step K of RUN, and how many messages, read from
its trace (data/RUN.trace.json) — collectives as the process group records them (what this rank
sends), a send on its sender, a device-to-device copy on its source (the event's peer) — next to
the closed form for the run's strategy (Ψ parameters of 4 bytes, N devices, B rows, m micro-batches;
a GPT's L blocks of C features over T positions).
Host↔device uploads and copies inside one device are not device-to-device traffic and are left out.

idle.RUN: each device's idle share of the trace's span (no lane busy), in %, and the span per
step: a measured trace (the shipped H100 one) beside the sim's trace of the same run.

primer: reduce-scatter + all-gather against all-reduce, from `bench comm --json` of each at one
size (data/comm-rs.json, comm-ag.json, comm-ar.json), and the bytes each rank sends (busbw · time).
"""
import argparse
import json
import os
import sys


def load(path):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def parameters(model):
    """Ψ of mlp:A-B-…-Z: weights and biases of each layer."""
    widths = [int(w) for w in model.split(":", 1)[1].split("-")]
    return sum(a * b + b for a, b in zip(widths, widths[1:])), widths


def sent_per_device(trace, step, n):
    """[bytes device d sends to other devices in `step`] and [messages it sends], for d < n."""
    lanes = lanes_of(trace)
    sent, messages = [0] * n, [0] * n
    for e in trace["traceEvents"]:
        a = e.get("args", {})
        if e.get("ph") != "X" or a.get("step") != step:
            continue
        lane = lanes.get((e["pid"], e["tid"]))
        if lane == "comm" and a.get("role") != "recv":  # a recv's bytes are its sender's send
            device = e["pid"]
            messages[device] += a.get("flow_id", -1) != -1  # a collective's later steps: the same call
        elif lane == "copy" and a.get("kind") == "copy_p2p" and a.get("peer", -1) >= 0:
            device = a["peer"]  # a copy is recorded on the device it lands on
            messages[device] += 1
        else:
            continue
        sent[device] += a["bytes"]
    return sent, messages


def lanes_of(trace):
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
            if e.get("ph") == "M" and e.get("name") == "thread_name"}


def idle_pct(trace):
    """([device d's idle share of the span, in %], ms per step): the span less the union of each
    device's events; the span over the steps it holds."""
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    begin = min(e["ts"] for e in events)
    span = max(e["ts"] + e["dur"] for e in events) - begin
    steps = {e["args"].get("step", -1) for e in events} - {-1}
    busy = {}
    for e in events:
        busy.setdefault(e["pid"], []).append((e["ts"], e["ts"] + e["dur"]))
    out = []
    for d in sorted(busy):
        covered, end = 0.0, begin
        for b, e in sorted(busy[d]):
            if e > end:
                covered += e - max(b, end)
                end = e
        out.append(100 * (1 - covered / span))
    return out, span * 1e-3 / max(1, len(steps))  # the trace's ts are µs


def gpt_sizes(model):
    """(L, C, H, T, V) of gpt:L-C-H-T-V."""
    return tuple(int(w) for w in model.split(":", 1)[1].split("-"))


def formula(summary, zero_stage):
    """Per device, the closed form of the bytes it sends per step, for the run's strategy."""
    n, b = summary["devices"], summary["batch"]
    s = summary["strategy"]
    if s == "tensor-parallel":
        # 2 all-reduces a block forward (g) and 2 backward (f), each of the B·T·C activations (f32),
        # a ring's 2(N−1)/N of them sent by each rank; nothing else (replicated gradients agree)
        layers, hidden, _, context, _ = gpt_sizes(summary["model"])
        return [4 * layers * 2 * (n - 1) / n * 4 * b * context * hidden] * n
    psi, widths = parameters(summary["model"])
    if s == "single":
        return [0]
    if s == "ddp" or (s == "zero" and zero_stage == 2):
        # the ring all-reduce: 2(N−1)/N of the gradients; ZeRO-2 reduce-scatters them ((N−1)/N) and
        # all-gathers the weights ((N−1)/N): the same
        return [2 * (n - 1) / n * 4 * psi] * n
    if s == "zero" and zero_stage == 1:  # scalelab's stage 1 all-reduces the gradients, then all-gathers
        return [3 * (n - 1) / n * 4 * psi] * n
    if s == "data-parallel":
        # device 0: the batch's rows (and later the loss gradient's) to the others, the weights to
        # each of them; the others: their outputs and their whole gradient to device 0
        d_in, classes = widths[0], widths[-1]
        return [(n - 1) / n * b * (d_in + classes) * 4 + (n - 1) * 4 * psi] + [b / n * classes * 4 + 4 * psi] * (n - 1)
    if s in ("model-parallel", "pipeline") and len(widths) - 1 == n:
        # one layer a device: device d sends its output forward and the gradient of its input back
        # (a pipeline: the same rows, in m micro-batches)
        cut = widths[1:-1]
        return [b * 4 * ((cut[d] if d < n - 1 else 0) + (cut[d - 1] if d > 0 else 0)) for d in range(n)]
    sys.exit(f"comm_volume.py: no closed form for strategy {s} on {summary['model']} over {n} devices")


def main(argv):
    ap = argparse.ArgumentParser(description="the decks' communication numbers, from runs")
    ap.add_argument("data")
    ap.add_argument("--step", type=int, required=True)
    ap.add_argument("--volume", nargs="+", default=[], metavar="RUN[:ZERO_STAGE]")
    ap.add_argument("--idle", nargs="*", default=[], metavar="RUN")
    args = ap.parse_args(argv)
    data, step = args.data, args.step
    out = {"step": step, "volume": {}, "idle": {}}
    for item in args.volume:
        run, _, stage = item.partition(":")
        summary = load(os.path.join(data, run + ".json"))
        n = summary["devices"]
        sent, messages = sent_per_device(load(os.path.join(data, run + ".trace.json")), step, n)
        closed = formula(summary, int(stage) if stage else 0)
        # The deck's {{comm.volume.NAME.…}} paths take no '-': data-parallel is data_parallel.
        out["volume"][run.replace("-", "_")] = {
            "strategy": summary["strategy"], "devices": n,
            "parameters": parameters(summary["model"])[0] if summary["model"].startswith("mlp:") else None,
            "micro_batches": summary.get("micro_batches", 1),
            "sent": sent, "messages": messages, "formula": closed, "max_sent": max(sent), "max_formula": max(closed),
        }
    for run in args.idle:
        idle, ms = idle_pct(load(os.path.join(data, run + ".trace.json")))
        out["idle"][run.replace("-", "_")] = {"idle_pct": idle, "min": min(idle), "max": max(idle), "ms_per_step": ms}
    primer = {}
    for key, name in (("reduce_scatter", "comm-rs"), ("all_gather", "comm-ag"), ("all_reduce", "comm-ar")):
        path = os.path.join(data, name + ".json")
        if os.path.exists(path):
            j = load(path)
            row = j["rows"][0]
            primer[key] = {"bytes": row["bytes"], "time_us": row["time_us"], "ranks": j["ranks"],
                           "algorithm": row.get("algorithm", ""), "protocol": row.get("protocol", ""),
                           "sent_bytes": row["busbw"] * 1e9 * row["time_us"] * 1e-6}
    if len(primer) == 3:
        primer["rs_plus_ag_us"] = primer["reduce_scatter"]["time_us"] + primer["all_gather"]["time_us"]
        primer["rs_plus_ag_sent_bytes"] = primer["reduce_scatter"]["sent_bytes"] + primer["all_gather"]["sent_bytes"]
        out["primer"] = primer
    with open(os.path.join(data, "comm.json"), "w", encoding="utf-8") as fh:
        json.dump(out, fh, indent=2)


if __name__ == "__main__":
    main(sys.argv[1:])

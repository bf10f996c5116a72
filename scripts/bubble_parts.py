#!/usr/bin/env python3
"""Where a pipeline run's idle time comes from, read from its trace: what the decks' bubble slides show.

    scripts/bubble_parts.py SUMMARY.json TRACE.json [gpipe|1f1b] > PARTS.json

(the schedule the run used, `--schedule`; gpipe where not given).

The idle share is the run's bubble_fraction: 1 − compute-lane busy time / (devices × span), over
the training steps (core/trace/metrics.cpp). It is split into four parts that add up to it, each a
share of devices × span:

  fill_drain      while the pipeline fills and drains, each stage waits for one micro-batch of each
                  of the other p−1 stages: (p−1)·Σ c_s per step, c_s = stage s's forward + backward
                  (+ loss) time per micro-batch. With equal stages that is all the idle time, and
                  its share is the formula (p−1)/(m+p−1).
  unequal_stages  in the m−1 slots between, the slowest stage sets the pace and each lighter one
                  waits for it: (m−1)·Σ (max c − c_s) with 1F1B, whose stages alternate forward and
                  backward. GPipe runs all forwards, then all backwards, each phase at the pace of
                  its own slowest stage: (m−1)·Σ ((max f − f_s) + (max b − b_s)), f and b the
                  forward (+ loss) and backward parts of c. Stage 0 computes no gradient for the
                  batch, so its backward is lighter than the others' even where c_s is equal.
  optimizer_tail  the optimizer of the stage that finishes last (stage 0: the last backward ends
                  there) runs while the others have nothing left to do; less the other stages'
                  optimizer work, done inside the drain
  sends_copies    the rest: the step is longer than it would be without them (Σ c_s plus m−1
                  slots at the slowest stage's pace) plus that tail — the sends and receives between stages, the batch's copies from
                  the host, and the waits they cause

Also written: the formula, the measured share, the step time, each stage's c_s and optimizer
time, the busiest stage's work in a step and the longest optimizer (µs per step).
"""
import json
import sys


def fail(msg):
    sys.exit(f"[bubble_parts] {msg}")


def main(argv):
    if len(argv) not in (3, 4) or (len(argv) == 4 and argv[3] not in ("gpipe", "1f1b")):
        fail("usage: bubble_parts.py SUMMARY.json TRACE.json [gpipe|1f1b]")
    schedule = argv[3] if len(argv) == 4 else "gpipe"
    with open(argv[1], encoding="utf-8") as fh:
        summary = json.load(fh)
    with open(argv[2], encoding="utf-8") as fh:
        trace = json.load(fh)
    p, m, steps = summary["devices"], summary.get("micro_batches") or 1, summary["steps"]
    # Chrome trace events in µs; tid 0 is the compute lane (core/trace), cat says fwd / bwd / optim.
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["args"].get("step", -1) >= 0]
    if not events:
        fail(f"{argv[2]} holds no training-step events — write it with `scalelab train --trace`")
    begin = min(e["ts"] for e in events)
    end = max(e["ts"] + e["dur"] for e in events)
    capacity = p * (end - begin)
    fwd = [0.0] * p  # forward and loss
    bwd = [0.0] * p
    optim = [0.0] * p
    last_end = {}  # step → (end of its last compute event, device)
    optim_of = {}  # (step, device) → optimizer time
    for e in events:
        if e["tid"] != 0:
            continue
        d, s = e["pid"], e["args"]["step"]
        if d >= p:
            fail(f"{argv[2]} has device {d}, but {argv[1]} says --devices {p}")
        if e["cat"] == "optim":
            optim[d] += e["dur"]
            optim_of[(s, d)] = optim_of.get((s, d), 0.0) + e["dur"]
        elif e["cat"] == "bwd":
            bwd[d] += e["dur"]
        else:
            fwd[d] += e["dur"]
        last_end[s] = max(last_end.get(s, (0.0, -1)), (e["ts"] + e["dur"], d))
    work = [a + b for a, b in zip(fwd, bwd)]
    idle = capacity - sum(work) - sum(optim)
    per_mb = steps * m
    f, b, c = [x / per_mb for x in fwd], [x / per_mb for x in bwd], [x / per_mb for x in work]
    fill_drain = (p - 1) * sum(c) * steps
    if schedule == "gpipe":
        unequal = (m - 1) * sum(max(f) - fs + max(b) - bs for fs, bs in zip(f, b)) * steps
    else:
        unequal = (m - 1) * sum(max(c) - cs for cs in c) * steps
    tail_optim = sum(optim_of.get((s, d), 0.0) for s, (_, d) in last_end.items())
    optimizer_tail = p * tail_optim - sum(optim)
    rest = idle - fill_drain - unequal - optimizer_tail
    out = {
        "schedule": schedule,
        "devices": p,
        "micro_batches": m,
        "measured": idle / capacity,
        "formula": (p - 1) / (m + p - 1),
        "fill_drain": fill_drain / capacity,
        "unequal_stages": unequal / capacity,
        "optimizer_tail": optimizer_tail / capacity,
        "sends_copies": rest / capacity,
        "step_us": (end - begin) / steps,
        "stage_us": c,
        "stage_optimizer_us": [o / steps for o in optim],
        "busiest_stage_us": max(work) / steps,
        "optimizer_longest_us": max(optim) / steps,
    }
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main(sys.argv)

#!/usr/bin/python3
"""`bench compute --vs torch` (an MLP, the ConvNet, a GPT) and `bench comm --vs gloo` run their PyTorch peer and print it beside
scalelab's figure (a column labelled pytorch, a ratio); the JSON carries both; without torch the
error names the package. No timing is asserted: the figures are shown, not held to a bound.

  bench_peers.py SCALELAB"""
import json, os, subprocess, sys, tempfile

scalelab = sys.argv[1]
failed = []


def check(what, ok):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failed.append(what)


with tempfile.TemporaryDirectory(prefix="scalelab-bench-peers-") as work:
    out = subprocess.run([scalelab, "bench", "compute", "--model", "mlp:784-64-10", "--batch", "64", "--steps", "3",
                          "--vs", "torch", "--json", f"{work}/c.json"], capture_output=True, text=True)
    print(out.stdout, out.stderr)
    check("bench compute --vs torch exits 0", out.returncode == 0)
    check("a training step (pytorch) row", "training step (pytorch)" in out.stdout)
    check("the pytorch / scalelab ratio", "pytorch / scalelab step time" in out.stdout)
    if out.returncode == 0:
        c = json.load(open(f"{work}/c.json"))
        check("JSON: both step times > 0", c["step_time_s"] > 0 and c["torch_step_time_s"] > 0)

    # The ConvNet and a GPT: PyTorch's same model beside ours; the JSON has no GEMM bound for them.
    for model, batch in (("convnet", "4"), ("gpt:1-32-2-16-96", "2")):
        out = subprocess.run([scalelab, "bench", "compute", "--model", model, "--batch", batch, "--steps", "2",
                              "--warmup", "1", "--vs", "torch", "--json", f"{work}/{model[:3]}.json"],
                             capture_output=True, text=True)
        print(out.stdout, out.stderr)
        check(f"bench compute --model {model} --vs torch exits 0", out.returncode == 0)
        check(f"{model}: both step rows and the ratio", "training step (scalelab)" in out.stdout and
              "training step (pytorch)" in out.stdout and "pytorch / scalelab step time" in out.stdout)
        if out.returncode == 0:
            c = json.load(open(f"{work}/{model[:3]}.json"))
            check(f"{model} JSON: both step times > 0, no GEMM bound",
                  c["step_time_s"] > 0 and c["torch_step_time_s"] > 0 and c["sgemm_time_s"] is None)
    out = subprocess.run([scalelab, "bench", "compute", "--model", "convnet", "--device", "cuda"], capture_output=True, text=True)
    check("bench compute --model convnet --device cuda: a usage error (exit 2)",
          out.returncode == 2 and "--device cpu" in out.stderr)

    out = subprocess.run([scalelab, "bench", "comm", "--comm", "shm", "--ranks", "2", "--min-bytes", "4K",
                          "--max-bytes", "16K", "--iters", "3", "--warmup", "1", "--vs", "gloo", "--json", f"{work}/m.json"],
                         capture_output=True, text=True)
    print(out.stdout, out.stderr)
    check("bench comm --vs gloo exits 0", out.returncode == 0)
    header = [l for l in out.stdout.splitlines() if l.strip().startswith("size")]
    check("a pytorch column and its ratio", bool(header) and header[0].split()[-2:] == ["pytorch", "ratio"])
    if out.returncode == 0:
        rows = json.load(open(f"{work}/m.json"))["rows"]
        check("JSON: a peer busbw > 0 for each of the 3 sizes",
              len(rows) == 3 and all(r["peer_busbw"] and r["peer_busbw"] > 0 for r in rows))

    # A python without torch: a `torch` package on PYTHONPATH whose import fails.
    os.makedirs(f"{work}/fake/torch")
    with open(f"{work}/fake/torch/__init__.py", "w") as f:
        f.write("raise ImportError('no torch here')\n")
    env = dict(os.environ, PYTHONPATH=f"{work}/fake")
    for cmd in (["compute", "--model", "mlp:784-10", "--batch", "8", "--steps", "1", "--vs", "torch"],
                ["comm", "--ranks", "2", "--max-bytes", "4K", "--vs", "gloo"]):
        out = subprocess.run([scalelab, "bench", *cmd], capture_output=True, text=True, env=env)
        check(f"bench {cmd[0]} without torch: exit 1 naming python3-torch",
              out.returncode == 1 and "[bench]" in out.stderr and "apt-get install python3-torch" in out.stderr)
    out = subprocess.run([scalelab, "bench", "comm", "--op", "reduce_scatter", "--vs", "gloo"], capture_output=True, text=True)
    check("bench comm --vs gloo --op reduce_scatter: a usage error (exit 2)", out.returncode == 2 and "--vs gloo" in out.stderr)

if failed:
    sys.exit("FAIL: " + "; ".join(failed))
print("PASS")

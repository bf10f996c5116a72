#!/usr/bin/python3
"""Each program of examples/pytorch/ against the scalelab command that does the same (the table in
examples/pytorch/README.md): both run, from the same initial weights where the numbers are
deterministic, and what they report is compared.

  lecture_examples.py SCALELAB EXAMPLE      (EXAMPLE: data_parallel, model_parallel, ddp, …)

Tolerances. The synchronous strategies train full batches of Fashion-MNIST (60 000 rows), so the
data order does not matter and the numbers are single's. scalelab matches PyTorch to 1e-5 when
PyTorch computes each layer as scalelab does (tests/pytorch/cross_check.py); these programs use
nn.Linear as students write it, whose addmm differs from that by up to 3e-5 on a layer (a ReLU
whose input is within rounding of 0 flips), so TOL = 1e-4, relative — for losses to the loss, for
weights to the tensor's largest value. The GPT of tensor_parallel.py is held to the same TOL: its
nn.Linear, LayerNorm and softmax are PyTorch's own, and over 4 steps of SGD it lands within ~1e-6
of scalelab (no ReLU to flip; a split done differently, e.g. qkv cut in N plain slices instead
of each rank its heads' rows of q, k and v, is off at the first loss). AMP is held to PyTorch's own bf16-vs-fp32 gap, measured in
the same run. Hogwild is asynchronous: the mean test accuracy of two seeds after one epoch, within
0.03 or twice the spread either side shows between its own two seeds (PyTorch's, seeds 1-3 with the
same start: 0.835-0.850)."""
import json, os, shutil, subprocess, sys, tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "..", "examples", "pytorch")
PYTHON = "/usr/bin/python3"
# Small and short, so the nine tests take little time; the programs' own defaults are larger.
MODEL, BATCH, STEPS, LR = "mlp:784-32-16-10", 60000, 3, 0.03
TOL = 1e-4
GPT, CORPUS = "gpt:2-64-4-32-96", "/usr/share/games/fortunes/computers"  # as cross_check.py's gpt cases
LIMIT_S = 200  # a run that hangs fails here, naming its command, before ctest's 300 s
failed = []


def check(what, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {what}{'  (' + detail + ')' if detail else ''}")
    if not ok:
        failed.append(what)


def scalelab(work, name, *args, steps=STEPS, every=None, lr=LR, seed=1, model=None, batch=None):
    """A scalelab run with a checkpoint at step 0 and at the end (or every `every`), its JSON."""
    cmd = [SCALELAB, "train", "--device", "cpu", "--model", model or MODEL, "--batch", str(batch or BATCH), "--steps", str(steps),
           "--lr", repr(lr), "--seed", str(seed), "--checkpoint", f"{work}/{name}-{{step}}.ckpt",
           "--checkpoint-every", str(every or steps), "--json", f"{work}/{name}.json", "--quiet", *args]
    print("$ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=LIMIT_S)
    return json.load(open(f"{work}/{name}.json"))


def export(work, name, step):
    out = f"{work}/{name}-{step}.npz"
    subprocess.run([SCALELAB, "export", f"{work}/{name}-{step}.ckpt", "--out", out], check=True, stdout=subprocess.DEVNULL)
    return out


def example(work, program, *args, model=None):
    """A program of examples/pytorch/ with --report; what it reported."""
    cmd = [PYTHON, os.path.join(EXAMPLES, program + ".py"), "--model", model or MODEL, *args, "--report",
           f"{work}/{program}.report"]
    print("$ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=work, stdout=subprocess.DEVNULL, timeout=LIMIT_S)
    return json.load(open(f"{work}/{program}.report"))


def rel(a, b):
    return abs(a - b) / abs(b)


def same_losses(ours, theirs, what="losses", tol=TOL):
    worst = max(rel(o, t) for o, t in zip(ours, theirs))
    check(f"{what}: scalelab {['%.6f' % l for l in ours]} vs pytorch {['%.6f' % l for l in theirs]}",
          len(ours) == len(theirs) and worst <= tol, f"worst {worst:.2e}, bound {tol:.0e}")


def same_weights(ours_npz, theirs_npz):
    ours, theirs = np.load(ours_npz), np.load(theirs_npz)
    worst = max(np.abs(ours[k].astype(np.float64) - theirs[k]).max() / np.abs(theirs[k]).max() for k in theirs.files)
    check(f"final weights ({len(theirs.files)} tensors)", worst <= TOL, f"worst {worst:.2e} of the tensor's largest, bound {TOL:.0e}")


def synchronous(work, program, strategy, devices, ours_extra=(), theirs_extra=()):
    """A synchronous strategy and its PyTorch program: same start, same losses, same final weights."""
    ours = scalelab(work, "ours", "--strategy", strategy, "--devices", str(devices), *ours_extra)
    theirs = example(work, program, "--init", export(work, "ours", 0), "--devices", str(devices), "--steps", str(STEPS),
                     "--batch", str(BATCH), "--lr", repr(LR), "--save-weights", f"{work}/theirs.npz", *theirs_extra)
    same_losses(ours["losses"], theirs["losses"])
    same_weights(export(work, "ours", STEPS), f"{work}/theirs.npz")
    return ours, theirs


def data_parallel(work):
    synchronous(work, "data_parallel", "data-parallel", 2)


def model_parallel(work):
    ours, theirs = synchronous(work, "model_parallel", "model-parallel", 2)
    mine = [d["peak_bytes"]["params"] // 4 for d in ours["per_device"]]
    check(f"parameters per device: scalelab {mine} = pytorch {theirs['params_per_device']}", mine == theirs["params_per_device"])


def pipeline(work):
    # Pipe's chunks are scalelab's micro-batches.
    synchronous(work, "pipeline", "pipeline", 2, ("--micro-batches", "4"), ("--chunks", "4"))


def ddp(work):
    _, theirs = synchronous(work, "ddp", "ddp", 2)
    check("pytorch's replicas equal bit for bit after training", theirs["replicas_equal"] is True)


def ddp_model_parallel(work):
    _, theirs = synchronous(work, "ddp_model_parallel", "ddp-mp", 4)
    check("pytorch's replicas equal bit for bit after training", theirs["replicas_equal"] is True)


def checkpoint(work):
    # scalelab: 3 steps straight with a checkpoint every 2 (and at the end), then a run resumed from step 2.
    straight = scalelab(work, "ours", "--strategy", "ddp", "--devices", "2", every=2)
    shutil.copy(f"{work}/ours-2.ckpt", f"{work}/resume-from.ckpt")
    cmd = [SCALELAB, "train", "--device", "cpu", "--strategy", "ddp", "--devices", "2", "--model", MODEL, "--batch",
           str(BATCH), "--steps", str(STEPS), "--lr", repr(LR), "--seed", "1", "--resume", f"{work}/resume-from.ckpt",
           "--checkpoint", f"{work}/resumed-{{step}}.ckpt", "--checkpoint-every", str(STEPS), "--json",
           f"{work}/resumed.json", "--quiet"]
    print("$ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=LIMIT_S)
    a, b = np.load(export(work, "ours", STEPS)), np.load(export(work, "resumed", STEPS))
    check(f"scalelab: resumed from step 2, the step-{STEPS} weights equal the straight run's bit for bit",
          all(np.array_equal(a[k], b[k]) for k in a.files))
    # PyTorch: the same save (rank 0, temporary + rename), barrier and load, inside one program.
    init = export(work, "ours", 0)
    args = ["--init", init, "--devices", "2", "--steps", str(STEPS), "--batch", str(BATCH), "--lr", repr(LR)]
    theirs = example(work, "checkpoint", *args, "--save-at", "2")
    check("pytorch: resumed losses equal the straight run's bit for bit", theirs["bit_identical"] is True)
    same_losses(straight["losses"], theirs["losses_straight"], "straight losses")
    # Across: PyTorch goes on from scalelab's step-2 checkpoint (weights and momentum, exported).
    across = example(work, "checkpoint", *args, "--resume-npz", export(work, "ours", 2))
    check("pytorch resumes scalelab's checkpoint at its step", across["resumed_from"] == 2)
    same_losses(straight["losses"][2:], across["losses_resumed"], "after step 2, pytorch resumed from scalelab's step 2")


def zero(work):
    n, lr = 2, 1e-3
    ours = scalelab(work, "ours", "--strategy", "zero", "--devices", str(n), "--optimizer", "adam", lr=lr)
    theirs = example(work, "zero", "--init", export(work, "ours", 0), "--devices", str(n), "--steps", str(STEPS),
                     "--batch", str(BATCH), "--lr", repr(lr))
    same_losses(theirs["losses"], theirs["losses_plain"], "pytorch: ZeRO's losses against plain Adam's", 1e-6)
    same_losses(ours["losses"], theirs["losses"])
    params = sum(v.size for k, v in np.load(export(work, "ours", 0)).items() if not k.startswith("optimizer"))
    adam = 2 * 4 * params  # two float32 moments per parameter
    mine = [d["peak_bytes"]["optimizer"] for d in ours["per_device"]]
    torch_ranks, plain = theirs["optimizer_bytes_per_rank"], theirs["optimizer_bytes_plain"]
    print(f"optimizer bytes per rank: plain Adam {adam}; scalelab zero {mine}; pytorch ZeRO {torch_ranks}")
    check("pytorch's plain Adam keeps 2 × 4 bytes per parameter on every rank", plain == adam)
    check("pytorch's ZeRO shards it: the ranks' state adds up to plain Adam's", sum(torch_ranks) == adam)
    share = -(-params // n) * 2 * 4  # 2 × 4 × ⌈P/N⌉
    check(f"scalelab's ZeRO: every rank 2 × 4 × ⌈P/N⌉ = {share} bytes (1/{n} of plain Adam's)",
          all(m == share for m in mine))
    check("scalelab's largest rank holds no more than pytorch's (flat shards against whole tensors)",
          max(mine) <= max(torch_ranks))


def amp(work):
    ours = scalelab(work, "ours", "--amp", "bf16")
    theirs = example(work, "amp", "--init", export(work, "ours", 0), "--steps", str(STEPS), "--batch", str(BATCH),
                     "--lr", repr(LR))
    for step, (o, t, f) in enumerate(zip(ours["losses"], theirs["losses"], theirs["losses_fp32"])):
        bound = max(TOL, 4 * rel(t, f))  # PyTorch's own bf16 against its fp32, this step
        check(f"step {step}: bf16 loss scalelab {o:.6f} vs pytorch {t:.6f} (pytorch fp32 {f:.6f})",
              rel(o, t) <= bound, f"{rel(o, t):.2e}, bound {bound:.2e}")


def convnet_ddp(work):
    # The ConvNet costs ~17 MFLOP per image to train, so not full batches: small ones, and PyTorch's
    # DistributedSampler shards the rows scalelab's steps took (its --dump-batches), in its order.
    steps, batch = 4, 128
    ours = scalelab(work, "ours", "--strategy", "ddp", "--devices", "2", "--dump-batches", f"{work}/batches.json",
                    steps=steps, model="convnet", batch=batch)
    theirs = example(work, "convnet_ddp", "--init", export(work, "ours", 0), "--devices", "2", "--steps", str(steps),
                     "--batch", str(batch), "--lr", repr(LR), "--batches", f"{work}/batches.json", "--save-weights",
                     f"{work}/theirs.npz", model="convnet")
    same_losses(ours["losses"], theirs["losses"], f"losses (pytorch resumed from its rank-0 checkpoint at step {theirs['resumed_at']})")
    same_weights(export(work, "ours", steps), f"{work}/theirs.npz")
    check("pytorch's replicas equal bit for bit after training", theirs["replicas_equal"] is True)
    diff = abs(ours["test_accuracy"] - theirs["test_accuracy"])
    check(f"test accuracy: scalelab {ours['test_accuracy']:.4f} vs pytorch {theirs['test_accuracy']:.4f}",
          diff <= 2e-4 + 1e-12, f"{diff * 10000:.0f} of the 10 000 test images, bound 2")


def tensor_parallel(work):
    # A GPT on a text, batches of 32 windows: every rank trains on the whole of scalelab's steps
    # (its --dump-batches), each from its own shards cut from the same exported start.
    steps, batch, lr = 4, 32, 0.1
    ours = scalelab(work, "ours", "--strategy", "tensor-parallel", "--devices", "2", "--dataset", "text", "--data-dir",
                    CORPUS, "--dump-batches", f"{work}/batches.json", steps=steps, model=GPT, batch=batch, lr=lr)
    theirs = example(work, "tensor_parallel", "--init", export(work, "ours", 0), "--devices", "2", "--steps", str(steps),
                     "--batch", str(batch), "--lr", repr(lr), "--corpus", CORPUS, "--batches", f"{work}/batches.json",
                     "--save-weights", f"{work}/theirs.npz", model=GPT)
    same_losses(ours["losses"], theirs["losses"])
    same_weights(export(work, "ours", steps), f"{work}/theirs.npz")  # pytorch's: its shards all-gathered
    check("pytorch's ranks hold equal replicated weights (embeddings, LayerNorms, head, row-parallel biases)",
          theirs["replicas_equal"] is True)
    mine = [d["peak_bytes"]["params"] // 4 for d in ours["per_device"]]
    check(f"parameters per rank: scalelab {mine} = pytorch {theirs['params_per_rank']} of {theirs['params_whole']}",
          mine == [theirs["params_per_rank"]] * 2 and theirs["params_per_rank"] < theirs["params_whole"])


def hogwild(work):
    # Asynchronous: two seeds (data order, interleaving) on each side; the means compared, bound by
    # 0.03 or twice the larger spread either side shows between its own two runs.
    rounds = 60000 // BATCH  # one epoch of rounds
    ours, theirs = [], []
    for seed in (1, 2):
        j = scalelab(work, f"ours{seed}", "--strategy", "multiprocessing", "--devices", "2", steps=rounds, every=rounds,
                     seed=seed)
        ours.append(j["test_accuracy"])
        r = example(work, "hogwild", "--init", export(work, "ours1", 0), "--devices", "2", "--batch", str(BATCH),
                    "--lr", repr(LR), "--seed", str(seed))
        check(f"pytorch (seed {seed}): the parent sees the workers' updates in its shared model", r["parent_sees_updates"] is True)
        theirs.append(r["test_accuracy"])
    bound = max(0.03, 2 * abs(ours[0] - ours[1]), 2 * abs(theirs[0] - theirs[1]))
    diff = abs(sum(ours) / 2 - sum(theirs) / 2)
    check(f"test accuracy after one epoch: scalelab {ours} vs pytorch {theirs}",
          diff <= bound and min(theirs) > 0.7, f"means differ by {diff:.4f}, bound {bound:.3f}")


if __name__ == "__main__":
    SCALELAB, name = sys.argv[1], sys.argv[2]
    if name == "hogwild":
        BATCH = 128
    work = tempfile.mkdtemp(prefix=f"scalelab-example-{name}-")
    try:
        globals()[name](work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if failed:
        sys.exit("FAIL: " + "; ".join(failed))
    print(f"PASS: examples/pytorch/{name}.py and its scalelab command agree")

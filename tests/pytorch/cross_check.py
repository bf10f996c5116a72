#!/usr/bin/python3
"""A scalelab strategy against PyTorch: the same model from the same initial weights (`scalelab
export`) on the same batches (`train --dump-batches`), trained a few steps with the same optimizer;
weights, optimizer state, per-step loss and test accuracy compared. The models:

  mlp:…          on Fashion-MNIST: Linear, ReLU, …, Linear (nn.Sequential's names: 0.weight, …)
  convnet        on Fashion-MNIST: the lecture's ConvNet, nn.Conv2d / MaxPool2d / nn.Linear named
                 conv1, conv2, fc as our export names them
  gpt:L-C-H-T-V  on a text file (--corpus, characters for V = 96, bytes for V ≥ 256): a pre-LN GPT-2
                 of nn.Embedding, nn.LayerNorm, nn.Linear and exact-erf nn.GELU, named tok_emb,
                 pos_emb, blocks.i.{ln1, attn.qkv, attn.proj, ln2, mlp.fc, mlp.proj}, ln_f, head
                 (examples/pytorch/common.py's Gpt and text_windows, which the examples share)

Our export must hold exactly the PyTorch module's state_dict, names in its order.

The reference is one PyTorch model (`--reference model`: every strategy's contract is single's
numbers), or PyTorch's own distributed program over gloo with one process per rank, each on the
rank's shard from the dump: `ddp` (DistributedDataParallel) or `zero` (ZeroRedundancyOptimizer
over DistributedDataParallel).

Two checks, each bounded by PyTorch's own float32 spread measured here, in the same run:

  step by step: at each step t PyTorch starts from *our* state at t−1 (weights and optimizer
    state, exported) and takes one step; our state at t must be within max(1e-5, 4 × spread) of
    it, relative to the tensor's largest value, where spread is how far PyTorch's float32 step is
    from its float64 step (and how far its float32 step with the gradient summed from the
    strategy's shards, or from two halves, is). Starting each step from the same state keeps
    rounding from compounding: Adam's update lr·g/(|g|+ε) turns a rounding-sized change in a
    gradient below ε into a change of order lr, a changed weight then flips a ReLU whose input is
    within rounding of zero, and two equally valid float32 programs drift apart by more than
    either's error at one step.
    Within one step, a ConvNet still meets decisions that float32 rounding may take either way: a
    max-pool window whose two largest inputs differ by less than their rounding, or a ReLU input
    within rounding of zero that would win its window. Each is taken the other way in one more
    float64 step (its pre-activation nudged across); where that step's change brings the reference
    at least halfway nearer to ours, it is added to the reference, and the output names the
    decisions ours took the other way. "Rounding" is √n·u·Σ|w·x| for a sum of n terms (u = 2^-24),
    twice that for two. On this VM, ours takes one max-pool near-tie (0.002 of its rounding: the
    two inputs differ in float64 by a tenth of a float32 ulp) the other way in a ConvNet run.
  the run: our per-step loss against PyTorch's float32 run from our init (bound: the larger of
    1e-5 and 4× its largest float32-vs-float64 difference over the steps, relative) and our test
    accuracy against its (bound: 4× its float32-vs-float64 difference, at least 2 of the test
    labels: images, or a GPT's next tokens).

The MLP's layers compute x @ W.T, then + b, then ReLU, as ours do (nn.Linear's addmm is an equally
valid float32 program, but flips a few ReLUs at 2048 rows); the ConvNet and the GPT are PyTorch's
own modules, as a student writes them. With --amp bf16 the MLP's layers are nn.Linear
under torch.autocast("cpu", torch.bfloat16), whose GEMM rounds its output, bias included, to
bfloat16 as our half layer does, and the spread is PyTorch's bfloat16 step against its float64 step.

  cross_check.py SCALELAB sgd|adam [--model M] [--strategy S --devices N] [--reference model|ddp|zero] …
"""
import argparse, gzip, json, os, shutil, subprocess, sys, tempfile

import numpy as np
import torch

# The GPT and its text, as the lectures' PyTorch programs build and read them: one copy.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "pytorch"))
from common import Gpt, text_windows  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"
CORPUS = "/usr/share/games/fortunes/computers"
MEAN, STD = np.float32(0.2860), np.float32(0.3530)


def idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def find(stem):
    for p in (f"{DATA}/{stem}.gz", f"{DATA}/{stem}"):
        if os.path.exists(p):
            return p
    sys.exit(f"[cross-check] {DATA}/{stem}: not found — apt-get install dataset-fashion-mnist")


def images(prefix):  # standardised as scalelab's loader does, in float32
    x = idx(find(f"{prefix}-images-idx3-ubyte")).reshape(-1, 784)
    xs = (x.astype(np.float32) * np.float32(1.0 / 255.0) - MEAN) / STD
    return torch.from_numpy(xs), torch.from_numpy(idx(find(f"{prefix}-labels-idx1-ubyte")).astype(np.int64))


class BiasAfter(torch.nn.Linear):  # scalelab's order: the matmul, then the bias
    def forward(self, x):
        return x @ self.weight.T + self.bias


class ConvNet(torch.nn.Module):
    """The lecture's ConvNet on 1×28×28 images, named as scalelab's export names it."""

    def __init__(self):
        super().__init__()
        self.nudge = {}  # layer name → a tensor added to its pre-activation (near_decisions)
        self.conv1 = torch.nn.Conv2d(1, 16, 5, padding=2)
        self.conv2 = torch.nn.Conv2d(16, 32, 5, padding=2)
        self.fc = torch.nn.Linear(32 * 7 * 7, 10)

    def forward(self, x):  # x: a row of 784 pixels per image
        h = x.view(-1, 1, 28, 28)
        h = torch.nn.functional.max_pool2d(torch.relu(self.conv1(h) + self.nudge.get("conv1", 0)), 2, 2)
        h = torch.nn.functional.max_pool2d(torch.relu(self.conv2(h) + self.nudge.get("conv2", 0)), 2, 2)
        return self.fc(h.flatten(1))  # NCHW order, as our rows hold it


class Setup:
    """What a PyTorch run needs: the options, the data, the batches, and how to build the model,
    its optimizer, and load our exported state into them."""

    def __init__(self, a, work):
        self.a, self.work = a, work
        self.family = a.model.split(":")[0]
        self.sizes = [int(s) for s in a.model.split(":")[1].split("-")] if ":" in a.model else []
        if self.family == "gpt":
            (self.X, self.Y), (self.Xt, self.Yt) = text_windows(a.corpus, self.sizes[3], self.sizes[4])
        else:
            self.X, self.Y = images("train")
            self.Xt, self.Yt = images("t10k")
        dump = json.load(open(f"{work}/batches.json"))
        self.batches = [torch.tensor(s["global"]) for s in dump["steps"]]
        self.shards = [[torch.tensor(r) for r in s["shards"]] for s in dump["steps"]]

    def model(self, dtype, bf16=False):
        if self.family == "convnet":
            return ConvNet().to(dtype)
        if self.family == "gpt":
            return Gpt(*self.sizes).to(dtype)
        linear = torch.nn.Linear if bf16 else BiasAfter
        layers = []
        for i in range(len(self.sizes) - 1):
            layers += [linear(self.sizes[i], self.sizes[i + 1]), torch.nn.ReLU()]
        return torch.nn.Sequential(*layers[:-1]).to(dtype)

    def optimizer(self, params, zero=False):
        a = self.a
        if a.optimizer == "sgd":
            cls, kw = torch.optim.SGD, dict(lr=a.lr, momentum=a.momentum, weight_decay=a.weight_decay)
        else:
            cls, kw = torch.optim.Adam, dict(lr=a.lr, weight_decay=a.weight_decay)
        if zero:
            from torch.distributed.optim import ZeroRedundancyOptimizer
            return ZeroRedundancyOptimizer(params, optimizer_class=cls, **kw)
        return cls(params, **kw)

    def load(self, model, opt, state, dtype):
        """Our exported state (weights, optimizer state) into a PyTorch model and optimizer, by name."""
        with torch.no_grad():
            for name, p in model.named_parameters():
                if tuple(state[name].shape) != tuple(p.shape):
                    sys.exit(f"[cross-check] {name}: ours {state[name].shape}, PyTorch's {tuple(p.shape)}")
                p.copy_(torch.from_numpy(state[name]).to(dtype))
        inner = getattr(opt, "optim", opt)  # ZeroRedundancyOptimizer: the rank's own optimizer
        owned = {id(p) for g in inner.param_groups for p in g["params"]}
        step = int(state["optimizer.step"]) if "optimizer.step" in state else 0
        for name, p in model.named_parameters():
            if id(p) not in owned:
                continue
            inner.state[p] = {}
            if step == 0:
                continue  # torch.optim's fresh state: SGD's buffer is the first gradient, Adam's zeros
            for key in ("momentum_buffer", "exp_avg", "exp_avg_sq"):
                if f"optimizer.{name}.{key}" in state:
                    inner.state[p][key] = torch.from_numpy(state[f"optimizer.{name}.{key}"]).to(dtype).clone()
            if self.a.optimizer == "adam":
                inner.state[p]["step"] = torch.tensor(float(step))

    def snapshot(self, model, opt):
        state = {k: v.detach().double().numpy().copy() for k, v in model.state_dict().items()}
        inner = getattr(opt, "optim", opt)
        for name, p in model.named_parameters():
            for key, v in inner.state.get(p, {}).items():
                if torch.is_tensor(v) and v.dim() > 0:
                    state[f"optimizer.{name}.{key}"] = v.double().numpy().copy()
        return state

    def inputs(self, rows, dtype, test=False):
        x = (self.Xt if test else self.X)[rows]
        return x if self.family == "gpt" else x.to(dtype)  # token ids stay ids

    def criterion(self, logits, y, reduction="mean"):
        """Cross-entropy over every label: a GPT's B·T tokens, logits.view(-1, V) against y.view(-1)."""
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction=reduction)

    def loss(self, model, rows, dtype, bf16, denominator=None):
        x, y = self.inputs(rows, dtype), self.Y[rows]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(x)
        logits = logits.float() if bf16 else logits
        if denominator is None:
            return self.criterion(logits, y)
        return self.criterion(logits, y, "sum") / (denominator * (y.numel() // len(rows)))

    def step(self, model, opt, t, dtype, bf16=False, parts=False):
        """One step on step t's global batch; with parts, the gradient summed from parts of it:
        the strategy's shards from the dump where it has several, else two halves."""
        opt.zero_grad()
        rows = self.batches[t]
        if parts:
            h, total = len(rows) // 2, 0.0
            for part in self.shards[t] if len(self.shards[t]) > 1 else (rows[:h], rows[h:]):
                loss = self.loss(model, part, dtype, bf16, denominator=len(rows))
                loss.backward()
                total += loss.item()
        else:
            loss = self.loss(model, rows, dtype, bf16)
            loss.backward()
            total = loss.item()
        opt.step()
        return total

    def accuracy(self, model, dtype):
        """The fraction of test labels (images, or a GPT's next tokens) the model's argmax gets right."""
        with torch.no_grad():
            right = 0
            for first in range(0, len(self.Yt), 1000):
                rows = torch.arange(first, min(first + 1000, len(self.Yt)))
                right += (model(self.inputs(rows, dtype, test=True)).argmax(-1) == self.Yt[rows]).sum().item()
            return right / self.Yt.numel()


# --- one PyTorch model -------------------------------------------------------------------------

def one_step(s, state, t, dtype, bf16=False, parts=False, nudge=None):
    model = s.model(dtype, bf16)
    if nudge:
        model.nudge = nudge
    opt = s.optimizer(model.parameters())
    s.load(model, opt, state, dtype)
    s.step(model, opt, t, dtype, bf16, parts)
    return s.snapshot(model, opt)


def whole_run(s, init, dtype, bf16=False):
    model = s.model(dtype, bf16)
    opt = s.optimizer(model.parameters())
    s.load(model, opt, init, dtype)
    losses = [s.step(model, opt, t, dtype, bf16) for t in range(len(s.batches))]
    return losses, s.accuracy(model, dtype)


# --- PyTorch's distributed programs over gloo, one process per rank ----------------------------

def rank_main(rank, world, a, work, port):
    from datetime import timedelta
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    # A rank that died or hung fails the others within two minutes, not the default thirty.
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=120))
    s = Setup(a, work)
    steps = len(s.batches)
    states = [dict(np.load(f"{work}/w{t}.npz")) for t in range(steps + 1)]

    def program():
        model = s.model(torch.float32)
        ddp = DistributedDataParallel(model)
        return model, ddp, s.optimizer(ddp.parameters(), zero=a.reference == "zero")

    def rank_step(model, ddp, opt, t):  # this rank's shard; DDP averages the gradients
        opt.zero_grad()
        rows = s.shards[t][rank]
        loss = s.criterion(ddp(s.inputs(rows, torch.float32)), s.Y[rows])
        loss.backward()
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        return total.item() / world

    # Step by step from our state; each rank saves its part of the optimizer state (all of it
    # under DDP, its shard under ZeRO), rank 0 the weights (the same on every rank).
    model, ddp, opt = program()
    for t in range(steps):
        s.load(model, opt, states[t], torch.float32)
        rank_step(model, ddp, opt, t)
        np.savez(f"{work}/ref{t + 1}-rank{rank}.npz", **s.snapshot(model, opt))
    # The whole run from our init.
    model, ddp, opt = program()
    s.load(model, opt, states[0], torch.float32)
    losses = [rank_step(model, ddp, opt, t) for t in range(steps)]
    if rank == 0:
        json.dump({"losses": losses, "accuracy": s.accuracy(model, torch.float32)}, open(f"{work}/ref-run.json", "w"))
    # DDP's reducer holds the process group: left to the frame's teardown after the group is
    # destroyed, it hung a rank at 100 % CPU about one run in thirty. Drop it first, all ranks
    # together.
    del model, ddp, opt
    dist.barrier()
    dist.destroy_process_group()


def distributed(a, work, world, steps):
    import socket
    import torch.multiprocessing as mp
    with socket.socket() as sock:  # a free port for the rendezvous
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    mp.spawn(rank_main, args=(world, a, work, port), nprocs=world, join=True)
    refs = []
    for t in range(1, steps + 1):
        merged = {}
        for r in range(world):
            merged.update(dict(np.load(f"{work}/ref{t}-rank{r}.npz")))
        refs.append(merged)
    run = json.load(open(f"{work}/ref-run.json"))
    return refs, run["losses"], run["accuracy"]


# --- the comparison ----------------------------------------------------------------------------

def relative(a, b, scale):
    return np.abs(a.astype(np.float64) - b).max() / scale


def distance(ours, theirs, f64):
    """How far two states are: the sum over tensors of the squared differences, each relative to
    the float64 step's largest value of that tensor."""
    return sum(float(((ours[k].astype(np.float64) - theirs[k]) ** 2).sum()) / max(np.abs(f64[k]).max(), 1e-30) ** 2
               for k in theirs if k in ours)


def near_decisions(s, state, t, limit=64):
    """The ConvNet's decisions at step t that float32 rounding may take either way, found in float64
    from state: each as (margin in units of its rounding, what it is, a nudge dict for one_step that
    takes it the other way). A pre-activation z = Σ w·x + b of n terms rounds by about √n·u·Σ|w·x|
    (u = 2^-24, the probabilistic bound of Higham and Mary); a max-pool window's winner and runner-up
    within twice that, or a ReLU input within it of zero that wins its window (or would), are
    decisions two valid float32 programs may take differently. The `limit` nearest are kept."""
    if s.family != "convnet":
        return [], 0
    F, u = torch.nn.functional, 2.0 ** -24
    h = s.inputs(s.batches[t], torch.float64).view(-1, 1, 28, 28)
    found = []
    for layer in ("conv1", "conv2"):
        w = torch.from_numpy(state[f"{layer}.weight"]).double()
        b = torch.from_numpy(state[f"{layer}.bias"]).double()
        z = F.conv2d(h, w, b, padding=2)
        rounding = (w[0].numel() + 1) ** 0.5 * u * F.conv2d(h.abs(), w.abs(), b.abs(), padding=2)
        r = torch.relu(z)
        B, C, H, W = z.shape

        def windows(q):  # (B, C, H/2, W/2, 4): each 2×2 window's pixels in row-major order
            return q.reshape(B, C, H // 2, 2, W // 2, 2).permute(0, 1, 2, 4, 3, 5).reshape(B, C, H // 2, W // 2, 4)

        def at(window, k):  # a window's k-th pixel as an index into z
            n, c, i, j = window
            return (n, c, 2 * i + k // 2, 2 * j + k % 2)

        top = windows(r).topk(2, -1)
        first, second = top.values[..., 0], top.values[..., 1]
        gap = first - second
        size = torch.maximum(windows(rounding).gather(-1, top.indices[..., :1]),
                             windows(rounding).gather(-1, top.indices[..., 1:])).squeeze(-1)
        # A runner-up within rounding of the winner (both positive; equal pixels from equal patches
        # give the same gradient whichever wins): pushed 2·gap up, it wins.
        margin = gap / (2 * size)
        for window in ((margin < 1) & (gap > 0) & (second > 0)).nonzero().tolist():
            k = top.indices[tuple(window)][1].item()
            g = gap[tuple(window)].item()
            found.append((margin[tuple(window)].item(), f"{layer} max-pool near-tie", layer, at(window, k), 2 * g))
        # A ReLU input within rounding of zero that decides its window: positive and winning (it
        # flips to losing), or negative and larger in size than its window's winner (it would win).
        near = (z.abs() < rounding) & (z != 0)
        best = windows(r).max(-1).values.repeat_interleave(2, -1).repeat_interleave(2, -2)
        decides = torch.where(z > 0, r >= best, z.abs() > best)
        for index in (near & decides).nonzero().tolist():
            v = z[tuple(index)].item()
            found.append((abs(v) / rounding[tuple(index)].item(), f"{layer} ReLU input near 0", layer, tuple(index), -2 * v))
        h = F.max_pool2d(r, 2, 2)
    found.sort(key=lambda d: d[0])
    decisions = []
    for margin, what, layer, index, delta in found[:limit]:
        nudge = torch.zeros(s.batches[t].numel(), *(16, 28, 28) if layer == "conv1" else (32, 14, 14), dtype=torch.float64)
        nudge[index] = delta
        decisions.append((margin, what, {layer: nudge}))
    return decisions, len(found)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scalelab")
    ap.add_argument("optimizer", choices=["sgd", "adam"])
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--model", default="mlp:784-128-64-32-10", help="mlp:…, convnet or gpt:L-C-H-T-V")
    ap.add_argument("--corpus", default=CORPUS, help="a GPT's text: one file, read as scalelab's --dataset text reads it")
    ap.add_argument("--strategy", default="single")
    ap.add_argument("--devices", type=int, default=1)
    ap.add_argument("--reference", choices=["model", "ddp", "zero"], default="model")
    ap.add_argument("--amp", choices=["off", "bf16"], default="off")
    ap.add_argument("--scalelab-args", default="", help="more options for scalelab's train, e.g. '--micro-batches 4'")
    a = ap.parse_args()
    a.lr = a.lr if a.lr is not None else (0.03 if a.optimizer == "sgd" else 1e-3)
    torch.set_num_threads(2)
    work = tempfile.mkdtemp(prefix="scalelab-cross-")
    try:
        return compare(a, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def compare(a, work):
    cmd = [a.scalelab, "train", "--strategy", a.strategy, "--devices", str(a.devices), "--device", "cpu",
           "--model", a.model, "--batch", str(a.batch), "--steps", str(a.steps), "--optimizer", a.optimizer,
           "--lr", repr(a.lr), "--weight-decay", repr(a.weight_decay), "--amp", a.amp,
           "--checkpoint", f"{work}/ck-{{step}}.ckpt", "--checkpoint-every", "1", "--dump-batches",
           f"{work}/batches.json", "--json", f"{work}/run.json", "--quiet"] + a.scalelab_args.split()
    if a.model.startswith("gpt:"):
        if not os.path.isfile(a.corpus):
            sys.exit(f"[cross-check] --corpus {a.corpus}: not a file — name one text file (apt-get install fortunes "
                     f"for the default, {CORPUS}); the cross-check tokenizes one file as scalelab does")
        cmd += ["--dataset", "text", "--data-dir", a.corpus]
    if a.optimizer == "sgd":
        cmd += ["--momentum", repr(a.momentum)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    for t in range(a.steps + 1):
        subprocess.run([a.scalelab, "export", f"{work}/ck-{t}.ckpt", "--out", f"{work}/w{t}.npz"], check=True,
                       stdout=subprocess.DEVNULL)
    ours = [dict(np.load(f"{work}/w{t}.npz")) for t in range(a.steps + 1)]
    run = json.load(open(f"{work}/run.json"))
    s = Setup(a, work)
    bf16 = a.amp == "bf16"
    dtype32 = torch.float32

    if a.reference == "model":
        refs = [one_step(s, ours[t], t, dtype32, bf16) for t in range(a.steps)]
        ref_losses, ref_acc = whole_run(s, ours[0], dtype32, bf16)
    else:
        refs, ref_losses, ref_acc = distributed(a, work, a.devices, a.steps)
    # PyTorch's own spread: its float32 (bfloat16) step against its float64 step, and its float32
    # step with the gradient summed from parts of the batch (the strategy's shards, or two halves)
    # against the same float64 step.
    worst_tensor, failed = {}, []
    # Our export holds PyTorch's state_dict: the same names, in the same order.
    exported = [k for k in ours[0] if not k.startswith("optimizer.")]
    theirs = list(s.model(dtype32).state_dict())
    if exported != theirs:
        failed.append(f"exported tensors {exported} are not PyTorch's state_dict {theirs}")
    near_notes = []
    for t in range(a.steps):
        f64 = one_step(s, ours[t], t, torch.float64)
        others = [one_step(s, ours[t], t, dtype32, bf16)] if a.reference != "model" else [refs[t]]
        others.append(one_step(s, ours[t], t, dtype32, bf16, parts=True))
        # The step's decisions within float32 rounding: those whose other way brings the reference
        # at least halfway nearer to ours are taken (one float64 step each, its change added).
        decisions, found = near_decisions(s, ours[t], t)
        reference, taken = dict(refs[t]), []
        for margin, what, nudge in decisions:
            other_way = one_step(s, ours[t], t, torch.float64, nudge=nudge)
            moved = {k: reference[k] + (other_way[k] - f64[k]) for k in f64 if k in reference and k in ours[t + 1]}
            if distance(ours[t + 1], moved, f64) < 0.5 * distance(ours[t + 1], reference, f64):
                reference.update(moved)
                taken.append(f"{what} ({margin:.2g} of its rounding)")
        if found:
            near_notes.append(f"step {t + 1}: {found} decision(s) within float32 rounding"
                              f"{f', the {len(decisions)} nearest tried' if found > len(decisions) else ''}; "
                              f"ours takes {len(taken)} the other way{': ' + ', '.join(taken) if taken else ''}")
        for k in sorted(f64):
            if k not in ours[t + 1] or k not in refs[t]:
                failed.append(f"{k}: missing at step {t + 1} ({'ours' if k not in ours[t + 1] else 'reference'})")
                continue
            scale = max(np.abs(f64[k]).max(), 1e-30)
            diff = relative(ours[t + 1][k], reference[k], scale)
            spread = max(relative(o[k], f64[k], scale) for o in others)
            bound = max(1e-5, 4 * spread)
            if k not in worst_tensor or diff / bound > worst_tensor[k][0] / worst_tensor[k][2]:
                worst_tensor[k] = (diff, spread, bound, t + 1)
    print(f"{a.model} · {a.strategy} ({a.devices}) vs {a.reference} · {a.optimizer} · amp {a.amp} · {a.steps} steps of {a.batch}")
    for note in near_notes:
        print(note)
    print(f"{'tensor (worst step)':40} {'ours vs torch':>14} {'torch spread':>13} {'bound':>9}")
    worst = 0.0
    for k, (diff, spread, bound, t) in sorted(worst_tensor.items()):
        worst = max(worst, diff / bound)
        print(f"{k + f' ({t})':40} {diff:14.3e} {spread:13.3e} {bound:9.2e}{'' if diff <= bound else '  <-- beyond'}")
        if diff > bound:
            failed.append(f"{k} at step {t}: {diff:.3e} relative, bound {bound:.2e}")

    # The run: per-step loss and test accuracy against PyTorch's run from our init.
    losses64, acc64 = whole_run(s, ours[0], torch.float64)
    if a.reference != "model":
        own32, own_acc32 = whole_run(s, ours[0], dtype32, bf16)
    else:
        own32, own_acc32 = ref_losses, ref_acc
    # One bound for the run's losses, from PyTorch's largest float32 (bfloat16) error over its
    # steps: a single step's error is one draw, and can land near zero by chance.
    bound = max(1e-5, 4 * max(abs(o - r) / abs(r) for o, r in zip(own32, losses64)))
    worst_loss = 0.0
    for i, (o, r) in enumerate(zip(run["losses"], ref_losses)):
        rel = abs(o - r) / abs(losses64[i])
        worst_loss = max(worst_loss, rel / bound)
        print(f"loss step {i}: ours {o:.7f} torch {r:.7f} (float64 {losses64[i]:.7f}) rel {rel:.2e} bound {bound:.2e}")
        if rel > bound:
            failed.append(f"loss at step {i}: ours {o}, torch {r}")
    acc_bound = max(2 / s.Yt.numel(), 4 * abs(own_acc32 - acc64))
    acc_diff = abs(run["test_accuracy"] - ref_acc)
    print(f"test accuracy: ours {run['test_accuracy']:.4f} torch {ref_acc:.4f} (float64 {acc64:.4f}) "
          f"diff {acc_diff:.4f} bound {acc_bound:.4f}")
    if acc_diff > acc_bound + 1e-12:
        failed.append(f"test accuracy: ours {run['test_accuracy']}, torch {ref_acc}")
    name, (diff, spread, bound, t) = max(worst_tensor.items(), key=lambda kv: kv[1][0] / kv[1][2])
    print("SUMMARY " + json.dumps(dict(model=a.model, strategy=a.strategy, devices=a.devices, reference=a.reference, optimizer=a.optimizer,
                                       amp=a.amp, tensor=name, step=t, diff=diff, spread=spread, bound=bound,
                                       loss_of_bound=worst_loss, accuracy=run["test_accuracy"], torch_accuracy=ref_acc)))
    if failed:
        print("FAIL: " + "; ".join(failed))
        return 1
    print(f"PASS: {a.strategy} on {a.devices} device(s) with {a.optimizer} matches PyTorch ({a.reference}) "
          f"within its bounds (worst tensor at {worst:.2f} of its bound, worst loss at {worst_loss:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

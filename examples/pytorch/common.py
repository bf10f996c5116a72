"""What every example here shares, so each program shows only its lecture's idea: Fashion-MNIST as
scalelab reads it, the MLP as scalelab builds it, the GPT and its text as scalelab builds and reads
them (tests/pytorch/cross_check.py uses these too), a start from scalelab's exported weights, and
the report line the tests read.

Run with Debian's PyTorch: /usr/bin/python3 (apt-get install python3-torch python3-numpy)."""
import argparse, gzip, json, math, os, sys

import numpy as np
import torch

DATA = os.environ.get("FASHION_MNIST", "/usr/share/datasets/fashion-mnist")
# scalelab's normalisation: pixels / 255, then the training set's mean and standard deviation.
MEAN, STD = 0.2860, 0.3530


def read_idx(stem):
    """An IDX file (images or labels), gzipped or not."""
    for path in (f"{DATA}/{stem}.gz", f"{DATA}/{stem}"):
        if os.path.exists(path):
            with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
                raw = f.read()
            dims = raw[3]
            shape = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims)]
            return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)
    sys.exit(f"[examples] {DATA}/{stem}: not found — apt-get install dataset-fashion-mnist, or set FASHION_MNIST")


def fashion_mnist(split="train"):
    """(images as float32 rows of 784, labels as int64), normalised as scalelab does."""
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(f"{prefix}-images-idx3-ubyte").reshape(-1, 784).astype(np.float32)
    x = (x / np.float32(255.0) - np.float32(MEAN)) / np.float32(STD)
    y = read_idx(f"{prefix}-labels-idx1-ubyte").astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


def mlp_layers(model):
    """`mlp:784-64-32-10` → [Linear(784, 64), ReLU, Linear(64, 32), ReLU, Linear(32, 10)]."""
    sizes = [int(s) for s in model.split(":")[1].split("-")]
    layers = []
    for i in range(len(sizes) - 1):
        layers += [torch.nn.Linear(sizes[i], sizes[i + 1]), torch.nn.ReLU()]
    return layers[:-1]


# --- the GPT: a pre-LN GPT-2 (gpt:L-C-H-T-V), named as scalelab's export names it ---------------

class Attention(torch.nn.Module):
    """Causal self-attention: q, k, v side by side in qkv's output, head h at columns h·d … (h+1)·d
    of each. The sizes come from qkv's output, so the same code runs a rank's share of the heads."""

    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(hidden, 3 * hidden)
        self.proj = torch.nn.Linear(hidden, hidden)

    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = (t.view(B, T, self.heads, -1).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=2))
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        future = torch.ones(T, T, dtype=torch.bool).triu(1)  # a key after its query
        p = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
        return self.proj((p @ v).transpose(1, 2).reshape(B, T, -1))


class Mlp(torch.nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.fc = torch.nn.Linear(hidden, 4 * hidden)
        self.gelu = torch.nn.GELU()  # exact: 0.5·x·(1 + erf(x/√2))
        self.proj = torch.nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        return self.proj(self.gelu(self.fc(x)))


class Block(torch.nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(hidden, eps=1e-5)
        self.attn = Attention(hidden, heads)
        self.ln2 = torch.nn.LayerNorm(hidden, eps=1e-5)
        self.mlp = Mlp(hidden)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Gpt(torch.nn.Module):
    """A pre-LN GPT-2 (gpt:L-C-H-T-V): tok_emb, pos_emb, blocks.i.{ln1, attn.qkv, attn.proj, ln2,
    mlp.fc, mlp.proj}, ln_f, head — scalelab's names, so its export loads as it is."""

    def __init__(self, layers, hidden, heads, context, vocab):
        super().__init__()
        self.tok_emb = torch.nn.Embedding(vocab, hidden)
        self.pos_emb = torch.nn.Embedding(context, hidden)
        self.blocks = torch.nn.ModuleList(Block(hidden, heads) for _ in range(layers))
        self.ln_f = torch.nn.LayerNorm(hidden, eps=1e-5)
        self.head = torch.nn.Linear(hidden, vocab)

    def forward(self, ids):  # ids {B, T} → logits {B, T, V}
        x = self.tok_emb(ids) + self.pos_emb(torch.arange(ids.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def gpt_sizes(model):
    """`gpt:2-64-4-32-96` → [layers, hidden, heads, context, vocab]."""
    if not model.startswith("gpt:") or len(model.split("-")) != 5:
        sys.exit(f"[examples] --model {model}: not a GPT — use gpt:L-C-H-T-V, e.g. gpt:2-64-4-32-96")
    return [int(s) for s in model[4:].split("-")]


def text_windows(path, context, vocab):
    """scalelab's --dataset text for one file (core/data/text.h): a token per byte (V = 96: '\\n' → 0,
    ' ' … '~' → 1 … 95, tab, CR, VT, FF → a space, any other byte → '?'; V ≥ 256: the byte), cut into
    windows of T + 1 tokens that do not overlap; the last tenth of them (at least 1) the test set.
    Returns ((inputs, next tokens) of training, the same of test), each {windows, T}."""
    raw = open(path, "rb").read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    b = np.frombuffer(raw, dtype=np.uint8).astype(np.int64)
    if vocab == 96:
        tokens = np.full(b.shape, ord("?") - ord(" ") + 1)
        printable = (b >= ord(" ")) & (b <= ord("~"))
        tokens[printable] = b[printable] - ord(" ") + 1
        tokens[np.isin(b, [ord("\t"), ord("\r"), 0x0B, 0x0C])] = 1
        tokens[b == ord("\n")] = 0
    else:
        tokens = b
    windows = len(tokens) // (context + 1)
    w = torch.from_numpy(tokens[: windows * (context + 1)].reshape(windows, context + 1).copy())
    test = 0 if windows < 2 else max(1, windows // 10)
    x, y = w[:, :-1], w[:, 1:]
    return (x[: windows - test], y[: windows - test]), (x[windows - test:], y[windows - test:])


def load_init(module, path):
    """Start from weights `scalelab export` wrote (nn.Sequential's names: 0.weight, 0.bias, 2.weight, …)."""
    if path:
        w = np.load(path)
        module.load_state_dict({k: torch.from_numpy(w[k]) for k in module.state_dict()})


def accuracy(model, x, y):
    with torch.no_grad():
        return (model(x).argmax(1) == y).double().mean().item()


def arguments(doc, **defaults):
    """The options every example takes; `defaults` sets the example's own."""
    ap = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    ap.add_argument("--model", default="mlp:784-64-32-10")
    ap.add_argument("--steps", type=int, default=defaults.get("steps", 4))
    ap.add_argument("--batch", type=int, default=defaults.get("batch", 60000), help="60000: the whole training set")
    ap.add_argument("--lr", type=float, default=defaults.get("lr", 0.03))
    ap.add_argument("--devices", type=int, default=defaults.get("devices", 2), help="devices, processes or workers")
    ap.add_argument("--init", help="start from these weights (scalelab export CKPT --out F.npz)")
    ap.add_argument("--report", help="write what the run reports as JSON here")
    ap.add_argument("--save-weights", help="write the final weights here (.npz, nn.Sequential's names)")
    return ap


def report(path, **what):
    """Print what the run reports and, with --report, write it for the tests."""
    print(json.dumps(what))
    if path:
        with open(path + ".tmp", "w") as f:
            json.dump(what, f)
        os.replace(path + ".tmp", path)


def state_numpy(module):
    return {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}


def save_npz(path, module):
    """The final weights under nn.Sequential's names, as `scalelab export` writes them."""
    np.savez(path, **state_numpy(module))


# --- torch.distributed on one machine: the rendezvous and the checks the DDP examples share ---

def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_process_group(rank, world_size, port):
    """gloo on localhost: what a CPU machine has ("nccl" needs GPUs). One thread per process, so
    N processes share the cores as scalelab's ranks do."""
    import torch.distributed as dist
    from datetime import timedelta
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    # A rank that died makes the others fail within two minutes, not the default thirty.
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=120))


# Tensors this program handed to gloo. Its worker thread drops its reference to a call's tensors
# only after the call has returned; if Python had dropped the tensor first, that thread then needs
# the GIL, and at exit (the main thread joining it, GIL held) the process deadlocks — seen on a
# loaded machine. Kept here, the last reference is always Python's.
_given_to_gloo = []


def keep(*tensors):
    _given_to_gloo.extend(tensors)
    return tensors[0]


def global_mean(value):
    """The loss over the whole batch: every rank's mean over its equal shard, averaged."""
    import torch.distributed as dist
    t = keep(torch.tensor([value], dtype=torch.float64))
    dist.all_reduce(t)
    return t.item() / dist.get_world_size()


def replicas_equal(module):
    """Whether every rank holds bit-for-bit the same weights (what DDP promises)."""
    import torch.distributed as dist
    mine = keep(torch.cat([p.detach().flatten() for p in module.parameters()]))
    all_ = [keep(torch.empty_like(mine)) for _ in range(dist.get_world_size())]
    dist.all_gather(all_, mine)
    return all(torch.equal(all_[0], other) for other in all_)


def ddp_steps(model, opt, x, y, a, first, last):
    """DDP's training loop, steps first … last-1: each rank forwards its shard of the step's batch,
    backward all-reduces (averages) the gradients bucket by bucket while it runs, and every rank's
    own optimizer then takes the same step. Returns the whole batch's loss at each step.

    The shards come from DistributedSampler: one shuffle of the dataset per epoch, the same on every
    rank (seed + epoch), of which rank r keeps positions r, r+N, r+2N, … — disjoint shards that
    together cover the data. With --batch 60000 each step is one epoch: the whole set, reshuffled."""
    import torch.distributed as dist
    from torch.utils.data.distributed import DistributedSampler
    rank, world_size = dist.get_rank(), dist.get_world_size()
    losses = []
    # slide: ddp-sampler
    sampler = DistributedSampler(range(len(x)), num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    per_rank = a.batch // world_size
    steps_per_epoch = len(sampler) // per_rank
    for step in range(first, last):
        sampler.set_epoch(step // steps_per_epoch)  # else every epoch repeats the first one's order
        start = step % steps_per_epoch * per_rank
        mine = list(sampler)[start:start + per_rank]  # this rank's rows of the step's batch
        # end slide
        out = model(x[mine])
        loss = torch.nn.functional.cross_entropy(out, y[mine].to(out.device))  # labels where the output is
        opt.zero_grad()
        loss.backward()  # the all-reduce of the gradients happens in here
        opt.step()
        losses.append(global_mean(loss.item()))
    return losses

"""What every example here shares, so each program shows only its lecture's idea: Fashion-MNIST as
scalelab reads it, the MLP as scalelab builds it, a start from scalelab's exported weights, and the
report line the tests read.

Run with Debian's PyTorch: /usr/bin/python3 (apt-get install python3-torch python3-numpy)."""
import argparse, gzip, json, os, sys

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

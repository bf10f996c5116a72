#!/usr/bin/python3
"""Megatron-LM's tensor parallelism written out by hand (Shoeybi et al. 2019, §3): N processes
(mp.spawn, gloo), every one on the WHOLE batch, each holding 1/N of every transformer block.

In a block, Y = GeLU(X·A) then Z = Y·B. Split A by its columns: rank r computes GeLU(X·A_r) on its
own (GeLU is element-wise). Split B by its rows: rank r's Y_r·B_r is a partial sum of Z, and one
all-reduce adds the N partials. Attention the same way: rank r holds its heads' rows of q, k and v
(ColumnParallelLinear), and the output projection is split by its input features
(RowParallelLinear). Two autograd Functions mark where the ranks talk: f before a column-parallel
layer (forward the identity, backward all-reduce), g after a row-parallel one (forward all-reduce,
backward the identity) — 2 all-reduces forward and 2 backward per block. The embedding, the
LayerNorms, the head and the row-parallel biases are whole on every rank: their gradients come
out the same everywhere, so they need no all-reduce.

(A weight here is out × in, A transposed: a column-parallel layer holds ROWS of its weight, a
row-parallel one COLUMNS. PyTorch ≥ 2.0 has this as torch.distributed.tensor.parallel's
ColwiseParallel and RowwiseParallel; Debian's 1.13 does not, so here it is by hand.)

  /usr/bin/python3 tensor_parallel.py --devices 2 --steps 20

The same in scalelab (strategies/tensor_parallel.cpp splits every tensor as this program does):

  scalelab train --model gpt:2-64-4-32-96 --dataset text --data-dir /usr/share/games/fortunes/computers \\
      --strategy tensor-parallel --devices 2 --batch 32 --steps 20 --lr 0.1

With --init F (scalelab's export of a step-0 checkpoint: whole tensors) each rank cuts its shards
from it; with --batches F (its --dump-batches) every rank trains on scalelab's steps' rows.
"""
import json, os

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from common import (Gpt, arguments, free_port, gpt_sizes, init_process_group, keep, load_init, replicas_equal, report,
                    text_windows)

CORPUS = "/usr/share/games/fortunes/computers"  # apt-get install fortunes


def all_reduce(t):
    """The sum of every rank's t, in a new tensor (autograd's own is left as it is)."""
    total = keep(t.clone())
    dist.all_reduce(total)
    return total


# slide: torch-tp-operators
class f(torch.autograd.Function):
    """Before a column-parallel layer. Forward: the identity — every rank holds the same input.
    Backward: each rank's layer gives its part of the input's gradient; the ranks add theirs."""
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        return all_reduce(grad)


class g(torch.autograd.Function):
    """After a row-parallel layer. Forward: each rank's output is a partial sum; add them.
    Backward: the identity — the output's gradient is the same on every rank."""
    @staticmethod
    def forward(ctx, partial):
        return all_reduce(partial)

    @staticmethod
    def backward(ctx, grad):
        return grad
# end slide


class ColumnParallelLinear(torch.nn.Module):
    """This rank's output features: its rows of the weight and of the bias, f in front."""

    def __init__(self, weight, bias):
        super().__init__()
        self.weight, self.bias = torch.nn.Parameter(weight), torch.nn.Parameter(bias)

    def forward(self, x):
        return F.linear(f.apply(x), self.weight, self.bias)


class RowParallelLinear(torch.nn.Module):
    """This rank's input features: its columns of the weight; g sums the ranks' partial products,
    then the bias (whole) is added once — added before the sum it would count N times."""

    def __init__(self, weight, bias):
        super().__init__()
        self.weight, self.bias = torch.nn.Parameter(weight), torch.nn.Parameter(bias)

    def forward(self, x):
        return g.apply(F.linear(x, self.weight)) + self.bias


# How each block tensor is split: (dim, groups). qkv is q;k;v (3 groups of rows), and a rank takes
# its heads' rows of each; fc by rows; the two projections' weights by columns. The rest is whole.
SPLIT = {"attn.qkv.weight": (0, 3), "attn.qkv.bias": (0, 3), "mlp.fc.weight": (0, 1), "mlp.fc.bias": (0, 1),
         "attn.proj.weight": (1, 1), "mlp.proj.weight": (1, 1)}


def split_of(name):
    return next((s for tail, s in SPLIT.items() if name.endswith(tail)), None)


def shard(whole, split, rank, n):
    """Rank `rank`'s part of a whole tensor: of each group, its n-th (all of it, not split)."""
    if split is None:
        return whole.clone()
    dim, groups = split
    return torch.cat([part.chunk(n, dim)[rank] for part in whole.chunk(groups, dim)], dim).clone()


def unshard(parts, split):
    """The whole tensor from every rank's part (shard's inverse)."""
    dim, groups = split
    return torch.cat([torch.cat([p.chunk(groups, dim)[k] for p in parts], dim) for k in range(groups)], dim)


def tensor_parallel(model, rank, n):
    """The model as single builds it, each block's four Linears swapped for this rank's shards
    (the names stay: blocks.i.attn.qkv.weight is rank r's rows of the whole one)."""
    def cut(layer, name):  # this rank's part of the layer's weight and of its bias
        return [shard(t.detach(), split_of(f"{name}.{k}"), rank, n)
                for k, t in (("weight", layer.weight), ("bias", layer.bias))]

    for block in model.blocks:
        attn, mlp = block.attn, block.mlp
        attn.heads //= n  # this rank's heads: H/N
        attn.qkv = ColumnParallelLinear(*cut(attn.qkv, "attn.qkv"))
        attn.proj = RowParallelLinear(*cut(attn.proj, "attn.proj"))
        mlp.fc = ColumnParallelLinear(*cut(mlp.fc, "mlp.fc"))
        mlp.proj = RowParallelLinear(*cut(mlp.proj, "mlp.proj"))
    return model


def whole_weights(model, n):
    """Every tensor whole, under single's names: the split ones all-gathered and put together."""
    out = {}
    for name, t in model.state_dict().items():
        if split_of(name):
            parts = [keep(torch.empty_like(t)) for _ in range(n)]
            dist.all_gather(parts, keep(t.clone()))
            t = unshard(parts, split_of(name))
        out[name] = t.numpy().copy()
    return out


def train(rank, n, a, port):
    init_process_group(rank, n, port)
    layers, hidden, heads, context, vocab = gpt_sizes(a.model)
    (x, y), _ = text_windows(a.corpus, context, vocab)  # windows of T tokens and their next tokens
    torch.manual_seed(0)  # without --init: the same whole start on every rank
    model = Gpt(layers, hidden, heads, context, vocab)
    load_init(model, a.init)
    model = tensor_parallel(model, rank, n)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)  # each rank its own shards
    if a.batches:  # scalelab's steps: every rank the whole of each
        steps = [torch.tensor(s["global"]) for s in json.load(open(a.batches))["steps"][: a.steps]]
    else:  # rows at random, the same on every rank (one seed)
        draw = torch.Generator().manual_seed(0)
        steps = [torch.randint(len(x), (a.batch,), generator=draw) for _ in range(a.steps)]
    losses = []
    for rows in steps:
        logits = model(x[rows])  # every rank: the whole batch, and in the end the same logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y[rows].reshape(-1))
        opt.zero_grad()
        loss.backward()  # f's all-reduces run in here (g's ran in forward)
        opt.step()
        losses.append(loss.item())
    replicated = [p for name, p in model.named_parameters() if not split_of(name)]
    equal = replicas_equal(torch.nn.ParameterList(replicated))
    weights = whole_weights(model, n)
    if rank == 0:
        if a.save_weights:
            np.savez(a.save_weights, **weights)
        report(a.report, example="tensor_parallel", devices=n, losses=losses, replicas_equal=equal,
               params_per_rank=sum(p.numel() for p in model.parameters()),
               params_whole=sum(w.size for w in weights.values()))
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = arguments(__doc__, batch=32, steps=8, lr=0.1)
    ap.set_defaults(model="gpt:2-64-4-32-96")
    ap.add_argument("--corpus", default=CORPUS, help="the text: one file, read as scalelab's --dataset text reads it")
    ap.add_argument("--batches", help="train on scalelab's steps: the JSON of its --dump-batches")
    a = ap.parse_args()
    _, hidden, heads, _, _ = gpt_sizes(a.model)
    if heads % a.devices or 4 * hidden % a.devices:
        ap.error(f"--devices {a.devices}: the {heads} heads and the MLP's {4 * hidden} features are shared equally "
                 f"— use a number of devices that divides {heads}")
    if not os.path.isfile(a.corpus):
        ap.error(f"--corpus {a.corpus}: not a file — apt-get install fortunes, or name one text file")
    mp.spawn(train, args=(a.devices, a, free_port()), nprocs=a.devices, join=True)


if __name__ == "__main__":
    main()

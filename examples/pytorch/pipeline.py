#!/usr/bin/python3
"""Pipeline parallel with PyTorch's Pipe (torch.distributed.pipeline.sync): the layers cut into p
stages, each on its own device, and every batch cut into m micro-batches ("chunks") that flow
through the stages one behind another in GPipe's order: every micro-batch's forward, then every
backward. The m micro-batches' gradients add up to the whole batch's: the same step as without a
pipeline.

Pipe returns its output as an RRef, so the RPC framework must be started, even in one process.
Here every stage is on the CPU (there, Pipe makes each child of the Sequential its own stage); with
GPUs, stage s goes to cuda:s. Pipe recomputes activations in backward unless told
checkpoint="never", which keeps them, as scalelab does. The same in scalelab:

  scalelab train --strategy pipeline --devices 2 --micro-batches 4 --model mlp:784-64-32-10 --batch 60000 --steps 4
"""
import os

import torch
import torch.distributed.rpc as rpc
from torch.distributed.pipeline.sync import Pipe

from common import arguments, fashion_mnist, free_port, load_init, mlp_layers, report, save_npz


def stages(layers, p):
    """Stage s of p: Linear layers ⌊s·L/p⌋ … ⌊(s+1)·L/p⌋−1 and their ReLUs, as scalelab cuts them."""
    linear = [i for i, m in enumerate(layers) if isinstance(m, torch.nn.Linear)]
    starts = [linear[s * len(linear) // p] for s in range(p)] + [len(layers)]
    return [torch.nn.Sequential(*layers[starts[s]:starts[s + 1]]) for s in range(p)]


def main():
    ap = arguments(__doc__)
    ap.add_argument("--chunks", type=int, default=4, help="micro-batches per batch")
    a = ap.parse_args()
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(free_port())
    rpc.init_rpc("pipeline", rank=0, world_size=1)
    torch.manual_seed(0)
    whole = torch.nn.Sequential(*mlp_layers(a.model))  # built whole so scalelab's names load into it
    load_init(whole, a.init)
    x, y = fashion_mnist()
    losses = []
    # slide: pipe
    model = Pipe(torch.nn.Sequential(*stages(list(whole), a.devices)), chunks=a.chunks, checkpoint="never")
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    for step in range(a.steps):
        rows = slice(step * a.batch % len(x), step * a.batch % len(x) + a.batch)
        out = model(x[rows]).local_value()  # the micro-batches' outputs, joined
        loss = torch.nn.functional.cross_entropy(out, y[rows])
        opt.zero_grad()
        loss.backward()  # every micro-batch's backward; their gradients add up
        opt.step()
        # end slide
        losses.append(loss.item())
        print(f"step {step}: loss {loss.item():.6f}")
    rpc.shutdown()
    if a.save_weights:
        save_npz(a.save_weights, whole)
    report(a.report, example="pipeline", stages=a.devices, chunks=a.chunks, losses=losses)


if __name__ == "__main__":
    main()

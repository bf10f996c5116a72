#!/usr/bin/python3
"""Single-machine data parallel, as torch.nn.DataParallel does it, step by step on the CPU.

One process drives N devices. Each step: the batch is split along its rows (scatter), the model is
copied to every device (replicate — every step, which is why DataParallel is slow), each copy runs
forward on its chunk (parallel_apply: one thread per device), the outputs are gathered on device 0,
where the loss is computed; backward runs through every copy, and their gradients are summed on
device 0, where the one optimizer steps.

On a machine with GPUs the whole of that is `model = torch.nn.DataParallel(model)`; without CUDA,
DataParallel calls the module directly, so here the steps are written out, with two "devices" that
are both the CPU. The same in scalelab:

  scalelab train --strategy data-parallel --devices 2 --model mlp:784-64-32-10 --batch 60000 --steps 4
"""
import copy
from concurrent.futures import ThreadPoolExecutor

import torch

from common import arguments, fashion_mnist, load_init, mlp_layers, report, save_npz


def main():
    a = arguments(__doc__).parse_args()
    torch.manual_seed(0)
    model = torch.nn.Sequential(*mlp_layers(a.model))  # the master copy, on device 0
    load_init(model, a.init)
    if torch.cuda.device_count() > 1:  # what a GPU machine would run: the same steps, inside PyTorch
        print("with GPUs: torch.nn.DataParallel(model.cuda()) does the steps below")
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    x, y = fashion_mnist()
    pool = ThreadPoolExecutor(a.devices)
    losses = []
    for step in range(a.steps):
        rows = slice(step * a.batch % len(x), step * a.batch % len(x) + a.batch)
        # slide: dp-step
        chunks = x[rows].chunk(a.devices)                                    # scatter
        replicas = [copy.deepcopy(model) for _ in range(a.devices)]          # replicate
        outputs = list(pool.map(lambda rc: rc[0](rc[1]), zip(replicas, chunks)))  # parallel forward
        out = torch.cat(outputs)                                             # gather on device 0
        loss = torch.nn.functional.cross_entropy(out, y[rows])               # the loss on device 0
        loss.backward()                                                      # backward on every replica
        for master, *copies in zip(model.parameters(), *(r.parameters() for r in replicas)):
            master.grad = sum(c.grad for c in copies)                        # reduce to device 0
        opt.step()
        # end slide
        opt.zero_grad()
        losses.append(loss.item())
        print(f"step {step}: loss {loss.item():.6f}")
    if a.save_weights:
        save_npz(a.save_weights, model)
    report(a.report, example="data_parallel", devices=a.devices, losses=losses)


if __name__ == "__main__":
    main()

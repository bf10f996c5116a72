#!/usr/bin/python3
"""DistributedDataParallel, launched with torch.multiprocessing.spawn: one process per device, each
with its own model, its own optimizer and its own shard of every batch (DistributedSampler). DDP
averages the gradients during backward (all-reduce over gloo here, nccl on GPUs), so every process
takes the same step and the replicas stay equal — no parameter broadcast after the first.

  /usr/bin/python3 ddp.py --devices 2

The same in scalelab (one thread per rank; --launch procs for processes):

  scalelab train --strategy ddp --devices 2 --model mlp:784-64-32-10 --batch 60000 --steps 4
"""
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

from common import (arguments, ddp_steps, fashion_mnist, free_port, init_process_group, load_init, mlp_layers,
                    replicas_equal, report, save_npz)


def train(rank, world_size, a, port, x, y):
    # slide: ddp-train
    init_process_group(rank, world_size, port)  # gloo on the CPU ("nccl" on GPUs)
    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    model = torch.nn.Sequential(*mlp_layers(a.model))
    load_init(model, a.init)
    ddp_model = DDP(model)  # DDP(model.to(rank), device_ids=[rank]) with one GPU per process
    opt = torch.optim.SGD(ddp_model.parameters(), lr=a.lr, momentum=0.9)
    losses = ddp_steps(ddp_model, opt, x, y, a, 0, a.steps)  # the training loop (common.py)
    # end slide
    equal = replicas_equal(model)
    if rank == 0:
        if a.save_weights:
            save_npz(a.save_weights, model)
        report(a.report, example="ddp", devices=world_size, losses=losses, replicas_equal=equal)
    # DDP holds the process group: drop it before the group goes, all ranks together (left to the
    # function's exit, a rank could hang there: PyTorch issue 75097).
    del ddp_model
    dist.barrier()
    dist.destroy_process_group()


def main():
    a = arguments(__doc__).parse_args()
    x, y = fashion_mnist()  # read once; the processes share it (torch.multiprocessing: shared memory)
    x.share_memory_(), y.share_memory_()
    # slide: ddp-spawn
    mp.spawn(train, args=(a.devices, a, free_port(), x, y), nprocs=a.devices, join=True)
    # end slide


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""DDP with model parallel: each process's replica spans two devices (the lecture's Net, layers
split between gpus[0] and gpus[1]), and DDP, given a multi-device module and no device_ids,
all-reduces each parameter's gradient on the device where it lives. Process r owns devices 2r and
2r+1; here they are all the CPU.

  /usr/bin/python3 ddp_model_parallel.py --devices 4     # 2 processes × 2 devices

The same in scalelab:

  scalelab train --strategy ddp-mp --devices 4 --model mlp:784-64-32-10 --batch 60000 --steps 4
"""
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

from common import (arguments, ddp_steps, fashion_mnist, free_port, init_process_group, load_init, mlp_layers,
                    replicas_equal, report, save_npz)
from model_parallel import Net


def train(rank, world_size, a, port, x, y):
    init_process_group(rank, world_size, port)
    torch.manual_seed(0)
    gpus = ["cpu", "cpu"]  # [f"cuda:{2 * rank}", f"cuda:{2 * rank + 1}"] on a machine with GPUs
    whole = torch.nn.Sequential(*mlp_layers(a.model))
    load_init(whole, a.init)
    model = DDP(Net(list(whole), *gpus))  # no device_ids: the module spans devices
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    losses = ddp_steps(model, opt, x, y, a, 0, a.steps)  # DDP's loop (common.py); the labels go to the last device
    equal = replicas_equal(whole)
    if rank == 0:
        if a.save_weights:
            save_npz(a.save_weights, whole)
        report(a.report, example="ddp_model_parallel", devices=2 * world_size, losses=losses, replicas_equal=equal)
    # DDP holds the process group: drop it before the group goes, all ranks together (left to the
    # function's exit, a rank could hang there: PyTorch issue 75097).
    del model
    dist.barrier()
    dist.destroy_process_group()


def main():
    a = arguments(__doc__, devices=4).parse_args()
    processes = a.devices // 2
    x, y = fashion_mnist()  # read once; the processes share it (torch.multiprocessing: shared memory)
    x.share_memory_(), y.share_memory_()
    mp.spawn(train, args=(processes, a, free_port(), x, y), nprocs=processes, join=True)


if __name__ == "__main__":
    main()

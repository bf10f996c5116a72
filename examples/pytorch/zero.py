#!/usr/bin/python3
"""ZeroRedundancyOptimizer: DDP whose optimizer state is sharded. Plain DDP keeps Adam's two
moments for every parameter in every process; ZeRO (stage 1) gives each process the state of its
part of the parameters only, steps that part, and broadcasts the updated weights to the others.
The step is the same — the losses are plain Adam's — and the optimizer memory per process drops.

PyTorch 1.13 shards by whole parameter tensors (greedily, largest first), so with one big layer
the split is uneven; scalelab shards the flat buffer evenly, ⌈P/N⌉ elements each. This program
trains with ZeRO, then with plain Adam from the same start, and reports both runs' losses and
each process's optimizer state bytes.

The same in scalelab (its per-device peak of optimizer memory is in --json's per_device):

  scalelab train --strategy zero --devices 2 --optimizer adam --lr 0.001 --model mlp:784-64-32-10 --batch 60000 --steps 4
"""
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

from common import (arguments, ddp_steps, fashion_mnist, free_port, init_process_group, keep, load_init, mlp_layers,
                    report)


def state_bytes(optimizer):
    """Bytes of the tensors an optimizer keeps per parameter (Adam: exp_avg, exp_avg_sq)."""
    return sum(v.numel() * v.element_size() for s in optimizer.state.values() for v in s.values()
               if torch.is_tensor(v) and v.dim() > 0)


def run(rank, world_size, a, x, y, use_zero):
    torch.manual_seed(0)
    model = torch.nn.Sequential(*mlp_layers(a.model))
    load_init(model, a.init)
    # slide: zero-optimizer
    ddp_model = DDP(model)
    if use_zero:
        opt = ZeroRedundancyOptimizer(ddp_model.parameters(), optimizer_class=torch.optim.Adam, lr=a.lr)
    else:
        opt = torch.optim.Adam(ddp_model.parameters(), lr=a.lr)
    # end slide
    losses = ddp_steps(ddp_model, opt, x, y, a, 0, a.steps)  # DDP's loop (common.py), whichever optimizer
    mine = state_bytes(opt.optim if use_zero else opt)  # ZeRO: the local optimizer over this rank's part
    every = [keep(torch.zeros(1, dtype=torch.int64)) for _ in range(world_size)]
    dist.all_gather(every, keep(torch.tensor([mine])))
    return losses, [int(t.item()) for t in every]


def train(rank, world_size, a, port, x, y):
    init_process_group(rank, world_size, port)
    zero_losses, zero_bytes = run(rank, world_size, a, x, y, use_zero=True)
    adam_losses, adam_bytes = run(rank, world_size, a, x, y, use_zero=False)
    if rank == 0:
        print(f"optimizer state per process: ZeRO {zero_bytes} bytes, plain Adam {adam_bytes} bytes")
        report(a.report, example="zero", devices=world_size, losses=zero_losses, losses_plain=adam_losses,
               optimizer_bytes_per_rank=zero_bytes, optimizer_bytes_plain=adam_bytes[0])
    dist.destroy_process_group()


def main():
    a = arguments(__doc__, lr=1e-3).parse_args()
    x, y = fashion_mnist()  # read once; the processes share it (torch.multiprocessing: shared memory)
    x.share_memory_(), y.share_memory_()
    mp.spawn(train, args=(a.devices, a, free_port(), x, y), nprocs=a.devices, join=True)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Checkpoint save and load under DDP: only rank 0 writes (every replica is the same), to a
temporary file renamed into place so a crash never leaves half a checkpoint; a barrier, so no rank
reads before rank 0's file is there; then every rank loads it (map_location: onto its own device)
and training goes on as if never stopped.

This program trains --steps straight, then again from the start with a save at --save-at and a
load — as a restarted job would — and reports both runs' losses: they are equal bit for bit.
With --resume-npz it instead loads a scalelab checkpoint exported as .npz (weights and momentum
buffers under PyTorch's names) and goes on from there.

The same in scalelab:

  scalelab train --strategy ddp --devices 2 --steps 2 --checkpoint ck.ckpt --checkpoint-every 2 …
  scalelab train --strategy ddp --devices 2 --steps 4 --resume ck.ckpt …
"""
import os, tempfile

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

from common import arguments, ddp_steps, fashion_mnist, free_port, init_process_group, load_init, mlp_layers, report


def build(a):
    torch.manual_seed(0)
    model = torch.nn.Sequential(*mlp_layers(a.model))
    load_init(model, a.init)
    ddp_model = DDP(model)
    return model, ddp_model, torch.optim.SGD(ddp_model.parameters(), lr=a.lr, momentum=0.9)


def load_scalelab(model, opt, path):
    """A scalelab export: the weights, `optimizer.NAME.momentum_buffer` and `optimizer.step`."""
    w = np.load(path)
    model.load_state_dict({k: torch.from_numpy(w[k]) for k in model.state_dict()})
    state = opt.state_dict()
    for i, name in enumerate(model.state_dict()):
        state["state"][i] = {"momentum_buffer": torch.from_numpy(w[f"optimizer.{name}.momentum_buffer"])}
    opt.load_state_dict(state)
    return int(w["optimizer.step"])


def train(rank, world_size, a, port, path, x, y):
    init_process_group(rank, world_size, port)
    if a.resume_npz:
        model, ddp_model, opt = build(a)
        first = load_scalelab(model, opt, a.resume_npz)
        resumed = ddp_steps(ddp_model, opt, x, y, a, first, a.steps)
        if rank == 0:
            report(a.report, example="checkpoint", resumed_from=first, losses_resumed=resumed)
        del ddp_model  # before the group goes (see the end of train)
        dist.barrier()
        dist.destroy_process_group()
        return

    model, ddp_model, opt = build(a)
    straight = ddp_steps(ddp_model, opt, x, y, a, 0, a.steps)

    model, ddp_model, opt = build(a)
    before = ddp_steps(ddp_model, opt, x, y, a, 0, a.save_at)
    # slide: checkpoint-save-load
    if rank == 0:  # one writer: the replicas are equal
        state = {"step": a.save_at, "state_dict": model.state_dict(), "optimizer": opt.state_dict()}
        torch.save(state, path + ".tmp")
        os.replace(path + ".tmp", path)
    dist.barrier()  # nobody reads before the file is in place
    model, ddp_model, opt = build(a)  # a restarted job
    # on GPUs: map_location=f"cuda:{rank}"
    checkpoint = torch.load(path, map_location="cpu")
    model.load_state_dict(checkpoint["state_dict"])
    opt.load_state_dict(checkpoint["optimizer"])
    # end slide
    after = ddp_steps(ddp_model, opt, x, y, a, checkpoint["step"], a.steps)
    if rank == 0:
        report(a.report, example="checkpoint", devices=world_size, save_at=a.save_at, losses_straight=straight,
               losses_resumed=before + after, bit_identical=straight == before + after)
        os.remove(path)
    # DDP holds the process group: drop it before the group goes, all ranks together (left to the
    # function's exit, a rank could hang there: PyTorch issue 75097).
    del ddp_model
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = arguments(__doc__)
    ap.add_argument("--save-at", type=int, default=2)
    ap.add_argument("--resume-npz", help="go on from a scalelab checkpoint exported as .npz")
    a = ap.parse_args()
    path = os.path.join(tempfile.gettempdir(), f"ddp-checkpoint-{os.getpid()}.pt")
    x, y = fashion_mnist()  # read once; the processes share it (torch.multiprocessing: shared memory)
    x.share_memory_(), y.share_memory_()
    mp.spawn(train, args=(a.devices, a, free_port(), path, x, y), nprocs=a.devices, join=True)


if __name__ == "__main__":
    main()

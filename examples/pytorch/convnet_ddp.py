#!/usr/bin/python3
"""The lecture's ConvNet under DistributedDataParallel: one process per device (mp.spawn), each
with its replica of the model and its own part of every batch (DistributedSampler), gradients
averaged by DDP during backward, so every replica takes the same step. Halfway (--save-at), rank 0
saves a checkpoint — the replicas are equal, one writer is enough — and the others wait at a
barrier before they load it, as a restarted job would, then training goes on from it.

The ConvNet: conv 1→16 (5×5, padding 2), ReLU, max-pool 2×2, conv 16→32, ReLU, max-pool, then a
linear head on the 32·7·7 features — the names (conv1, conv2, fc) are scalelab's, so `--init`
takes `scalelab export`'s weights as they are.

  /usr/bin/python3 convnet_ddp.py --devices 2 --steps 4 --batch 128

The same in scalelab (one thread per rank; --launch procs for processes):

  scalelab train --model convnet --strategy ddp --devices 2 --batch 128 --steps 4 --lr 0.03

With --batches F (scalelab's `train --dump-batches F`) the sampler shards the samples scalelab's
steps took, in its order, instead of its own shuffle: then both sides train on the same rows.
"""
import json, os, tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Subset, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from common import (arguments, fashion_mnist, free_port, global_mean, init_process_group, load_init, replicas_equal,
                    report, save_npz)


class ConvNet(torch.nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 16, kernel_size=5, padding=2)   # 28×28 stays 28×28
        self.conv2 = torch.nn.Conv2d(16, 32, kernel_size=5, padding=2)  # 14×14 stays 14×14
        self.pool = torch.nn.MaxPool2d(2, 2)                            # halves each side
        self.fc = torch.nn.Linear(32 * 7 * 7, classes)

    def forward(self, x):
        x = x.view(-1, 1, 28, 28)  # a row of 784 pixels is one 1×28×28 image
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        return self.fc(x.flatten(1))  # channels, then rows, then columns: NCHW, as scalelab's rows


def build(a, rank):
    torch.manual_seed(0)  # the same start on every rank (DDP broadcasts rank 0's weights anyway)
    model = ConvNet()
    load_init(model, a.init)
    ddp_model = DDP(model)  # on GPUs: DDP(model.to(rank), device_ids=[rank])
    return model, ddp_model, torch.optim.SGD(ddp_model.parameters(), lr=a.lr, momentum=0.9)


def batches(a, dataset, rank, world_size):
    """This rank's part of every step's batch. DistributedSampler lays the epoch's samples out in
    one order (shuffled from seed + epoch, the same on every rank) and hands rank r the positions
    r, r + N, r + 2N, …; a DataLoader of batch / N rows then makes this rank's part of each step."""
    shuffle = True
    if a.batches:  # scalelab's steps, in its order: the sampler only shards them
        steps = json.load(open(a.batches))["steps"][: a.steps]
        dataset, shuffle = Subset(dataset, [i for s in steps for i in s["global"]]), False
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=shuffle, seed=0)
    loader = DataLoader(dataset, batch_size=a.batch // world_size, sampler=sampler, drop_last=True)
    epoch = 0
    while True:
        sampler.set_epoch(epoch)  # a new shuffle each epoch; without it every epoch repeats the first
        yield from loader
        epoch += 1


def steps(ddp_model, opt, data, count):
    """`count` steps of DDP: forward this rank's rows, backward (DDP all-reduces the gradients
    while it runs), the same optimizer step on every rank. The whole batch's loss at each step."""
    losses = []
    for _ in range(count):
        x, y = next(data)
        loss = torch.nn.functional.cross_entropy(ddp_model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(global_mean(loss.item()))
    return losses


def train(rank, world_size, a, port, path, x, y):
    init_process_group(rank, world_size, port)  # gloo on the CPU ("nccl" on GPUs)
    data = batches(a, TensorDataset(x, y), rank, world_size)
    model, ddp_model, opt = build(a, rank)
    losses = steps(ddp_model, opt, data, a.save_at)

    if rank == 0:  # one writer: every replica holds the same weights
        state = {"step": a.save_at, "state_dict": model.state_dict(), "optimizer": opt.state_dict()}
        torch.save(state, path + ".tmp")
        os.replace(path + ".tmp", path)  # whole or absent, never half written
    dist.barrier()  # no rank reads before rank 0's file is in place
    model, ddp_model, opt = build(a, rank)  # as a restarted job: fresh model and optimizer
    checkpoint = torch.load(path, map_location="cpu")  # on GPUs: map_location=f"cuda:{rank}"
    model.load_state_dict(checkpoint["state_dict"])
    opt.load_state_dict(checkpoint["optimizer"])
    losses += steps(ddp_model, opt, data, a.steps - checkpoint["step"])

    equal = replicas_equal(model)
    if rank == 0:
        if a.save_weights:
            save_npz(a.save_weights, model)
        xt, yt = fashion_mnist("test")
        with torch.no_grad():
            accuracy = (model(xt).argmax(1) == yt).double().mean().item()
        report(a.report, example="convnet_ddp", devices=world_size, losses=losses, replicas_equal=equal,
               resumed_at=checkpoint["step"], test_accuracy=accuracy)
        os.remove(path)
    # DDP holds the process group: drop it before the group goes, all ranks together (left to the
    # function's exit, a rank could hang there: PyTorch issue 75097).
    del ddp_model
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = arguments(__doc__, batch=128, steps=4)
    ap.set_defaults(model="convnet")
    ap.add_argument("--save-at", type=int, help="the step rank 0 saves the checkpoint at (default: halfway)")
    ap.add_argument("--batches", help="train on scalelab's steps: the JSON of its --dump-batches")
    a = ap.parse_args()
    if a.model != "convnet":
        ap.error(f"--model {a.model}: this program trains the lecture's ConvNet only (--model convnet)")
    a.save_at = a.steps // 2 if a.save_at is None else min(a.save_at, a.steps)
    path = os.path.join(tempfile.gettempdir(), f"convnet-ddp-{os.getpid()}.pt")
    x, y = fashion_mnist()  # read once; the processes share it (torch.multiprocessing: shared memory)
    x.share_memory_(), y.share_memory_()
    mp.spawn(train, args=(a.devices, a, free_port(), path, x, y), nprocs=a.devices, join=True)


if __name__ == "__main__":
    main()

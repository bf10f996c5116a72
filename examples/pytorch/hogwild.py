#!/usr/bin/python3
"""Hogwild with torch.multiprocessing: ONE model whose parameters live in shared memory
(model.share_memory(); CPU tensors are shared by file descriptor by default, or through
/dev/shm files with the "file_system" strategy), and N worker processes that each train it on
their own shard of the data with their own optimizer — no lock and no all-reduce: each worker's
update goes straight into the shared weights, even while another reads them.

The parent never trains: after joining the workers it sees their updates in its own model and
measures the test accuracy. Hogwild is asynchronous, so it is held to accuracy, not to exact
numbers. The same in scalelab (each step a round: worker r gets rows r, r+N, … of the batch):

  scalelab train --strategy multiprocessing --devices 2 --epochs 1 --batch 128 --model mlp:784-64-32-10
"""
import torch
import torch.multiprocessing as mp

from common import accuracy, arguments, fashion_mnist, load_init, mlp_layers, report


def worker(rank, workers, model, x, y, a):
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)  # every worker deals the same epoch order, then takes its own rows
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)  # its own momentum
    for epoch in range(a.epochs):
        order = torch.randperm(len(x))
        for start in range(0, len(x) - a.batch + 1, a.batch):
            # slide: hogwild-worker
            rows = order[start + rank:start + a.batch:workers]  # rows r, r+N, … of this batch
            loss = torch.nn.functional.cross_entropy(model(x[rows]), y[rows])
            opt.zero_grad()
            loss.backward()
            opt.step()  # writes into the shared parameters, unlocked
            # end slide


def main():
    ap = arguments(__doc__, batch=128)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--sharing", choices=["file_descriptor", "file_system"], default="file_descriptor")
    a = ap.parse_args()
    mp.set_sharing_strategy(a.sharing)
    torch.manual_seed(0)
    model = torch.nn.Sequential(*mlp_layers(a.model))
    load_init(model, a.init)
    before = [p.detach().clone() for p in model.parameters()]
    # slide: hogwild-spawn
    model.share_memory()  # the parameters move to shared memory: every worker maps the same pages
    x, y = fashion_mnist()
    x.share_memory_()
    y.share_memory_()
    workers = [mp.Process(target=worker, args=(r, a.devices, model, x, y, a)) for r in range(a.devices)]
    for p in workers:
        p.start()
    for p in workers:
        p.join()
    # end slide
    failed = [r for r, p in enumerate(workers) if p.exitcode != 0]
    if failed:
        raise SystemExit(f"[hogwild] workers {failed} failed — see their errors above")
    # The parent did not train, yet its model has moved: the workers wrote into the shared pages.
    moved = any(not torch.equal(b, p) for b, p in zip(before, model.parameters()))
    tx, ty = fashion_mnist("test")
    acc = accuracy(model, tx, ty)
    print(f"{a.devices} workers, {a.epochs} epoch(s): test accuracy {acc:.4f}; parent sees the updates: {moved}")
    report(a.report, example="hogwild", workers=a.devices, test_accuracy=acc, parent_sees_updates=moved)


if __name__ == "__main__":
    main()

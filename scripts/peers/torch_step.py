#!/usr/bin/python3
"""PyTorch's side of `scalelab bench compute --vs torch`: one training step of the same MLP
(Linear/ReLU layers, softmax cross-entropy, SGD with momentum) on the same batch size and the same
number of threads, timed like scalelab's step (warm-up, then the median of the timed steps).

  torch_step.py --model mlp:784-1024-1024-10 --batch 512 --steps 20 --threads 2 --out F.json

Exit 3 when torch cannot be imported (the caller names the package to install)."""
import argparse, json, os, statistics, sys, time

try:
    import torch
except ImportError as e:
    print(f"[bench] torch cannot be imported ({e}) — apt-get install python3-torch", file=sys.stderr)
    sys.exit(3)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    sizes = [int(s) for s in a.model.split(":")[1].split("-")]
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers)
    # scalelab's bench trains with its default SGD: lr 0.03, momentum 0.9.
    opt = torch.optim.SGD(model.parameters(), lr=0.03, momentum=0.9)
    x = torch.rand(a.batch, sizes[0])
    y = torch.randint(0, sizes[-1], (a.batch,))
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(3):
        step()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"step_time_s": statistics.median(times), "threads": torch.get_num_threads(),
                   "torch": torch.__version__}, f)
    os.replace(tmp, a.out)


if __name__ == "__main__":
    main()

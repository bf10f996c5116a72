#!/usr/bin/python3
"""Single-machine model parallel, the lecture's `Net(*gpus)`: the layers in two contiguous groups,
the first on device 0 and the rest on device 1; forward copies the activation from one device to
the next (`.to(gpu1)`, blocking), backward sends its gradient back the same way. Only one device
works at a time — the price of a model too large for one.

Here both "devices" are the CPU (pass cuda:0 cuda:1 on a machine with two GPUs), and each
reports the parameters it holds. The same in scalelab:

  scalelab train --strategy model-parallel --devices 2 --model mlp:784-64-32-10 --batch 60000 --steps 4
"""
import torch

from common import arguments, fashion_mnist, load_init, mlp_layers, report, save_npz


# slide: mp-net
class Net(torch.nn.Module):
    def __init__(self, layers, *gpus):
        super().__init__()
        self.gpu0, self.gpu1 = torch.device(gpus[0]), torch.device(gpus[1])
        # the first ⌈L/2⌉ Linear layers (and their ReLUs) on gpu0
        linear = [i for i, m in enumerate(layers) if isinstance(m, torch.nn.Linear)]
        cut = linear[(len(linear) + 1) // 2]
        self.sub_net1 = torch.nn.Sequential(*layers[:cut]).to(self.gpu0)
        self.sub_net2 = torch.nn.Sequential(*layers[cut:]).to(self.gpu1)

    def forward(self, x):
        y = self.sub_net1(x.to(self.gpu0))
        # the copy between devices: blocking
        return self.sub_net2(y.to(self.gpu1))
# end slide


def main():
    ap = arguments(__doc__)
    ap.add_argument("--gpus", nargs=2, default=["cpu", "cpu"])
    a = ap.parse_args()
    torch.manual_seed(0)
    whole = torch.nn.Sequential(*mlp_layers(a.model))  # built whole so scalelab's names load into it
    load_init(whole, a.init)
    model = Net(list(whole), *a.gpus)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    x, y = fashion_mnist()
    losses = []
    for step in range(a.steps):
        rows = slice(step * a.batch % len(x), step * a.batch % len(x) + a.batch)
        out = model(x[rows])
        loss = torch.nn.functional.cross_entropy(out, y[rows].to(out.device))  # the labels go to the last device
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        print(f"step {step}: loss {loss.item():.6f}")
    params = [sum(p.numel() for p in part.parameters()) for part in (model.sub_net1, model.sub_net2)]
    print(f"parameters per device: {params}")
    if a.save_weights:
        save_npz(a.save_weights, whole)
    report(a.report, example="model_parallel", losses=losses, params_per_device=params)


if __name__ == "__main__":
    main()

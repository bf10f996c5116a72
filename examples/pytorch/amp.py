#!/usr/bin/python3
"""Automatic mixed precision on the CPU: inside `torch.autocast("cpu", dtype=torch.bfloat16)` the
matmuls run in bfloat16 while the weights, the optimizer and the loss's reduction stay float32.
bfloat16 keeps float32's exponent range, so no gradient underflows and no GradScaler is needed;
with float16 on a GPU (`torch.cuda.amp.autocast()`), the lecture's GradScaler scales the loss up
before backward and the gradients back down before the step.

This program trains in bfloat16 and again in float32 from the same start and reports both runs'
losses: their gap is what bfloat16's 8-bit mantissa costs. The same in scalelab:

  scalelab train --amp bf16 --model mlp:784-64-32-10 --batch 60000 --steps 4
"""
import torch

from common import arguments, fashion_mnist, load_init, mlp_layers, report


def run(a, x, y, dtype):
    torch.manual_seed(0)
    model = torch.nn.Sequential(*mlp_layers(a.model))
    load_init(model, a.init)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    losses = []
    for step in range(a.steps):
        rows = slice(step * a.batch % len(x), step * a.batch % len(x) + a.batch)
        # slide: amp-autocast
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            out = model(x[rows])  # bfloat16 under autocast
            loss = torch.nn.functional.cross_entropy(out, y[rows])  # autocast runs this in float32
        opt.zero_grad()
        loss.backward()  # gradients come back float32, as the weights are
        opt.step()
        # end slide
        losses.append(loss.item())
    return losses


def main():
    a = arguments(__doc__).parse_args()
    torch.set_num_threads(2)
    x, y = fashion_mnist()
    bf16, fp32 = run(a, x, y, torch.bfloat16), run(a, x, y, torch.float32)
    for step, (h, f) in enumerate(zip(bf16, fp32)):
        print(f"step {step}: loss bf16 {h:.6f}  fp32 {f:.6f}")
    report(a.report, example="amp", losses=bf16, losses_fp32=fp32)


if __name__ == "__main__":
    main()

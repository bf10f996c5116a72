#!/usr/bin/python3
"""PyTorch's side of `scalelab bench compute --vs torch`: one training step of the same model
(softmax cross-entropy, SGD with momentum) on the same batch size, timed like scalelab's step
(warm-up, then the median of the timed steps). The models as scalelab builds them: an MLP of
Linear/ReLU layers; the ConvNet (Conv2d(1,16,5,p=2), ReLU, MaxPool2d(2), Conv2d(16,32,5,p=2), ReLU,
MaxPool2d(2), Linear(1568,10)); a GPT gpt:L-C-H-T-V (token + position embedding, L pre-LayerNorm
blocks of causal self-attention and a 4C MLP with exact GELU, a final LayerNorm, an untied head with
bias; the loss over every token).

  torch_step.py --model mlp:784-1024-1024-10 --batch 512 --steps 20 --threads 2 --out F.json
  torch_step.py --model gpt:4-256-4-128-256 --batch 16 --steps 10 --threads 2 --out F.json
  torch_step.py --model mlp:784-4096-4096-10 --batch 512 --steps 50 --device cuda --amp bf16 --gemms --out F.json

cpu: on --threads threads. cuda: PyTorch eager on GPU 0, f32 with TF32 off (as scalelab's cuBLAS
handle: CUBLAS_DEFAULT_MATH), or --amp bf16: torch.autocast(bfloat16) around forward and loss, f32
master weights, no GradScaler (as scalelab's --amp bf16). Each step copies the batch from host memory,
as scalelab's step uploads it; each timed step is bracketed by torch.cuda.synchronize(). --gemms also
times the step's GEMMs alone (torch.mm on the same shapes and dtypes, back to back).

Exit 3 when torch cannot be imported (the caller names the package to install)."""
import argparse, json, os, statistics, sys, time

try:
    import torch
except ImportError as e:
    print(f"[bench] torch cannot be imported ({e}) — apt-get install python3-torch", file=sys.stderr)
    sys.exit(3)


def step_gemms(sizes, batch):
    """The GEMMs of one step, as scalelab's bench lists them: (trans_a, trans_b, m, n, k)."""
    g = []
    layers = len(sizes) - 1
    for l in range(layers):  # forward: y = x · Wᵀ
        g.append((False, True, batch, sizes[l + 1], sizes[l]))
    for l in range(layers - 1, -1, -1):
        g.append((True, False, sizes[l + 1], sizes[l], batch))  # dW = dyᵀ · x
        if l > 0:
            g.append((False, False, batch, sizes[l], sizes[l + 1]))  # dx = dy · W
    return g


class Block(torch.nn.Module):
    """scalelab's TransformerBlock: x + proj(attn(qkv(ln1(x)))), then + mlp.proj(gelu(mlp.fc(ln2(·))))."""

    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln1, self.ln2 = torch.nn.LayerNorm(C), torch.nn.LayerNorm(C)
        self.qkv, self.proj = torch.nn.Linear(C, 3 * C), torch.nn.Linear(C, C)
        self.fc, self.mlp_proj = torch.nn.Linear(C, 4 * C), torch.nn.Linear(4 * C, C)

    def forward(self, x):  # x {B, T, C}
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        s = (q @ k.transpose(-2, -1)) * (1.0 / (C // self.H) ** 0.5)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        p = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1)
        x = x + self.proj((p @ v).transpose(1, 2).reshape(B, T, C))
        return x + self.mlp_proj(torch.nn.functional.gelu(self.fc(self.ln2(x))))


class Gpt(torch.nn.Module):
    def __init__(self, L, C, H, T, V):
        super().__init__()
        self.tok_emb, self.pos_emb = torch.nn.Embedding(V, C), torch.nn.Embedding(T, C)
        self.blocks = torch.nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f, self.head = torch.nn.LayerNorm(C), torch.nn.Linear(C, V)

    def forward(self, ids):  # ids {B, T} → logits {B·T, V}, a row per token as scalelab's
        x = self.tok_emb(ids) + self.pos_emb(torch.arange(ids.shape[1], device=ids.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x)).flatten(0, 1)


def make_model(spec):
    """The model, an input batch maker and the labels' shape, for `spec` as scalelab reads it."""
    family, _, shape = spec.partition(":")
    if family == "convnet":
        model = torch.nn.Sequential(
            torch.nn.Conv2d(1, 16, 5, padding=2), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(16, 32, 5, padding=2), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Flatten(), torch.nn.Linear(1568, 10))
        return model, lambda b: (torch.rand(b, 1, 28, 28), torch.randint(0, 10, (b,)))
    if family == "gpt":
        L, C, H, T, V = (int(s) for s in shape.split("-"))
        return Gpt(L, C, H, T, V), lambda b: (torch.randint(0, V, (b, T)), torch.randint(0, V, (b * T,)))
    sizes = [int(s) for s in shape.split("-")]
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers), lambda b: (torch.rand(b, sizes[0]), torch.randint(0, sizes[-1], (b,)))


def tf32_off():
    """f32 GEMMs in full f32, as scalelab's cuBLAS handle (CUBLAS_DEFAULT_MATH: no TF32 tensor cores).
    torch ≥ 2.9 has fp32_precision = "ieee" and warns about the legacy allow_tf32 flags (reading one
    kind after setting the other raises), so the new API where it exists, the legacy one before."""
    def has(obj, name):  # torch 1.x's backends.cuda.matmul raises AssertionError for unknown names
        try:
            getattr(obj, name)
            return True
        except Exception:
            return False

    if has(torch.backends.cuda.matmul, "fp32_precision"):
        torch.backends.cuda.matmul.fp32_precision = "ieee"
        for b in (torch.backends.cudnn, getattr(torch.backends.cudnn, "conv", None)):
            try:  # cudnn runs nothing of an MLP: best effort
                if b is not None and has(b, "fp32_precision"):
                    b.fp32_precision = "ieee"
            except Exception:
                pass
        return "fp32_precision=ieee"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return "allow_tf32=False"


def f32_matmul_error(dev):
    """The relative error of an f32 matmul against f64: ~1e-6 in full f32, ~1e-3 if TF32 ran."""
    g = torch.Generator(device="cpu").manual_seed(3)
    a = torch.rand(1024, 1024, generator=g, dtype=torch.float64) - 0.5
    b = torch.rand(1024, 1024, generator=g, dtype=torch.float64) - 0.5
    exact = a @ b
    got = (a.float().to(dev) @ b.float().to(dev)).double().cpu()
    return float((got - exact).norm() / exact.norm())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--threads", type=int, default=0, help="cpu: torch.set_num_threads")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--amp", default="off", choices=["off", "bf16"])
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--gemms", action="store_true", help="also time the step's GEMMs alone (torch.mm)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    cuda = a.device == "cuda"
    if cuda:
        if not torch.cuda.is_available():
            print(f"[bench] torch {torch.__version__} sees no GPU (torch.version.cuda = {torch.version.cuda}) — "
                  "set SCALELAB_PYTHON to a python3 with a CUDA build of torch", file=sys.stderr)
            sys.exit(4)
        tf32_setting = tf32_off()
    elif a.threads > 0:
        torch.set_num_threads(a.threads)
    if a.amp != "off" and not cuda:
        sys.exit("[bench] torch_step.py: --amp bf16 is measured on --device cuda only")
    dev = torch.device(a.device)
    torch.manual_seed(1)
    if a.gemms and not a.model.startswith("mlp:"):
        sys.exit("[bench] torch_step.py: --gemms lists an MLP's GEMMs only")
    model, make_batch = make_model(a.model)
    model = model.to(dev)  # f32 master weights, also under autocast
    # scalelab's bench trains with its default SGD: lr 0.03, momentum 0.9.
    opt = torch.optim.SGD(model.parameters(), lr=0.03, momentum=0.9)
    x_host, y_host = make_batch(a.batch)
    loss_fn = torch.nn.CrossEntropyLoss()

    if cuda:
        def step():
            # The batch from host memory, as scalelab's step uploads it (pageable, like its HostBatch).
            x = x_host.to(dev)
            y = y_host.to(dev)
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=a.amp == "bf16"):
                loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
        sync = torch.cuda.synchronize
    else:
        x, y = x_host, y_host

        def step():
            opt.zero_grad(set_to_none=False)
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
        sync = lambda: None

    for _ in range(a.warmup):
        step()
    sync()
    times = []
    for _ in range(a.steps):
        sync()
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    result = {"step_time_s": statistics.median(times), "step_time_min_s": min(times),
              "step_time_max_s": max(times), "torch": torch.__version__,
              "device": a.device, "amp": a.amp, "steps": a.steps, "warmup": a.warmup}
    if cuda:
        # Back to back, one synchronize at the end: what the host's queueing ahead hides.
        sync()
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
        sync()
        result["step_time_back_to_back_s"] = (time.perf_counter() - t0) / a.steps
        result["device_name"] = torch.cuda.get_device_name(0)
        result["torch_cuda"] = torch.version.cuda
        result["tf32"] = "off (" + tf32_setting + ")"
        result["f32_matmul_rel_err"] = err = f32_matmul_error(dev)
        if err > 1e-4:
            print(f"[bench] torch_step.py: an f32 matmul is off by {err:.1e} from f64 — TF32 seems to be on despite "
                  f"{tf32_setting}; the f32 timings are not full f32", file=sys.stderr)
    else:
        result["threads"] = torch.get_num_threads()

    if a.gemms:
        dtype = torch.bfloat16 if a.amp == "bf16" else torch.float32
        ops = []
        for ta, tb, m, n, k in step_gemms([int(s) for s in a.model.split(":")[1].split("-")], a.batch):
            A = torch.rand((k, m) if ta else (m, k), device=dev).to(dtype)
            B = torch.rand((n, k) if tb else (k, n), device=dev).to(dtype)
            C = torch.empty((m, n), device=dev, dtype=dtype)
            ops.append((A.t() if ta else A, B.t() if tb else B, C))

        def gemms():
            for A, B, C in ops:
                torch.mm(A, B, out=C)
        for _ in range(a.warmup):
            gemms()
        gtimes = []
        for _ in range(a.steps):
            sync()
            t0 = time.perf_counter()
            gemms()
            sync()
            gtimes.append(time.perf_counter() - t0)
        result["gemm_time_s"] = statistics.median(gtimes)
        result["gemm_count"] = len(ops)

    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, a.out)


if __name__ == "__main__":
    main()

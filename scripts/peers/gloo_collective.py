#!/usr/bin/python3
"""PyTorch's side of `scalelab bench comm --vs gloo`: torch.distributed's collective over the gloo
backend, N processes on localhost, on the same sizes as scalelab's sweep (doubling from
--min-bytes to --max-bytes), timed as scalelab times its own: each call alone between barriers,
per call the slowest rank's time, then the median over calls.

  gloo_collective.py --ranks 4 --op all_reduce --min-bytes 1024 --max-bytes 64M --iters 20 --warmup 5 --out F.json

Writes {"rows": [{"bytes", "time_us", "algbw", "busbw"}]} (GB/s, nccl-tests' busbw factors).
Exit 3 when torch cannot be imported (the caller names the package to install)."""
import argparse, json, os, socket, statistics, sys, time

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError as e:
    print(f"[bench] torch cannot be imported ({e}) — apt-get install python3-torch", file=sys.stderr)
    sys.exit(3)

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def bus_factor(op, n):
    return {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n}.get(op, 1.0)


def run_rank(rank, a, port):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)  # one core per rank, as scalelab's shm ranks
    dist.init_process_group("gloo", rank=rank, world_size=a.ranks)
    n, dtype = a.ranks, DTYPES[a.dtype]
    elem = torch.tensor([], dtype=dtype).element_size()
    rows, size = [], a.min_bytes
    # Every tensor given to gloo stays referenced until the group is gone: its worker thread must
    # never drop the last reference (that needs the GIL, which the exiting main thread holds).
    kept = []
    while size <= a.max_bytes:
        # all_gather: `size` is the whole gathered buffer, as nccl-tests and scalelab count it.
        count = size // elem // (n if a.op == "all_gather" else 1)
        x = torch.full((count,), float(rank + 1), dtype=dtype)
        outs = [torch.empty_like(x) for _ in range(n)] if a.op == "all_gather" else None

        def call():
            if a.op == "all_reduce":
                dist.all_reduce(x)
            elif a.op == "broadcast":
                dist.broadcast(x, 0)
            else:
                dist.all_gather(outs, x)

        for _ in range(a.warmup):
            call()
        iters = max(min(a.iters, 7), min(a.iters, a.iters * (16 << 20) // max(size, 1)))
        mine = torch.zeros(iters, dtype=torch.float64)
        kept += [x, mine] + (outs or [])
        for i in range(iters):
            dist.barrier()
            t0 = time.perf_counter()
            call()
            mine[i] = time.perf_counter() - t0
        dist.all_reduce(mine, op=dist.ReduceOp.MAX)
        t = statistics.median(mine.tolist())
        nbytes = count * elem * (n if a.op == "all_gather" else 1)
        algbw = nbytes / t * 1e-9
        rows.append({"bytes": nbytes, "time_us": t * 1e6, "algbw": algbw, "busbw": algbw * bus_factor(a.op, n)})
        size *= 2
    if rank == 0:
        tmp = a.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"op": a.op, "ranks": n, "torch": torch.__version__, "rows": rows}, f)
        os.replace(tmp, a.out)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--op", choices=["all_reduce", "broadcast", "all_gather"], required=True)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
    ap.add_argument("--min-bytes", type=int, required=True)
    ap.add_argument("--max-bytes", type=int, required=True)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(run_rank, args=(a, port), nprocs=a.ranks, join=True)


if __name__ == "__main__":
    main()

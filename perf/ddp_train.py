#!/usr/bin/env python3
"""A plain PyTorch DDP training script, run under tiderun (or torchrun):

    tiderun -n 4 /usr/bin/python3 perf/ddp_train.py --backend tide --model transformer

The only tide-specific lines are `import tide_torch` and the backend string:
with --backend gloo this is an ordinary gloo DDP script. Rank r trains on its
own synthetic batches (seeded by r and the step), so every backend sees the
same data. Prints one line per run:

    ddp: backend=tide model=transformer ranks=4 params=... steps=50 step_ms=... loss0=... loss=...

(step_ms: the median step time after the warm-up steps), and with --out
writes rank 0's final parameters (torch.save of the state dict) and losses.
--hook CODEC registers tide_torch.compression_hook(CODEC) (tide only).
"""
import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

ap = argparse.ArgumentParser()
ap.add_argument("--backend", default="tide")
ap.add_argument("--model", choices=["mlp", "transformer"], default="mlp")
ap.add_argument("--steps", type=int, default=50)
ap.add_argument("--warmup", type=int, default=3, help="steps left out of step_ms")
ap.add_argument("--batch", type=int, default=16)
ap.add_argument("--width", type=int, default=0, help="hidden width (default: 256 mlp, 64 transformer)")
ap.add_argument("--layers", type=int, default=2)
ap.add_argument("--ctx", type=int, default=32)
ap.add_argument("--vocab", type=int, default=64, help="transformer: vocabulary (embedding and head rows)")
ap.add_argument("--lr", type=float, default=0.05)
ap.add_argument("--hook", default="", help="tide_torch.compression_hook codec (int8, fp16, ...)")
ap.add_argument("--hook-every-phase", action="store_true",
                help="--hook: compress the phases inside a node too (inter_node_only=False)")
ap.add_argument("--bucket-mb", type=float, default=25.0)
ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads per rank")
ap.add_argument("--out", default="")
args = ap.parse_args()

if args.backend == "tide":
    import tide_torch  # noqa: F401  (registers the "tide" backend)

torch.set_num_threads(args.threads)
dist.init_process_group(args.backend)  # env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
rank, world = dist.get_rank(), dist.get_world_size()
VOCAB = args.vocab


class MLP(nn.Module):
    def __init__(self, width, layers):
        super().__init__()
        dims = [32] + [width] * layers
        mods = []
        for a, b in zip(dims, dims[1:]):
            mods += [nn.Linear(a, b), nn.Tanh()]
        mods.append(nn.Linear(dims[-1], 8))
        self.net = nn.Sequential(*mods)

    def forward(self, x):
        return self.net(x)


class TinyGPT(nn.Module):
    def __init__(self, width, layers, ctx):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, width)
        self.pos = nn.Parameter(0.02 * torch.randn(ctx, width))
        layer = nn.TransformerEncoderLayer(width, nhead=4, dim_feedforward=4 * width, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, VOCAB)
        self.register_buffer("mask", torch.triu(torch.full((ctx, ctx), float("-inf")), 1))

    def forward(self, idx):
        x = self.tok(idx) + self.pos[: idx.shape[1]]
        x = self.blocks(x, mask=self.mask[: idx.shape[1], : idx.shape[1]])
        return self.head(self.norm(x))


def batch(step):
    """Rank `rank`'s batch of step `step`: a learnable synthetic task."""
    g = torch.Generator().manual_seed(7919 * rank + 104729 * step + 1)
    if args.model == "mlp":
        x = torch.randn(args.batch, 32, generator=g)
        y = (x[:, :8] * 2.0 - x[:, 8:16]).sin()
        return x, y
    # Tokens that mostly follow t -> (3t + 1) mod VOCAB, with some noise.
    start = torch.randint(0, VOCAB, (args.batch, 1), generator=g)
    seq = [start]
    for _ in range(args.ctx):
        nxt = (seq[-1] * 3 + 1) % VOCAB
        noise = torch.randint(0, VOCAB, nxt.shape, generator=g)
        keep = torch.rand(nxt.shape, generator=g) < 0.9
        seq.append(torch.where(keep, nxt, noise))
    s = torch.cat(seq, 1)
    return s[:, :-1], s[:, 1:]


torch.manual_seed(0)  # the same initial weights everywhere (DDP broadcasts rank 0's anyway)
if args.model == "mlp":
    model = MLP(args.width or 256, args.layers)
    loss_fn = nn.MSELoss()
else:
    model = TinyGPT(args.width or 64, args.layers, args.ctx)
    ce = nn.CrossEntropyLoss()

    def loss_fn(logits, y):
        return ce(logits.reshape(-1, VOCAB), y.reshape(-1))

ddp = DDP(model, bucket_cap_mb=args.bucket_mb)
if args.hook:
    ddp.register_comm_hook(None, tide_torch.compression_hook(
        args.hook, inter_node_only=not args.hook_every_phase))
opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
losses, times = [], []
for step in range(args.steps):
    x, y = batch(step)
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(ddp(x), y)
    loss.backward()
    opt.step()
    times.append(time.perf_counter() - t0)
    # The mean loss over ranks (a gloo-free path: the same backend).
    lt = loss.detach().clone()
    dist.all_reduce(lt)
    losses.append(lt.item() / world)

step_ms = 1e3 * statistics.median(times[args.warmup:] if len(times) > args.warmup else times)
nparams = sum(p.numel() for p in model.parameters())
if rank == 0:
    print(f"ddp: backend={args.backend} model={args.model} ranks={world} params={nparams} "
          f"steps={args.steps} step_ms={step_ms:.2f} loss0={losses[0]:.6f} loss={losses[-1]:.6f}"
          + (f" hook={args.hook}" if args.hook else ""), flush=True)
    if args.out:
        torch.save({"params": {k: v.detach().clone() for k, v in model.named_parameters()},
                    "losses": losses, "step_ms": step_ms}, args.out)
dist.destroy_process_group()

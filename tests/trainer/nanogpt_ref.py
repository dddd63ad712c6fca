#!/usr/bin/env python3
"""An independent PyTorch reference of tide-train (docs/trainer.md).

Importing this module has no side effects. It provides what the acceptance
checks (tests/trainer/torch_check.py) and the speed and learning comparison
(perf/train_compare.py) need, each written from tide-train's contract:

  GPT                  nanoGPT's model without dropout, float32, tied head
  read_tensors, write_tensors, load_model, save_model
                       safetensors (F32 only) with the standard library
  read_text_source, TextData, splitmix64
                       the data source, the train/validation split and the
                       deterministic windows every layout of tide-train shares
  get_lr               nanoGPT's warmup + cosine schedule
  make_optimizer, Lamb AdamW (torch) and LAMB with nanoGPT's two groups
  train, evaluate, score
                       the training loop, the validation loss, the bytes score

Quick self-tests (exit 0 on success; small, one BLAS thread):

  /usr/bin/python3 tests/trainer/nanogpt_ref.py --self-test
"""
from __future__ import annotations

import json
import math
import os
import stat
import struct
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

FORTUNES = "/usr/share/games/fortunes"
MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15   # seed multiplier (and splitmix64's increment)
STEP_MUL = 0xD1B54A32D192ED03  # step multiplier
EVAL_STEP0 = 1 << 63           # evaluation batch k uses step 2^63 + k
META_KEYS = ("n_layer", "n_head", "n_embd", "block_size", "vocab_size")


# ---------------------------------------------------------------- the model --
@dataclass
class GPTConfig:
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    block_size: int = 64
    vocab_size: int = 256


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention; q, k, v from one projection in that order."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        assert cfg.n_embd % cfg.n_head == 0, "n_embd must be a multiple of n_head"
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        hs = c // self.n_head
        q, k, v = self.c_attn(x).split(c, dim=2)
        q = q.view(b, t, self.n_head, hs).transpose(1, 2)  # (b, h, t, hs)
        k = k.view(b, t, self.n_head, hs).transpose(1, 2)
        v = v.view(b, t, self.n_head, hs).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        # The mask is built here, not kept as a buffer: gloo cannot broadcast a
        # bool buffer when DDP syncs the module's state.
        future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu_(1)
        scores = scores.masked_fill(future, float("-inf"))
        y = F.softmax(scores, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.gelu = nn.GELU()  # exact (erf) GELU
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln_1(x)), then x + mlp(ln_2(x))."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=1e-5)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=1e-5)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """nanoGPT's GPT without dropout; lm_head shares its weight with wte."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.config = cfg
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg.vocab_size, cfg.n_embd),
            wpe=nn.Embedding(cfg.block_size, cfg.n_embd),
            h=nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)]),
            ln_f=nn.LayerNorm(cfg.n_embd, eps=1e-5),
        ))
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied

    def init_weights(self, seed: int) -> None:
        """nanoGPT's initialisation, seeded by torch.manual_seed(seed)."""
        torch.manual_seed(seed)
        std_proj = 0.02 / math.sqrt(2 * self.config.n_layer)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("c_proj.weight"):
                    p.normal_(0.0, std_proj)
                elif name.endswith("ln_1.weight") or name.endswith("ln_2.weight") \
                        or name.endswith("ln_f.weight"):
                    p.fill_(1.0)
                elif name.endswith(".bias"):
                    p.zero_()
                else:  # Linear weights and the embeddings
                    p.normal_(0.0, 0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """Logits (b, t, V) and, with targets, the mean cross-entropy over b·t tokens."""
        b, t = idx.shape
        assert t <= self.config.block_size, f"sequence {t} > block_size {self.config.block_size}"
        pos = torch.arange(t, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss


def param_names(cfg: GPTConfig) -> list[str]:
    """The parameter names tide-train writes (nanoGPT's; lm_head.weight is tied, not written)."""
    names = ["transformer.wte.weight", "transformer.wpe.weight"]
    for i in range(cfg.n_layer):
        p = f"transformer.h.{i}."
        for sub in ("ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj"):
            names += [p + sub + ".weight", p + sub + ".bias"]
    return names + ["transformer.ln_f.weight", "transformer.ln_f.bias"]


# ------------------------------------------------------------- safetensors --
def write_tensors(path: str, tensors: dict, metadata: dict | None = None) -> None:
    """Writes F32 tensors (in name order) and string metadata as safetensors."""
    header: dict = {}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().to(torch.float32).contiguous()
        data = t.numpy().astype("<f4", copy=False).tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the format allows trailing spaces; aligns the data
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in blobs:
            f.write(data)


def read_tensors(path: str) -> tuple[dict, dict]:
    """Reads a safetensors file of F32 tensors: (name -> tensor, metadata)."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: truncated (no header length)")
    (hlen,) = struct.unpack("<Q", raw[:8])
    if 8 + hlen > len(raw):
        raise ValueError(f"{path}: header length {hlen} beyond the file ({len(raw)} bytes)")
    header = json.loads(raw[8:8 + hlen].decode())
    data = memoryview(raw)[8 + hlen:]
    metadata = header.pop("__metadata__", {}) or {}
    tensors = {}
    spans = []
    for name, info in header.items():
        if info.get("dtype") != "F32":
            raise ValueError(f"{path}: {name} has dtype {info.get('dtype')}, not F32")
        shape = [int(s) for s in info["shape"]]
        b, e = (int(x) for x in info["data_offsets"])
        if not 0 <= b <= e <= len(data) or e - b != 4 * math.prod(shape):
            raise ValueError(f"{path}: {name} offsets [{b}, {e}] do not fit shape {shape}")
        spans.append((b, e, name))
        arr = np.frombuffer(data[b:e], dtype="<f4").astype(np.float32).reshape(shape)
        tensors[name] = torch.from_numpy(arr.copy())
    spans.sort()
    for (_, e0, n0), (b1, _, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise ValueError(f"{path}: {n0} and {n1} overlap")
    return tensors, dict(metadata)


def model_state(model: GPT) -> dict:
    """The model's tensors by their safetensors names (lm_head.weight left out)."""
    params = dict(model.named_parameters())
    return {n: params[n].detach() for n in param_names(model.config)}


def save_model(model: GPT, path: str) -> None:
    cfg = model.config
    write_tensors(path, model_state(model), {k: getattr(cfg, k) for k in META_KEYS})


def load_model(path: str, **overrides) -> GPT:
    """A GPT with the weights of `path`; the configuration from its metadata
    (or `overrides`, e.g. n_head=4 for a file without metadata)."""
    tensors, meta = read_tensors(path)
    fields = {}
    for k in META_KEYS:
        if k in overrides:
            fields[k] = int(overrides[k])
        elif k in meta:
            fields[k] = int(meta[k])
    wte = tensors.get("transformer.wte.weight")
    wpe = tensors.get("transformer.wpe.weight")
    if wte is not None:
        fields.setdefault("vocab_size", wte.shape[0])
        fields.setdefault("n_embd", wte.shape[1])
    if wpe is not None:
        fields.setdefault("block_size", wpe.shape[0])
    fields.setdefault("n_layer", len({n.split(".")[2] for n in tensors
                                      if n.startswith("transformer.h.")}))
    if "n_head" not in fields:
        raise ValueError(f"{path}: no n_head in __metadata__ (pass n_head=...)")
    model = GPT(GPTConfig(**fields))
    names = param_names(model.config)
    head = tensors.pop("lm_head.weight", None)
    if head is not None and not torch.equal(head, tensors.get("transformer.wte.weight", head)):
        raise ValueError(f"{path}: lm_head.weight differs from the tied transformer.wte.weight")
    missing = [n for n in names if n not in tensors]
    extra = sorted(set(tensors) - set(names))
    if missing or extra:
        raise ValueError(f"{path}: missing tensors {missing}, unexpected tensors {extra}")
    params = dict(model.named_parameters())
    with torch.no_grad():
        for n in names:
            if tuple(tensors[n].shape) != tuple(params[n].shape):
                raise ValueError(f"{path}: {n} has shape {list(tensors[n].shape)}, "
                                 f"expected {list(params[n].shape)}")
            params[n].copy_(tensors[n])
    return model


# -------------------------------------------------------------------- data --
def splitmix64(x: int) -> int:
    """Vigna's splitmix64 output for state x (mod 2^64)."""
    z = (x + GOLDEN) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def read_text_source(path: str = FORTUNES) -> bytes:
    """A file's bytes, or a folder's regular files (no symlinks, no subfolders,
    no '*.dat') concatenated in byte-wise name order."""
    if not os.path.isdir(path):
        with open(path, "rb") as f:
            return f.read()
    folder = os.fsencode(path)
    parts = []
    for name in sorted(os.listdir(folder)):
        if name.endswith(b".dat"):
            continue
        full = os.path.join(folder, name)
        if not stat.S_ISREG(os.lstat(full).st_mode):
            continue
        with open(full, "rb") as f:
            parts.append(f.read())
    return b"".join(parts)


def window_starts(n: int, T: int, seed: int, step: int, first: int, count: int) -> list[int]:
    """Start offsets of sequences first..first+count-1 of `step` in n bytes."""
    if n <= T + 1:
        raise ValueError(f"{n} bytes are too few for windows of {T} + 1")
    base = seed * GOLDEN + step * STEP_MUL
    return [splitmix64((base + b) & MASK64) % (n - T) for b in range(first, first + count)]


class TextData:
    """Bytes split as tide-train: validation = the last n//10 bytes, train = the rest."""

    def __init__(self, raw: bytes):
        n = len(raw)
        cut = n - n // 10
        everything = torch.from_numpy(np.frombuffer(raw, dtype=np.uint8).copy())
        self.train = everything[:cut]
        self.val = everything[cut:]

    @classmethod
    def from_source(cls, path: str = FORTUNES) -> "TextData":
        return cls(read_text_source(path))

    @staticmethod
    def _windows(part: torch.Tensor, T: int, seed: int, step: int, first: int, count: int):
        starts = torch.tensor(window_starts(len(part), T, seed, step, first, count))
        w = part[starts[:, None] + torch.arange(T + 1)].long()
        return w[:, :-1].contiguous(), w[:, 1:].contiguous()

    def train_batch(self, seed: int, step: int, B: int, T: int, first: int = 0,
                    count: int | None = None):
        """(inputs, targets), each (count, T) int64: global sequences first.. of `step`."""
        return self._windows(self.train, T, seed, step, first, B - first if count is None
                             else count)

    def val_batch(self, seed: int, k: int, B: int, T: int, first: int = 0,
                  count: int | None = None):
        """Evaluation batch k: the windows of step 2^63 + k over the validation bytes."""
        return self._windows(self.val, T, seed, EVAL_STEP0 + k, first,
                             B - first if count is None else count)


# --------------------------------------------------------------- optimizers --
def get_lr(it: int, lr: float, min_lr: float, warmup: int, decay_steps: int) -> float:
    """nanoGPT's schedule: linear warmup, cosine decay to min_lr, then min_lr."""
    if it < warmup:
        return lr * (it + 1) / (warmup + 1)
    if it > decay_steps:
        return min_lr
    ratio = 1.0 if decay_steps == warmup else (it - warmup) / (decay_steps - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


class Lamb(torch.optim.Optimizer):
    """LAMB (You et al. 2020, Algorithm 2) with bias correction and a per-tensor
    trust ratio ‖w‖/‖u‖ (1 when either norm is 0); weight decay inside u."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                st = self.state[p]
                if not st:
                    st["step"] = 0
                    st["exp_avg"] = torch.zeros_like(p)
                    st["exp_avg_sq"] = torch.zeros_like(p)
                st["step"] += 1
                t = st["step"]
                m, v = st["exp_avg"], st["exp_avg_sq"]
                m.mul_(b1).add_(g, alpha=1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                u = (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + group["eps"])
                if group["weight_decay"] != 0:
                    u.add_(p, alpha=group["weight_decay"])
                w_norm = float(p.norm())
                u_norm = float(u.norm())
                ratio = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
                p.add_(u, alpha=-group["lr"] * ratio)
        return loss


def make_optimizer(model: nn.Module, name: str = "adamw", lr: float = 1e-3,
                   weight_decay: float = 0.1, beta1: float = 0.9, beta2: float = 0.95,
                   eps: float = 1e-8) -> torch.optim.Optimizer:
    """AdamW or LAMB with nanoGPT's groups: dim >= 2 decays, the rest does not."""
    params = list(model.parameters())  # the tied wte/lm_head once
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    if name == "adamw":
        return torch.optim.AdamW(groups, lr=lr, betas=(beta1, beta2), eps=eps)
    if name == "lamb":
        return Lamb(groups, lr=lr, betas=(beta1, beta2), eps=eps)
    raise ValueError(f"unknown optimizer {name!r} (adamw or lamb)")


def grad_norm_and_clip(model: nn.Module, clip: float) -> float:
    """The total gradient norm before clipping; clips to `clip` when clip > 0."""
    params = [p for p in model.parameters() if p.grad is not None]
    if clip > 0:
        return float(torch.nn.utils.clip_grad_norm_(params, clip))
    return float(torch.norm(torch.stack([torch.norm(p.grad.detach(), 2) for p in params]), 2))


# ---------------------------------------------------------------- training --
@torch.no_grad()
def evaluate(model: GPT, data: TextData, B: int, T: int, batches: int, seed: int) -> float:
    """Mean of the per-batch mean losses of validation batches 0..batches-1 (double)."""
    total = 0.0
    for k in range(batches):
        x, y = data.val_batch(seed, k, B, T)
        total += float(model(x, y)[1])
    return total / batches


def train(model: GPT, data: TextData, B: int, T: int, steps: int, optimizer="adamw", *,
          lr: float = 1e-3, min_lr: float = 1e-4, warmup: int = 100, decay_steps: int = 2000,
          weight_decay: float = 0.1, beta1: float = 0.9, beta2: float = 0.95,
          eps: float = 1e-8, clip: float = 1.0, eval_every: int = 250, eval_batches: int = 20,
          seed: int = 1, log=None) -> list[dict]:
    """Trains `steps` steps of global batch B as tide-train does; returns one record
    per step {step, loss, grad_norm, lr, step_ms, tokens_per_s[, val_loss]} and, when
    evaluating, a last {step: steps, val_loss}. Step s evaluates before its update
    when eval_every > 0 and s % eval_every == 0. `optimizer`: "adamw", "lamb" or an
    Optimizer whose groups' lr this sets each step."""
    if isinstance(optimizer, str):
        optimizer = make_optimizer(model, optimizer, lr, weight_decay, beta1, beta2, eps)
    records = []
    for s in range(steps):
        rec: dict = {"step": s}
        if eval_every > 0 and s % eval_every == 0:
            rec["val_loss"] = evaluate(model, data, B, T, eval_batches, seed)
        t0 = time.perf_counter()
        rate = get_lr(s, lr, min_lr, warmup, decay_steps)
        for group in optimizer.param_groups:
            group["lr"] = rate
        x, y = data.train_batch(seed, s, B, T)
        _, loss = model(x, y)
        loss.backward()
        rec["grad_norm"] = grad_norm_and_clip(model, clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        dt = time.perf_counter() - t0
        rec.update(loss=float(loss), lr=rate, step_ms=1e3 * dt, tokens_per_s=B * T / dt)
        records.append(rec)
        if log is not None:
            log(rec)
    if eval_every > 0:
        rec = {"step": steps, "val_loss": evaluate(model, data, B, T, eval_batches, seed)}
        records.append(rec)
        if log is not None:
            log(rec)
    return records


@torch.no_grad()
def score(model: GPT, raw: bytes, T: int, chunk: int = 64) -> float:
    """Mean cross-entropy (nats per byte) of K = (L-1)//T consecutive windows of raw."""
    K = (len(raw) - 1) // T
    if K < 1:
        raise ValueError(f"{len(raw)} bytes hold no window of {T} + 1")
    b = torch.from_numpy(np.frombuffer(raw, dtype=np.uint8).copy()).long()
    total = 0.0
    for k0 in range(0, K, chunk):
        k1 = min(K, k0 + chunk)
        x = b[k0 * T:k1 * T].view(k1 - k0, T)
        y = b[k0 * T + 1:k1 * T + 1].view(k1 - k0, T)
        logits, _ = model(x)
        nll = F.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1), reduction="none")
        total += float(nll.double().sum())
    return total / (K * T)


# -------------------------------------------------------------- self-tests --
def _self_test() -> int:
    import tempfile
    torch.set_num_threads(1)
    failures = []

    def check(what: str, ok: bool, detail: str = "") -> None:
        print(f"{'ok  ' if ok else 'FAIL'} {what}{': ' + detail if detail else ''}")
        if not ok:
            failures.append(what)

    # splitmix64 against Vigna's reference outputs (state 0, first output).
    v = splitmix64(0)
    check("splitmix64(0) == 0xE220A8397B1DCDAF", v == 0xE220A8397B1DCDAF, hex(v))
    state, outs = 0, []  # the generator form: state += golden; output mix(state)
    for _ in range(3):
        outs.append(splitmix64(state))
        state = (state + GOLDEN) & MASK64
    check("splitmix64 stream from state 0",
          outs == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F],
          " ".join(hex(o) for o in outs))

    # Schedule.
    got = [get_lr(i, 1e-3, 1e-4, 2, 10) for i in (0, 1, 2, 6, 10, 11)]
    want = [1e-3 / 3, 2e-3 / 3, 1e-3, 1e-4 + 0.5 * 9e-4, 1e-4, 1e-4]
    check("get_lr warmup/cosine/min", all(math.isclose(a, b, rel_tol=1e-12)
                                          for a, b in zip(got, want)), str(got))
    check("get_lr decay_steps == warmup", get_lr(5, 1e-3, 1e-4, 5, 5) == 1e-4)

    with tempfile.TemporaryDirectory() as tmp:
        # Data source: byte-wise name order, no symlinks, subfolders or *.dat.
        src = os.path.join(tmp, "src")
        os.makedirs(os.path.join(src, "sub"))
        for name, text in (("b", b"BB"), ("B", b"Up"), ("_x", b"__"), ("a.dat", b"DAT"),
                           ("sub/c", b"SUB")):
            with open(os.path.join(src, name), "wb") as f:
                f.write(text)
        os.symlink("b", os.path.join(src, "link"))
        got = read_text_source(src)
        check("read_text_source folder", got == b"Up__BB", repr(got))
        check("read_text_source file", read_text_source(os.path.join(src, "b")) == b"BB")

        # Windows and split.
        raw = bytes(range(256)) * 8
        data = TextData(raw)
        check("split", len(data.val) == len(raw) // 10
              and bytes(data.train.tolist()) + bytes(data.val.tolist()) == raw)
        x, y = data.train_batch(7, 3, 4, 16)
        s1 = splitmix64((7 * GOLDEN + 3 * STEP_MUL + 1) & MASK64) % (len(data.train) - 16)
        check("train window formula", x[1].tolist() == list(raw[s1:s1 + 16])
              and y[1].tolist() == list(raw[s1 + 1:s1 + 17]))
        x2, _ = data.train_batch(7, 3, 4, 16, first=2, count=2)
        check("a rank's slice of the global batch", torch.equal(x2, x[2:]))
        xv, _ = data.val_batch(7, 5, 2, 16)
        sv = splitmix64((7 * GOLDEN + ((1 << 63) + 5) * STEP_MUL) & MASK64) % (len(data.val) - 16)
        check("val window formula", xv[0].tolist() == data.val[sv:sv + 16].tolist())

        # safetensors round trip, header layout, and the model through it.
        tens = {"b": torch.randn(3, 4), "a": torch.randn(5), "s": torch.tensor(2.5)}
        path = os.path.join(tmp, "t.safetensors")
        write_tensors(path, tens, {"k": 1})
        back, meta = read_tensors(path)
        check("safetensors round trip", meta == {"k": "1"} and set(back) == set(tens)
              and all(torch.equal(back[n], tens[n]) for n in tens))
        with open(path, "rb") as f:
            blob = f.read()
        hlen = struct.unpack("<Q", blob[:8])[0]
        hdr = json.loads(blob[8:8 + hlen])
        check("safetensors header", hdr["a"] == {"dtype": "F32", "shape": [5],
                                                  "data_offsets": [0, 20]}
              and hdr["s"]["shape"] == [] and len(blob) == 8 + hlen + 4 * (3 * 4 + 5 + 1))

        cfg = GPTConfig(n_layer=2, n_head=4, n_embd=32, block_size=16, vocab_size=256)
        model = GPT(cfg)
        model.init_weights(1)
        mpath = os.path.join(tmp, "m.safetensors")
        save_model(model, mpath)
        model2 = load_model(mpath)
        idx = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
        same = torch.equal(model(idx)[0], model2(idx)[0])
        check("save_model/load_model", same and model2.config == cfg
              and model2.lm_head.weight is model2.transformer.wte.weight)
        _, meta = read_tensors(mpath)
        check("model metadata", meta == {"n_layer": "2", "n_head": "4", "n_embd": "32",
                                         "block_size": "16", "vocab_size": "256"}, str(meta))
        # A file that also holds an equal lm_head.weight loads; a different one does not.
        st = model_state(model)
        write_tensors(mpath, {**st, "lm_head.weight": st["transformer.wte.weight"]}, meta)
        load_model(mpath)
        write_tensors(mpath, {**st, "lm_head.weight": st["transformer.wte.weight"] + 1}, meta)
        try:
            load_model(mpath)
            check("differing lm_head.weight rejected", False)
        except ValueError:
            check("differing lm_head.weight rejected", True)

        # Loss at init ≈ ln 256 (targets unrelated to the inputs: the tied head
        # favours repeating the input byte), causality, parameter count.
        tgt = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))
        _, loss = model(idx, tgt)
        check("loss at init ≈ ln 256", abs(float(loss) - math.log(256)) < 0.05,
              f"{float(loss):.4f} vs {math.log(256):.4f}")
        idx2 = idx.clone()
        idx2[:, 10:] = (idx2[:, 10:] + 1) % 256
        check("causal", torch.allclose(model(idx)[0][:, :10], model(idx2)[0][:, :10]))
        n = sum(p.numel() for p in model.parameters())
        C, L, V, Tb = 32, 2, 256, 16
        check("parameter count", n == V * C + Tb * C + L * (12 * C * C + 13 * C) + 2 * C, str(n))

        # LAMB against a hand computation (two steps, wd, and the zero-norm case).
        w0, g1, g2 = [0.5, -1.0, 2.0], [0.1, 0.2, -0.3], [-0.2, 0.05, 0.4]
        lr, b1, b2, eps, wd = 0.01, 0.9, 0.95, 1e-8, 0.1
        p = torch.tensor(w0, requires_grad=True)
        z = torch.zeros(2, requires_grad=True)
        opt = Lamb([{"params": [p], "weight_decay": wd},
                    {"params": [z], "weight_decay": 0.0}], lr=lr, betas=(b1, b2), eps=eps)
        w, m, vv = list(w0), [0.0] * 3, [0.0] * 3
        for t, g in ((1, g1), (2, g2)):
            p.grad = torch.tensor(g)
            z.grad = torch.tensor([0.3, -0.4])
            opt.step()
            m = [b1 * a + (1 - b1) * gi for a, gi in zip(m, g)]
            vv = [b2 * a + (1 - b2) * gi * gi for a, gi in zip(vv, g)]
            u = [(mi / (1 - b1 ** t)) / (math.sqrt(vi / (1 - b2 ** t)) + eps) + wd * wi
                 for mi, vi, wi in zip(m, vv, w)]
            r = math.sqrt(sum(a * a for a in w)) / math.sqrt(sum(a * a for a in u))
            w = [wi - lr * r * ui for wi, ui in zip(w, u)]
        err = max(abs(a - b) for a, b in zip(p.tolist(), w))
        check("LAMB vs hand computation", err < 1e-6, f"max abs err {err:.2e}")
        # z: step 1 from 0 has ‖w‖ = 0 → ratio 1, u = ±1 → z = ∓lr; step 2 has ratio ‖z‖/‖u‖.
        check("LAMB zero-norm ratio 1", z.tolist()[0] < 0 and z.tolist()[1] > 0
              and abs(abs(z.tolist()[0]) - abs(z.tolist()[1])) < 1e-9)

        # Score against a direct computation.
        raw = bytes((i * 37) % 251 for i in range(16 * 5 + 7))
        got = score(model, raw, 16, chunk=2)
        K = (len(raw) - 1) // 16
        xs = torch.tensor(list(raw[:K * 16])).view(K, 16)
        ys = torch.tensor(list(raw[1:K * 16 + 1])).view(K, 16)
        want = float(model(xs, ys)[1])
        check("score", abs(got - want) < 1e-6 * want, f"{got!r} vs {want!r}")

        # A short run: records, evaluation placement, learning on repetitive text.
        data = TextData(b"the quick brown fox jumps over the lazy dog. " * 200)
        model.init_weights(2)
        recs = train(model, data, 4, 16, 30, "adamw", lr=3e-3, min_lr=3e-4, warmup=2,
                     decay_steps=30, clip=1.0, eval_every=10, eval_batches=2, seed=1)
        evals = [r["step"] for r in recs if "val_loss" in r]
        check("train records", len(recs) == 31 and evals == [0, 10, 20, 30], str(evals))
        check("train learns", recs[-2]["loss"] < recs[0]["loss"] - 1.0,
              f"{recs[0]['loss']:.3f} -> {recs[-2]['loss']:.3f}")
        model.init_weights(2)
        recs2 = train(model, data, 4, 16, 3, "lamb", lr=3e-3, min_lr=3e-4, warmup=2,
                      decay_steps=30, clip=1.0, eval_every=0, seed=1)
        check("lamb run", len(recs2) == 3 and recs2[0]["loss"] == recs[0]["loss"])

    print("self-test:", "FAILED: " + ", ".join(failures) if failures else "all passed")
    return 1 if failures else 0


def main() -> int:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--self-test", action="store_true", help="run the quick self-tests")
    args = ap.parse_args()
    if args.self_test:
        return _self_test()
    ap.print_help()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

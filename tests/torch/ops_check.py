#!/usr/bin/env python3
"""tide_torch's operations against a serial fp64 reference and against gloo.

Driver (no RANK in the environment):
    ops_check.py --tiderun TIDERUN [--ranks 1,2,3,4]
starts this script under `tiderun -n N` for each N and exits 77 when torch or
tide_torch cannot be imported. Each rank (under tiderun) runs every operation
x dtype x size (0, 1, odd, non-contiguous) x root on the default "tide" group
and on a gloo group over the same inputs: tide's result must match the
reference (exactly for integers; within the dtype's rounding for floats) and
gloo's where gloo has the operation. Then the Work API, subgroups and the
errors Tide raises.
"""
import argparse
import os
import subprocess
import sys
import time


def driver():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiderun", required=True)
    ap.add_argument("--ranks", default="1,2,3,4")
    args = ap.parse_args()
    try:
        import torch  # noqa: F401
        import tide_torch  # noqa: F401
    except ImportError as e:
        print(f"skipped: {e}")
        return 77
    for n in [int(x) for x in args.ranks.split(",")]:
        t0 = time.time()
        rc = subprocess.call([args.tiderun, "-n", str(n), "--timeout", "240", sys.executable,
                              os.path.abspath(__file__)])
        print(f"== {n} rank(s): exit {rc} in {time.time() - t0:.1f} s", flush=True)
        if rc != 0:
            return 1
    return 0


if "RANK" not in os.environ:
    sys.exit(driver())

import datetime  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import tide_torch  # noqa: E402,F401
import warnings  # noqa: E402

warnings.filterwarnings("ignore", message=".*all_reduce_coalesced will be deprecated.*")

dist.init_process_group("tide", timeout=datetime.timedelta(seconds=120))
RANK, N = dist.get_rank(), dist.get_world_size()
TIDE = dist.group.WORLD
GLOO = dist.new_group(backend="gloo")
ROp = dist.ReduceOp
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.uint8, torch.int32, torch.int64]
DTYPES = FLOATS + INTS + [torch.bool]
SIZES = [0, 1, 7, 1031]
failures = []
checks = {"tide": 0, "gloo": 0, "gloo_missing": 0}


def gen(rank, seed, numel, dtype, op=None):
    """Rank `rank`'s input: a function of (rank, seed), so every rank knows all."""
    g = torch.Generator().manual_seed(1000003 * seed + 7919 * rank + 17)
    if dtype == torch.bool:
        return torch.randint(0, 2, (numel,), generator=g).bool()
    if dtype in FLOATS:
        if op is not None and op == ROp.PRODUCT:
            x = 0.75 + 0.5 * torch.rand(numel, generator=g, dtype=torch.float64)
        else:
            x = torch.randn(numel, generator=g, dtype=torch.float64)
        return x.to(dtype)
    lo, hi = (1, 3) if op is not None and op == ROp.PRODUCT else ((0, 30) if dtype == torch.uint8 else (-30, 30))
    return torch.randint(lo, hi, (numel,), generator=g).to(dtype)


def wide(t):
    return t.to(torch.float64) if t.dtype in FLOATS else t.to(torch.int64)


def reduce_ref(xs, op):
    s = torch.stack([wide(x) for x in xs])
    if op == ROp.SUM:
        return s.sum(0) if xs[0].dtype != torch.bool else s.amax(0)
    if op == ROp.PRODUCT:
        return s.prod(0) if xs[0].dtype != torch.bool else s.amin(0)
    if op == ROp.MIN:
        return s.amin(0)
    if op == ROp.MAX:
        return s.amax(0)
    if op == ROp.AVG:
        return s.mean(0)
    raise ValueError(op)


def tol(dtype, n_terms):
    return {torch.float32: 2e-6, torch.float64: 1e-13, torch.float16: 2e-3,
            torch.bfloat16: 1.6e-2}.get(dtype, 0.0) * max(1, n_terms)


def check(name, got, want, dtype, n_terms=1, who="tide"):
    checks[who] += 1
    got_w, want_w = wide(got), (want.to(got_w_dtype(got)) if want is not None else None)
    if got_w.shape != want_w.shape:
        failures.append(f"{who} {name}: shape {tuple(got_w.shape)}, want {tuple(want_w.shape)}")
        return
    if got_w.numel() == 0:
        return
    if got.dtype in FLOATS:
        err = ((got_w - want_w).abs() / (want_w.abs() + 1.0)).max().item()
        if not err <= tol(dtype, n_terms):
            failures.append(f"{who} {name}: max error {err:.3g} > {tol(dtype, n_terms):.3g}")
    elif not torch.equal(got_w, want_w):
        i = (got_w != want_w).nonzero()[0].item()
        failures.append(f"{who} {name}: [{i}] = {got_w[i].item()}, want {want_w[i].item()}")


def got_w_dtype(t):
    return torch.float64 if t.dtype in FLOATS else torch.int64


def rounded(x, dtype):
    """The reference as the output dtype holds it (integer AVG aside)."""
    return x.to(dtype) if dtype != torch.bool else x.bool()


def both(name, run, want, dtype, n_terms=1, gloo=True):
    """Runs `run(group)` on tide and on gloo; checks tide against `want` and
    gloo's result against tide's (the loop's `numel` > 0 only, and not where
    gloo is wrong: strided tensors, whose storage it reduces as if dense, and
    reduce's non-root ranks, where it leaves partial sums)."""
    tide_out = run(TIDE)
    check(name, tide_out, rounded(want, dtype), dtype, n_terms)
    if numel == 0:  # gloo's allgather divides by zero on empty tensors
        checks["gloo_missing"] += 1
        return
    try:
        gloo_out = run(GLOO)  # on every rank (a collective), compared where it is right
    except RuntimeError:
        checks["gloo_missing"] += 1
        return
    if not gloo:
        return
    check(name + " vs gloo", tide_out, wide(gloo_out), dtype, 2 * n_terms, who="gloo")


def noncontig(x):
    """A non-contiguous tensor holding x's values (every other element)."""
    buf = torch.zeros(2 * x.numel(), dtype=x.dtype)
    v = buf[::2]
    v.copy_(x)
    return v


def opn(op):
    for name in ["SUM", "PRODUCT", "MIN", "MAX", "AVG"]:
        if op == getattr(ROp, name):
            return name
    return str(op)


def ops_for(dtype):
    ops = [ROp.SUM, ROp.PRODUCT, ROp.MIN, ROp.MAX]
    return ops + [ROp.AVG] if dtype in FLOATS else ops


seed = 0
for dtype in DTYPES:
    dn = str(dtype).replace("torch.", "")
    for numel in SIZES:
        for op in ops_for(dtype):
            seed += 1
            xs = [gen(r, seed, numel, dtype, op) for r in range(N)]
            want = reduce_ref(xs, op)
            for layout in (["contig", "strided"] if numel == 1031 else ["contig"]):
                def run(g, layout=layout):
                    t = xs[RANK].clone() if layout == "contig" else noncontig(xs[RANK])
                    dist.all_reduce(t, op=op, group=g)
                    return t
                if op == ROp.AVG:  # gloo has no AVG: reference only
                    t = run(TIDE)
                    check(f"all_reduce {dn} AVG n={numel} {layout}", t, want.to(dtype), dtype, N)
                else:
                    both(f"all_reduce {dn} {opn(op)} n={numel} {layout}", run, want, dtype, N,
                         gloo=layout == "contig")
        # all_reduce_coalesced: two tensors in one call
        seed += 1
        xs = [gen(r, seed, numel, dtype) for r in range(N)]
        ys = [gen(r, seed + 5000, numel + 3, dtype) for r in range(N)]
        if dtype != torch.bool:
            a, b = xs[RANK].clone(), ys[RANK].clone()
            dist.all_reduce_coalesced([a, b], op=ROp.SUM, group=TIDE)
            check(f"all_reduce_coalesced {dn} n={numel} [0]", a, rounded(reduce_ref(xs, ROp.SUM), dtype), dtype, N)
            check(f"all_reduce_coalesced {dn} n={numel} [1]", b, rounded(reduce_ref(ys, ROp.SUM), dtype), dtype, N)
        for root in sorted({0, N - 1}):
            def run(g, root=root):
                t = xs[RANK].clone() if RANK == root else torch.zeros_like(xs[RANK])
                dist.broadcast(t, src=root, group=g)
                return t
            both(f"broadcast {dn} n={numel} root={root}", run, wide(xs[root]), dtype)
            for op in [ROp.SUM, ROp.MAX]:
                def run(g, root=root, op=op):
                    t = xs[RANK].clone()
                    dist.reduce(t, dst=root, op=op, group=g)
                    return t
                want = reduce_ref(xs, op) if RANK == root else wide(xs[RANK])
                both(f"reduce {dn} {opn(op)} n={numel} root={root}", run, want, dtype, N,
                     gloo=RANK == root)
            # gather and scatter
            def run(g, root=root):
                out = [torch.zeros_like(xs[RANK]) for _ in range(N)] if RANK == root else None
                dist.gather(xs[RANK].clone(), out, dst=root, group=g)
                return torch.cat(out) if RANK == root else torch.zeros(0, dtype=dtype)
            want = torch.cat([wide(x) for x in xs]) if RANK == root else torch.zeros(0, dtype=torch.int64)
            both(f"gather {dn} n={numel} root={root}", run, want, dtype)

            def run(g, root=root):
                out = torch.zeros_like(xs[RANK])
                dist.scatter(out, [x.clone() for x in xs] if RANK == root else None, src=root, group=g)
                return out
            both(f"scatter {dn} n={numel} root={root}", run, wide(xs[RANK]), dtype)
        # all_gather (list; also with a strided output) and all_gather_into_tensor
        for strided in [False, True, "chunks"]:
            def run(g, strided=strided):
                out = [torch.zeros_like(xs[RANK]) for _ in range(N)]
                if strided == "chunks":  # views of one buffer: gathered in place
                    flat = torch.zeros(N * numel, dtype=dtype)
                    out = list(flat.chunk(N)) if numel > 0 else out
                elif strided:
                    out[-1] = noncontig(torch.zeros_like(xs[RANK]))
                dist.all_gather(out, xs[RANK].clone(), group=g)
                return torch.cat(out)
            both(f"all_gather {dn} n={numel} strided={strided}", run,
                 torch.cat([wide(x) for x in xs]), dtype, gloo=strided is not True)

        def run(g):
            out = torch.zeros(N * numel, dtype=dtype)
            dist.all_gather_into_tensor(out, xs[RANK].clone(), group=g)
            return out
        both(f"all_gather_into_tensor {dn} n={numel}", run, torch.cat([wide(x) for x in xs]), dtype)
        # reduce_scatter (list) and reduce_scatter_tensor: rank r's input
        # chunk p is gen(r, seed, p); rank p receives the reduction of chunk p.
        seed += 1
        chunks = [[gen(r, seed + 100 * p, numel, dtype) for p in range(N)] for r in range(N)]
        for op in [ROp.SUM, ROp.MAX]:
            want = reduce_ref([chunks[r][RANK] for r in range(N)], op)

            def run(g, op=op):
                out = torch.zeros(numel, dtype=dtype)
                dist.reduce_scatter(out, [c.clone() for c in chunks[RANK]], op=op, group=g)
                return out
            both(f"reduce_scatter {dn} {opn(op)} n={numel}", run, want, dtype, N)

            def run(g, op=op):  # inputs that are views of one buffer: read in place
                out = torch.zeros(numel, dtype=dtype)
                flat = torch.cat(chunks[RANK])
                ins = list(flat.chunk(N)) if numel > 0 else [c.clone() for c in chunks[RANK]]
                dist.reduce_scatter(out, ins, op=op, group=g)
                return out
            both(f"reduce_scatter chunks {dn} {opn(op)} n={numel}", run, want, dtype, N)

            def run(g, op=op):
                out = torch.zeros(numel, dtype=dtype)
                dist.reduce_scatter_tensor(out, torch.cat(chunks[RANK]), op=op, group=g)
                return out
            both(f"reduce_scatter_tensor {dn} {opn(op)} n={numel}", run, want, dtype, N)
        # all_to_all_single: equal splits, then unequal ones (rank r sends
        # r + p + 1 rows of 2 elements to rank p), and the list all_to_all
        def run(g):
            out = torch.zeros(N * numel, dtype=dtype)
            dist.all_to_all_single(out, torch.cat(chunks[RANK]), group=g)
            return out
        both(f"all_to_all_single {dn} n={numel}", run,
             torch.cat([wide(chunks[r][RANK]) for r in range(N)]), dtype)
        rows = [[(r + p + 1) * (numel % 3) for p in range(N)] for r in range(N)]
        blocks = [[gen(r, seed + 300 * p, 2 * rows[r][p], dtype).view(-1, 2) for p in range(N)]
                  for r in range(N)]

        def run(g):
            out = torch.zeros(sum(rows[r][RANK] for r in range(N)), 2, dtype=dtype)
            dist.all_to_all_single(out, torch.cat(blocks[RANK]),
                                   output_split_sizes=[rows[r][RANK] for r in range(N)],
                                   input_split_sizes=rows[RANK], group=g)
            return out.flatten()
        both(f"all_to_all_single unequal {dn} n={numel}", run,
             torch.cat([wide(blocks[r][RANK]).flatten() for r in range(N)]), dtype)

        def run(g):
            outs = [torch.zeros(numel, dtype=dtype) for _ in range(N)]
            dist.all_to_all(outs, [c.clone() for c in chunks[RANK]], group=g)
            return torch.cat(outs)
        both(f"all_to_all {dn} n={numel}", run,
             torch.cat([wide(chunks[r][RANK]) for r in range(N)]), dtype)
        # send/recv around the ring: even ranks send first, odd ones receive first
        if N > 1:
            nxt, prv = (RANK + 1) % N, (RANK - 1) % N

            def run(g):
                out = torch.zeros(numel, dtype=dtype)
                if RANK % 2 == 0:
                    dist.send(xs[RANK].clone(), nxt, group=g)
                    dist.recv(out, prv, group=g)
                else:
                    dist.recv(out, prv, group=g)
                    dist.send(xs[RANK].clone(), nxt, group=g)
                return out
            if N % 2 == 0:
                both(f"send/recv {dn} n={numel}", run, wide(xs[prv]), dtype)

                def run(g):  # isend/irecv, both posted before waiting
                    out = torch.zeros(numel, dtype=dtype)
                    reqs = [dist.isend(xs[RANK].clone(), nxt, group=g), dist.irecv(out, prv, group=g)]
                    for q in reqs:
                        q.wait()
                    return out
                both(f"isend/irecv {dn} n={numel}", run, wide(xs[prv]), dtype)
    dist.barrier(group=TIDE)

# ---- the Work API: async ops, is_completed, wait, get_future, then --------
x = torch.full((1 << 20,), float(RANK + 1))
works = [dist.all_reduce(x, async_op=True) for _ in range(3)]
seen_pending = not works[-1].is_completed()
for w in works:
    w.wait()
    if not w.is_completed():
        failures.append("work: not completed after wait()")
want = float(sum(range(1, N + 1))) * N ** 2
if x[0].item() != want or x[-1].item() != want:
    failures.append(f"async all_reduce x3: {x[0].item()}, want {want}")
fut = dist.all_reduce(torch.ones(4), async_op=True).get_future()
doubled = fut.then(lambda f: f.value()[0] * 2).wait()
if not torch.equal(doubled, torch.full((4,), 2.0 * N)):
    failures.append(f"future.then: {doubled.tolist()}")
# fire and forget: the work object is dropped at once
for _ in range(20):
    dist.all_reduce(torch.ones(8), async_op=True)
dist.barrier()

# ---- subgroups: even ranks, and a reversed-order group -------------------
evens = list(range(0, N, 2))
sub = dist.new_group(ranks=evens, backend="tide")
rev = dist.new_group(ranks=list(reversed(range(N))), backend="tide")
if RANK in evens:
    t = torch.tensor([float(RANK)])
    dist.all_reduce(t, group=sub)
    if t.item() != float(sum(evens)):
        failures.append(f"subgroup all_reduce: {t.item()}, want {sum(evens)}")
t = torch.tensor([float(RANK)])
dist.broadcast(t, src=N - 1, group=rev)
if t.item() != float(N - 1):
    failures.append(f"reversed group broadcast from global rank {N - 1}: {t.item()}")

# ---- errors: clear messages, and the group stays usable ------------------
def expect_error(what, fn, words):
    try:
        fn()
    except (RuntimeError, ValueError) as e:
        msg = str(e)
        if not all(w in msg for w in words):
            failures.append(f"error for {what}: {msg!r} lacks {words}")
        return
    failures.append(f"no error for {what}")


expect_error("int16", lambda: dist.all_reduce(torch.zeros(3, dtype=torch.int16)), ["tide", "Short"])
expect_error("BXOR", lambda: dist.all_reduce(torch.zeros(3, dtype=torch.int32), op=ROp.BXOR),
             ["tide", "not supported"])
expect_error("recv from any source", lambda: dist.recv(torch.zeros(3)), ["tide", "any source"])
expect_error("all_gather_into_tensor size",
             lambda: dist.all_gather_into_tensor(torch.zeros(N * 3 + 1), torch.zeros(3)),
             ["tide", "elements"])
t = torch.ones(3)
dist.all_reduce(t)
if t[0].item() != N:
    failures.append("all_reduce after the errors failed")

dist.barrier()
print(f"rank {RANK}/{N}: {checks['tide']} checks against the reference, {checks['gloo']} against "
      f"gloo ({checks['gloo_missing']} cases gloo lacks), {len(failures)} failure(s)", flush=True)
for f in failures[:30]:
    print(f"rank {RANK}: FAIL {f}", flush=True)
dist.destroy_process_group()
sys.exit(1 if failures else 0)

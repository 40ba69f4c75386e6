"""Train crnn-v0 on synthetic lines and write the fp16 model container (a checked-in fixture).

    python -m crnn_conformance.generators.train [--seed N] [--out PATH] [--minutes M] [--steps S]

Seeded, CPU only, 2 torch threads by default (--threads). Batches are drawn from
generators/lines.py on the fly (batch i comes from its own seed stream, so the data do not
depend on timing or on the optional helper processes). AdamW with decay on weight matrices
only (biases do not decay, as in model.param_specs); warm-up, then a cosine learning-rate
schedule over progress = max(step fraction, wall-clock fraction), so the schedule anneals
even when a busy machine makes the clock budget end the run first; CTC (blank 0,
reduction mean); gradient norm clipped at 5.

The run is step-reproducible when the step count ends it (stopped_by = "steps"); when the
wall-clock budget ends it the step count is recorded. The container is then written
(fp16), read back, and the CER of greedy decoding with those fp16 weights (widened to fp32)
is measured on held-out natural-width lines; the container is rewritten with that CER in
its attributes.
"""
from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import sys
import time

import numpy as np

from . import container, lines, model

HELDOUT_SEED = 900_001          # held-out lines: make_batch(HELDOUT_SEED + seed, n)
TRAIN_SEED_BASE = 1_000_000     # training batch i: SeedSequence(TRAIN_SEED_BASE + seed, (i,))


def train_batch(args) -> tuple[np.ndarray, list[np.ndarray]]:
    """Training batch `i` of run `seed`: B lines of one common width (short texts get extra
    background, which teaches the model that margins are blank)."""
    seed, i, B = args
    rng = np.random.default_rng(np.random.SeedSequence(TRAIN_SEED_BASE + seed, spawn_key=(i,)))
    texts = [lines.random_text(rng) for _ in range(B)]
    longest = max(len(t) for t in texts)
    W = max(lines.min_width(longest), int(8.5 * longest + rng.uniform(4.0, 20.0)))
    imgs, tgts = [], []
    for t in texts:
        img, tgt = lines.make_line(rng, t, W)
        imgs.append(img)
        tgts.append(tgt)
    return np.stack(imgs), tgts


def evaluate(config: dict, params: dict, n: int, seed: int) -> tuple[float, list]:
    """CER of greedy decoding with `params` (fp32 torch) on n held-out natural-width lines."""
    import torch

    from . import torch_model as tm

    m = tm.build(config, params).eval()
    imgs, tgts = lines.make_batch(HELDOUT_SEED + seed, n)
    hyps = []
    with torch.no_grad():
        for img in imgs:
            hyps.append(tm.greedy_decode(m(torch.from_numpy(img)[None]))[0])
    refs = [list(map(int, t)) for t in tgts]
    return tm.cer(refs, hyps), list(zip(refs, hyps))


def train(seed: int = 0, minutes_budget: float = 10, out_path: str = "fixtures/model/crnn-v0.h5",
          steps: int = 9000, batch: int = 16, lr: float = 3e-3, weight_decay: float = 1e-4,
          heldout: int = 400, log_every: int = 100, workers: int = 0,
          threads: int = 2) -> dict:
    import torch

    from . import torch_model as tm

    t0 = time.time()
    jobs = ((seed, i, batch) for i in range(steps))
    ctx = mp.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    pool = ctx.Pool(workers) if workers > 0 else None   # before torch starts its threads
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    config = model.default_config()
    net = tm.build(config, model.init_params(config, np.random.default_rng(seed)))
    decay = {s.name for s in model.param_specs(config) if s.decay}
    # torch parameter -> our decay flag (weights decay, biases do not)
    groups = {True: [], False: []}
    for name, p in net.named_parameters():
        if p.requires_grad:
            groups["weight" in name].append(p)
    assert len(decay) == len(groups[True]) and len(groups[False]) == len(
        [s for s in model.param_specs(config) if not s.decay])
    opt = torch.optim.AdamW([{"params": groups[True], "weight_decay": weight_decay},
                             {"params": groups[False], "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.999), eps=1e-8)
    warm = max(1, steps // 30)
    budget = minutes_budget * 60.0
    reserve = 45.0 + heldout * 0.02            # time kept for the evaluation and writing
    train_budget = max(1.0, budget - reserve - (time.time() - t0))

    def lr_at(i, elapsed):
        """Warm-up, then cosine over progress = max(step fraction, clock fraction): on a
        busy machine the schedule still anneals before the wall-clock budget ends the run
        (the run is then cut short, and not step-reproducible; steps are recorded)."""
        if i < warm:
            return lr * (i + 1) / warm
        prog = min(1.0, max((i - warm) / (steps - warm), elapsed / train_budget))
        return lr * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * prog)))

    ctc = torch.nn.CTCLoss(blank=0, reduction="mean", zero_infinity=True)
    t_train = time.time()
    it = pool.imap(train_batch, jobs, chunksize=4) if pool else map(train_batch, jobs)
    done, run_loss, stopped_by = 0, None, "steps"
    try:
        for i, (x, tgts) in enumerate(it):
            cur_lr = lr_at(i, time.time() - t_train)
            for g in opt.param_groups:
                g["lr"] = cur_lr
            xt = torch.from_numpy(x)
            lp = net(xt)
            T = lp.shape[0]
            tl = torch.tensor([len(t) for t in tgts], dtype=torch.long)
            il = torch.full((len(tgts),), T, dtype=torch.long)
            tg = torch.from_numpy(np.concatenate(tgts).astype(np.int64))
            loss = ctc(lp, tg, il, tl)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(groups[True] + groups[False], 5.0)
            opt.step()
            done = i + 1
            lv = float(loss.detach())
            run_loss = lv if run_loss is None else 0.98 * run_loss + 0.02 * lv
            el = time.time() - t0
            if done % log_every == 0 or done == steps:
                print(f"step {done}/{steps}  loss {run_loss:.4f}  lr {cur_lr:.2e}  "
                      f"{el:.0f}s", flush=True)
            if time.time() - t_train >= train_budget:
                stopped_by = "time"
                print(f"time budget reached after {done} steps", flush=True)
                break
    finally:
        if pool:
            pool.terminate()
            pool.join()
    train_wall = time.time() - t0

    params = tm.to_params(net, np.float32)
    attrs = {"trained": True, "seed": int(seed), "steps": int(done), "batch": int(batch),
             "train_wall_seconds": round(train_wall, 1), "torch_version": torch.__version__,
             "generator": "crnn_conformance.generators.lines", "heldout_seed": HELDOUT_SEED + seed,
             "heldout_lines": int(heldout),
             "planned_steps": int(steps), "stopped_by": stopped_by, "lr": float(lr),
             "weight_decay": float(weight_decay), "threads": int(threads)}
    # Measure the CER of the container itself (fp16-rounded weights widened to fp32).
    container.save_container(out_path, config, params, dict(attrs, cer=-1.0))
    cfg2, p16 = container.load_container(out_path)
    rate, pairs = evaluate(cfg2, p16, heldout, seed)
    wall = time.time() - t0
    attrs.update(cer=float(round(rate, 6)), wall_seconds=round(wall, 1))
    container.save_container(out_path, config, params, attrs)
    for r, h in pairs[:5]:
        print(f"  ref {lines.decode(r):12s} hyp {lines.decode(h)}")
    print(f"held-out CER {rate * 100:.2f}% on {heldout} lines; {done} steps; "
          f"train {train_wall:.0f}s, total {wall:.0f}s; wrote {out_path} "
          f"({os.path.getsize(out_path)} bytes)", flush=True)
    return dict(attrs, out_path=out_path, size=os.path.getsize(out_path))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="fixtures/model/crnn-v0.h5")
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--steps", type=int, default=9000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--heldout", type=int, default=400)
    ap.add_argument("--threads", type=int, default=2,
                    help="torch threads (2 on an idle 2-core machine; on a shared, busy "
                         "machine 1 is far faster: OpenMP barriers stall when oversubscribed)")
    ap.add_argument("--workers", type=int, default=0,
                    help="helper processes generating batches (0: in line; a helper "
                         "competes with torch's threads and was slower on 2 cores)")
    a = ap.parse_args(argv)
    train(seed=a.seed, minutes_budget=a.minutes, out_path=a.out, steps=a.steps, batch=a.batch,
          heldout=a.heldout, workers=a.workers, threads=a.threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())

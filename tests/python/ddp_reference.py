#!/usr/bin/python3
"""One rank of the PyTorch DDP reference run for tests/integration/ddp_parity_test.cc.

Launched by hand, once per rank, with MASTER_ADDR, MASTER_PORT, RANK and
WORLD_SIZE set (Debian's torchrun is broken on its Python). Reads the
initial weights and this rank's batches that firedrill exported with
torch::pickle_save, trains them with DDP + SGD exactly as the firedrill job
is configured, and writes:
  losses_rank<R>.txt  one line per optimiser step: the sum over micro-batches
                      of (loss / accum).item(), as firedrill reports it
  params_rank<R>.txt  every parameter element after the last step, in
                      parameters() order, one per line (%.9g: exact for fp32)
"""
import argparse
import contextlib
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def build_mlp(input_dim, hidden, layers, classes):
    # The same Sequential as agent/model.cc, so state_dict names match.
    mods = []
    d = input_dim
    for _ in range(layers):
        mods += [nn.Linear(d, hidden), nn.ReLU()]
        d = hidden
    mods.append(nn.Linear(d, classes))
    return nn.Sequential(*mods)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--input", type=int, required=True)
    ap.add_argument("--hidden", type=int, required=True)
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--classes", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--accum", type=int, required=True)
    ap.add_argument("--lr", type=float, required=True)  # already scaled by firedrill's rule
    ap.add_argument("--momentum", type=float, default=0.0)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--warmup", type=int, default=0)
    a = ap.parse_args()

    torch.set_num_threads(1)
    torch.set_flush_denormal(True)  # as firedrill's trainer (agent/trainer.cc)
    dist.init_process_group("gloo")
    rank = dist.get_rank()

    model = build_mlp(a.input, a.hidden, a.layers, a.classes)
    model.load_state_dict(torch.load(os.path.join(a.dir, "init.pt")))
    ddp = DDP(model)  # PyTorch's defaults: 25 MB buckets, broadcast from rank 0
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=a.momentum, weight_decay=a.weight_decay)
    sched = None
    if a.warmup > 0:
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / a.warmup))
    batches = torch.load(os.path.join(a.dir, "batches_rank%d.pt" % rank))

    losses = []
    for step in range(a.steps):
        total = 0.0
        for micro in range(a.accum):
            i = step * a.accum + micro
            x, y = batches["x.%d" % i], batches["y.%d" % i]
            sync = micro == a.accum - 1
            with (contextlib.nullcontext() if sync else ddp.no_sync()):
                loss = F.cross_entropy(ddp(x), y) / a.accum
                loss.backward()
            total += loss.item()
        opt.step()
        opt.zero_grad()
        if sched is not None:
            sched.step()
        losses.append(total)

    with open(os.path.join(a.dir, "losses_rank%d.txt" % rank), "w") as f:
        f.writelines("%.17g\n" % v for v in losses)
    with open(os.path.join(a.dir, "params_rank%d.txt" % rank), "w") as f:
        for p in model.parameters():
            f.writelines("%.9g\n" % v for v in p.detach().reshape(-1).tolist())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

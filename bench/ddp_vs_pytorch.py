#!/usr/bin/python3
"""Trainer benchmarks: firedrill vs PyTorch DDP, bucketing overlap, telemetry
overhead. Results and exact commands live in bench/RESULTS.md.

Every run starts one process per rank (OMP_NUM_THREADS=1, one intra-op
thread each) and measures samples/s per rank over a window after warm-up.
Arms of a comparison alternate, round after round, so that load drifting on
the shared cores hits both; the summary gives the median and the min-max
over rounds.

  python3 bench/ddp_vs_pytorch.py                      # firedrill vs PyTorch DDP, world 1 2 4
  python3 bench/ddp_vs_pytorch.py --mode overlap       # bucketed+overlap vs flat all-reduce
  python3 bench/ddp_vs_pytorch.py --mode telemetry     # telemetry + idle fault vs off

Internal: --pytorch-worker runs one PyTorch DDP rank (env RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT), printing the same JSON line as trainer_bench.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def pytorch_worker(a):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1)
    mods, d = [], a.input
    for _ in range(a.layers):
        mods += [nn.Linear(d, a.hidden), nn.ReLU()]
        d = a.hidden
    mods.append(nn.Linear(d, a.classes))
    ddp = DDP(nn.Sequential(*mods))  # PyTorch's defaults: 25 MB buckets
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    gen = torch.Generator().manual_seed(1000 + rank)
    teacher = torch.randn(a.input, a.classes, generator=gen)
    last = a.warmup + a.steps
    t0 = t1 = 0.0
    for step in range(last + 1):
        if step == a.warmup:
            t0 = time.perf_counter()
        if step == last:
            t1 = time.perf_counter()
            break
        # A fresh batch each step, made inline, as firedrill's loader does.
        x = torch.randn(a.batch, a.input, generator=gen)
        y = (x @ teacher).argmax(1)
        loss = F.cross_entropy(ddp(x), y)
        loss.item()  # firedrill reads the loss every step for telemetry
        loss.backward()
        opt.step()
        opt.zero_grad()
    s = t1 - t0
    print(json.dumps({"impl": "pytorch", "rank": rank, "world": world, "steps": a.steps,
                      "samples_per_s": round(a.batch * a.steps / s, 1), "step_ms": round(1000 * s / a.steps, 3)}),
          flush=True)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def busy_seconds():
    """CPU seconds the whole machine has been busy (all cores, /proc/stat)."""
    f = [int(x) for x in open("/proc/stat").readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = f
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def others(results):
    return "others %.2f cores" % results[0]["_others"]


def run_ranks(cmd_for_rank, world, extra_env=None, timeout=600):
    """Starts `world` processes, returns their parsed JSON lines, each with
    `_others`: cores used by other processes meanwhile (machine busy time
    minus this run's CPU time, over the run's wall time)."""
    b0, c0, w0 = busy_seconds(), os.times(), time.time()
    procs = []
    for r in range(world):
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", RANK=str(r), WORLD_SIZE=str(world))
        env.update(extra_env or {})
        procs.append(subprocess.Popen(cmd_for_rank(r), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=timeout)
        if p.returncode != 0:
            for q in procs:
                q.kill()
            raise RuntimeError("rank failed (rc %d): %s %s" % (p.returncode, stdout, stderr[-2000:]))
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    c1 = os.times()
    ours = (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system)
    other = max(0.0, (busy_seconds() - b0 - ours) / max(time.time() - w0, 1e-9))
    for r in out:
        r["_others"] = other
    return out


def run_firedrill(a, world, flags=()):
    flags = list(flags) + a.fd_flags
    with tempfile.TemporaryDirectory() as d:
        rv = os.path.join(d, "rendezvous")
        common = ["--rendezvous", rv, "--steps", str(a.steps), "--warmup", str(a.warmup), "--batch", str(a.batch),
                  "--input", str(a.input), "--hidden", str(a.hidden), "--layers", str(a.layers),
                  "--classes", str(a.classes)] + list(flags)
        return run_ranks(lambda r: [a.bin] + common, world)


def run_pytorch(a, world):
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    args = ["--steps", str(a.steps), "--warmup", str(a.warmup), "--batch", str(a.batch), "--input", str(a.input),
            "--hidden", str(a.hidden), "--layers", str(a.layers), "--classes", str(a.classes)]
    return run_ranks(lambda r: [a.python, os.path.abspath(__file__), "--pytorch-worker"] + args, world, env)


def per_rank(results, key="samples_per_s"):
    return statistics.mean(r[key] for r in results)


def load():
    return open("/proc/loadavg").read().split()[0]


def spread(v):
    return "%.0f (%.0f-%.0f)" % (statistics.median(v), min(v), max(v))


def machine():
    model = "?"
    # Load average counts this benchmark's own ranks too; each run also
    # reports the cores other processes used while it ran.
    for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
        if line.startswith("Model name"):
            model = line.split(":", 1)[1].strip()
    return "nproc %d, %s, load at start %s" % (os.cpu_count(), model, load())


def mode_compare(a):
    print("# firedrill vs PyTorch DDP: MLP %d->%dx%d->%d, batch %d/rank, fp32, SGD momentum, %d steps after %d "
          "warm-up, %d rounds; %s" % (a.input, a.hidden, a.layers, a.classes, a.batch, a.steps, a.warmup, a.rounds,
                                      machine()), flush=True)
    rows = []
    for world in a.worlds:
        fd, pt, loads = [], [], []
        for rnd in range(a.rounds):
            order = [("firedrill", lambda: run_firedrill(a, world)), ("pytorch", lambda: run_pytorch(a, world))]
            if rnd % 2:
                order.reverse()
            for name, fn in order:
                res = fn()
                (fd if name == "firedrill" else pt).append(per_rank(res))
                loads.append(res[0]["_others"])
                print("  world %d round %d %-9s %8.1f samples/s/rank  (%s)" % (world, rnd, name, per_rank(res),
                                                                             others(res)), flush=True)
        ratios = [f / p for f, p in zip(fd, pt)]
        rows.append((world, spread(fd), spread(pt), statistics.median(fd) / statistics.median(pt),
                     min(ratios), max(ratios), max(loads)))
    print("\n| world | firedrill samples/s/rank | PyTorch DDP samples/s/rank | ratio (medians) | ratio per round "
          "min-max | other processes, cores (max) |")
    print("|---|---|---|---|---|---|")
    for w, f, p, r, lo, hi, ld in rows:
        print("| %d | %s | %s | **%.2fx** | %.2f-%.2f | %.2f |" % (w, f, p, r, lo, hi, ld))


def mode_overlap(a):
    print("# bucketed (hooks, overlap) vs flat all-reduce after backward; %s" % machine(), flush=True)
    print("| world | bucketed samples/s/rank | flat samples/s/rank | ratio (medians) | ratio per round min-max | "
          "bucketed exposed / total comm ms | flat exposed ms | hidden | other processes, cores (max) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for world in a.worlds:
        b, f, bexp, btot, fexp, other = [], [], [], [], [], []
        for rnd in range(a.rounds):
            arms = [("bucketed", []), ("flat", ["--flat"])]
            if rnd % 2:
                arms.reverse()
            for name, flags in arms:
                res = run_firedrill(a, world, flags + a.bucket_flags)
                other.append(res[0]["_others"])
                if name == "bucketed":
                    b.append(per_rank(res))
                    bexp.append(per_rank(res, "comm_exposed_ms"))
                    btot.append(per_rank(res, "comm_total_ms"))
                else:
                    f.append(per_rank(res))
                    fexp.append(per_rank(res, "comm_exposed_ms"))
                print("  world %d round %d %-8s %8.1f samples/s/rank exposed %.2f total %.2f ms (%s)" % (
                    world, rnd, name, per_rank(res), per_rank(res, "comm_exposed_ms"),
                    per_rank(res, "comm_total_ms"), others(res)), file=sys.stderr, flush=True)
        e, t = statistics.median(bexp), statistics.median(btot)
        ratios = [x / y for x, y in zip(b, f)]
        print("| %d | %s | %s | %.2fx | %.2f-%.2f | %.2f / %.2f | %.2f | %.2f ms (%.0f%%) | %.2f |" % (
            world, spread(b), spread(f), statistics.median(b) / statistics.median(f), min(ratios), max(ratios), e, t,
            statistics.median(fexp), t - e, 100 * (t - e) / t if t > 0 else 0, max(other)), flush=True)


def mode_telemetry(a):
    print("# telemetry + idle fault hooks vs telemetry off, no faults; %s" % machine(), flush=True)
    for world in a.worlds:
        wall = {"on": [], "off": []}
        cpu = {"on": [], "off": []}
        p10 = {"on": [], "off": []}
        for rnd in range(a.rounds):
            arms = [("on", ["--idle-fault"]), ("off", ["--no-telemetry"])]
            if rnd % 2:
                arms.reverse()
            for name, flags in arms:
                res = run_firedrill(a, world, flags)
                wall[name].append(per_rank(res, "step_ms"))
                cpu[name].append(per_rank(res, "cpu_ms"))
                p10[name].append(per_rank(res, "step_p10_ms"))
                print("  world %d round %d %-3s step %.3f ms, p10 %.3f ms, cpu %.3f ms/step (%s)" % (
                    world, rnd, name, wall[name][-1], p10[name][-1], cpu[name][-1], others(res)), file=sys.stderr,
                    flush=True)
        for what, d in (("wall", wall), ("p10", p10), ("cpu", cpu)):
            ratios = sorted(x / y for x, y in zip(d["on"], d["off"]))
            print("world %d %-4s: ms/step on %.3f, off %.3f (medians); on/off per round pair: median %.4f, "
                  "min %.4f, max %.4f -> overhead %+.2f%%" % (
                      world, what, statistics.median(d["on"]), statistics.median(d["off"]),
                      statistics.median(ratios), ratios[0], ratios[-1], 100 * (statistics.median(ratios) - 1)),
                  flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["compare", "overlap", "telemetry"], default="compare")
    ap.add_argument("--pytorch-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--worlds", default="1,2,4")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--input", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--bucket-mb", type=float, default=0, help="overlap mode: comm.bucket_mb of the bucketed arm")
    ap.add_argument("--fd-flags", default="", help="extra trainer_bench flags for every firedrill run, "
                    "e.g. --no-shm (gradients over Gloo instead of shared memory)")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin", "trainer_bench"))
    ap.add_argument("--python", default="/usr/bin/python3")
    a = ap.parse_args()
    if a.pytorch_worker:
        return pytorch_worker(a)
    if not os.access(a.bin, os.X_OK):
        sys.exit(f"ddp_vs_pytorch: {a.bin} is missing: build the benchmarks first (make bench)")
    a.worlds = [int(w) for w in a.worlds.split(",")]
    a.fd_flags = a.fd_flags.split()
    a.bucket_flags = ["--bucket-mb", str(a.bucket_mb)] if a.bucket_mb > 0 else []
    {"compare": mode_compare, "overlap": mode_overlap, "telemetry": mode_telemetry}[a.mode](a)


if __name__ == "__main__":
    main()

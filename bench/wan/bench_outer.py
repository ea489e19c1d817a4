#!/usr/bin/python3
"""bench/wan.sh --outer's driver: time to accuracy of two clusters (one daemon each, the whole
model on it) over links shaped by scripts/wan, for per-step gradient averaging
(reduce = "gradients"), Ravnest's parameter averaging after every update (reduce = "parameters",
reduce_factor = 1) and DiLoCo ([outer], H updates between outer Nesterov steps; --H 20,50 runs
each), same run, from the same clusterized weights. Prints the seconds (and cluster 0's batches)
until cluster 0's validation accuracy first reaches the target (its metrics.csv), the seconds to
its first record (the job's start), seconds per batch, the bytes the rings sent, the final and
best accuracy, and ratios against gradient averaging; with --repeats R, medians of R runs per
mode, run r with seed r (batch order) for every mode, the modes interleaved. Asserts nothing.
"""

import argparse
import csv
import os
import re
import shutil
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_wan import Run, parse_bytes  # noqa: E402


def make_tokens(out_dir):
    """A bag-of-tokens task the transformer (no positions) can learn: the label is which of 5
    token ranges occurs most often among 11 tokens."""
    g = torch.Generator().manual_seed(0)
    for name, n in (("tokens_train.pt", 4096), ("tokens_val.pt", 1024)):
        # Skewed draws so that one range dominates each sample.
        favourite = torch.randint(0, 5, (n,), generator=g)
        tokens = torch.randint(0, 100, (n, 11), generator=g)
        pick = torch.rand(n, 11, generator=g) < 0.45
        tokens = torch.where(pick, favourite[:, None] * 20 + tokens % 20, tokens)
        counts = torch.stack([((tokens // 20) == k).sum(1) for k in range(5)], 1)
        labels = counts.argmax(1)
        torch.save({"inputs": tokens, "labels": labels}, os.path.join(out_dir, name))


class Pair(Run):
    """Two daemons, each one cluster, in namespaces NAME0/NAME1 (shaped) or on loopback: bench_wan's
    Run of two, started on construction."""

    def __init__(self, args, work, name, model, example):
        super().__init__(args, work, name, bool(args.wan_name), count=2, net=args.net)
        os.makedirs(self.dir)
        for f in os.listdir(work):
            if f.endswith((".pt", ".csv")):
                shutil.copy(os.path.join(work, f), self.dir)
        self.start(model, example, 4)

    def train_to_target(self, job_text, target, synced_every=1):
        """Runs the job; the time and cluster 0's batches until its validation accuracy first
        reaches TARGET, read from the job's metrics.csv (docs/metrics.md), whose wall_time is
        the requester's steady clock when the validation's event arrived: the same clock as
        time.monotonic() here. "synced": the same counting only validations after an update
        that is a multiple of SYNCED_EVERY (DiLoCo's H: a validation right after an outer step
        sees the model every cluster holds; between outer steps a cluster's own)."""
        with open(os.path.join(self.dir, "job.toml"), "w") as f:
            f.write(job_text)
        env = dict(os.environ, RAVNEST_SECRET_FILE=os.path.join(self.dir, "secret"))
        started = time.monotonic()
        out = subprocess.run([os.path.join(self.bin, "ravnest", "ravnest"), "train", "job.toml",
                              "--progress-every", "0"],
                             cwd=self.dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
        wall = time.monotonic() - started
        lines = out.stdout.splitlines()
        if out.returncode != 0:
            raise RuntimeError("ravnest train failed: " + "\n".join(lines[-30:]))
        metrics = [l.split(": ", 1)[1] for l in lines if l.startswith("metrics (CSV, TensorBoard): ")]
        if not metrics:
            raise RuntimeError("ravnest train printed no metrics directory:\n" + "\n".join(lines[-30:]))
        reached, step, first, accuracies, synced = None, None, None, [], None
        with open(os.path.join(self.dir, metrics[-1], "cluster_0", "metrics.csv")) as f:
            for row in csv.DictReader(f):
                if first is None:
                    first = float(row["wall_time"]) - started
                last, batches = float(row["wall_time"]) - started, int(row["step"])
                if not row["val_accuracy"]:
                    continue
                accuracies.append(float(row["val_accuracy"]))
                if reached is None and accuracies[-1] >= target:
                    reached, step = float(row["wall_time"]) - started, int(row["step"])
                if (synced is None and accuracies[-1] >= target and
                        int(row["step"]) % synced_every == 0):
                    synced = float(row["wall_time"]) - started
        rings = 0.0
        for line in lines:
            if line.startswith("total "):
                columns = re.findall(r"([0-9.]+ [kMGT]?B) / [0-9.]+ [kMGT]?B", line)
                if len(columns) >= 3:
                    rings = parse_bytes(columns[2])
        # Seconds per batch of cluster 0 from its first record to its last (validations and
        # outer steps included; the job's start and end not).
        per_batch = (last - first) / max(batches - 1, 1)
        return {"reached": reached, "step": step, "synced": synced, "first": first,
                "per_batch": per_batch,
                "wall": wall, "rings": rings,
                "accuracy": accuracies[-1] if accuracies else float("nan"),
                "best": max(accuracies) if accuracies else float("nan")}


SETUPS = {
    "digits": dict(
        # 0.97 takes ~55 updates of gradient averaging (0.90 takes 20, within the job's start:
        # docs/performance.md#diloco-over-slow-links).
        model="small_cnn.pt", example="64x1x8x8", target=0.97, epochs=10,
        job='[train]\nepochs = @EPOCHS@\nbatch_size = 32\nseed = @SEED@\nval_freq = @VAL@\n@REDUCE@\n'
            '[data]\nformat = "csv"\ntrain = "digits_train.csv"\nvalidation = "digits_val.csv"\n'
            'label_column = "label"\ninput_shape = [1, 8, 8]\nscale = 0.0625\nnum_classes = 10\n\n'
            '[loss]\nname = "cross_entropy"\n\n[optimizer]\nname = "adam"\nlr = 0.002\n'),
    "transformer": dict(
        model="transformer.pt", example="32x11:int64:100", target=0.80, epochs=4,
        job='[train]\nepochs = @EPOCHS@\nbatch_size = 32\nseed = @SEED@\nval_freq = @VAL@\n@REDUCE@\n'
            '[data]\nformat = "tensors"\ntrain = "tokens_train.pt"\nvalidation = "tokens_val.pt"\n'
            'num_classes = 5\n\n[loss]\nname = "cross_entropy"\n\n[optimizer]\nname = "adam"\n'
            'lr = 0.001\n'),
}


def median(values):
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--build", default="build")
    ap.add_argument("--wan-name", default="", help="scripts/wan's --name; empty: loopback")
    ap.add_argument("--net", default="10.227")
    ap.add_argument("--port", type=int, default=18600)
    ap.add_argument("--models", default="digits,transformer")
    ap.add_argument("--epochs", type=int, default=0,
                    help="epochs for every model; 0: each model's own (digits 10, transformer 4)")
    ap.add_argument("--H", default="20", help="DiLoCo's every; a comma-separated list runs each")
    ap.add_argument("--outer-lr", type=float, default=0.7)
    ap.add_argument("--outer-momentum", type=float, default=0.9)
    ap.add_argument("--val-freq", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=1,
                    help="runs per mode; repeat r uses seed r for every mode and starts with a "
                         "different mode (interleaved); the table shows medians")
    ap.add_argument("--rate", default="")
    ap.add_argument("--delay", default="")
    ap.add_argument("--targets", default="",
                    help="validation accuracy to reach per model, e.g. digits=0.95,transformer=0.8")
    args = ap.parse_args()
    for item in filter(None, args.targets.split(",")):
        model, _, value = item.partition("=")
        if model not in SETUPS or not value:
            sys.exit("bench_outer.py: --targets: expected MODEL=ACCURACY with MODEL one of %s, got %r"
                     % (", ".join(SETUPS), item))
        SETUPS[model]["target"] = float(value)
    make_tokens(args.work)
    modes = [("gradients", 'reduce = "gradients"\n', "", 1),
             ("parameters", 'reduce = "parameters"\nreduce_factor = 1\n', "", 1)]
    for h in args.H.split(","):
        modes.append(("diloco H=%d" % int(h), "",
                      '\n[outer]\nname = "nesterov"\nlr = %g\nmomentum = %g\nevery = %d\n'
                      % (args.outer_lr, args.outer_momentum, int(h)), int(h)))
    print("links: %s" % ("%s, %s one-way (scripts/wan)" % (args.rate, args.delay) if args.wan_name
                         else "loopback"))
    print("2 clusters of one daemon each; target validation accuracy per model; same run; "
          "load average %.2f %.2f %.2f at the start" % os.getloadavg())
    for model in args.models.split(","):
        setup = SETUPS[model]
        epochs = args.epochs or setup["epochs"]
        pair = Pair(args, args.work, model, os.path.join(args.work, setup["model"]), setup["example"])
        results = {mode[0]: [] for mode in modes}
        try:
            for r in range(args.repeats):
                order = modes[r % len(modes):] + modes[:r % len(modes)]
                for label, reduce, outer, synced_every in order:
                    text = (setup["job"].replace("@EPOCHS@", str(epochs))
                            .replace("@VAL@", str(args.val_freq)).replace("@REDUCE@", reduce)
                            .replace("@SEED@", str(r))) + outer
                    res = pair.train_to_target(text, setup["target"], synced_every)
                    results[label].append(res)
                    sys.stderr.write("  %s seed %d %s: %s load %.2f\n" % (
                        model, r, label, {k: (round(v, 3) if isinstance(v, float) else v)
                                          for k, v in res.items()}, os.getloadavg()[0]))
        finally:
            pair.stop()
        print("\n%s (%d epochs, target val_acc %.2f, median of %d run(s), load average %.2f "
              "at the end)" % (model, epochs, setup["target"], args.repeats, os.getloadavg()[0]))
        print("%-14s %11s %9s %9s %9s %9s %8s %12s %9s %9s %12s %12s" % (
            "", "to target s", "batches", "synced s", "1st rec s", "ms/batch", "wall s", "ring bytes",
            "final acc", "best acc", "time vs grad", "bytes vs grad"))
        base = median(r["reached"] for r in results["gradients"])
        base_bytes = median(r["rings"] for r in results["gradients"])
        for label, _, _, _ in modes:
            runs = results[label]
            reached = median(r["reached"] for r in runs)
            never = sum(r["reached"] is None for r in runs)
            steps = median(r["step"] for r in runs)
            synced = median(r["synced"] for r in runs)
            print("%-14s %11s %9s %9s %9.1f %9.0f %8.1f %11.2fM %9.4f %9.4f %12s %11.1fx" % (
                label, ("%.1f" % reached if reached is not None else "never") +
                ("*%d" % never if never and reached is not None else ""),
                "%d" % steps if steps is not None else "-",
                "%.1f" % synced if synced is not None else "never",
                median(r["first"] for r in runs),
                1000 * median(r["per_batch"] for r in runs),
                median(r["wall"] for r in runs), median(r["rings"] for r in runs) / 1e6,
                median(r["accuracy"] for r in runs), median(r["best"] for r in runs),
                "%.2fx" % (base / reached) if base and reached else "-",
                base_bytes / max(median(r["rings"] for r in runs), 1.0)))
        print("(*N: N of the runs never reached the target; the median is of the others)")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""bench/wan.sh --outer's driver: time to accuracy of two clusters (one daemon each, the whole
model on it) over links shaped by scripts/wan, for per-step gradient averaging
(reduce = "gradients"), Ravnest's parameter averaging after every update (reduce = "parameters",
reduce_factor = 1) and DiLoCo ([outer], H updates between outer Nesterov steps), same run. Prints
the seconds until the validation accuracy first reaches the target, the bytes the rings sent,
the final accuracy, and ratios against gradient averaging. Asserts nothing.
"""

import argparse
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

    def train(self, job_text, target):
        with open(os.path.join(self.dir, "job.toml"), "w") as f:
            f.write(job_text)
        env = dict(os.environ, RAVNEST_SECRET_FILE=os.path.join(self.dir, "secret"))
        started = time.time()
        # A progress record every 0.25 s carries each cluster's latest validation.
        p = subprocess.Popen([os.path.join(self.bin, "ravnest", "ravnest"), "train", "job.toml",
                              "--progress-every", "0.25"],
                             cwd=self.dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
        reached, accuracies, lines = None, [], []
        for line in p.stdout:
            lines.append(line)
            if not line.startswith("cluster 0 "):
                continue
            for acc in re.findall(r"val_acc ([0-9.]+)", line):
                accuracies.append(float(acc))
                if reached is None and float(acc) >= target:
                    reached = time.time() - started
        p.wait()
        wall = time.time() - started
        if p.returncode != 0:
            raise RuntimeError("ravnest train failed: " + "".join(lines[-30:]))
        rings = 0.0
        for line in lines:
            if line.startswith("total "):
                columns = re.findall(r"([0-9.]+ [kMGT]?B) / [0-9.]+ [kMGT]?B", line)
                if len(columns) >= 3:
                    rings = parse_bytes(columns[2])
        return {"reached": reached, "wall": wall, "rings": rings,
                "accuracy": accuracies[-1] if accuracies else float("nan"),
                "validations": len(accuracies), "log": "".join(lines[-12:])}


SETUPS = {
    "digits": dict(
        model="small_cnn.pt", example="64x1x8x8", target=0.90,
        job='[train]\nepochs = @EPOCHS@\nbatch_size = 32\nseed = 0\nval_freq = @VAL@\n@REDUCE@\n'
            '[data]\nformat = "csv"\ntrain = "digits_train.csv"\nvalidation = "digits_val.csv"\n'
            'label_column = "label"\ninput_shape = [1, 8, 8]\nscale = 0.0625\nnum_classes = 10\n\n'
            '[loss]\nname = "cross_entropy"\n\n[optimizer]\nname = "adam"\nlr = 0.002\n'),
    "transformer": dict(
        model="transformer.pt", example="32x11:int64:100", target=0.80,
        job='[train]\nepochs = @EPOCHS@\nbatch_size = 32\nseed = 0\nval_freq = @VAL@\n@REDUCE@\n'
            '[data]\nformat = "tensors"\ntrain = "tokens_train.pt"\nvalidation = "tokens_val.pt"\n'
            'num_classes = 5\n\n[loss]\nname = "cross_entropy"\n\n[optimizer]\nname = "adam"\n'
            'lr = 0.001\n'),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--build", default="build")
    ap.add_argument("--wan-name", default="", help="scripts/wan's --name; empty: loopback")
    ap.add_argument("--net", default="10.227")
    ap.add_argument("--port", type=int, default=18600)
    ap.add_argument("--models", default="digits,transformer")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--H", type=int, default=25)
    ap.add_argument("--outer-lr", type=float, default=0.7)
    ap.add_argument("--val-freq", type=int, default=5)
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
    modes = [("gradients", 'reduce = "gradients"\n'),
             ("parameters", 'reduce = "parameters"\nreduce_factor = 1\n'),
             ("diloco H=%d" % args.H, "")]
    print("links: %s" % ("%s, %s one-way (scripts/wan)" % (args.rate, args.delay) if args.wan_name
                         else "loopback"))
    print("2 clusters of one daemon each; target validation accuracy per model; same run")
    for model in args.models.split(","):
        setup = SETUPS[model]
        pair = Pair(args, args.work, model, os.path.join(args.work, setup["model"]), setup["example"])
        results = {}
        try:
            for label, reduce in modes:
                text = (setup["job"].replace("@EPOCHS@", str(args.epochs))
                        .replace("@VAL@", str(args.val_freq)).replace("@REDUCE@", reduce))
                if label.startswith("diloco"):
                    text += '\n[outer]\nname = "nesterov"\nlr = %g\nmomentum = 0.9\nevery = %d\n' % (
                        args.outer_lr, args.H)
                results[label] = pair.train(text, setup["target"])
                r = results[label]
                sys.stderr.write("  %s %s: reached %s wall %.1f rings %.0f acc %.4f (%d validations)\n"
                                 % (model, label, r["reached"], r["wall"], r["rings"], r["accuracy"],
                                    r["validations"]))
        finally:
            pair.stop()
        base = results["gradients"]
        print("\n%s (%d epochs, target val_acc %.2f)" % (model, args.epochs, setup["target"]))
        print("%-16s %12s %10s %14s %10s %12s %12s" % ("", "to target s", "wall s", "ring bytes",
                                                       "final acc", "time vs grad", "bytes vs grad"))
        for label, _ in modes:
            r = results[label]
            reached = "%.1f" % r["reached"] if r["reached"] is not None else "never"
            ratio = ("%.2fx" % (base["reached"] / r["reached"])
                     if r["reached"] and base["reached"] else "-")
            print("%-16s %12s %10.1f %13.2fM %10.4f %12s %11.1fx" % (
                label, reached, r["wall"], r["rings"] / 1e6, r["accuracy"], ratio,
                base["rings"] / max(r["rings"], 1.0)))


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""bench/wan.sh's driver: trains a model over 3 local daemons through the whole CLI path
(clusterize, ravnestd, push, train), on loopback and on links shaped by scripts/wan, for each
schedule and codec, and prints samples/s and bytes per epoch side by side. Prints figures;
asserts nothing. See bench/wan.sh for the arguments.
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UNITS = {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_bytes(text):
    value, unit = text.split()
    return float(value) * UNITS[unit]


class Run:
    """COUNT local daemons, each node_I, on loopback or (shaped) in namespace WAN_NAME<I> behind
    scripts/wan's relay: daemon I listens on NET.I.2:PORT and is reached at NET.I.1:PORT.
    bench_outer.py's pairs are Runs of two."""

    def __init__(self, args, work, name, shaped, count=3, net="10.213"):
        self.args, self.work, self.name, self.shaped = args, work, name, shaped
        self.count, self.net = count, net
        self.bin = os.path.join(ROOT, args.build, "apps")
        self.dir = os.path.join(work, name)
        self.daemons = []

    def ravnest(self, *argv, timeout=3600):
        env = dict(os.environ, RAVNEST_SECRET_FILE=os.path.join(self.dir, "secret"))
        out = subprocess.run([os.path.join(self.bin, "ravnest", "ravnest"), *argv], cwd=self.dir,
                             env=env, capture_output=True, text=True, timeout=timeout)
        if out.returncode != 0:
            raise RuntimeError("ravnest %s failed: %s%s" % (argv[0], out.stdout[-2000:], out.stderr))
        return out.stdout

    def start(self, model, example, ram_gb, stages=None):
        # `stages`: one cluster of that many stages (the pipeline runs); else the planner's
        # choice for nodes of `ram_gb` each.
        os.makedirs(os.path.join(self.dir, "node_data"))
        nodes = {}
        for i in range(self.count):
            if self.shaped:
                nodes[str(i)] = {"IP": "%s.%d.1:%d" % (self.net, i, self.args.port),
                                 "benchmarks": {"ram": ram_gb, "bandwidth": 100}}
            else:
                nodes[str(i)] = {"IP": "127.0.0.1:%d" % free_port(),
                                 "benchmarks": {"ram": ram_gb, "bandwidth": 100}}
        with open(os.path.join(self.dir, "node_data", "node_configs.json"), "w") as f:
            json.dump(nodes, f)
        with open(os.path.join(self.dir, "secret"), "w") as f:
            f.write(os.urandom(18).hex())
        os.chmod(os.path.join(self.dir, "secret"), 0o600)
        cut = ["--stages", str(stages), "--clusters", "1"] if stages else []
        self.ravnest("clusterize", model, "--example-input", example, *cut)
        for i in range(self.count):
            listen = ("%s.%d.2:%d" % (self.net, i, self.args.port)) if self.shaped else nodes[str(i)]["IP"]
            command = [os.path.join(self.bin, "ravnestd", "ravnestd"), "--node", "node_%d" % i,
                       "--listen", listen, "--data-dir", "data_%d" % i, "--secret-file", "secret",
                       "--log-file", "node_%d.log" % i,
                       # The daemons share this machine's cores in both runs. Shaped, each
                       # one's address is its own, so it would take the whole machine for itself
                       # (threads = 0 divides the cores among the daemons it sees on its host) and
                       # their LibTorch thread pools would fight over two cores.
                       "--threads", str(max(1, (os.cpu_count() or 1) // self.count))]
            if self.shaped:
                command = ["ip", "netns", "exec", "%s%d" % (self.args.wan_name, i)] + command
            self.daemons.append(subprocess.Popen(command, cwd=self.dir, start_new_session=True))
        deadline = time.time() + 30
        while True:
            try:
                self.ravnest("status", timeout=30)
                break
            except RuntimeError:
                if time.time() > deadline:
                    raise
                time.sleep(0.3)
        self.ravnest("push")

    def train(self, job_text, epochs):
        with open(os.path.join(self.dir, "job.toml"), "w") as f:
            f.write(job_text)
        started = time.time()
        out = self.ravnest("train", "job.toml")
        wall = time.time() - started
        lines = [l for l in out.splitlines() if l.startswith("cluster 0 epoch")]
        rate = float(re.search(r"([0-9.]+) samples/s", lines[-1]).group(1)) if lines else 0.0
        accuracy = re.findall(r"val_acc ([0-9.]+)", out)
        total = [l for l in out.splitlines() if l.startswith("total ")]
        sent = 0.0
        if total:
            columns = re.findall(r"([0-9.]+ [kMGT]?B) / [0-9.]+ [kMGT]?B", total[-1])
            sent = parse_bytes(columns[0]) + parse_bytes(columns[1])  # activations, gradients
        return {"samples_per_second": rate, "bytes_per_epoch": sent / epochs,
                "accuracy": float(accuracy[-1]) if accuracy else float("nan"), "wall": wall}

    def stop(self):
        for p in self.daemons:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in self.daemons:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        self.daemons = []


def job(base, schedule, codec, max_in_flight):
    text = base.replace("@SCHEDULE@", schedule)
    if schedule == "async" and max_in_flight:
        text = text.replace("[train]\n", "[train]\nmax_in_flight = %d\n" % max_in_flight)
    if codec != "none":
        text += '\n[compression]\nactivations = "%s"\ngradients = "%s"\n' % (codec, codec)
    return text


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--build", default="build")
    ap.add_argument("--wan-name", default="rnwan")
    ap.add_argument("--port", type=int, default=18500)
    ap.add_argument("--models", default="digits,resnet18")
    ap.add_argument("--max-in-flight", type=int, default=0)
    ap.add_argument("--rate", default="100mbit")
    ap.add_argument("--delay", default="20ms")
    ap.add_argument("--configs", default="sync,async,async + fp16,async + int8",
                    help="which of the four runs, by label, comma-separated")
    ap.add_argument("--shaped-only", action="store_true", help="skip the loopback runs")
    args = ap.parse_args()

    setups = {
        "digits": dict(
            model="small_cnn.pt", example="64x1x8x8", ram=4, epochs=8,
            job='[train]\nepochs = 8\nbatch_size = 64\nmicro_batches = 4\nseed = 0\n'
                'schedule = "@SCHEDULE@"\n\n[data]\nformat = "csv"\ntrain = "digits_train.csv"\n'
                'validation = "digits_val.csv"\nlabel_column = "label"\ninput_shape = [1, 8, 8]\n'
                'scale = 0.0625\nnum_classes = 10\n\n[loss]\nname = "cross_entropy"\n\n'
                '[optimizer]\nname = "adam"\nlr = 0.002\n'),
        "resnet18": dict(
            model="resnet18.pt", example="32x3x32x32", ram=4, epochs=3,
            job='[train]\nepochs = 3\nbatch_size = 32\nmicro_batches = 4\nseed = 0\n'
                'schedule = "@SCHEDULE@"\n\n[data]\nformat = "tensors"\ntrain = "images_train.pt"\n'
                'validation = "images_val.pt"\nnum_classes = 10\n\n[loss]\nname = "cross_entropy"\n\n'
                '[optimizer]\nname = "adam"\nlr = 0.001\n'),
    }
    configs = [("sync", "1f1b", "none"), ("async", "async", "none"), ("async + fp16", "async", "fp16"),
               ("async + int8", "async", "int8")]
    wanted = [c.strip() for c in args.configs.split(",")]
    configs = [c for c in configs if c[0] in wanted]
    if not any(c[0] == "sync" for c in configs):
        sys.exit("bench_wan: --configs must include sync (the ratios are against it)")
    print("links: %s, %s one-way (scripts/wan), against loopback; 3 daemons, one pipeline" %
          (args.rate, args.delay))
    for model in args.models.split(","):
        setup = setups[model]
        results = {}
        for shaped in ((True,) if args.shaped_only else (False, True)):
            run = Run(args, args.work, "%s_%s" % (model, "wan" if shaped else "lo"), shaped)
            for f in os.listdir(args.work):
                if f.endswith((".pt", ".csv")):
                    os.makedirs(run.dir, exist_ok=True)
                    shutil.copy(os.path.join(args.work, f), run.dir)
            try:
                # Three stages, one pipeline, whatever the memory: the planner measures a stage's
                # peak now, and a pool too small to hold the model whole is refused outright.
                run.start(setup["model"], setup["example"], setup["ram"], stages=run.count)
                for label, schedule, codec in configs:
                    results[(label, shaped)] = run.train(
                        job(setup["job"], schedule, codec, args.max_in_flight), setup["epochs"])
                    sys.stderr.write("  %s %s %s: %s\n" % (model, "shaped" if shaped else "loopback",
                                                           label, results[(label, shaped)]))
            finally:
                run.stop()
        print("\n%s (%d epochs)" % (model, setup["epochs"]))
        print("%-14s %12s %12s %14s %9s %9s %12s %12s" % (
            "", "samples/s lo", "samples/s wan", "bytes/epoch", "acc lo", "acc wan", "vs sync wan",
            "bytes vs none"))
        sync_wan = results[("sync", True)]["samples_per_second"]
        none_bytes = results[("sync", True)]["bytes_per_epoch"]
        missing = {"samples_per_second": float("nan"), "accuracy": float("nan")}
        for label, _, _ in configs:
            lo, wan = results.get((label, False), missing), results[(label, True)]
            print("%-14s %12.0f %12.0f %13.2fM %9.4f %9.4f %11.2fx %11.2fx" % (
                label, lo["samples_per_second"], wan["samples_per_second"],
                wan["bytes_per_epoch"] / 1e6, lo["accuracy"], wan["accuracy"],
                wan["samples_per_second"] / max(sync_wan, 1e-9),
                none_bytes / max(wan["bytes_per_epoch"], 1e-9)))


if __name__ == "__main__":
    main()

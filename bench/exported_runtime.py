"""Writes the models bench_exported_runtime times, times eager PyTorch on them (one thread), and
sums up the rounds of bench/exported_runtime.sh.

Usage: exported_runtime.py --out DIR --models a,b [--reps N] [--write]   (torch >= 2.10, the
       environment of scripts/venv; resnet50 needs torchvision)
       exported_runtime.py --summarize LOG

The models (NAME: what, micro-batch):
  digits   the digits CNN of tests/models/small_cnn.py, 16 of 8x8
  resblock a resnet basic block of 64 channels at 32x32 with a head, 16
  resnet50 torchvision's resnet50 (1000 classes), 2 of 224x224
  gpt2     one GPT-2-small-shaped block (width 768, 12 heads, causal attention through
           scaled_dot_product_attention, GELU MLP of 3072, pre-LayerNorm), 2 sequences of 128
With --write it writes DIR/NAME.pt2 (torch.export, dynamic batch), DIR/NAME.ts
(torch.jit.script) and DIR/NAME.input.pt (the micro-batch). Every call then writes
DIR/NAME.eager_ms: the median over N of one forward + backward (sum of outputs) in train mode, in
milliseconds, the weights from seed 0 each time. --summarize reads the lines
bench_exported_runtime printed over the rounds and prints, per model, the medians over rounds of
each time and of each round's ratios.
"""
import argparse
import os
import re
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "models"))
sys.dont_write_bytecode = True
from small_cnn import SmallCNN  # noqa: E402


class ResBlock(nn.Module):
    def __init__(self, channels=64):
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1, bias=False)
        self.bn0 = nn.BatchNorm2d(channels)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)
        self.fc = nn.Linear(channels, 10)

    def forward(self, x):
        x = self.relu(self.bn0(self.stem(x)))
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        y = self.relu(y + x)
        return self.fc(y.mean(dim=(2, 3)))


class Gpt2Block(nn.Module):
    """GPT-2 small's block: x + attn(ln1(x)), then x + mlp(ln2(x)); input (batch, seq, 768)."""

    def __init__(self, width=768, heads=12):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.out = nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


def resnet50():
    import torchvision

    return torchvision.models.resnet50()


MODELS = {
    "digits": (SmallCNN, (16, 1, 8, 8)),
    "resblock": (ResBlock, (16, 3, 32, 32)),
    "resnet50": (resnet50, (2, 3, 224, 224)),
    "gpt2": (Gpt2Block, (2, 128, 768)),
}


def write(out, name, model, x):
    batch = torch.export.Dim("batch", min=2, max=4096)
    program = torch.export.export(model, (x,), dynamic_shapes=({0: batch},))
    torch.export.save(program, os.path.join(out, name + ".pt2"))
    torch.jit.script(model).save(os.path.join(out, name + ".ts"))
    torch.save(x, os.path.join(out, name + ".input.pt"))


def time_eager(model, x, reps):
    times = []
    for rep in range(reps + 2):
        start = time.perf_counter()
        model(x).sum().backward()
        if rep >= 2:
            times.append((time.perf_counter() - start) * 1000)
        model.zero_grad(set_to_none=True)
    return statistics.median(times)


def summarize(log):
    # bench_exported_runtime's line: "NAME micro-batch B: eager E ms, .pt2 runtime P ms (..),
    # TorchScript T ms (..); .pt2/TorchScript R"
    line_re = re.compile(r"^(\w+)\s+micro-batch (\d+): eager ([\d.]+) ms, \.pt2 runtime ([\d.]+) ms"
                         r".*TorchScript ([\d.]+) ms")
    rounds = {}
    with open(log) as f:
        for line in f:
            m = line_re.match(line)
            if m:
                e, p, t = (float(m.group(i)) for i in (3, 4, 5))
                rounds.setdefault((m.group(1), m.group(2)), []).append((e, p, t))
    med = statistics.median
    for (name, batch), rs in rounds.items():
        e, p, t = (med(r[i] for r in rs) for i in range(3))
        ratios = [(p / e, t / e, p / t) for e, p, t in rs]
        pe, te, pt = (med(r[i] for r in ratios) for i in range(3))
        print(f"{name:<9} micro-batch {batch}, medians over {len(rs)} rounds: eager {e:.3f} ms, "
              f".pt2 {p:.3f} ms, TorchScript {t:.3f} ms; ratios .pt2/eager {pe:.3f}, "
              f"TorchScript/eager {te:.3f}, .pt2/TorchScript {pt:.3f}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out")
    parser.add_argument("--models", default="digits,resblock,resnet50,gpt2")
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--summarize")
    args = parser.parse_args()
    if args.summarize:
        summarize(args.summarize)
        return
    if not args.out:
        parser.error("--out DIR is needed")
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    for name in args.models.split(","):
        if name not in MODELS:
            parser.error(f"--models: unknown model {name!r} (known: {', '.join(MODELS)})")
        build, shape = MODELS[name]
        torch.manual_seed(0)
        model = build().train()
        x = torch.randn(*shape)
        if args.write:
            write(args.out, name, model, x)
        with open(os.path.join(args.out, name + ".eager_ms"), "w") as f:
            f.write(f"{time_eager(model, x, args.reps)}\n")


if __name__ == "__main__":
    main()

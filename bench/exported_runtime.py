"""Writes the models bench_exported_runtime times and times eager PyTorch on them (one thread).

Usage: exported_runtime.py --out DIR [--reps N]   (torch >= 2.10: the environment of scripts/venv)

For each model NAME (digits: the digits CNN of tests/models/small_cnn.py, micro-batch 16;
resblock: a resnet basic block of 64 channels at 32x32 with a head, micro-batch 16) it writes
DIR/NAME.pt2 (torch.export, dynamic batch), DIR/NAME.ts (torch.jit.script), DIR/NAME.input.pt
(the micro-batch) and DIR/NAME.eager_ms: the median over N of one forward + backward (sum of
outputs) in train mode, in milliseconds.
"""
import argparse
import os
import statistics
import sys
import time

import torch
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


MODELS = {"digits": (SmallCNN, (16, 1, 8, 8)), "resblock": (ResBlock, (16, 3, 32, 32))}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--reps", type=int, default=50)
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    for name, (cls, shape) in MODELS.items():
        torch.manual_seed(0)
        model = cls().train()
        x = torch.randn(*shape)
        batch = torch.export.Dim("batch", min=2, max=4096)
        program = torch.export.export(model, (x,), dynamic_shapes=({0: batch},))
        torch.export.save(program, os.path.join(args.out, name + ".pt2"))
        torch.jit.script(model).save(os.path.join(args.out, name + ".ts"))
        torch.save(x, os.path.join(args.out, name + ".input.pt"))
        times = []
        for rep in range(args.reps + 5):
            start = time.perf_counter()
            model(x).sum().backward()
            if rep >= 5:
                times.append((time.perf_counter() - start) * 1000)
            model.zero_grad(set_to_none=True)
        with open(os.path.join(args.out, name + ".eager_ms"), "w") as f:
            f.write(f"{statistics.median(times)}\n")


if __name__ == "__main__":
    main()

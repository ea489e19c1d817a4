#!/usr/bin/python3
"""Prepare the parameter-server example (docs/parameter-server.md): seed 003's LeNet and
MNIST-format data, without downloading anything.

Usage: make_data.py --out DIR [--seed N]

Writes
  DIR/mnist/train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte,
      t10k-labels-idx1-ubyte   the idx files of MNIST's format, made from the 1797 8x8 digits
      python3-sklearn ships, scaled to 28x28 (bilinear) and split 80/20 (seeded, stratified).
  DIR/lenet.pt   LeNet as ps_pytorch defines it (conv 1->20 5x5, max pool, conv 20->50 5x5,
      max pool, fc 800->500, relu, fc 500->10), scripted, training mode; input N x 1 x 28 x 28,
      output N x 10 logits.
Files are written atomically (tmp + os.replace). Run with /usr/bin/python3.
"""

import argparse
import os
import struct
import sys

sys.dont_write_bytecode = True

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402


class LeNet(nn.Module):
    """ps_pytorch's LeNet (src/model_ops/lenet.py)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 20, 5, 1)
        self.conv2 = nn.Conv2d(20, 50, 5, 1)
        self.fc1 = nn.Linear(4 * 4 * 50, 500)
        self.fc2 = nn.Linear(500, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2, 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2, 2)
        x = x.view(-1, 4 * 4 * 50)
        x = F.relu(self.fc1(x))
        return self.fc2(x)


def atomic(path, write):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_idx(directory, prefix, images, labels):
    def images_file(tmp):
        with open(tmp, "wb") as f:
            f.write(struct.pack(">IIII", 2051, len(images), 28, 28))
            f.write(images.astype(np.uint8).tobytes())

    def labels_file(tmp):
        with open(tmp, "wb") as f:
            f.write(struct.pack(">II", 2049, len(labels)))
            f.write(labels.astype(np.uint8).tobytes())

    atomic(os.path.join(directory, prefix + "-images-idx3-ubyte"), images_file)
    atomic(os.path.join(directory, prefix + "-labels-idx1-ubyte"), labels_file)


def main():
    ap = argparse.ArgumentParser(description="write MNIST-format digits and lenet.pt")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    mnist = os.path.join(args.out, "mnist")
    os.makedirs(mnist, exist_ok=True)

    digits = load_digits()
    small = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0  # N x 1 x 8 x 8
    big = F.interpolate(small, size=(28, 28), mode="bilinear", align_corners=False)
    pixels = (big.squeeze(1).clamp(0, 1) * 255).round().numpy()
    X_train, X_test, y_train, y_test = train_test_split(
        pixels, digits.target, test_size=0.2, random_state=args.seed, stratify=digits.target)
    write_idx(mnist, "train", X_train, y_train)
    write_idx(mnist, "t10k", X_test, y_test)

    torch.manual_seed(args.seed)
    model = torch.jit.script(LeNet())
    atomic(os.path.join(args.out, "lenet.pt"), lambda tmp: model.save(tmp))
    print("wrote %s (train %d, test %d) and %s" % (mnist, len(y_train), len(y_test),
                                                   os.path.join(args.out, "lenet.pt")))


if __name__ == "__main__":
    main()

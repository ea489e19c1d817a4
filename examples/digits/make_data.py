#!/usr/bin/python3
"""Prepare the digits example: CSV data + the SmallCNN TorchScript model.

Usage: make_data.py --out DIR [--seed N]

Writes
  DIR/digits_train.csv, DIR/digits_val.csv   seeded, stratified 80/20 split of
      sklearn.datasets.load_digits() (1797 8x8 images, shipped with
      python3-sklearn, nothing downloaded); header p0,...,p63,label; pixel
      values as given, integers 0..16.
  DIR/small_cnn.pt   SmallCNN (tests/models/small_cnn.py) scripted, training mode.
      Input N x 1 x 8 x 8 float32 with pixels scaled to pixel/16 -- the scaling
      is NOT in the model; the dataset loader does it. Output N x 10 logits.
Files are written atomically (tmp + os.replace). Run with /usr/bin/python3.
"""

import argparse
import csv
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..", "..", "tests", "models")))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree

import torch  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

from small_cnn import SmallCNN  # noqa: E402


def atomic(path, write):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_csv(path, X, y):
    def w(tmp):
        with open(tmp, "w", newline="") as f:
            out = csv.writer(f)
            out.writerow(["p%d" % i for i in range(X.shape[1])] + ["label"])
            for row, label in zip(X, y):
                out.writerow([int(v) for v in row] + [int(label)])
    atomic(path, w)


def main():
    ap = argparse.ArgumentParser(description="write the digits CSVs and small_cnn.pt")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0, help="split seed (default 0)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    digits = load_digits()
    X, y = digits.data, digits.target  # X: 1797 x 64 floats 0..16, y: 0..9
    X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.2, random_state=args.seed, stratify=y)
    write_csv(os.path.join(args.out, "digits_train.csv"), X_tr, y_tr)
    write_csv(os.path.join(args.out, "digits_val.csv"), X_va, y_va)
    print("digits_train.csv: %d rows, digits_val.csv: %d rows (64 pixels 0..16 + label)" % (len(y_tr), len(y_va)))

    torch.manual_seed(0)
    model = SmallCNN(num_classes=10)
    model.train()  # exported for training
    sm = torch.jit.script(model)
    sm.train()
    path = os.path.join(args.out, "small_cnn.pt")
    atomic(path, lambda p: sm.save(p))

    # Sanity check on one real batch, scaled the way the loader will scale it.
    batch = torch.tensor(X_tr[:4], dtype=torch.float32).reshape(4, 1, 8, 8) / 16.0
    logits = torch.jit.load(path)(batch)
    assert tuple(logits.shape) == (4, 10), logits.shape
    print("small_cnn.pt: input 4x1x8x8:float32 (pixel/16, scaling done by the loader), output 4x10 logits, "
          "%d parameters" % sum(p.numel() for p in sm.parameters()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

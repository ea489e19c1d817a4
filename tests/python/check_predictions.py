#!/usr/bin/python3
"""Check `ravnest predict`'s output against PyTorch itself.

Usage: check_predictions.py MODEL.pt STATE_DICT.pt DATA.csv PREDICTIONS.pt...

MODEL.pt is the original TorchScript model, STATE_DICT.pt what `ravnest fuse` wrote; DATA.csv
the digits CSV (a "label" column, 64 pixels 0..16, read as 1x8x8 scaled by 1/16). The model
with the fused weights, in eval mode without autograd, computes the outputs of every row in
one batch; each PREDICTIONS.pt (torch.load) must hold the same tensor, in the same order, to
1e-5. Prints "ok N samples, max difference D" or "FAIL: ..." (exit 1).
"""

import csv
import sys

import torch


def main():
    model_path, state_path, data_path = sys.argv[1:4]
    model = torch.jit.load(model_path)
    model.load_state_dict(torch.load(state_path), strict=True)
    model.eval()
    with open(data_path) as f:
        rows = list(csv.DictReader(f))
    pixels = [[float(v) for k, v in row.items() if k != "label"] for row in rows]
    x = torch.tensor(pixels, dtype=torch.float32).view(-1, 1, 8, 8) * 0.0625
    with torch.no_grad():
        expected = model(x)
    worst = 0.0
    for path in sys.argv[4:]:
        got = torch.load(path)
        if not isinstance(got, torch.Tensor):
            print("FAIL: %s holds a %s, not a tensor" % (path, type(got).__name__))
            return 1
        if got.shape != expected.shape:
            print("FAIL: %s has shape %s, expected %s" % (path, tuple(got.shape),
                                                          tuple(expected.shape)))
            return 1
        diff = (got - expected).abs().max().item()
        worst = max(worst, diff)
        if diff > 1e-5:
            print("FAIL: %s differs by %g" % (path, diff))
            return 1
    print("ok %d samples, max difference %g" % (expected.shape[0], worst))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Export the digits example's SmallCNN with torch.export: DIR/small_cnn.pt2.

Usage: export_model.py --out DIR      (a torch >= 2.10: the environment `bash scripts/venv` makes)

The same model and weights as make_data.py's small_cnn.pt (SmallCNN of tests/models/small_cnn.py,
torch.manual_seed(0)), exported in training mode with dim 0 of its input a batch Dim, so that
`ravnest clusterize small_cnn.pt2` may cut a batch into micro-batches of any size. Input
N x 1 x 8 x 8 float32 (pixel / 16, which the job's loader does), output N x 10 logits.
Written atomically (a temporary folder, then os.replace).
"""

import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..", "..", "tests", "models")))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree

import torch  # noqa: E402

from small_cnn import SmallCNN  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description="write small_cnn.pt2 with torch.export")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    version = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    if version < (2, 10):
        print("export_model.py: torch %s has no torch.export training IR (2.10 or later); run it "
              "with the Python `bash scripts/venv` prints" % torch.__version__, file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    model = SmallCNN(num_classes=10).train()  # exported for training
    batch = torch.export.Dim("batch", min=2)
    program = torch.export.export(model, (torch.randn(4, 1, 8, 8),), dynamic_shapes=({0: batch},))
    path = os.path.join(args.out, "small_cnn.pt2")
    # The archive's root folder is named after the file it is saved as: saved under its own name
    # in a temporary folder beside it, then moved.
    scratch = tempfile.mkdtemp(dir=args.out, prefix=".export-")
    try:
        torch.export.save(program, os.path.join(scratch, "small_cnn.pt2"))
        os.replace(os.path.join(scratch, "small_cnn.pt2"), path)
    finally:
        os.rmdir(scratch) if os.path.isdir(scratch) and not os.listdir(scratch) else None
    print("small_cnn.pt2: torch.export of SmallCNN (batch dimension dynamic), %d parameters"
          % sum(p.numel() for p in model.parameters()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

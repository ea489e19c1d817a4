"""Loads the .pt2 archives ravnest wrote (test_pt2_writer) with PyTorch itself and checks that
they give what eager PyTorch gave (export_pt2_zoo.py's references): torch.export.load(path)
.module() run in training mode on the reference's inputs, dropout seeded as eager's.

Usage: check_pt2_in_python.py --archives DIR --references ZOO_DIR
Prints "checked N archives" and exits 0 when every output is equal, bit for bit; else names the
archive and output and exits 1.
"""

import argparse
import glob
import os
import sys

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--archives", required=True)
    parser.add_argument("--references", required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    paths = sorted(glob.glob(os.path.join(args.archives, "*.pt2")))
    failures = []
    for path in paths:
        name = os.path.basename(path)[: -len(".pt2")]
        ref = torch.load(os.path.join(args.references, name + ".ref.pt"))
        module = torch.export.load(path).module()
        torch.manual_seed(ref["seed"])
        # With autograd on, as eager's forward ran (LSTM's kernels differ without it).
        outputs = module(*ref["inputs"])
        outputs = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
        if len(outputs) != len(ref["outputs"]):
            failures.append(f"{name}: {len(outputs)} outputs, eager gave {len(ref['outputs'])}")
            continue
        for i, (ours, eager) in enumerate(zip(outputs, ref["outputs"])):
            if ours.shape != eager.shape or not torch.equal(ours.detach(), eager):
                failures.append(f"{name}: output {i} differs from eager's")
    for failure in failures:
        print(failure)
    print(f"checked {len(paths)} archives")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

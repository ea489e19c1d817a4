#!/usr/bin/python3
"""Check what `fuse` wrote against the original model.

Usage: check_fused_model.py STATE_DICT.pt FUSED_MODEL.pt ORIGINAL_MODEL.pt [--delta D]

STATE_DICT.pt (trained_state_dict.pt) is loaded with torch.load, FUSED_MODEL.pt (model.pt) and
ORIGINAL_MODEL.pt with torch.jit.load. Checks:
  - the state dict is a plain dict whose keys are the original's state_dict keys, in order;
  - the fused model's state_dict has the same keys, in order, and every tensor equals the state
    dict's (same dtype and shape);
  - names that are one tensor in the original (tied weights) are one tensor in the fused model;
  - the fused model runs forward on the original's example inputs when ORIGINAL_MODEL has a
    NAME.inputs.pt beside it;
  - with --delta D: every value equals the original's plus D (floating tensors within 1e-5,
    others exactly), i.e. the trained values were taken, not the original ones.

Prints "ok N tensors, T tied" and exits 0, or prints one "FAIL: ..." line and exits 1.
Must run with /usr/bin/python3 (Debian's, with torch).
"""

import argparse
import os
import sys

import torch


def fail(msg: str) -> int:
    print("FAIL: " + msg, flush=True)
    return 1


def tied_groups(sd):
    """Lists of names sharing one storage (by data pointer), groups of two or more only."""
    by_ptr = {}
    for k, v in sd.items():
        if v.numel() == 0:
            continue
        by_ptr.setdefault((v.data_ptr(), v.dtype, tuple(v.shape)), []).append(k)
    return sorted(g for g in by_ptr.values() if len(g) > 1)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("state_dict")
    parser.add_argument("fused_model")
    parser.add_argument("original_model")
    parser.add_argument("--delta", type=float, default=None)
    args = parser.parse_args()

    sd = torch.load(args.state_dict, map_location="cpu")
    if type(sd) is not dict:
        return fail("state dict file holds a %s, expected a plain dict" % type(sd).__name__)
    fused = torch.jit.load(args.fused_model, map_location="cpu")
    original = torch.jit.load(args.original_model, map_location="cpu")
    orig_sd = original.state_dict()
    fused_sd = fused.state_dict()

    if list(sd.keys()) != list(orig_sd.keys()):
        odd = [k for k in sd if k not in orig_sd][:3] + [k for k in orig_sd if k not in sd][:3]
        return fail("state dict keys differ from the original's, or are in another order: %s"
                    % odd)
    if list(fused_sd.keys()) != list(orig_sd.keys()):
        return fail("fused model's state_dict keys differ from the original's")
    for k, v in sd.items():
        f = fused_sd[k]
        if v.dtype != f.dtype or v.shape != f.shape or not torch.equal(v, f):
            return fail("%s: fused model's tensor differs from the state dict's" % k)
        o = orig_sd[k]
        if v.dtype != o.dtype or v.shape != o.shape:
            return fail("%s: dtype/shape %s %s, original %s %s" % (k, v.dtype, tuple(v.shape),
                                                                  o.dtype, tuple(o.shape)))
        if args.delta is not None:
            expected = o + (args.delta if o.is_floating_point() else int(args.delta))
            ok = (torch.allclose(v, expected, rtol=0, atol=1e-5) if o.is_floating_point()
                  else torch.equal(v, expected))
            if not ok:
                return fail("%s: not the original plus %g (largest difference %g)" % (
                    k, args.delta, (v.double() - expected.double()).abs().max().item()))

    orig_tied = tied_groups(orig_sd)
    fused_tied = tied_groups(fused_sd)
    if orig_tied != fused_tied:
        return fail("tied tensors differ: original %s, fused %s" % (orig_tied, fused_tied))
    for group in orig_tied:
        for k in group[1:]:
            if not torch.equal(sd[k], sd[group[0]]):
                return fail("tied names %s and %s hold different values" % (group[0], k))

    inputs_path = args.original_model[:-3] + ".inputs.pt"
    if args.original_model.endswith(".pt") and os.path.exists(inputs_path):
        inputs = torch.load(inputs_path)
        fused.eval()
        with torch.no_grad():
            fused(*inputs)

    print("ok %d tensors, %d tied" % (len(sd), sum(len(g) - 1 for g in orig_tied)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

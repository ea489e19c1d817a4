#!/usr/bin/python3
"""Check a pipeline stage's state dict against the original model's.

Usage: check_state_dict_keys.py STAGE_FILE ORIGINAL_MODEL.pt [--expect-subset] [--expect-all]

Loads STAGE_FILE (TorchScript) with torch.jit.load and prints its state dict keys,
one "key shape dtype" line each. Every stage key must be one of ORIGINAL_MODEL's
state dict keys with the same shape (and dtype). ORIGINAL_MODEL may be a TorchScript
module or a torch.save'd dict of tensors (e.g. NAME.state_dict.pt).

  --expect-subset  also require a proper subset: the stage lacks at least one of the
                   original's keys (i.e. it really is a part of the model)
  --expect-all     also require that the stage holds every original key

Exit 0 if OK (last line "ok: ..."), 1 with a one-line "FAIL: ..." message otherwise.
Must run with /usr/bin/python3 (Debian's, with torch).
"""

import argparse
import sys

import torch


def load_state(path: str, allow_dict: bool):
    try:
        return dict(torch.jit.load(path, map_location="cpu").state_dict())
    except Exception as e:
        if not allow_dict:
            raise
        try:
            obj = torch.load(path, map_location="cpu")
        except Exception:
            raise e
        if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
            raise RuntimeError("%s is neither TorchScript nor a dict of tensors" % path)
        return dict(obj)


def fail(msg: str) -> int:
    print("FAIL: " + msg, flush=True)
    return 1


def main() -> int:
    ap = argparse.ArgumentParser(description="check a stage's state dict keys against the original model")
    ap.add_argument("stage")
    ap.add_argument("original")
    ap.add_argument("--expect-subset", action="store_true")
    ap.add_argument("--expect-all", action="store_true")
    args = ap.parse_args()

    try:
        stage = load_state(args.stage, allow_dict=False)
    except Exception as e:
        return fail("cannot load stage %s: %s" % (args.stage, str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__))
    try:
        orig = load_state(args.original, allow_dict=True)
    except Exception as e:
        return fail("cannot load original %s: %s" % (args.original, str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__))

    for k, v in stage.items():
        print("%s %s %s" % (k, "x".join(str(d) for d in v.shape) or "scalar", str(v.dtype).replace("torch.", "")))

    unknown = [k for k in stage if k not in orig]
    if unknown:
        return fail("%d stage key(s) not in the original model, first: %s" % (len(unknown), unknown[0]))
    for k, v in stage.items():
        o = orig[k]
        if tuple(v.shape) != tuple(o.shape):
            return fail("shape of %s is %s in the stage, %s in the original" % (k, list(v.shape), list(o.shape)))
        if v.dtype != o.dtype:
            return fail("dtype of %s is %s in the stage, %s in the original" % (k, v.dtype, o.dtype))
    if args.expect_subset and len(stage) >= len(orig):
        return fail("stage holds all %d keys of the original, expected a proper subset" % len(orig))
    if args.expect_all and len(stage) != len(orig):
        missing = [k for k in orig if k not in stage]
        return fail("stage lacks %d of the original's keys, first: %s" % (len(missing), missing[0]))
    print("ok: %d of %d keys, shapes match" % (len(stage), len(orig)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

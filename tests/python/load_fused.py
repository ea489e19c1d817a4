#!/usr/bin/python3
"""Load a fused state dict into the original model (strict): TorchScript, or torch.export's .pt2.

Usage: load_fused.py STATE_DICT.pt ORIGINAL_MODEL.pt|ORIGINAL_MODEL.pt2

STATE_DICT.pt is a torch.save'd / torch::pickle_save'd dict of name -> tensor (e.g.
the weights gathered back from all pipeline stages). ORIGINAL_MODEL.pt is loaded
with torch.jit.load (a RecursiveScriptModule, whose nn.Module.load_state_dict works)
and load_state_dict(sd, strict=True) is called; afterwards every tensor of the
model's state dict is compared with the file's to make sure it was really copied.

A .pt2 is loaded with torch.export.load(...).module() (a torch >= 2.10: the Python of
`bash scripts/venv`). Prints "ok N tensors" and exits 0, or exits 1 with a one-line "FAIL: ..."
message. Run with a Python that has torch (/usr/bin/python3, Debian's, for TorchScript).
"""

import sys

import torch


def first_line(e: BaseException) -> str:
    s = str(e).strip()
    return s.splitlines()[0] if s else type(e).__name__


def fail(msg: str) -> int:
    print("FAIL: " + msg, flush=True)
    return 1


def is_exported(path: str) -> bool:
    """Whether `path` is a torch.export archive: a zip holding models/*.json."""
    import zipfile
    try:
        with zipfile.ZipFile(path) as archive:
            return any("/models/" in "/" + n and n.endswith(".json") for n in archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def main(argv) -> int:
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    sd_path, model_path = argv[1], argv[2]
    try:
        if is_exported(model_path):
            model = torch.export.load(model_path).module()
        else:
            model = torch.jit.load(model_path, map_location="cpu")
    except Exception as e:
        return fail("cannot load model %s: %s" % (model_path, first_line(e)))
    try:
        sd = torch.load(sd_path, map_location="cpu")
    except Exception as e:
        return fail("cannot load state dict %s: %s" % (sd_path, first_line(e)))
    if not isinstance(sd, dict):
        return fail("%s holds a %s, expected a dict of tensors" % (sd_path, type(sd).__name__))
    bad = [k for k, v in sd.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)]
    if bad:
        return fail("%s: entry %r is not a str -> tensor pair" % (sd_path, bad[0]))

    expected = dict(model.state_dict())
    missing = [k for k in expected if k not in sd]
    unexpected = [k for k in sd if k not in expected]
    if missing or unexpected:
        return fail("%d missing key(s)%s, %d unexpected key(s)%s" % (
            len(missing), " (first: %s)" % missing[0] if missing else "",
            len(unexpected), " (first: %s)" % unexpected[0] if unexpected else ""))
    try:
        model.load_state_dict(sd, strict=True)
    except Exception as e:
        return fail("load_state_dict: %s" % " ".join(str(e).split())[:500])

    for k, v in model.state_dict().items():
        if not torch.equal(v, sd[k].to(v.dtype)):
            return fail("tensor %s differs from the file after load_state_dict" % k)
    print("ok %d tensors" % len(sd), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""Stages cut by exported_cut.h load with torch.export.load and, run one after the other, compute
what the whole program computes: forward outputs and parameter gradients, exactly.

Usage: check_exported_cut.py --tool WRITE_STAGE_JSONS --zoo DIR --out DIR   (torch >= 2.10)

For every archive NAME.pt2 of export_pt2_zoo.py's DIR (with its NAME.ref.pt) and 2 and 3 stages:
the tool writes each stage's models/model.json; a stage archive is the whole archive with that
model.json, its weights' and constants' configs restricted to the state the stage holds, and no
sample inputs (the whole's would not match the stage's inputs). Each is loaded with
torch.export.load and .module(); the stages run in pipeline order on the reference inputs, each
value handed to the stages that read it, and backward runs from the reference's output gradients.
The whole archive's module runs the same (the same seed, so dropout draws the same). A parameter
held by several stages (tied weights) has the sum of its stages' gradients.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import zipfile

import torch


def stage_archive(whole, stage_json, out):
    with zipfile.ZipFile(whole) as z:
        root = z.namelist()[0].split("/")[0]
        model = json.loads(open(stage_json).read())
        held = set()
        for spec in model["graph_module"]["signature"]["input_specs"]:
            for value in spec.values():
                for key in ("parameter_name", "buffer_name", "tensor_constant_name"):
                    if key in value:
                        held.add(value[key])
        name = os.path.splitext(os.path.basename(out))[0]
        with zipfile.ZipFile(out, "w") as o:
            for item in z.infolist():
                data = z.read(item.filename)
                inner = item.filename[len(root) + 1:]
                if inner == "models/model.json":
                    data = open(stage_json, "rb").read()
                elif inner.endswith("_config.json"):
                    config = json.loads(data)
                    config["config"] = {k: v for k, v in config["config"].items() if k in held}
                    data = json.dumps(config).encode()
                elif inner.startswith("data/sample_inputs/"):
                    data = b""
                o.writestr(name + "/" + inner, data)


def run(module, inputs, seed):
    torch.manual_seed(seed)
    out = module(*inputs)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def check(tool, zoo, out_dir, name, stages):
    work = os.path.join(out_dir, f"{name}_{stages}")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    whole = os.path.join(zoo, name + ".pt2")
    with zipfile.ZipFile(whole) as z:
        root = z.namelist()[0].split("/")[0]
        with open(os.path.join(work, "whole.json"), "wb") as f:
            f.write(z.read(root + "/models/model.json"))
    cut = subprocess.run([tool, os.path.join(work, "whole.json"), work, str(stages)],
                         capture_output=True, text=True)
    if cut.returncode != 0:
        return f"{name}, {stages} stages: the tool failed: {cut.stderr.strip()}"
    ref = torch.load(os.path.join(zoo, name + ".ref.pt"))
    inputs, seed = ref["inputs"], ref["seed"]
    grad_outputs = [g if g.numel() else None for g in ref["grad_outputs"]]

    whole_module = torch.export.load(whole).module()
    expected = run(whole_module, inputs, seed)

    programs = []
    for s in range(stages):
        archive = os.path.join(work, f"stage{s}.pt2")
        stage_archive(whole, os.path.join(work, f"stage{s}.json"), archive)
        programs.append(torch.export.load(archive))
    modules = [p.module() for p in programs]
    values = {}
    torch.manual_seed(seed)
    got = None
    for s, (program, module) in enumerate(zip(programs, modules)):
        specs = program.graph_signature
        names = [spec.arg.name for spec in specs.input_specs if spec.kind.name == "USER_INPUT"]
        args = inputs if s == 0 else [values[n] for n in names]
        out = module(*args)
        out = list(out) if isinstance(out, (tuple, list)) else [out]
        if s + 1 < stages:
            outputs = [spec.arg.name for spec in specs.output_specs if spec.kind.name == "USER_OUTPUT"]
            values.update(zip(outputs, out))
        else:
            got = out

    problems = []
    for i, (a, b) in enumerate(zip(expected, got)):
        if not torch.allclose(a.float(), b.float(), rtol=0, atol=1e-6):
            problems.append(f"output {i} differs by {(a.float() - b.float()).abs().max().item()}")
    for outs in (expected, got):
        pairs = [(o, g) for o, g in zip(outs, grad_outputs) if g is not None]
        torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
    whole_grads = {k: p.grad for k, p in whole_module.named_parameters(remove_duplicate=False)}
    stage_grads = {}
    for module in modules:
        for k, p in module.named_parameters(remove_duplicate=False):
            if p.grad is not None:
                stage_grads[k] = stage_grads.get(k, 0) + p.grad
    for k, g in whole_grads.items():
        if g is None:
            continue
        if k not in stage_grads:
            # A tied parameter's other name: the stages read it under the name export kept.
            if any(g is whole_grads.get(other) for other in stage_grads):
                continue
            problems.append(f"no stage has a gradient for {k}")
        elif not torch.allclose(g, stage_grads[k], rtol=0, atol=1e-6):
            problems.append(f"gradient of {k} differs by {(g - stage_grads[k]).abs().max().item()}")
    if len(got) != len(expected):
        problems.append(f"{len(got)} outputs, the whole has {len(expected)}")
    if problems:
        return f"{name}, {stages} stages ({cut.stdout.strip()}): " + "; ".join(problems)
    print(f"{name}: {stages} stages equal the whole ({' '.join(cut.stdout.split())})")
    return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tool", required=True)
    parser.add_argument("--zoo", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    names = sorted(f[:-len(".ref.pt")] for f in os.listdir(args.zoo) if f.endswith(".ref.pt"))
    if not names:
        print(f"{args.zoo}: no exported models", file=sys.stderr)
        return 1
    failures = [p for name in names for stages in (2, 3)
                if (p := check(args.tool, args.zoo, args.out, name, stages))]
    for failure in failures:
        print(failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

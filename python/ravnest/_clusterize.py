"""ravnest.clusterize: Ravnest's clusterize(model, example_args) over `ravnest clusterize`.

On a torch that has torch.export's training IR (2.10 and later), with a `ravnest` built on
LibTorch 2.x, the model is exported: torch.export.export(model, example_args, dynamic_shapes=
{0: Dim.AUTO} for each input) in training mode, saved to WORK/model.pt2 and cut as a .pt2
(docs/exported.md). Otherwise, or with format="torchscript", it takes the legacy path, said on
stderr when torch.export was not asked against:

The model is scripted (torch.jit.script); a model TorchScript cannot script is traced with
example_args instead, which is said on stderr (a trace records one path through the code: the
control flow that depends on the data is frozen). A traced model (the package's trace, or a
torch.jit.trace module passed in) is saved with the extra record "ravnest/traced": LibTorch then
makes its dropout and batch norm follow each module's `training` flag again, which the trace had
frozen as the mode it ran in (libs/torch_support/traced_mode.h). The file goes to WORK/model.pt, each example
argument to WORK/example_<i>.pt, and `ravnest clusterize` cuts it into node_data/ and pushes the
stages to the pool's daemons.
"""

import inspect
import json
import os
import sys

import torch

from ._cli import RavnestError, run


def script_or_trace(model, example_args):
    """A ScriptModule of `model` in training mode: scripted, else traced with example_args."""
    if isinstance(model, torch.jit.ScriptModule):
        return model
    try:
        return torch.jit.script(model)
    except Exception as scripting:  # TorchScript raises several kinds
        if not example_args:
            raise RavnestError("clusterize: TorchScript cannot script %s (%s); pass example_args "
                               "to trace it instead" % (type(model).__name__,
                                                       str(scripting).splitlines()[0]))
        print("ravnest: %s is traced with example_args, TorchScript cannot script it (%s); "
              "control flow that depends on the data is frozen as the example took it"
              % (type(model).__name__, str(scripting).strip().splitlines()[0]), file=sys.stderr)
        # The trace runs forward once in training mode: BatchNorm's statistics and the random
        # state it moved are put back, so the job starts from the user's model and RNG.
        state = {k: v.detach().clone() for k, v in model.state_dict(keep_vars=True).items()}
        was_training = model.training
        model.train()
        try:
            with torch.random.fork_rng(devices=[]):
                traced = torch.jit.trace(model, tuple(example_args), check_trace=False)
        except Exception as tracing:  # the tracer raises several kinds
            raise RavnestError("clusterize: %s can be neither scripted (%s) nor traced with "
                               "example_args (%s)" % (
                                   type(model).__name__, str(scripting).strip().splitlines()[0],
                                   (str(tracing).strip().splitlines() or ["?"])[0])) from None
        finally:
            model.train(was_training)
        with torch.no_grad():
            for module in (model, traced):
                for name, tensor in module.state_dict(keep_vars=True).items():
                    if name in state:
                        tensor.copy_(state[name])
        return traced


STATE_KEYS = "state_keys.json"  # beside model.pt: the user's state dict's names, in order
# beside model.pt: {"inputs": forward's parameter names the model's inputs are, in order (null
# when forward's signature cannot be read), "outputs": the number of tensors of a tuple output
# (0: one tensor; null: not known)}; a Trainer maps node.forward_compute's keywords and a loss
# function's preds by it.
MODEL_IO = "model_io.json"
EXPORT_SINCE = (2, 10)  # torch.export returns the training IR (aten ops, not decomposed)


def version_tuple(text):
    """(major, minor) of "2.15.0+cu132", "1.13.0a0", "LibTorch 1.13.0"; (0, 0) when unreadable."""
    import re
    found = re.search(r"(\d+)\.(\d+)", text or "")
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


def choose_format(requested, torch_version, binary_line):
    """("torch.export" or "torchscript", why or None) for format=`requested` (None: the best this
    torch and this binary run), torch.__version__ and `ravnest --version`'s line (pure)."""
    libtorch = version_tuple(binary_line.split("LibTorch", 1)[1]) if "LibTorch" in binary_line \
        else (0, 0)
    if requested not in (None, "torch.export", "torchscript"):
        raise RavnestError("clusterize: format=%r is neither 'torch.export' nor 'torchscript'"
                           % (requested,))
    if requested == "torchscript":
        return "torchscript", None
    problem = None
    if version_tuple(torch_version) < EXPORT_SINCE:
        problem = "this torch (%s) predates torch.export's training IR (2.10)" % torch_version
    elif libtorch < (2, 0):
        problem = ("the ravnest binary runs LibTorch %d.%d, which cannot run a .pt2 (build it "
                   "with scripts/build --torch2)" % libtorch)
    if problem and requested == "torch.export":
        raise RavnestError("clusterize: format='torch.export': " + problem)
    if problem:
        return "torchscript", problem + "; the model goes as TorchScript (deprecated by PyTorch)"
    return "torch.export", None


def export_program(model, example_args):
    """torch.export.export of `model` in training mode, dim 0 of every tensor input dynamic
    (Dim.AUTO: a batch of 1 in the example stays static, which clusterize then names)."""
    auto = torch.export.Dim.AUTO
    dynamic = tuple({0: auto} if isinstance(a, torch.Tensor) and a.dim() > 0 else None
                    for a in example_args)
    was_training = model.training
    model.train()
    try:
        with torch.random.fork_rng(devices=[]):
            return torch.export.export(model, tuple(example_args), dynamic_shapes=dynamic)
    except Exception as e:  # export raises many kinds
        raise RavnestError("clusterize: torch.export cannot export %s (%s); format='torchscript' "
                           "takes the legacy path" % (type(model).__name__,
                                                      (str(e).strip().splitlines() or ["?"])[0])
                           ) from None
    finally:
        model.train(was_training)
TRACED_RECORD = "ravnest/traced"  # libs/torch_support/traced_mode.h: kTracedRecord


def save_module(module, path):
    """torch.jit.save, marking a traced module as such (TRACED_RECORD)."""
    extra = {TRACED_RECORD: "torch.jit.trace"} if isinstance(module, torch.jit.TracedModule) else {}
    torch.jit.save(module, path, _extra_files=extra)


def clusterize_args(model_path, example_paths, nodes, out, stages, clusters, verify, push,
                    memory_probe, device):
    """The argument list of `ravnest clusterize` (pure: tested without a binary)."""
    args = ["clusterize", model_path, "--nodes", nodes, "--out", out]
    if example_paths:
        args += ["--example-input"] + list(example_paths)
    if stages is not None:
        args += ["--stages", int(stages)]
    if clusters is not None:
        args += ["--clusters", int(clusters)]
    if verify:
        args.append("--verify")
    if not memory_probe:
        args.append("--no-memory-probe")
    if device is not None:
        args += ["--device", device]
    if push:
        args.append("--push")
    return args


def input_names(model, count):
    """forward's first `count` parameter names, the model's inputs; None when unreadable."""
    try:
        parameters = list(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError, AttributeError):
        return None
    return parameters[:count] if len(parameters) >= count else None


def output_count(program):
    """The number of tensors of an exported program's tuple or list output, 0 for one tensor,
    None for any other structure."""
    spec = program.call_spec.out_spec
    if spec is None:
        return None
    if spec.type in (tuple, list) and all(c.num_children == 0 for c in spec.children_specs):
        return spec.num_children
    if spec.num_children == 0:
        return 0
    return None


def positional_examples(model, example_args, example_kwargs):
    """example_args followed by example_kwargs in the order of forward's parameters: the model's
    inputs are positional here. A keyword that leaves a parameter between them out (its default
    would have to be an input), or that forward does not have, is refused in one line."""
    example_args = tuple(example_args)
    if not example_kwargs:
        return example_args
    try:
        parameters = list(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        raise RavnestError("clusterize: example_kwargs needs forward's parameter names, which "
                           "%s does not give" % type(model).__name__) from None
    unknown = sorted(set(example_kwargs) - set(parameters))
    if unknown:
        raise RavnestError("clusterize: example_kwargs names %s, which %s.forward does not take"
                           % (", ".join(unknown), type(model).__name__))
    rest = parameters[len(example_args):]
    last = max(rest.index(k) for k in example_kwargs)
    skipped = [p for p in rest[:last + 1] if p not in example_kwargs]
    if skipped or any(k in parameters[:len(example_args)] for k in example_kwargs):
        raise RavnestError("clusterize: example_kwargs must give forward's parameters after "
                           "example_args without a gap (%s.forward's inputs are positional "
                           "here); missing: %s" % (type(model).__name__,
                                                   ", ".join(skipped) or "none, one given twice"))
    return example_args + tuple(example_kwargs[p] for p in rest[:last + 1])


def clusterize(model, example_args=(), nodes="node_data/node_configs.json", stages=None,
               clusters=None, verify=True, out="node_data", push=True, memory_probe=True,
               device=None, work_dir=".ravnest", example_kwargs=None, pass_data=False,
               format=None):
    """Cuts `model` over the pool `nodes` into the plan directory `out` and, with push, stores
    each stage on its daemon. stages/clusters ask for that layout (`--stages`/`--clusters`).
    example_kwargs (Ravnest's) follow example_args in forward's order. pass_data=True (Ravnest:
    size the model by running it) asks for the measured memory, memory_probe=True.
    format: "torch.export" or "torchscript"; None takes torch.export where this torch and the
    ravnest binary run it. Returns the command's output (the plan's lines, as Ravnest prints
    Node(0, Cluster(1)))."""
    if not isinstance(example_args, (tuple, list)):
        example_args = (example_args,)
    example_args = positional_examples(model, example_args, example_kwargs or {})
    if pass_data and not memory_probe:
        raise RavnestError("clusterize: pass_data=True asks for the memory measured by running "
                           "the model; memory_probe=False forbids it")
    os.makedirs(work_dir, exist_ok=True)
    chosen, why = choose_format(format, torch.__version__,
                                run(["--version"]) if format != "torchscript" else "")
    if why:
        print("ravnest: " + why, file=sys.stderr)
    outputs = None
    if chosen == "torch.export" and isinstance(model, torch.nn.Module) and \
            not isinstance(model, torch.jit.ScriptModule):
        program = export_program(model, example_args)
        model_path = os.path.join(work_dir, "model.pt2")
        torch.export.save(program, model_path)
        outputs = output_count(program)
    else:
        scripted = script_or_trace(model, example_args)
        model_path = os.path.join(work_dir, "model.pt")
        save_module(scripted, model_path)
    if isinstance(model, torch.nn.Module):
        # TorchScript keeps no buffer's persistent=False: the fused state dict is cut to these.
        with open(os.path.join(work_dir, STATE_KEYS), "w") as f:
            json.dump(list(model.state_dict().keys()), f)
    with open(os.path.join(work_dir, MODEL_IO), "w") as f:
        json.dump({"inputs": input_names(model, len(example_args)), "outputs": outputs}, f)
    example_paths = []
    for i, arg in enumerate(example_args):
        if not isinstance(arg, torch.Tensor):
            raise RavnestError("clusterize: example_args[%d] is a %s, not a tensor"
                               % (i, type(arg).__name__))
        path = os.path.join(work_dir, "example_%d.pt" % i)
        torch.save(arg.detach().cpu().contiguous(), path)
        example_paths.append(path)
    args = clusterize_args(model_path, example_paths, nodes, out, stages, clusters, verify, push,
                           memory_probe, device)
    text = run(args)
    sys.stdout.write(text)
    return text

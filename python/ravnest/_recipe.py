"""The recipe as torch objects -> the job file's [optimizer], [scheduler] and [loss] tables.

An optimizer is a torch.optim object (its class and param_groups give name and options), a class
with optimizer_params (Ravnest's Node(optimizer=torch.optim.Adam, optimizer_params={...})), or a
name. A scheduler likewise (an object, a class with lr_scheduler_params, or a name with params).
What the job file cannot express is refused in one line naming it (docs/job-file.md).
"""

import ast
import functools
import importlib.util
import inspect
import os
import shutil
import tempfile
import textwrap
import types

import torch

from ._cli import RavnestError

# torch class name -> (job name, {torch option: job key}) for the options the job file has.
_OPTIMIZERS = {
    "SGD": ("sgd", ["lr", "momentum", "dampening", "nesterov", "weight_decay"]),
    "Adam": ("adam", ["lr", "betas", "eps", "weight_decay", "amsgrad"]),
    "AdamW": ("adamw", ["lr", "betas", "eps", "weight_decay", "amsgrad"]),
    "RMSprop": ("rmsprop", ["lr", "alpha", "eps", "weight_decay", "momentum", "centered"]),
    "Adagrad": ("adagrad", ["lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps"]),
    # torch_optimizer.Lamb (pytorch-optimizer), Ravnest's BERT example's: clamp_value, adam and
    # debias are attributes of the object, not of its param groups.
    "Lamb": ("lamb", ["lr", "betas", "eps", "weight_decay", "clamp_value", "adam", "debias"]),
}
_LAMB_ATTRIBUTES = ("clamp_value", "adam", "debias")
# Options of PyTorch's optimizers that change how, not what, they compute, or that the job file
# cannot hold when set (their defaults pass).
_HOW_ONLY = {"foreach", "capturable", "differentiable", "fused", "params", "initial_lr"}
_MUST_BE_DEFAULT = {"maximize": False, "decoupled_weight_decay": False}


def _by_name(name, table):
    for cls, (job_name, _) in table.items():
        if name in (cls, job_name, cls.lower()):
            return cls
    return None


def optimizer_table(optimizer, params=None):
    """{"name": ..., options...} for [optimizer]."""
    params = dict(params or {})
    if isinstance(optimizer, torch.optim.Optimizer):
        cls = type(optimizer).__name__
        groups = optimizer.param_groups
        first = {k: v for k, v in groups[0].items() if k != "params"}
        for g in groups[1:]:
            if {k: v for k, v in g.items() if k != "params"} != first:
                raise RavnestError("optimizer: parameter groups with different options are not "
                                   "expressible in a job file (one [optimizer] for the model)")
        # A scheduler made on the optimizer changed lr; its initial_lr is the recipe's.
        options = dict(first)
        if "initial_lr" in options:
            options["lr"] = options["initial_lr"]
        if cls == "Lamb":
            options.update({k: getattr(optimizer, k) for k in _LAMB_ATTRIBUTES
                            if hasattr(optimizer, k)})
    else:
        name = optimizer if isinstance(optimizer, str) else getattr(optimizer, "__name__", "")
        cls = _by_name(name, _OPTIMIZERS)
        if cls is None:
            raise RavnestError("optimizer: %r is not one of %s" % (
                optimizer, ", ".join(n for n, _ in _OPTIMIZERS.values())))
        options = params
    if cls not in _OPTIMIZERS:
        raise RavnestError("optimizer: torch.optim.%s has no [optimizer] name (%s)" % (
            cls, ", ".join(n for n, _ in _OPTIMIZERS.values())))
    if cls == "Lamb" and not isinstance(optimizer, str):
        # Other packages' Lamb (timm's, apex's) compute something else under that name.
        module = getattr(optimizer if isinstance(optimizer, type) else type(optimizer),
                         "__module__", "")
        if module.split(".")[0] != "torch_optimizer":
            raise RavnestError("optimizer: %s.Lamb is not torch_optimizer.Lamb, the job file's "
                               "lamb" % module)
    job_name, keys = _OPTIMIZERS[cls]
    table = {"name": job_name}
    for key, value in options.items():
        if key in _HOW_ONLY:
            continue
        if key in _MUST_BE_DEFAULT:
            if value != _MUST_BE_DEFAULT[key]:
                raise RavnestError("optimizer: %s=%r is not expressible in a job file" % (key, value))
            continue
        if key not in keys:
            raise RavnestError("optimizer: %s is not an option of %s in a job file (%s)" % (
                key, job_name, ", ".join(keys)))
        if isinstance(value, torch.Tensor):
            value = value.item()
        table[key] = list(value) if isinstance(value, tuple) else value
    return table


def _linear_warmup_factor(step, num_warmup_steps, num_training_steps):
    """transformers' _get_linear_schedule_with_warmup_lr_lambda (optimization.py): the factor
    [scheduler] name = "warmup_linear" multiplies into the lr (libs/training/lr_schedule.h)."""
    if step < num_warmup_steps:
        return float(step) / float(max(1, num_warmup_steps))
    return max(0.0, float(num_training_steps - step) /
               float(max(1, num_training_steps - num_warmup_steps)))


def _hf_linear_lambda(lr_lambda):
    """(num_warmup_steps, num_training_steps) when lr_lambda is the lambda transformers'
    get_linear_schedule_with_warmup gives its LambdaLR: a functools.partial of
    _get_linear_schedule_with_warmup_lr_lambda with those two keywords. Copies of it under that
    name exist outside transformers: it must also give the formula's factors (probed around
    both ends). None otherwise."""
    if not isinstance(lr_lambda, functools.partial) or lr_lambda.args or \
            getattr(lr_lambda.func, "__name__", "") != "_get_linear_schedule_with_warmup_lr_lambda" or \
            set(lr_lambda.keywords) != {"num_warmup_steps", "num_training_steps"}:
        return None
    warmup = lr_lambda.keywords["num_warmup_steps"]
    total = lr_lambda.keywords["num_training_steps"]
    if any(isinstance(v, bool) or not isinstance(v, int) for v in (warmup, total)):
        return None
    probes = {0, 1, warmup - 1, warmup, warmup + 1, (warmup + total) // 2, total - 1, total,
              total + 1}
    try:
        if any(lr_lambda(t) != _linear_warmup_factor(t, warmup, total)
               for t in sorted(p for p in probes if p >= 0)):
            return None
    except Exception:  # a function of that name that is not transformers'
        return None
    return warmup, total


def _lambda_table(scheduler, what):
    """[scheduler] of a LambdaLR: transformers' linear warm-up and decay is warmup_linear; any
    other lambda is Python a job file cannot hold, refused naming `what`."""
    found = {_hf_linear_lambda(f) for f in scheduler.lr_lambdas}
    if len(found) != 1 or None in found:
        unread = [f for f in scheduler.lr_lambdas if _hf_linear_lambda(f) is None]
        function = getattr(unread[0], "func", unread[0]) if unread else None
        name = getattr(function, "__name__", None) or repr(function) if unread else \
            "parameter groups with different ones"
        raise RavnestError("lr_scheduler: %s whose lr_lambda (%s) is Python a job file cannot "
                           "hold; of LambdaLRs only transformers' get_linear_schedule_with_warmup "
                           "is read (warmup_linear), else a [scheduler] of docs/job-file.md: "
                           "StepLR, MultiStepLR, ExponentialLR, CosineAnnealingLR, LinearLR"
                           % (what, name))
    warmup, total = found.pop()
    if total < 1:
        raise RavnestError("lr_scheduler: %s has num_training_steps=%d; the lr is 0 from that "
                           "step on, so at least 1 is needed" % (what, total))
    return {"name": "warmup_linear", "warmup_steps": warmup, "total_steps": total}


def scheduler_table(scheduler, params=None, per_epoch=True):
    """{"name": ..., options..., "per": ...} for [scheduler], or None."""
    if scheduler is None:
        return None
    params = dict(params or {})
    if isinstance(scheduler, str):
        table = {"name": scheduler}
        table.update(params)
    elif inspect.isroutine(scheduler) or isinstance(scheduler, functools.partial):
        # A function that makes the scheduler (transformers' get_linear_schedule_with_warmup),
        # called as Ravnest calls it, lr_scheduler(optimizer, **lr_scheduler_params), on a
        # stand-in optimizer: what it makes is read as a scheduler object.
        name = getattr(scheduler, "__name__", None) or repr(scheduler)
        stand_in = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
        try:
            made = scheduler(stand_in, **params)
        except Exception as e:  # the user's function may raise anything
            raise RavnestError("lr_scheduler: %s(optimizer, **lr_scheduler_params) fails (%s)"
                               % (name, str(e).strip().splitlines()[0] if str(e).strip()
                                  else type(e).__name__)) from None
        if not hasattr(made, "optimizer") or not hasattr(made, "step"):
            raise RavnestError("lr_scheduler: %s(optimizer, **lr_scheduler_params) gives %r, "
                               "not a torch.optim.lr_scheduler object" % (name, made))
        if not isinstance(made, torch.optim.lr_scheduler.LambdaLR):
            return scheduler_table(made, None, per_epoch)
        table = _lambda_table(made, "%s makes a LambdaLR" % name)
    elif isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR):
        cls = type(scheduler).__name__
        table = _lambda_table(scheduler, "LambdaLR" if cls == "LambdaLR" else
                              "%s (a LambdaLR)" % cls)
    else:
        obj = scheduler if not isinstance(scheduler, type) else None
        cls = type(scheduler).__name__ if obj is not None else scheduler.__name__
        get = (lambda k, d=None: getattr(obj, k, d)) if obj is not None else \
              (lambda k, d=None: params.get(k, d))
        if cls == "StepLR":
            table = {"name": "step", "step_size": get("step_size"), "gamma": get("gamma", 0.1)}
        elif cls == "MultiStepLR":
            table = {"name": "multistep", "milestones": sorted(int(m) for m in get("milestones")),
                     "gamma": get("gamma", 0.1)}
        elif cls == "ExponentialLR":
            table = {"name": "exponential", "gamma": get("gamma")}
        elif cls == "CosineAnnealingLR":
            table = {"name": "cosine", "t_max": get("T_max"), "eta_min": get("eta_min", 0)}
        elif cls == "LinearLR":
            end = get("end_factor", 1.0)
            if end != 1.0:
                raise RavnestError("lr_scheduler: LinearLR with end_factor %r is not expressible "
                                   "(linear_warmup ends at 1.0)" % end)
            table = {"name": "linear_warmup", "warmup_steps": get("total_iters", 5),
                     "start_factor": get("start_factor", 1.0 / 3)}
        else:
            raise RavnestError("lr_scheduler: torch.optim.lr_scheduler.%s has no [scheduler] "
                               "name (StepLR, MultiStepLR, ExponentialLR, CosineAnnealingLR, "
                               "LinearLR, transformers' get_linear_schedule_with_warmup)" % cls)
        missing = [k for k, v in table.items() if v is None]
        if missing:
            raise RavnestError("lr_scheduler: %s needs %s" % (cls, ", ".join(missing)))
    table["per"] = "epoch" if per_epoch else "update"
    return table


_LOSSES = {"CrossEntropyLoss": "cross_entropy", "NLLLoss": "nll", "MSELoss": "mse",
           "L1Loss": "l1", "BCEWithLogitsLoss": "bce_with_logits"}


def _is_plain(criterion):
    """Whether a known loss module has only the built-in's behaviour (mean, no weights)."""
    if getattr(criterion, "reduction", "mean") != "mean":
        return False
    for attr in ("weight", "pos_weight"):
        if getattr(criterion, attr, None) is not None:
            return False
    if getattr(criterion, "ignore_index", -100) != -100:
        return False
    return getattr(criterion, "label_smoothing", 0.0) == 0.0


def _targets_read(graph, index):
    """The elements of a graph's tuple input `index` that it reads (indices, or node kinds for
    any other use)."""
    graph = graph.copy()
    torch._C._jit_pass_inline(graph)
    read = set()
    for use in list(graph.inputs())[index].uses():
        node = use.user
        if node.kind() == "prim::TupleIndex" and node.inputsAt(1).toIValue() is not None:
            read.add(int(node.inputsAt(1).toIValue()))
        elif node.kind() == "prim::TupleUnpack":
            read.update(i for i, out in enumerate(node.outputs()) if out.uses())
        else:
            read.add(node.kind())
    return read


_CONSTANTS = (bool, int, float, str)


class _CriterionSource(ast.NodeTransformer):
    """A loss function's body as a method: names of nn.Module objects it reads from its globals
    or closure become self.<name> (submodules); numbers and strings it reads there, and their
    attributes of other Python objects (Ravnest's `update_frequency`, BERT's
    `config.vocab_size`), become constants, which TorchScript cannot read from a global; moves
    to a device (`.to(device)`, `.cuda()`, `.cpu()`) are dropped: the loss runs where the outputs
    are. Divisions by a name in `dropped_divisors` (Ravnest's `total_loss.div_(update_frequency)`,
    which a job's 1 / update_frequency weighting does already) are dropped. Names the function
    binds itself are its own."""

    def __init__(self, scope, definition, dropped_divisors=()):
        self.modules = {}
        self.dropped_divisors = set(dropped_divisors)
        local = {a.arg for a in definition.args.args}
        local.update(n.id for n in ast.walk(definition)
                     if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load))
        self.scope = {k: v for k, v in scope.items() if k not in local}

    def _constant(self, value, node):
        return ast.copy_location(ast.Constant(value=value), node)

    def visit_Name(self, node):
        value = self.scope.get(node.id)
        if isinstance(node.ctx, ast.Load) and isinstance(value, torch.nn.Module):
            self.modules[node.id] = value
            return ast.copy_location(ast.Attribute(value=ast.Name(id="self", ctx=ast.Load()),
                                                   attr=node.id, ctx=ast.Load()), node)
        if isinstance(node.ctx, ast.Load) and isinstance(value, _CONSTANTS):
            return self._constant(value, node)
        return node

    def visit_Attribute(self, node):
        if isinstance(node.ctx, ast.Load) and isinstance(node.value, ast.Name):
            owner = self.scope.get(node.value.id)
            if owner is not None and not isinstance(owner, (types.ModuleType, torch.nn.Module)):
                value = getattr(owner, node.attr, None)
                if isinstance(value, _CONSTANTS):
                    return self._constant(value, node)
        self.generic_visit(node)
        return node

    def _is_device(self, node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value.split(":")[0] in ("cpu", "cuda", "mps")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            return node.func.attr == "device"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            return node.func.id == "device"
        if isinstance(node, ast.Name):
            return isinstance(self.scope.get(node.id), torch.device)
        return False

    def _dropped(self, divisor):
        return isinstance(divisor, ast.Name) and divisor.id in self.dropped_divisors

    def visit_BinOp(self, node):
        if isinstance(node.op, ast.Div) and self._dropped(node.right):
            return self.visit(node.left)
        self.generic_visit(node)
        return node

    def visit_AugAssign(self, node):
        if isinstance(node.op, ast.Div) and self._dropped(node.value):
            return ast.copy_location(ast.Expr(value=ast.Constant(value=None)), node)
        self.generic_visit(node)
        return node

    def visit_Call(self, node):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in ("div", "div_", "true_divide",
                                                             "true_divide_") and \
                len(node.args) == 1 and not node.keywords and self._dropped(node.args[0]):
            return self.visit(func.value)
        self.generic_visit(node)
        if isinstance(func, ast.Attribute) and not node.keywords:
            if func.attr in ("cuda", "cpu") and not node.args:
                return func.value
            if func.attr == "to" and len(node.args) == 1 and self._is_device(node.args[0]):
                return func.value
        return node


def _rename_argument(body, name, new_name):
    """Reads of argument `name` become `new_name` up to the statement that first assigns `name`
    (its right side included): Ravnest's `targets = targets[1]` gives the name another type,
    which TorchScript refuses of one variable."""
    class Rename(ast.NodeTransformer):
        def visit_Name(self, node):
            if node.id == name and isinstance(node.ctx, ast.Load):
                return ast.copy_location(ast.Name(id=new_name, ctx=ast.Load()), node)
            return node

    for i, statement in enumerate(body):
        assigned = any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
                       for n in ast.walk(statement))
        if assigned and isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            statement.value = Rename().visit(statement.value)
            return
        if assigned:
            # Assigned inside a block: the name stays one variable, the argument's.
            body[:] = [ast.parse("%s = %s" % (name, new_name)).body[0]] + body
            return
        body[i] = Rename().visit(statement)
    return


def _string_keys(definition, name):
    """The string keys a function reads of its argument `name` (name['labels'],
    name.get('labels')), in the order written."""
    found = []
    for node in ast.walk(definition):
        key = None
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and \
                node.value.id == name:
            index = node.slice
            if type(index).__name__ == "Index":  # Python < 3.9 wraps the key
                index = index.value
            if isinstance(index, ast.Constant) and isinstance(index.value, str):
                key = index.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr == "get" and isinstance(node.func.value, ast.Name) and \
                node.func.value.id == name and node.args and \
                isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            key = node.args[0].value
        if key is not None:
            found.append((node.lineno, node.col_offset, key))
    keys = []
    for _, _, key in sorted(found):
        if key not in keys:
            keys.append(key)
    return keys


def _int_indices(definition, name):
    """The integer constants a function indexes its argument `name` with (name[0], name[1])."""
    found = set()
    for node in ast.walk(definition):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and \
                node.value.id == name:
            index = node.slice
            if type(index).__name__ == "Index":  # Python < 3.9 wraps the key
                index = index.value
            if isinstance(index, ast.Constant) and isinstance(index.value, int) and \
                    not isinstance(index.value, bool) and index.value >= 0:
                found.add(index.value)
    return found


def label_keys(function):
    """The string keys Ravnest's loss function reads of its targets (targets['labels']), in the
    order written; [] when it reads none or its source cannot be read."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return []
    definition = tree.body[0] if tree.body else None
    if not isinstance(definition, ast.FunctionDef) or len(definition.args.args) != 2:
        return []
    return _string_keys(definition, definition.args.args[1].arg)


_CRITERION_SOURCE = """import torch
from torch import Tensor
from typing import Dict, List, Tuple


class RavnestCriterion(torch.nn.Module):
    label_keys: List[str]
    label_bounds: List[int]
    label_shapes: List[List[int]]

    def criterion(self, %(preds)s: %(preds_type)s, ravnest_targets: %(targets_type)s) -> Tensor:
%(body)s

    def forward(self, outputs: %(preds_type)s, labels: Tensor) -> Tensor:
%(forward)s
"""

# forward of a loss reading targets[1] of the batch (inputs, labels).
_TUPLE_FORWARD = "        return self.criterion(outputs, (labels, labels))"
# forward of a loss reading a dict of labels: the data file holds them side by side in one
# tensor [N, width] (label_layout), cut back into the dict here.
_DICT_FORWARD = """        targets: Dict[str, Tensor] = {}
        for i in range(len(self.label_keys)):
            shape = [labels.size(0)] + self.label_shapes[i]
            part = labels[:, self.label_bounds[i]:self.label_bounds[i + 1]]
            # contiguous: the loss may view() them, as a collator's own tensors allow.
            targets[self.label_keys[i]] = part.reshape(shape).contiguous()
        return self.criterion(outputs, targets)"""


def function_loss(function, update_frequency=1, outputs=None, label_layout=None):
    """Ravnest's criterion, a plain function loss_fn(preds, targets), scripted as a module whose
    forward(outputs, labels) calls it. Its targets are the labels loader's whole batch: either
    (inputs, labels), read as targets[1] (forward calls it with (labels, labels)), or a dict
    (a Hugging Face collator's batch) read as targets['key']: the data file then holds the keys'
    tensors side by side in one tensor [N, width], label_layout [(key, sample shape), ...] in
    that order (None: one column per key, for the checks before the data is read), and forward
    cuts them back into a Dict[str, Tensor]. preds is the model's output: when the function
    indexes it (preds[0], preds[1]) a tuple of `outputs` tensors (the model's, clusterize wrote
    it) or else of as many as it reads; otherwise one tensor. Loss modules it reads from its file (Ravnest's
    loss_fct = nn.CrossEntropyLoss()) become submodules; moves to a device are dropped; a
    division by a name whose value is update_frequency (> 1; Ravnest's
    total_loss.div_(update_frequency)) is dropped, as a job weighs each loss by 1 /
    update_frequency itself. The loss runs where the outputs are, which has the labels but not
    the inputs: a function that reads targets[0] is refused, as is one TorchScript cannot
    compile."""
    name = getattr(function, "__name__", repr(function))
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        raise RavnestError("criterion: the source of %s cannot be read (define the loss function "
                           "with def in a file)" % name) from None
    definition = tree.body[0] if tree.body else None
    if not isinstance(definition, ast.FunctionDef) or len(definition.args.args) != 2 or \
            definition.args.vararg or definition.args.kwonlyargs or definition.args.kwarg:
        raise RavnestError("criterion: %s must be a function def of two arguments (preds, "
                           "targets) as in Ravnest" % name)
    preds, targets = (a.arg for a in definition.args.args)
    keys = _string_keys(definition, targets)
    if label_layout is not None:
        layout = [(str(k), [int(d) for d in shape]) for k, shape in label_layout]
    else:
        layout = [(k, []) for k in keys]
    indices = _int_indices(definition, preds)
    # A function that indexes preds reads a tuple output (of clusterize's length when known).
    arity = (outputs or max(indices) + 1) if indices else 0
    preds_type = "Tuple[%s]" % ", ".join(["Tensor"] * arity) if arity else "Tensor"
    scope = dict(function.__globals__)
    scope.update(inspect.getclosurevars(function).nonlocals)
    dropped = divides_by(function, update_frequency) if update_frequency > 1 else []
    rewrite = _CriterionSource(scope, definition, dropped)
    definition = rewrite.visit(definition)
    ast.fix_missing_locations(definition)
    _rename_argument(definition.body, targets, "ravnest_targets")
    body = "\n".join("        " + line for line in
                     "\n".join(ast.unparse(statement) for statement in definition.body)
                     .splitlines())
    source = _CRITERION_SOURCE % {
        "preds": preds, "preds_type": preds_type, "body": body,
        "targets_type": "Dict[str, Tensor]" if keys else "Tuple[Tensor, Tensor]",
        "forward": _DICT_FORWARD if keys else _TUPLE_FORWARD}
    # TorchScript reads a method's source from its file: the class is written to one.
    folder = tempfile.mkdtemp(prefix="ravnest_criterion_")
    try:
        path = os.path.join(folder, "ravnest_criterion.py")
        with open(path, "w") as f:
            f.write(source)
        spec = importlib.util.spec_from_file_location("ravnest_criterion_%d" % id(function), path)
        generated = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(generated)
        for key, value in scope.items():
            generated.__dict__.setdefault(key, value)
        module = generated.RavnestCriterion()
        bounds = [0]
        for _, shape in layout:
            bounds.append(bounds[-1] + int(torch.Size(shape).numel()))
        module.label_keys = [k for k, _ in layout]
        module.label_bounds = bounds
        module.label_shapes = [shape for _, shape in layout]
        for key, value in rewrite.modules.items():
            setattr(module, key, value)
        try:
            module = torch.jit.script(module)
        except Exception as e:  # TorchScript raises several kinds
            raise RavnestError("criterion: TorchScript cannot script %s with targets the batch "
                               "%s (%s)" % (name, "as a dict of tensors" if keys else
                                            "(inputs, labels)", str(e).strip().splitlines()[0])) \
                from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if not keys and _targets_read(module.criterion.graph, 2) - {1}:
        raise RavnestError("criterion: %s reads targets other than targets[1] (the labels); the "
                           "loss is computed on the last stage, which has the labels but not the "
                           "batch's inputs" % name)
    return module


def divides_by(function, value):
    """The names a loss function divides its result by (x / name, x.div(name), x.div_(name),
    x /= name) whose value, from its file or closure, is the int `value`: Ravnest's examples
    divide the loss by update_frequency themselves, which a job already does. [] when the source
    cannot be read."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
        scope = dict(function.__globals__)
        scope.update(inspect.getclosurevars(function).nonlocals)
    except (OSError, TypeError, SyntaxError, ValueError):
        return []
    divisors = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.BinOp, ast.AugAssign)) and isinstance(node.op, ast.Div):
            divisors.append(node.right if isinstance(node, ast.BinOp) else node.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("div", "div_", "true_divide", "true_divide_") and node.args:
            divisors.append(node.args[0])
    names = []
    for divisor in divisors:
        if isinstance(divisor, ast.Name) and divisor.id not in names:
            found = scope.get(divisor.id)
            if isinstance(found, int) and not isinstance(found, bool) and found == value:
                names.append(divisor.id)
    return names


def loss_table(criterion, work_dir, update_frequency=1, outputs=None, label_layout=None):
    """[loss]: the built-in name of a known loss module, else the module (or Ravnest's loss
    function, function_loss with the other arguments) scripted to a file."""
    if isinstance(criterion, str):
        return {"name": criterion}
    if not isinstance(criterion, torch.nn.Module) and inspect.isfunction(criterion):
        path = os.path.abspath(os.path.join(work_dir, "loss.pt"))
        os.makedirs(work_dir, exist_ok=True)
        function_loss(criterion, update_frequency, outputs, label_layout).save(path)
        return {"name": "script", "path": path}
    if not isinstance(criterion, torch.nn.Module):
        raise RavnestError("criterion: %r is neither a torch.nn.Module (forward(outputs, labels)) "
                           "nor a function loss_fn(preds, targets)" % (criterion,))
    name = _LOSSES.get(type(criterion).__name__)
    if name is not None and _is_plain(criterion):
        return {"name": name}
    if getattr(criterion, "reduction", "mean") != "mean":
        raise RavnestError("criterion: reduction=%r; a job's loss is the mean"
                           % criterion.reduction)
    try:
        scripted = torch.jit.script(criterion)
    except Exception as e:
        raise RavnestError("criterion: TorchScript cannot script %s (%s)" % (
            type(criterion).__name__, str(e).strip().splitlines()[0])) from None
    path = os.path.abspath(os.path.join(work_dir, "loss.pt"))
    os.makedirs(work_dir, exist_ok=True)
    scripted.save(path)
    return {"name": "script", "path": path}


def accuracy_is_argmax(accuracy_fn):
    """Whether Ravnest's accuracy_fn(outputs, labels) is the accuracy of the argmax over the
    class dimension (as a fraction, or in percent), which validation reports built in; probed on
    random logits of a few shapes. Refused in one line otherwise: the job cannot run Python."""
    generator = torch.Generator().manual_seed(0)
    for n, classes in ((40, 10), (17, 3), (64, 2)):
        outputs = torch.randn(n, classes, generator=generator)
        labels = torch.randint(0, classes, (n,), generator=generator)
        # A known share right: the first n // 3 labels are the argmax.
        labels[:n // 3] = outputs[:n // 3].argmax(1)
        expected = (outputs.argmax(1) == labels).double().mean().item()
        try:
            value = accuracy_fn(outputs.clone(), labels.clone())
            value = float(value.item() if isinstance(value, torch.Tensor) else value)
        except Exception as e:  # the user's function may raise anything
            raise RavnestError("Trainer: accuracy_fn fails on logits [%d, %d] and integer labels "
                               "(%s); validation computes the argmax accuracy built in, pass "
                               "accuracy_fn=None" % (n, classes,
                                                     str(e).strip().splitlines()[0])) from None
        if not any(abs(value - scale * expected) <= 1e-6 * scale for scale in (1.0, 100.0)):
            raise RavnestError("Trainer: accuracy_fn gives %.6g on logits [%d, %d] where the "
                               "argmax accuracy is %.6g; only that accuracy is computed "
                               "(validation's, docs/job-file.md): pass accuracy_fn=None"
                               % (value, n, classes, expected))
    return True

"""Node and Trainer: Ravnest's run configuration, written as a job file for `ravnest train`.

Ravnest configures each provider with Node(...) and runs Trainer(node, ...).train() on each;
here the requester runs them once: Trainer writes WORK/job.toml, WORK/train.pt and WORK/val.pt
(docs/job-file.md) and runs `ravnest train` on the plan's daemons, streaming its progress.
"""

import collections
import inspect
import json
import math
import os
import re
import sys
import warnings

import torch

from ._cli import RavnestError, run
from ._clusterize import MODEL_IO, STATE_KEYS
from ._data import (cast_inputs, check_samples, collect, drawn_once, epoch_orders,
                    first_inputs_dtype, index_order, write_tensors)
from ._recipe import (accuracy_is_argmax, divides_by, label_keys, loss_table, optimizer_table,
                      scheduler_table)
from ._recorded import (LoaderTap, RecordingNode, batch_size as recorded_batch_size,
                        recorded_inputs, recorded_labels)
from ._seed import last_seed


def note(text):
    """One line on stderr for what is accepted but not done as Ravnest does it."""
    print("ravnest: " + text, file=sys.stderr)


class Node:
    """Ravnest's Node arguments that shape the recipe (the rest is the daemon's: docs/
    ravnest-vocabulary.md). name and model are accepted and unused: the plan places the model.
    labels and test_labels are Ravnest's loaders of the loss's targets: the Trainer takes them
    from train_loader and val_loader and says so in one line when they are other objects. A
    device other than the CPU is said in one line too: each daemon computes on its own."""

    def __init__(self, name=None, model=None, optimizer=None, optimizer_params=None,
                 criterion=None, lr_scheduler=None, lr_scheduler_params=None,
                 lr_step_on_epoch_change=True, update_frequency=1, reduce_factor=None,
                 average_optim=False, compression=False, device=None, labels=None,
                 test_labels=None, loss_filename=None, **ignored):
        for name_ in sorted(ignored):
            note("Node(%s=...) is not read (not one of Ravnest's Node arguments this package "
                 "takes: docs/python.md)" % name_)
        if device is not None and torch.device(device).type != "cpu":
            note("Node(device=%s) is not read: each daemon computes on its own device "
                 "(ravnestd's, or clusterize(device=...))" % torch.device(device))
        if loss_filename is not None:
            note("Node(loss_filename=%r) is not written: the job's losses are in "
                 "runs/<job>/metrics.csv" % loss_filename)
        self.labels = labels
        self.test_labels = test_labels
        self.name = name
        self.model = model
        self.optimizer = optimizer
        self.optimizer_params = optimizer_params or {}
        self.criterion = criterion
        self.lr_scheduler = lr_scheduler
        self.lr_scheduler_params = lr_scheduler_params or {}
        self.lr_step_on_epoch_change = lr_step_on_epoch_change
        self.update_frequency = update_frequency
        self.reduce_factor = reduce_factor
        self.average_optim = average_optim
        self.compression = compression


def _toml_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise RavnestError("job: %r is not a finite number" % value)
        return repr(value)
    if isinstance(value, str):
        return '"%s"' % value.replace("\\", "\\\\").replace('"', '\\"')
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise RavnestError("job: cannot write %r in a job file" % (value,))


def job_text(tables):
    """TOML of {table: {key: value}} in the given order; None tables are left out."""
    out = []
    for name, table in tables.items():
        if table is None:
            continue
        out.append("[%s]" % name)
        out.extend("%s = %s" % (k, _toml_value(v)) for k, v in table.items())
        out.append("")
    return "\n".join(out)


class Trainer:
    """Trainer(node=Node(...) or the same arguments here, train_loader=..., val_loader=...,
    epochs=..., ...).train(). Loaders may be DataLoaders or Datasets. batch_size defaults to the
    loader's; step_size is Ravnest's micro-batch count per batch (`[train] micro_batches`, at
    most the batch size); inputs_dtype casts the inputs written. The optimizer, scheduler and
    criterion are checked here, before any data is read."""

    def __init__(self, node=None, lr_scheduler=None, lr_scheduler_params=None, train_loader=None,
                 val_loader=None, val_freq=0, save=False, epochs=1, batch_size=None, step_size=1,
                 update_frequency=None, loss_fn=None, accuracy_fn=None, optimizer=None,
                 optimizer_params=None, criterion=None, lr_step_on_epoch_change=None, seed=None,
                 shuffle=None, max_steps=None, schedule=None, plan="node_data",
                 work_dir=".ravnest", inputs_dtype=None):
        recorded = self._check_overrides()
        node = node or Node()
        if train_loader is None:
            raise RavnestError("Trainer: train_loader is required")
        if not recorded:
            # A subclass's own train() (recorded) may read dict batches: its forward_compute
            # names the inputs.
            check_samples(train_loader, "train_loader")
        if val_loader is not None:
            check_samples(val_loader, "val_loader")
        for given, used, what in ((node.labels, train_loader, "labels"),
                                  (node.test_labels, val_loader, "test_labels")):
            if given is not None and given is not used:
                note("Node(%s=...) is not read: the loss's targets are %s's batches" %
                     (what, "train_loader" if what == "labels" else "val_loader"))
        if inputs_dtype is not None and not isinstance(inputs_dtype, torch.dtype):
            raise RavnestError("Trainer: inputs_dtype=%r is not a torch.dtype" % (inputs_dtype,))
        if inputs_dtype is None and first_inputs_dtype(train_loader) == torch.float64:
            note("train_loader's inputs are float64 (NumPy's default) and are cast to float32, "
                 "the models' usual dtype: pass inputs_dtype=torch.float64 to keep them")
            inputs_dtype = torch.float32
        self.inputs_dtype = inputs_dtype
        self.plan = plan
        self.work_dir = work_dir
        # Ravnest's Trainer attributes, which a subclass's own train() reads.
        self.node = node
        self.train_loader = train_loader
        self.val_loader = val_loader
        self.epochs = int(epochs)
        self.n_forwards = 0
        self.model_io = model_io(plan)
        self.optimizer = optimizer if optimizer is not None else node.optimizer
        self.optimizer_params = optimizer_params or node.optimizer_params
        self.criterion = next(c for c in (loss_fn, criterion, node.criterion, "cross_entropy")
                              if c is not None)
        self.lr_scheduler = lr_scheduler if lr_scheduler is not None else node.lr_scheduler
        self.lr_scheduler_params = lr_scheduler_params or node.lr_scheduler_params
        self.per_epoch = (node.lr_step_on_epoch_change if lr_step_on_epoch_change is None
                          else lr_step_on_epoch_change)
        if self.optimizer is None:
            raise RavnestError("Trainer: no optimizer (pass optimizer= or a Node with one)")
        self.train_table = {"epochs": int(epochs), "micro_batches": int(step_size),
                            "update_frequency": int(update_frequency or node.update_frequency),
                            "seed": int(last_seed() if seed is None else seed),
                            "val_freq": int(val_freq)}
        if batch_size is not None:
            self.train_table["batch_size"] = int(batch_size)
        if shuffle is not None:
            self.train_table["shuffle"] = bool(shuffle)
        if max_steps is not None:
            self.train_table["max_steps"] = int(max_steps)
        if schedule is not None:
            self.train_table["schedule"] = schedule
        if node.reduce_factor is not None:
            self.train_table["reduce_factor"] = int(node.reduce_factor)
        if node.average_optim:
            self.train_table["average_optim"] = True
        self.compression = ({"activations": "fp16", "gradients": "fp16"}
                            if node.compression else None)
        if accuracy_fn is not None:
            # The common one is validation's own accuracy; any other is refused here.
            accuracy_is_argmax(accuracy_fn)
        self._check_step_size(step_size, batch_size)
        frequency = self.train_table["update_frequency"]
        if frequency > 1 and inspect.isfunction(self.criterion):
            for name in divides_by(self.criterion, frequency):
                note("criterion: %s divides the loss by %s (%d), as Ravnest needs; a job already "
                     "weighs each micro-batch's loss by 1 / update_frequency, so that division "
                     "is dropped here (the gradients are Ravnest's; the losses reported are "
                     "the undivided ones)" % (self.criterion.__name__, name, frequency))
        keys = label_keys(self.criterion) if inspect.isfunction(self.criterion) else []
        if keys and not recorded:
            raise RavnestError("criterion: %s reads %s, a dict of labels (Hugging Face's "
                               "collators give one); the Trainer's own loop gives the batch "
                               "(inputs, labels), read as targets[1]: make train_loader give "
                               "(inputs, labels), or loop in a Trainer subclass's train() "
                               "calling node.forward_compute per batch (Ravnest's BERT_Trainer)"
                               % (self.criterion.__name__,
                                  ", ".join("targets[%r]" % k for k in keys)))
        if recorded and self.lr_scheduler is not None and self.per_epoch and self.epochs > 1:
            raise RavnestError("Node(lr_step_on_epoch_change=True): %s's own train() is recorded "
                               "and its %d epochs run as one pass of the job, so a scheduler "
                               "cannot step per epoch here; pass lr_step_on_epoch_change=False "
                               "(per update)" % (type(self).__name__, self.epochs))
        # The recipe's refusals come now, before any data is read (a script loss is written to
        # WORK/loss.pt).
        self.recipe = {"loss": loss_table(self.criterion, os.path.abspath(work_dir), frequency,
                                          self.model_io.get("outputs")),
                       "optimizer": optimizer_table(self.optimizer, self.optimizer_params),
                       "scheduler": scheduler_table(self.lr_scheduler, self.lr_scheduler_params,
                                                    self.per_epoch)}
        self.job_path = None
        if recorded:
            self.train = self._recording(type(self).train)

    # What the package runs of a Trainer: a subclass that replaces one of these would run its own
    # Python where the package runs the daemons.
    _RUN = ("write_job", "evaluate", "pred", "model_fusion")

    def _check_overrides(self):
        """A subclass is taken when it adds or wraps only what the package never calls (its own
        __init__ calling this one, helpers), or replaces train() (Ravnest's BERT_Trainer, whose
        loop calls node.forward_compute): that train() is recorded (_recorded.py). One that
        replaces another method the package runs is refused in one line naming it. Returns
        whether train() is the subclass's."""
        cls = type(self)
        replaced = [m for m in self._RUN if getattr(cls, m) is not getattr(Trainer, m)]
        if replaced:
            raise RavnestError("Trainer: %s overrides %s: here the loop over train_loader runs "
                               "in the daemons (ravnest train), not in Python, so a subclass's "
                               "own %s would not run; pass the same arguments to "
                               "ravnest.Trainer and call its %s()"
                               % (cls.__name__, ", ".join(m + "()" for m in replaced),
                                  "methods" if len(replaced) > 1 else replaced[0] + "()",
                                  replaced[0]))
        return cls.train is not Trainer.train

    def prelim_checks(self):
        """Ravnest's: a stem or leaf node waits there; here the requester runs every stage."""

    def _recording(self, user_train):
        """The subclass's train() run with a RecordingNode as self.node and a LoaderTap as
        self.train_loader; the job runs at the epochs-th node.wait_for_backwards() (Ravnest's
        end of the last epoch), or when train() returns without it."""
        def train(*args, **kwargs):
            node, loader = self.node, self.train_loader
            tap = LoaderTap(loader)
            ran = []

            def on_wait(count):
                if count == self.epochs and not ran:
                    ran.append(self._run_recorded(recorder))

            recorder = RecordingNode(node, tap, self.model_io.get("inputs"), on_wait)
            self.node, self.train_loader = recorder, tap
            try:
                value = user_train(self, *args, **kwargs)
            finally:
                self.node, self.train_loader = node, loader
            if not ran:
                self._run_recorded(recorder)
            return value
        return train

    def _run_recorded(self, recorder):
        """Writes the recorded batches as the job's data and runs it (`ravnest train`)."""
        recorder.closed = "the job ran (%s's train() recorded %d batches)" % (
            type(self).__name__, len(recorder.batches))
        if not recorder.batches:
            raise RavnestError("Trainer: %s's train() called no node.forward_compute: no batch "
                               "to train on" % type(self).__name__)
        self.n_forwards = len(recorder.batches)
        job = self.write_job(recorded=recorder)
        return run(["train", job, "--plan", self.plan], stream=True)

    def _check_step_size(self, step_size, batch_size):
        """step_size is [train] micro_batches: at most the batch size, refused naming it."""
        if isinstance(step_size, bool) or not isinstance(step_size, int) or step_size < 1:
            raise RavnestError("Trainer: step_size=%r must be a whole number >= 1 (the "
                               "micro-batches each batch is cut into)" % (step_size,))
        if batch_size is None and isinstance(self.train_loader, torch.utils.data.DataLoader):
            batch_size = self.train_loader.batch_size
        if batch_size is not None and step_size > int(batch_size):
            raise RavnestError("Trainer: step_size=%d must be at most the batch size %d: here it "
                               "is the number of micro-batches each batch is cut into ([train] "
                               "micro_batches), which Ravnest's own Trainer does not read: "
                               "leave it out to train on whole batches"
                               % (step_size, int(batch_size)))

    def write_job(self, recorded=None):
        """Writes WORK/train.pt (and val.pt) and WORK/job.toml; returns the job file's path.
        recorded: a RecordingNode whose batches are the data (a subclass's own train())."""
        os.makedirs(self.work_dir, exist_ok=True)
        work = os.path.abspath(self.work_dir)
        train = dict(self.train_table)
        if recorded is not None:
            data = self._write_recorded(recorded, train, work)
        else:
            data = self._write_loader(self.train_loader, train, work)
        if self.val_loader is not None:
            v_inputs, v_labels, _ = collect(self.val_loader)
            write_tensors(os.path.join(work, "val.pt"), cast_inputs(v_inputs, self.inputs_dtype),
                          v_labels)
            data["validation"] = os.path.join(work, "val.pt")
        tables = {"train": train, "data": data, "loss": self.recipe["loss"],
                  "optimizer": self.recipe["optimizer"], "scheduler": self.recipe["scheduler"],
                  "compression": self.compression}
        self.job_path = os.path.join(work, "job.toml")
        with open(self.job_path + ".tmp", "w") as f:
            f.write(job_text(tables))
        os.replace(self.job_path + ".tmp", self.job_path)
        return self.job_path

    def _write_recorded(self, recorded, train, work):
        """WORK/train.pt of the recorded batches in the order drawn, read once in order
        ([train] epochs = 1: every epoch's batches are in the file); the loss module rewritten
        for the labels' layout when the criterion reads a dict. Returns [data]."""
        batches = recorded.batches
        keys = label_keys(self.criterion) if inspect.isfunction(self.criterion) else []
        inputs = recorded_inputs(batches)
        labels, layout = recorded_labels(batches, keys)
        size = recorded_batch_size(batches)
        if layout is not None:
            self.recipe["loss"] = loss_table(self.criterion, work, train["update_frequency"],
                                             self.model_io.get("outputs"), layout)
        if recorded.waits > 1:
            note("%s's train(): its %d epochs' %d batches, drawn as its loop drew them, run as "
                 "one pass of the job ([train] epochs = 1)" % (
                     type(self).__name__, recorded.waits, len(batches)))
        train["epochs"] = 1
        train["batch_size"] = int(size)
        train["shuffle"] = False
        write_tensors(os.path.join(work, "train.pt"), cast_inputs(inputs, self.inputs_dtype),
                      labels)
        return {"format": "tensors", "train": os.path.join(work, "train.pt")}

    def _write_loader(self, loader, train, work):
        """WORK/train.pt (and order.pt) of train_loader, as the job's loop reads it. Returns
        [data]."""
        drawn = drawn_once(loader)
        if drawn and train["epochs"] > 1:
            note("train_loader's %s run once, when the data is written: what they draw at random "
                 "is the same in every epoch (the job reads fixed tensors)" % ", ".join(drawn))
        orders = None
        if isinstance(loader, torch.utils.data.DataLoader):
            orders = epoch_orders(loader, train["epochs"])
        data = {"format": "tensors", "train": os.path.join(work, "train.pt")}
        if orders is not None:
            # The dataset in index order, each epoch's order beside it: the user's batches.
            inputs, labels, facts = collect(index_order(loader))
            torch.save(orders, os.path.join(work, "order.pt"))
            data["order"] = os.path.join(work, "order.pt")
            train["drop_last"] = bool(loader.drop_last)
        else:
            inputs, labels, facts = collect(loader)
            if (facts is not None and train["epochs"] > 1 and
                    not isinstance(loader.sampler, torch.utils.data.SequentialSampler)):
                warnings.warn("ravnest: the DataLoader's first epoch order is used for every "
                              "epoch (its sampler does not order the whole dataset once per "
                              "epoch)")
        write_tensors(os.path.join(work, "train.pt"), cast_inputs(inputs, self.inputs_dtype),
                      labels)
        if facts is not None:
            # The file holds the loader's samples: read them in order, in the loader's batches.
            train.setdefault("batch_size", int(facts["batch_size"]))
            train["shuffle"] = False
        return data

    def train(self):
        """Runs the job on the plan's daemons (`ravnest train`), its progress on stdout."""
        job = self.write_job()
        return run(["train", job, "--plan", self.plan], stream=True)

    def model_fusion(self, cluster_id=0, out=None):
        return model_fusion(cluster_id, plan=self.plan,
                            out=out or os.path.join(self.work_dir, "trained"))

    def evaluate(self, cluster_id=0):
        """Loss and accuracy of the trained model of `cluster_id` on the validation data (the
        training data without a val_loader): `ravnest fuse`, then `ravnest evaluate`. Returns
        {"loss": ..., "accuracy": ... (when there is one), "samples": ...}."""
        if self.job_path is None:
            self.write_job()
        out = os.path.join(self.work_dir, "trained")
        model_fusion(cluster_id, plan=self.plan, out=out)
        args = ["evaluate", fused_model(out, self.plan), self.job_path]
        if self.val_loader is None:
            args.append("--train-data")
        text = run(args)
        print(text.strip())
        return _parse_evaluation(text)

    def pred(self, data, cluster_id=0):
        """The model's outputs for `data` (a tensor of inputs, a Dataset or a DataLoader) through
        the daemons of `cluster_id` (`ravnest predict`)."""
        if self.job_path is None:
            self.write_job()
        work = os.path.abspath(self.work_dir)
        if isinstance(data, torch.Tensor):
            inputs, labels = data, torch.zeros(data.shape[0], dtype=torch.int64)
        elif isinstance(data, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in data):
            inputs, labels = tuple(data), torch.zeros(data[0].shape[0], dtype=torch.int64)
        else:
            inputs, labels, _ = collect(data)
        path = os.path.join(work, "predict_data.pt")
        write_tensors(path, cast_inputs(inputs, self.inputs_dtype), labels)
        out = os.path.join(work, "predictions.pt")
        run(["predict", self.plan, path, "--job", self.job_path, "--out", out,
             "--cluster", cluster_id])
        return torch.load(out)


def _parse_evaluation(text):
    """`ravnest evaluate`'s line "MODEL on DATA: loss L, accuracy A (N samples)" as a dict."""
    result = {}
    for key, value in re.findall(r"\b(loss|accuracy) ([-+0-9.eE]+|nan|inf)", text):
        result[key] = float(value)
    samples = re.search(r"\((\d+) samples\)", text)
    if samples:
        result["samples"] = int(samples.group(1))
    return result


def fused_model(out, plan):
    """The fused model `ravnest fuse` wrote into `out` for `plan`: model.pt2 when the plan's
    model came from torch.export (a zip holding models/*.json), model.pt for TorchScript."""
    import zipfile
    try:
        with open(os.path.join(plan, "plan.json")) as f:
            model_path = json.load(f)["model"]
        with zipfile.ZipFile(model_path) as archive:
            exported = any("/models/" in "/" + name and name.endswith(".json")
                           for name in archive.namelist())
    except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile):
        exported = False
    return os.path.join(out, "model.pt2" if exported else "model.pt")


def model_io(plan):
    """clusterize's model_io.json beside the plan's model ({} when it is not there)."""
    try:
        with open(os.path.join(plan, "plan.json")) as f:
            model_path = json.load(f)["model"]
        with open(os.path.join(os.path.dirname(model_path), MODEL_IO)) as f:
            found = json.load(f)
        return found if isinstance(found, dict) else {}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def model_fusion(cluster_id=0, plan="node_data", out="trained"):
    """The trained state dict of cluster `cluster_id` (`ravnest fuse`, then torch.load), as
    Ravnest's model_fusion; out/model.pt2 (torch.export) or out/model.pt (TorchScript) is the
    fused model."""
    run(["fuse", "--cluster", cluster_id, "--plan", plan, "--out", out])
    state = torch.load(os.path.join(out, "trained_state_dict.pt"))
    return user_state(state, plan)


def user_state(state, plan):
    """The fused state dict cut to the names the user's model has (clusterize wrote them beside
    the plan's model.pt): TorchScript keeps every buffer, persistent=False ones too, which the
    user's load_state_dict(strict=True) would refuse. Unchanged when the names are not there."""
    try:
        with open(os.path.join(plan, "plan.json")) as f:
            model_path = json.load(f)["model"]
        with open(os.path.join(os.path.dirname(model_path), STATE_KEYS)) as f:
            names = json.load(f)
    except (OSError, ValueError, KeyError, TypeError):
        return state
    if not set(names) <= set(state):
        return state  # another model's names: leave the state dict whole
    return collections.OrderedDict((name, state[name]) for name in names)

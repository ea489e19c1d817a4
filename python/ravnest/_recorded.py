"""A Trainer subclass's own train() (Ravnest's BERT_Trainer), recorded into the job's batches.

Ravnest's BERT example replaces Trainer.train() with its own loop:

    self.prelim_checks()
    for epoch in range(self.epochs):
        for batch in self.train_loader:
            self.node.forward_compute(input_ids=batch['input_ids'], ...)
        self.node.wait_for_backwards()

Here the loop runs once in the user's process with a RecordingNode as self.node and a LoaderTap
as self.train_loader: each forward_compute call is one batch of the job, its keywords mapped to
the model's inputs by name (clusterize's model_io.json), and its labels are the batch the
train_loader yielded for it (Ravnest's leaf iterates Node(labels=train_loader), seeded as the
root, so it reads that same batch). Every epoch's batches are recorded as the loop drew them:
the loader's shuffle and a collator's random masking are drawn per epoch, as in the user's loop.
What cannot be recorded (no_grad_forward_compute, other Node methods, a forward_compute outside
an iteration of train_loader, keywords that are not the model's inputs) is refused in one line.
All of it is pure Python on the user's objects; nothing here runs a command.
"""

import collections.abc

import torch

from ._cli import RavnestError


class LoaderTap:
    """train_loader as the user's train() sees it: iterating it iterates the loader and keeps
    the batch it yielded last (`current`), None between iterations. Everything else is the
    loader's."""

    def __init__(self, loader):
        self.loader = loader
        self.current = None

    def __iter__(self):
        try:
            for batch in self.loader:
                self.current = batch
                yield batch
        finally:
            self.current = None

    def __len__(self):
        return len(self.loader)

    def __getattr__(self, name):
        return getattr(self.loader, name)


class RecordingNode:
    """self.node while the user's train() runs: forward_compute records (inputs, labels batch);
    wait_for_backwards counts epochs and calls on_epochs(count) (which may run the job)."""

    def __init__(self, node, tap, input_names, on_wait):
        self.node = node
        self.tap = tap
        self.input_names = input_names
        self.on_wait = on_wait
        self.batches = []  # [(inputs tuple, labels batch)]
        self.waits = 0
        self.n_forwards = 0
        self.closed = None  # why no more batches can be recorded

    def forward_compute(self, tensors=None, **kwargs):
        if self.closed:
            raise RavnestError("Node.forward_compute: called after %s" % self.closed)
        if self.tap.current is None:
            raise RavnestError("Node.forward_compute: called while no batch of train_loader is "
                               "being iterated; its labels are the batch train_loader yielded "
                               "(Ravnest's Node(labels=train_loader)), so call it inside "
                               "`for batch in self.train_loader`")
        self.batches.append((self.inputs(tensors, kwargs), self.tap.current))
        self.n_forwards += 1

    def inputs(self, tensors, kwargs):
        """The call's inputs as a tuple in the model's order."""
        if tensors is not None and kwargs:
            raise RavnestError("Node.forward_compute: give tensors= or the model's inputs by "
                               "name, not both")
        if tensors is not None:
            parts = tuple(tensors) if isinstance(tensors, (tuple, list)) else (tensors,)
        else:
            if self.input_names is None:
                raise RavnestError("Node.forward_compute(%s): the model's input names are not "
                                   "known (clusterize the model with this package, with "
                                   "example_kwargs or a forward whose signature can be read)"
                                   % ", ".join("%s=..." % k for k in kwargs))
            unknown = [k for k in kwargs if k not in self.input_names]
            missing = [k for k in self.input_names if k not in kwargs]
            if unknown or missing:
                raise RavnestError("Node.forward_compute: the model's inputs are %s (as "
                                   "clusterize took them); %s" % (
                                       ", ".join(self.input_names),
                                       "not inputs: " + ", ".join(unknown) if unknown else
                                       "missing: " + ", ".join(missing)))
            parts = tuple(kwargs[k] for k in self.input_names)
        for i, part in enumerate(parts):
            if not isinstance(part, torch.Tensor):
                raise RavnestError("Node.forward_compute: input %d is a %s, not a tensor"
                                   % (i, type(part).__name__))
        return tuple(p.detach().cpu() for p in parts)

    def wait_for_backwards(self):
        self.waits += 1
        self.on_wait(self.waits)

    def no_grad_forward_compute(self, *args, **kwargs):
        raise RavnestError("Node.no_grad_forward_compute: not recorded from a Trainer's own "
                           "train(); pass val_loader to the Trainer (the job's validation)")

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = getattr(self.node, name, None)
        if value is not None and not callable(value):
            return value
        raise RavnestError("Node.%s: not recorded from a Trainer's own train(); only "
                           "forward_compute and wait_for_backwards are (the job runs the rest)"
                           % name)


def _tensors_of(batch):
    """A batch's tensors by key: a dict (BatchEncoding too) as it is, else None."""
    if isinstance(batch, collections.abc.Mapping):
        return {k: v for k, v in batch.items()}
    if hasattr(batch, "keys") and hasattr(batch, "__getitem__"):  # UserDict-like
        return {k: batch[k] for k in batch.keys()}
    return None


def recorded_labels(batches, keys):
    """(labels tensor [N, width] of all recorded batches, label_layout [(key, sample shape)])
    for a loss reading targets[key] for `keys`: each batch's keys' tensors flattened per sample
    and set side by side (function_loss's forward cuts them back). With no keys, the labels of
    (inputs, labels) batches, and layout None."""
    if not keys:
        labels = []
        for i, (_, batch) in enumerate(batches):
            if _tensors_of(batch) is not None or not isinstance(batch, (tuple, list)) or \
                    len(batch) != 2:
                raise RavnestError("data: train_loader's batch %d is not (inputs, labels), and "
                                   "the criterion reads no targets['key']" % i)
            y = batch[1]
            labels.append(y if isinstance(y, torch.Tensor) else torch.as_tensor(y))
        return _join(labels, "labels"), None
    layout, rows = None, []
    for i, (_, batch) in enumerate(batches):
        tensors = _tensors_of(batch)
        if tensors is None:
            raise RavnestError("data: train_loader's batch %d is a %s; the criterion reads %s "
                               "of a dict" % (i, type(batch).__name__,
                                              ", ".join("targets[%r]" % k for k in keys)))
        absent = [k for k in keys if k not in tensors]
        if absent:
            raise RavnestError("data: train_loader's batch %d has no %s (it has %s), which the "
                               "criterion reads" % (i, ", ".join(absent),
                                                    ", ".join(str(k) for k in tensors)))
        parts = [torch.as_tensor(tensors[k]) for k in keys]
        dtypes = sorted({str(p.dtype) for p in parts})
        if len(dtypes) > 1:
            raise RavnestError("data: the criterion's targets %s have different dtypes (%s); "
                               "one tensor of labels holds them here" % (
                                   ", ".join(keys), ", ".join(dtypes)))
        shapes = [(k, list(p.shape[1:])) for k, p in zip(keys, parts)]
        if layout is None:
            layout = shapes
        elif shapes != layout:
            raise RavnestError("data: train_loader's batch %d has targets of other sample shapes "
                               "(%s) than the first batch's (%s); pad them alike (a collator's "
                               "pad_to_multiple_of or max_length)" % (i, shapes, layout))
        rows.append(torch.cat([p.reshape(p.shape[0], -1) for p in parts], dim=1))
    return _join(rows, "labels"), layout


def recorded_inputs(batches):
    """The inputs of all recorded batches, one tensor per model input (a tuple when several)."""
    count = {len(inputs) for inputs, _ in batches}
    if len(count) != 1:
        raise RavnestError("Node.forward_compute: called with different numbers of inputs")
    joined = tuple(_join([inputs[k] for inputs, _ in batches], "inputs")
                   for k in range(count.pop()))
    return joined if len(joined) > 1 else joined[0]


def batch_size(batches):
    """The recorded batches' size: all the same but maybe the last (a loader without
    drop_last), else refused (the job cuts its file in batches of one size)."""
    sizes = [inputs[0].shape[0] if inputs[0].dim() else 1 for inputs, _ in batches]
    if any(s != sizes[0] for s in sizes[:-1]) or sizes[-1] > sizes[0]:
        raise RavnestError("data: the recorded batches have sizes %s: the job reads them in "
                           "batches of one size, the last one smaller at most; make "
                           "train_loader with drop_last=True" % sorted(set(sizes)))
    return sizes[0]


def _join(parts, what):
    try:
        return torch.cat(parts)
    except RuntimeError as e:
        raise RavnestError("data: the %s of the recorded batches do not join (%s); pad them "
                           "alike (a collator's pad_to_multiple_of or max_length)" % (
                               what, str(e).splitlines()[0])) from None

"""Datasets and DataLoaders -> the job file's tensors format (docs/job-file.md#formats).

A DataLoader is iterated once, with its own sampler and generator, so that the file holds the
samples in the order the user's loader gives them; the job then reads it in that order
(shuffle = false) in the loader's batches. A Dataset is read in index order. Inputs and labels are
saved as the tuple (inputs, labels) that LibTorch reads; a sample whose input is a tuple or list
gives a tuple of input tensors (a model with several inputs).
"""

import torch

from ._cli import RavnestError


def _cat(parts, what):
    try:
        return torch.cat(parts)
    except RuntimeError as e:
        raise RavnestError("data: the %s of the batches do not join (%s)" % (
            what, str(e).splitlines()[0])) from None


def _split(item, where):
    if not isinstance(item, (tuple, list)) or len(item) != 2:
        raise RavnestError("data: %s gives %s; expected (inputs, labels)" % (
            where, type(item).__name__))
    return item[0], item[1]


def _as_tensor(value):
    return value if isinstance(value, torch.Tensor) else torch.as_tensor(value)


def collect(data):
    """(inputs, labels, loader facts) from a DataLoader or a Dataset; inputs is a tensor or a
    tuple of tensors. facts: batch_size and drop_last of a loader, else None."""
    if isinstance(data, torch.utils.data.DataLoader):
        xs, ys = [], []
        for batch in data:
            x, y = _split(batch, "the DataLoader")
            xs.append(tuple(x) if isinstance(x, (tuple, list)) else x)
            ys.append(_as_tensor(y))
        if not xs:
            raise RavnestError("data: the DataLoader gives no batch")
        facts = {"batch_size": data.batch_size, "drop_last": data.drop_last}
    else:
        xs, ys = [], []
        for i in range(len(data)):
            x, y = _split(data[i], "dataset[%d]" % i)
            xs.append(tuple(_as_tensor(t).unsqueeze(0) for t in x) if isinstance(x, (tuple, list))
                      else _as_tensor(x).unsqueeze(0))
            ys.append(_as_tensor(y).reshape(1, *_as_tensor(y).shape))
        if not xs:
            raise RavnestError("data: the dataset is empty")
        facts = None
    if isinstance(xs[0], tuple):
        inputs = tuple(_cat([x[k] for x in xs], "inputs") for k in range(len(xs[0])))
    else:
        inputs = _cat(xs, "inputs")
    labels = _cat(ys, "labels")
    return inputs, labels, facts


def write_tensors(path, inputs, labels):
    torch.save((inputs, labels), path)

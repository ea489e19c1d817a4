"""Datasets and DataLoaders -> the job file's tensors format (docs/job-file.md#formats).

A shuffling DataLoader gives the dataset in index order and each epoch's order as the user's loop
would draw it ([data] order, epoch_orders); any other DataLoader is iterated once, with its own
sampler and generator, so that the file holds the samples in the order the loader gives them; the
job then reads it in that order (shuffle = false) in the loader's batches. A Dataset is read in index order. Inputs and labels are
saved as the tuple (inputs, labels) that LibTorch reads; a sample whose input is a tuple or list
gives a tuple of input tensors (a model with several inputs).
"""

import collections.abc

import torch

from ._cli import RavnestError


def _cat(parts, what):
    try:
        return torch.cat(parts)
    except RuntimeError as e:
        raise RavnestError("data: the %s of the batches do not join (%s)" % (
            what, str(e).splitlines()[0])) from None


def _dict_refusal(where, item):
    return RavnestError("data: %s gives a dict (%s), as Hugging Face's collators do; a sample "
                        "here is (inputs, labels): inputs a tensor or a tuple of them in "
                        "forward's order, labels one tensor (docs/python.md)"
                        % (where, ", ".join(str(k) for k in list(item)[:6])))


def _split(item, where):
    if isinstance(item, collections.abc.Mapping):
        raise _dict_refusal(where, item)
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


def _draws_seed(loader, epoch):
    """Whether iter(loader) draws its base seed from loader.generator in this epoch: always, but
    persistent workers make their iterator once (_BaseDataLoaderIter._reset draws none)."""
    return epoch == 0 or not (loader.persistent_workers and loader.num_workers > 0)


def epoch_orders(loader, epochs):
    """Each epoch's sample order as the user's loop `for epoch ...: for batch in loader` draws
    it, as an int64 tensor [epochs, len(dataset)], advancing the loader's generator as PyTorch
    does: each iter(loader) makes the batch sampler's iterator, draws the iterator's base seed
    from loader.generator, then the sampler draws its permutation. None when the loader reads in
    index order (SequentialSampler) or its batches are not a permutation of the dataset cut in
    batch_size (a sampler with replacement or over a subset, a batch sampler of its own, an
    IterableDataset): then the first epoch's order is written as the data."""
    if isinstance(loader.dataset, torch.utils.data.IterableDataset):
        return None
    if isinstance(loader.sampler, torch.utils.data.SequentialSampler):
        return None
    if loader.batch_sampler is None or not loader.batch_size:
        return None
    n, size = len(loader.dataset), int(loader.batch_size)
    rows = []
    for epoch in range(epochs):
        batches = iter(loader.batch_sampler)
        if _draws_seed(loader, epoch):
            torch.empty((), dtype=torch.int64).random_(generator=loader.generator)
        batches = [list(b) for b in batches]
        order = [int(i) for b in batches for i in b]
        if any(len(b) != size for b in batches[:-1]) or len(set(order)) != len(order):
            return None
        missing = sorted(set(range(n)) - set(order))
        # drop_last: BatchSampler left out the order's last n % batch_size samples; the job
        # drops them again (drop_last = true), so any order of them does.
        if missing and not (loader.drop_last and len(missing) < size):
            return None
        if len(order) + len(missing) != n:
            return None
        rows.append(order + missing)
    return torch.tensor(rows, dtype=torch.int64)


def check_samples(data, what):
    """Refuses, before the data pass, a loader or dataset whose samples are dicts (a Hugging
    Face dataset's rows, which a collator makes into dict batches), reading its first sample
    from the dataset without iterating a DataLoader (that would draw from its generator). Other
    samples, and datasets that cannot be indexed, are left to the data pass."""
    dataset = data.dataset if isinstance(data, torch.utils.data.DataLoader) else data
    try:
        sample = dataset[0]
    except Exception:  # an iterable dataset, or one that cannot be indexed
        return
    if isinstance(sample, collections.abc.Mapping):
        raise _dict_refusal(what, sample)


def first_inputs_dtype(data):
    """The dtype of the first sample's inputs (the first of a tuple), read from the dataset
    without iterating a DataLoader (that would draw from its generator); None when unknown."""
    dataset = data.dataset if isinstance(data, torch.utils.data.DataLoader) else data
    try:
        x, _ = _split(dataset[0], "dataset[0]")
    except Exception:  # an iterable dataset, or one that cannot be indexed
        return None
    if isinstance(x, (tuple, list)):
        x = x[0] if x else None
    try:
        return _as_tensor(x).dtype
    except Exception:
        return None


def drawn_once(data):
    """What in a loader draws at random per sample and is run once here, when the data is
    written: the dataset's torchvision-style transforms named Random* (in a Compose too), and a
    DataLoader's own collate_fn (BERT's masking collator). Names, for one line."""
    dataset = data.dataset if isinstance(data, torch.utils.data.DataLoader) else data
    found = []
    for attr in ("transform", "transforms", "target_transform"):
        transform = getattr(dataset, attr, None)
        parts = getattr(transform, "transforms", None)
        for part in (parts if isinstance(parts, (list, tuple)) else [transform]):
            name = type(part).__name__
            if part is not None and name.startswith("Random") and name not in found:
                found.append(name)
    if isinstance(data, torch.utils.data.DataLoader):
        collate = data.collate_fn
        default = getattr(torch.utils.data, "default_collate",
                          getattr(torch.utils.data._utils.collate, "default_collate", None))
        if collate is not None and collate is not default:
            found.append("collate_fn " + getattr(collate, "__name__", type(collate).__name__))
    return found


def cast_inputs(inputs, dtype):
    """Ravnest's inputs_dtype: a tensor of inputs cast to dtype; in a tuple, its floating ones."""
    if dtype is None:
        return inputs
    if isinstance(inputs, tuple):
        return tuple(t.to(dtype) if t.is_floating_point() else t for t in inputs)
    return inputs.to(dtype)


def index_order(loader):
    """A DataLoader over loader's dataset in index order, in its batches and with its collate_fn
    (the samples are the loader's; only their order differs)."""
    return torch.utils.data.DataLoader(loader.dataset, batch_size=loader.batch_size,
                                       shuffle=False, collate_fn=loader.collate_fn)


def write_tensors(path, inputs, labels):
    torch.save((inputs, labels), path)

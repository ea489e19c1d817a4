"""set_seed: Ravnest's set_seed(seed), which also becomes the job's [train] seed.

Ravnest seeds Python's, NumPy's and torch's generators in every provider; here the same is done
in the user's process (the DataLoader's shuffling and the model's initial weights are drawn
there), and the value is kept: a Trainer made without seed= runs its job with it (`[train]
seed`, the daemons' torch.manual_seed for dropout and the like).
"""

import random

import torch

_seed = None


def set_seed(seed=42):
    """random.seed, numpy.random.seed (when NumPy is there), torch.manual_seed (CUDA's too)."""
    global _seed
    random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    try:
        import numpy
        numpy.random.seed(seed)
    except ImportError:
        pass
    _seed = int(seed)


def last_seed(default=0):
    """The seed set_seed was last called with, else `default`."""
    return default if _seed is None else _seed

#!/usr/bin/python3
"""Models whose embeddings cannot live on a server, for test_hybrid: OUT_DIR/<name>.pt.

  computed.pt     the indices are computed in the model (indices + 1) before the lookup
  also_dense.pt   the indices input also feeds the dense part (indices.float())
  renormed.pt     an nn.Embedding with max_norm (which rescales the table in place)
  padded.pt       an nn.Embedding with a padding_idx
  matmul.pt       the table's weight multiplied densely besides the lookup
  two_inputs.pt   fine: two tables, each on its own input (and offsets-free 2-D bags)
"""

import os
import sys

import torch
import torch.nn as nn


class Computed(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 4)

    def forward(self, indices):
        return self.emb(indices + 1).sum(1)


class AlsoDense(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 4)

    def forward(self, indices):
        return self.emb(indices).sum(1) + indices.float().sum(1, keepdim=True)


class Renormed(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 4, max_norm=1.0)

    def forward(self, indices):
        return self.emb(indices).sum(1)


class Padded(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 4, padding_idx=0)

    def forward(self, indices):
        return self.emb(indices).sum(1)


class Matmul(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 4)

    def forward(self, indices):
        return self.emb(indices).sum(1) @ self.emb.weight.t()


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.users = nn.EmbeddingBag(30, 4, mode="mean")
        self.items = nn.Embedding(20, 4)

    def forward(self, users, items):
        return self.users(users) * self.items(items).sum(1)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, cls in [("computed", Computed), ("also_dense", AlsoDense), ("renormed", Renormed),
                      ("padded", Padded), ("matmul", Matmul), ("two_inputs", TwoInputs)]:
        torch.jit.script(cls()).save(os.path.join(out, name + ".pt"))


if __name__ == "__main__":
    main()

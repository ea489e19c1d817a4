#!/usr/bin/python3
"""Prepare the hybrid example (docs/parameter-server.md#hybrid): seed 004's model and data made
here, without downloading anything.

Usage: make_data.py --out DIR [--seed N]

Writes
  DIR/hybrid.pt     HybridModel, scripted: an nn.EmbeddingBag(100, 16, mode="sum") (the sparse
                    part, which the plan puts on a server) and a 16 -> 8 nn.Linear (the dense
                    part, data-parallel over the trainers). forward(indices [N, 8] int64) returns
                    (logits [N, 8], penalty), penalty = ||W^T W - I||^2 for the Linear's weight
                    seen as the 16 x 8 Stiefel variable W, as cdopt's Linear_cdopt keeps it.
  DIR/loss.pt       the TorchScript loss: cross entropy + 0.5 * penalty (cdopt's penalty_param).
  DIR/train.pt, DIR/val.pt   (indices, labels) tuples for the job's "tensors" format: bags of 8
                    indices in [0, 100); each index has a fixed random class in [0, 8) and a
                    bag's label is its most frequent class (the smallest on ties), which a sum
                    of embeddings followed by a linear layer can learn.
Files are written atomically (tmp + os.replace). Run with /usr/bin/python3.
"""

import argparse
import os
import sys

sys.dont_write_bytecode = True

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

NUM_EMBEDDINGS = 100
EMBEDDING_DIM = 16
BAG = 8


class HybridModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.EmbeddingBag(NUM_EMBEDDINGS, EMBEDDING_DIM, mode="sum")
        self.fc = nn.Linear(EMBEDDING_DIM, 8)

    def forward(self, indices):
        w = self.fc.weight.t()
        penalty = ((w.t() @ w - torch.eye(8)) ** 2).sum()
        return self.fc(self.emb(indices)), penalty


class PenalisedLoss(nn.Module):
    def forward(self, outputs: tuple[torch.Tensor, torch.Tensor], labels: torch.Tensor):
        return F.cross_entropy(outputs[0], labels) + 0.5 * outputs[1]


def save(obj, path, script=False):
    tmp = path + ".tmp"
    if script:
        obj.save(tmp)
    else:
        torch.save(obj, tmp)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--samples", type=int, default=1600)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    g = torch.Generator().manual_seed(args.seed)
    torch.manual_seed(args.seed)
    model = HybridModel()
    save(torch.jit.script(model), os.path.join(args.out, "hybrid.pt"), script=True)
    save(torch.jit.script(PenalisedLoss()), os.path.join(args.out, "loss.pt"), script=True)
    code = torch.randint(0, 8, (NUM_EMBEDDINGS,), generator=g)
    indices = torch.randint(0, NUM_EMBEDDINGS, (args.samples, BAG), generator=g)
    votes = torch.nn.functional.one_hot(code[indices], 8).sum(1)
    labels = votes.argmax(1)  # the first maximum: the smallest class on ties
    split = args.samples * 4 // 5
    save((indices[:split].clone(), labels[:split].clone()), os.path.join(args.out, "train.pt"))
    save((indices[split:].clone(), labels[split:].clone()), os.path.join(args.out, "val.pt"))
    print("wrote hybrid.pt, loss.pt, train.pt (%d bags of %d), val.pt (%d)" %
          (split, BAG, args.samples - split))


if __name__ == "__main__":
    main()

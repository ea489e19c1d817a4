#!/usr/bin/python3
"""PyTorch's own optimizers on sparse gradients, the reference of test_sparse_optimizer.

Usage: sparse_optimizer_reference.py OUT NAME SHAPE... 

Builds a seeded float32 table of SHAPE (e.g. 100 16, or 50 3 4), runs 6 steps of NAME
(sgd | adagrad | sparse_adam, with the options test_sparse_optimizer.cpp uses) on random
coalesced sparse gradients (some rows repeated across steps, most never touched, one step with
no rows for sgd: PyTorch 1.13's Adagrad and SparseAdam fail on one), and saves with torch.save a tuple: (initial table, ids_1, grad_1, table_1, ..., ids_6,
grad_6, table_6).
"""

import sys

import torch


def main():
    out, name = sys.argv[1], sys.argv[2]
    shape = [int(x) for x in sys.argv[3:]]
    g = torch.Generator().manual_seed(11)
    table = torch.nn.Parameter(torch.randn(*shape, generator=g))
    if name == "sgd":
        opt = torch.optim.SGD([table], lr=0.3)
    elif name == "adagrad":
        opt = torch.optim.Adagrad([table], lr=0.2, lr_decay=0.05, initial_accumulator_value=0.3,
                                  eps=1e-10)
    else:
        opt = torch.optim.SparseAdam([table], lr=0.05, betas=(0.8, 0.95), eps=1e-7)
    saved = [table.detach().clone()]
    rows = shape[0]
    for step in range(6):
        # Adagrad and SparseAdam of PyTorch 1.13 fail on a sparse gradient without rows.
        empty = step == 3 and name == "sgd"
        count = 0 if empty else 1 + int(torch.randint(0, rows // 3, (1,), generator=g))
        ids = torch.randperm(rows // 2, generator=g)[:count].sort().values  # the lower half only
        values = torch.randn(count, *shape[1:], generator=g)
        grad = torch.sparse_coo_tensor(ids.unsqueeze(0), values, table.shape).coalesce()
        table.grad = grad
        opt.step()
        saved += [ids.clone(), values.clone(), table.detach().clone()]
    torch.save(tuple(saved), out)


if __name__ == "__main__":
    main()

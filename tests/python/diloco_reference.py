#!/usr/bin/python3
"""DiLoCo (Douillard et al. 2023, arXiv 2311.08105) in plain PyTorch, one process, K workers.

Usage: diloco_reference.py JOB.toml MODEL.pt CLUSTERS OUT_STATE.pt

Written from the paper's Algorithm 1, independently of the C++ (libs/training/outer_optimizer.h):
K copies of the model, copy k trains on its data shard with its own inner optimizer ([optimizer])
and its own random stream; after every H = [outer] every inner updates, and after the last
one, the outer gradient Delta = mean_k(theta_global - theta_k) goes to
torch.optim.SGD([theta_global], lr, momentum, nesterov) as theta_global.grad, one step, and every
copy takes theta_global. BatchNorm buffers are averaged at each outer step (ravnest's choice;
docs/data-parallel.md#diloco). At the end the copies' parameters and buffers are averaged once
more, as every ravnest data-parallel mode ends (a no-op here: they are already equal).

What must match the daemons, beside reference_train.py's rules (batch order, micro-batches, loss
weighting, eager TorchScript):
  - shard k: torch.randperm(n) from a generator seeded with epoch_seed(seed, -2), the k-th of K
    contiguous parts of n // K samples (libs/data/batch_order.h shard_indices); each epoch's
    order is over the shard's positions;
  - every copy's random stream starts from torch.manual_seed(seed);
  - an average is the sum in copy order, then one division (integers: floor division).
Supports [data] format "csv" and "tensors", no scheduler per epoch subtleties beyond
reference_train.py's, no autocast or clipping.
"""

import os
import sys
import tomllib

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_train import (epoch_seed, load_csv, load_tensors, loss_fn, make_optimizer,  # noqa: E402
                             make_scheduler, resolve, tensor_split_ranges)


def average(tensors):
    total = tensors[0].clone()
    for t in tensors[1:]:
        total.add_(t)
    if total.is_floating_point():
        return total.div_(len(tensors))
    return total.div(len(tensors), rounding_mode="floor").to(total.dtype)


def main() -> int:
    job_path, model_path, clusters, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    with open(job_path, "rb") as f:
        job = tomllib.load(f)
    job_dir = os.path.dirname(os.path.abspath(job_path))
    t, data, outer = job.get("train", {}), job["data"], job["outer"]
    epochs, batch_size = t.get("epochs", 1), t.get("batch_size", 64)
    micro, uf, seed = t.get("micro_batches", 1), t.get("update_frequency", 1), t.get("seed", 0)
    shuffle, drop_last = t.get("shuffle", True), t.get("drop_last", False)
    H = outer.get("every", outer.get("H", outer.get("inner_steps")))
    nesterov = outer.get("name", "nesterov") == "nesterov"

    torch._C._set_graph_executor_optimize(False)
    if data["format"] == "csv":
        xs, y = load_csv(resolve(job_dir, data["train"]), data)
    else:
        xs, y = load_tensors(resolve(job_dir, data["train"]))
    n = y.shape[0]
    g = torch.Generator()
    g.manual_seed(epoch_seed(seed, -2))
    perm = torch.randperm(n, generator=g)
    per_shard = n // clusters

    workers = []
    for k in range(clusters):
        torch.manual_seed(seed)
        model = torch.jit.load(model_path)
        model.train()
        params, seen = [], set()
        for p in model.parameters():
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                params.append(p)
        opt = make_optimizer(job["optimizer"], params)
        sched, per = make_scheduler(job.get("scheduler"), opt)
        opt.zero_grad()
        workers.append({"model": model, "params": params, "opt": opt, "sched": sched, "per": per,
                        "shard": perm[k * per_shard:(k + 1) * per_shard],
                        "rng": torch.get_rng_state()})

    # theta_global: one copy, stepped by the outer optimizer.
    global_params = [torch.nn.Parameter(p.detach().clone()) for p in workers[0]["params"]]
    outer_opt = torch.optim.SGD(global_params, lr=outer["lr"], momentum=outer.get("momentum", 0.9),
                                nesterov=nesterov)

    def buffers(w):
        return list(w["model"].buffers())

    def outer_step():
        with torch.no_grad():
            for i, gp in enumerate(global_params):
                gp.grad = average([gp.detach() - w["params"][i].detach() for w in workers])
            for per_copy in zip(*[buffers(w) for w in workers]):
                a = average(list(per_copy))
                for b in per_copy:
                    b.copy_(a)
        outer_opt.step()
        with torch.no_grad():
            for w in workers:
                for p, gp in zip(w["params"], global_params):
                    p.copy_(gp)

    per_epoch = (per_shard // batch_size if drop_last
                 else (per_shard + batch_size - 1) // batch_size)
    total = per_epoch * epochs
    if "max_steps" in t:
        total = min(total, t["max_steps"])
    done = pending = updates = 0
    for epoch in range(epochs):
        if done >= total:
            break
        if shuffle:
            ge = torch.Generator()
            ge.manual_seed(epoch_seed(seed, epoch))
            order = torch.randperm(per_shard, generator=ge)
        else:
            order = torch.arange(per_shard)
        for b in range(per_epoch):
            if done >= total:
                break
            positions = order[b * batch_size:(b + 1) * batch_size]
            for w in workers:
                torch.set_rng_state(w["rng"])
                idx = w["shard"].index_select(0, positions)
                bx = [x.index_select(0, idx) for x in xs]
                by = y.index_select(0, idx)
                bn = idx.shape[0]
                for s, e in tensor_split_ranges(bn, micro):
                    loss = loss_fn(job["loss"], w["model"](*[x[s:e] for x in bx]), by[s:e])
                    (loss * ((e - s) / bn / uf)).backward()
                w["rng"] = torch.get_rng_state()
            done += 1
            pending += 1
            last = done == total
            if pending == uf or last:
                for w in workers:
                    w["opt"].step()
                    w["opt"].zero_grad()
                    if w["sched"] is not None and w["per"] == "update":
                        w["sched"].step()
                pending = 0
                updates += 1
                if updates % H == 0 or last:
                    outer_step()
            if b + 1 == per_epoch:
                for w in workers:
                    if w["sched"] is not None and w["per"] == "epoch":
                        w["sched"].step()

    with torch.no_grad():
        states = [w["model"].state_dict() for w in workers]
        for name in states[0]:
            a = average([s[name] for s in states])
            for s in states:
                s[name].copy_(a)
    torch.save({k: v.detach().clone() for k, v in workers[0]["model"].state_dict().items()}, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

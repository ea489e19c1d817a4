#!/usr/bin/python3
"""The baseline of bench/ps: seed 003's synchronous parameter server in torch.distributed (gloo),
on this machine, timed per step.

Usage: torch_ps.py --data DIR --workers N --steps S [--batch-size B]

DIR is what examples/ps/make_data.py writes (mnist/ and lenet.pt). Rank 0 is the server: every
step it broadcasts the step's weights, each worker computes the gradient of one batch of its own
shard (the same shards as ravnest's workers) and sends it back (gather), the server averages them
and steps SGD (lr 0.05, momentum 0.9). Prints the median time per step over the steps after the
first two. Only 127.0.0.1.
"""

import argparse
import os
import socket
import statistics
import struct
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F


def read_idx(path):
    with open(path, "rb") as f:
        magic = struct.unpack(">I", f.read(4))[0]
        dims = struct.unpack(">" + "I" * (magic & 0xFF), f.read(4 * (magic & 0xFF)))
        return np.frombuffer(f.read(), dtype=np.uint8).reshape(dims)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(rank, world, port, data, steps, batch, out):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = torch.jit.load(os.path.join(data, "lenet.pt"))
    params = list(model.parameters())
    workers = world - 1
    if rank == 0:
        opt = torch.optim.SGD(params, lr=0.05, momentum=0.9)
    else:
        images = torch.from_numpy(read_idx(os.path.join(data, "mnist", "train-images-idx3-ubyte")).copy())
        labels = torch.from_numpy(read_idx(os.path.join(data, "mnist", "train-labels-idx1-ubyte")).copy()).long()
        mine = torch.arange(rank - 1, len(labels), workers)
        images = images[mine].float().unsqueeze(1) / 255.0
        labels = labels[mine]
    times = []
    for step in range(steps):
        start = time.perf_counter()
        for p in params:  # the server's weights to everybody
            dist.broadcast(p.data, src=0)
        if rank == 0:
            grads = []
            for p in params:
                gathered = [torch.zeros_like(p) for _ in range(world)]
                dist.gather(torch.zeros_like(p), gather_list=gathered, dst=0)
                grads.append(sum(gathered[1:]) / workers)
            for p, g in zip(params, grads):
                p.grad = g
            opt.step()
        else:
            at = (step * batch) % max(1, len(labels) - batch)
            for p in params:
                p.grad = None
            F.cross_entropy(model(images[at:at + batch]), labels[at:at + batch]).backward()
            for p in params:
                dist.gather(p.grad, dst=0)
        dist.barrier()
        times.append(time.perf_counter() - start)
    if rank == 0:
        out.put(statistics.median(times[2:]) if len(times) > 2 else times[-1])
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()
    world = args.workers + 1
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    port = free_port()
    procs = [ctx.Process(target=run, args=(r, world, port, args.data, args.steps,
                                            args.batch_size, out)) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=600)
    if any(p.exitcode != 0 for p in procs):
        sys.exit("torch_ps.py: a process failed")
    seconds = out.get()
    print("torch.distributed (gloo), 1 server + %d workers: %.2f ms per step" %
          (args.workers, seconds * 1000))


if __name__ == "__main__":
    main()

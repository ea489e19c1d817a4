#!/usr/bin/python3
"""A traced model's job ends on every stage (issue 43 item 11).

Usage: package_traced_end.py WORK_DIR [ROUNDS]   (the package on PYTHONPATH; $RAVNEST_BIN or
$RAVNEST_BINARY_DIR names the binary; /usr/bin/python3 or a torch 2.x venv)

The issue's model as it describes it: a 3-stage MLP of Linear, BatchNorm1d, Dropout and a lambda
activation (so that TorchScript cannot script it and the package traces it), batch 50, 600
samples, 3 epochs, SGD, on `ravnest.local(nodes=3)`. There the root and the leaf logged "job
finished" and the middle stage never did: the requester waited forever (3 of 3 runs at 16977ae).
Not reproduced since (22 runs on both builds, on a loaded machine, with and without a validation
loader); this trains it ROUNDS times each way, every job bounded by the caller's timeout, and
checks that every stage's daemon logged the job's end.
"""

import glob
import os
import sys
import time

import torch
import torch.nn as nn

import ravnest


class Lambda(nn.Module):
    def __init__(self, f):
        super().__init__()
        self.f = f

    def forward(self, x):
        return self.f(x)


def main():
    work = os.path.abspath(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    os.makedirs(work, exist_ok=True)
    os.chdir(work)
    torch.manual_seed(0)
    x = torch.randn(600, 20)
    y = torch.randint(0, 3, (600,))
    model = nn.Sequential(nn.Linear(20, 64), nn.BatchNorm1d(64), Lambda(lambda t: torch.relu(t)),
                          nn.Dropout(0.2), nn.Linear(64, 64), Lambda(lambda t: torch.tanh(t)),
                          nn.Linear(64, 3))
    train_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y),
                                               batch_size=50)
    val_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x[:100], y[:100]),
                                             batch_size=50)
    failures = []
    with ravnest.local(nodes=3):
        # TorchScript's tracing is the case (torch.export records no trace).
        ravnest.clusterize(model, example_args=(x[:50],), stages=3, format="torchscript")
        for r in range(rounds):
            for validation in (val_loader, None):
                trainer = ravnest.Trainer(
                    node=ravnest.Node(optimizer=torch.optim.SGD, optimizer_params={"lr": 0.05},
                                      criterion=nn.CrossEntropyLoss()),
                    train_loader=train_loader, val_loader=validation, epochs=3)
                begin = time.time()
                trainer.train()
                print("package_traced_end: round %d %s validation: trained in %.1f s" % (
                    r + 1, "with" if validation is not None else "without", time.time() - begin))
    # Every daemon's log says the job finished as many times as jobs ran.
    logs = sorted(glob.glob(os.path.join(work, "node_data", "local", "node_*", "ravnestd.log")))
    if len(logs) != 3:
        failures.append("%d daemon logs under node_data/local, not 3" % len(logs))
    for log in logs:
        with open(log) as f:
            ended = f.read().count("job finished")
        if ended != 2 * rounds:
            failures.append("%s says \"job finished\" %d times for %d jobs" % (
                os.path.basename(os.path.dirname(log)), ended, 2 * rounds))
    print("package_traced_end: torch %s, %d jobs, every stage finished each: %s" % (
        torch.__version__, 2 * rounds, "no" if failures else "yes"))
    for failure in failures:
        print("package_traced_end: FAILED " + failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""A Ravnest user's script through the `ravnest` Python package (python/ravnest), checked.

Usage: package_user.py DIGITS_TRAIN_CSV WORK_DIR   (the package on PYTHONPATH; $RAVNEST_BIN or
$RAVNEST_BINARY_DIR names the binary; run with /usr/bin/python3 or a torch 2.x venv)

The user's part is what a Ravnest script holds: a model class, a DataLoader with its own
generator (shuffling: a new order each epoch), an optimizer, a criterion,
clusterize(model, example_args, stages=3), a Trainer of two epochs, train(), model_fusion(). It
runs on three daemons of `ravnest.local` cut in three stages, then checks that the fused state
dict loads strictly into the user's class and equals the same script's two epochs trained in one
process with plain PyTorch (so every epoch's batches were the user's); that pred() equals the
fused model's forward; and prints the figures.
"""

import copy
import csv
import json
import os
import sys

import torch
import torch.nn as nn

import ravnest

EPOCHS = 2  # a shuffling DataLoader: each epoch's order is its own ([data] order)

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 64)
        self.fc2 = nn.Linear(64, 64)
        self.fc3 = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def read_digits(path, rows):
    with open(path) as f:
        reader = csv.reader(f)
        next(reader)
        data = [[float(v) for v in row] for _, row in zip(range(rows), reader)]
    x = torch.tensor([r[:-1] for r in data], dtype=torch.float32) / 16
    y = torch.tensor([int(r[-1]) for r in data], dtype=torch.int64)
    return x, y


def loaders(x, y):
    train = torch.utils.data.TensorDataset(x[:192], y[:192])
    val = torch.utils.data.TensorDataset(x[192:256], y[192:256])
    generator = torch.Generator().manual_seed(7)
    return (torch.utils.data.DataLoader(train, batch_size=32, shuffle=True, generator=generator),
            torch.utils.data.DataLoader(val, batch_size=32))


def main():
    csv_path, work = sys.argv[1], sys.argv[2]
    x, y = read_digits(csv_path, 256)
    torch.manual_seed(0)
    model = Net()
    reference = copy.deepcopy(model)
    os.makedirs(work, exist_ok=True)
    os.chdir(work)

    # The user's script, through the package.
    train_loader, val_loader = loaders(x, y)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    with ravnest.local(nodes=3):
        ravnest.clusterize(model, example_args=(x[:32],), stages=3, memory_probe=False)
        with open("node_data/plan.json") as f:
            clusters = json.load(f)["clusters"]
        stages = len(clusters[0]["nodes"]) if len(clusters) == 1 else -len(clusters)
        assert stages == 3, "expected 3 stages, the plan has %d" % stages
        trainer = ravnest.Trainer(node=ravnest.Node(optimizer=optimizer, criterion=criterion),
                                  train_loader=train_loader, val_loader=val_loader,
                                  epochs=EPOCHS)
        trainer.train()
        state_dict = ravnest.model_fusion(cluster_id=0)
        predictions = trainer.pred(x[192:256])
        evaluation = trainer.evaluate()

    fused = Net()
    fused.load_state_dict(state_dict, strict=True)

    # The same script in one process.
    train_loader, _ = loaders(x, y)
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    for _ in range(EPOCHS):
        for xb, yb in train_loader:
            loss = criterion(reference(xb), yb)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    worst = max((fused.state_dict()[k] - v).abs().max().item()
                for k, v in reference.state_dict().items())
    fused.eval()
    with torch.no_grad():
        pred_diff = (predictions - fused(x[192:256])).abs().max().item()
    exported = os.path.exists(os.path.join(".ravnest", "model.pt2"))
    print("package_user: torch %s, the model as %s, 3 stages, %d epochs, fused vs one process: "
          "max |diff| %.3g over %d tensors; pred() vs fused forward %.3g; evaluate %s" % (
              torch.__version__, "torch.export (.pt2)" if exported else "TorchScript", EPOCHS,
              worst, len(state_dict), pred_diff, evaluation))
    # Debian's PyTorch runs LibTorch's kernels: the same weights; 2.x may differ in the last bits.
    tolerance = 0 if torch.__version__.startswith("1.13") else 1e-5
    assert worst <= tolerance, "fused weights differ from PyTorch's by %g" % worst
    with open(".ravnest/job.toml") as f:
        assert "order = " in f.read(), "the job has no [data] order"
    assert pred_diff <= 1e-6, "pred() differs from the fused model by %g" % pred_diff
    assert "loss" in evaluation and "accuracy" in evaluation, evaluation
    return 0


if __name__ == "__main__":
    sys.exit(main())

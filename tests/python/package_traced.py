#!/usr/bin/python3
"""A model the package must trace evaluates in eval mode, and validation leaves its weights alone.

Usage: package_traced.py DIGITS_TRAIN_CSV WORK_DIR   (the package on PYTHONPATH; $RAVNEST_BIN or
$RAVNEST_BINARY_DIR names the binary; /usr/bin/python3 or a torch 2.x venv)

An MLP with BatchNorm1d and Dropout whose forward(*inputs) TorchScript cannot script, so
clusterize traces it after model.train(); its scriptable twin (forward(x)) is scripted. Each is
trained over three stages of `ravnest.local` for two epochs, with a val_loader and (the traced
one) without. Checked (libs/torch_support/traced_mode.h):
  - validation changes no trained weight: the traced model's fused state dict with a val_loader
    equals the one without, exactly (a trace frozen in training mode drew dropout masks and
    moved BatchNorm's running statistics and num_batches_tracked during validation);
  - the fused state dict loaded into the user's class in eval() is the answer: `ravnest evaluate`
    (trainer.evaluate()), the job's last validation loss, trainer.pred() and the fused
    trained/model.pt in eval() (twice: no dropout) all equal it;
  - the scripted twin trains to the same weights as the traced model;
  - model_fusion's state dict loads strictly into the user's class although the model has a
    buffer registered persistent=False (TorchScript keeps it as any other).
"""

import copy
import csv
import glob
import os
import sys

import torch
import torch.nn as nn

import ravnest

EPOCHS = 2


class Traced(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 32)
        self.bn = nn.BatchNorm1d(32)
        self.drop = nn.Dropout(0.3)
        self.fc2 = nn.Linear(32, 32)
        self.fc3 = nn.Linear(32, 10)
        # Not in the state dict; TorchScript keeps it as a buffer all the same.
        self.register_buffer("scale", torch.ones(10), persistent=False)

    def body(self, x):
        return self.fc3(torch.relu(self.fc2(self.drop(torch.relu(self.bn(self.fc1(x))))))) * \
            self.scale

    def forward(self, *inputs):  # varargs: TorchScript cannot script this, the package traces it
        return self.body(inputs[0])


class Scripted(Traced):
    def forward(self, x):
        return self.body(x)


def read_digits(path, rows):
    with open(path) as f:
        reader = csv.reader(f)
        next(reader)
        data = [[float(v) for v in row] for _, row in zip(range(rows), reader)]
    x = torch.tensor([r[:-1] for r in data], dtype=torch.float32) / 16
    y = torch.tensor([int(r[-1]) for r in data], dtype=torch.int64)
    return x, y


def last_validation_loss(work):
    """The job's last val_loss in its metrics.csv."""
    paths = sorted(glob.glob(os.path.join(work, "**", "metrics.csv"), recursive=True),
                   key=os.path.getmtime)
    assert paths, "no metrics.csv under %s" % work
    with open(paths[-1]) as f:
        rows = [r for r in csv.DictReader(f) if r.get("val_loss")]
    assert rows, "no validation row in %s" % paths[-1]
    return float(rows[-1]["val_loss"])


def train(cls, initial, x, y, with_validation, name):
    plan, work = "plan_" + name, ".ravnest_" + name
    model = cls()
    model.load_state_dict(initial)
    train_set = torch.utils.data.TensorDataset(x[:192], y[:192])
    val_set = torch.utils.data.TensorDataset(x[192:256], y[192:256])
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=32)
    val_loader = torch.utils.data.DataLoader(val_set, batch_size=64) if with_validation else None
    # The TorchScript path's tracing is what this checks (torch.export records no trace).
    ravnest.clusterize(model, example_args=(x[:32],), stages=3, memory_probe=False, out=plan,
                       work_dir=work, format="torchscript")
    trainer = ravnest.Trainer(node=ravnest.Node(optimizer=torch.optim.SGD,
                                                optimizer_params={"lr": 0.1},
                                                criterion=nn.CrossEntropyLoss()),
                              train_loader=train_loader, val_loader=val_loader, epochs=EPOCHS,
                              plan=plan, work_dir=work)
    trainer.train()
    result = {"state": ravnest.model_fusion(cluster_id=0, plan=plan,
                                            out=os.path.join(work, "trained"))}
    if with_validation:
        result["evaluate"] = trainer.evaluate()["loss"]
        result["validation"] = last_validation_loss(".")
        result["pred"] = trainer.pred(x[192:256])
        fused = torch.jit.load(os.path.join(work, "trained", "model.pt"))
        fused.eval()
        with torch.no_grad():
            result["model_pt"] = (fused(x[192:256]), fused(x[192:256]))
    return result


def main():
    csv_path, work = sys.argv[1], os.path.abspath(sys.argv[2])
    x, y = read_digits(csv_path, 256)
    torch.manual_seed(0)
    initial = copy.deepcopy(Traced().state_dict())
    os.makedirs(work, exist_ok=True)
    os.chdir(work)
    with ravnest.local(nodes=3):
        traced = train(Traced, initial, x, y, True, "traced")
        unvalidated = train(Traced, initial, x, y, False, "unvalidated")
        scripted = train(Scripted, initial, x, y, True, "scripted")

    def worst(a, b):
        return max((a[k].double() - b[k].double()).abs().max().item() for k in a)

    moved = worst(traced["state"], unvalidated["state"])
    twin = worst(traced["state"], scripted["state"])
    failures = []
    for name, run in (("traced", traced), ("scripted", scripted)):
        user = Traced()
        user.load_state_dict(run["state"], strict=True)
        user.eval()
        with torch.no_grad():
            outputs = user(x[192:256])
            loss = nn.functional.cross_entropy(outputs, y[192:256]).item()
        figures = {
            "ravnest evaluate": abs(run["evaluate"] - loss),
            "job validation": abs(run["validation"] - loss),
            "pred()": (run["pred"] - outputs).abs().max().item(),
            "model.pt": (run["model_pt"][0] - outputs).abs().max().item(),
            "model.pt twice": (run["model_pt"][0] - run["model_pt"][1]).abs().max().item(),
        }
        print("package_traced: torch %s, %s: eval-mode loss %.6f; |diff| %s" % (
            torch.__version__, name, loss,
            ", ".join("%s %.3g" % (k, v) for k, v in figures.items())))
        failures += ["%s: %s differs by %g" % (name, k, v) for k, v in figures.items() if v > 1e-5]
    print("package_traced: validation moved the traced model's weights by %.3g; scripted twin "
          "vs traced %.3g" % (moved, twin))
    if moved != 0:
        failures.append("validation changed the traced model's weights by %g" % moved)
    if twin > 1e-6:
        failures.append("the scripted twin trained to other weights (%g)" % twin)
    for failure in failures:
        print("package_traced: FAILED " + failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

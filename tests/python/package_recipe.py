#!/usr/bin/python3
"""The Python package's pure parts (python/ravnest), without a daemon: torch objects -> job tables.

Usage: package_recipe.py   (the package on PYTHONPATH; Debian's python3 or a torch 2.x venv)

Each torch optimizer, scheduler and loss the job file can hold maps to its table with the values
the object holds (the lr before a scheduler changed it); what it cannot hold is refused with a
RavnestError naming it; clusterize's argument list carries --stages/--clusters when asked.
"""

import contextlib
import functools
import io
import os
import sys
import tempfile

import torch

import ravnest
from ravnest._cli import binary
from ravnest._clusterize import clusterize_args, positional_examples, script_or_trace
from ravnest._recipe import loss_table, optimizer_table, scheduler_table
from ravnest._data import collect, epoch_orders
from ravnest._trainer import _parse_evaluation, job_text


def doubled(t):
    try:
        return t * 2
    except RuntimeError:
        return t


# Ravnest's criteria (examples/cnn and examples/sorter): targets is the labels loader's batch.
def cnn_loss_fn(preds, targets):
    return torch.nn.functional.mse_loss(preds, targets[1])


def sorter_criterion(outputs, targets):
    return torch.nn.functional.cross_entropy(outputs.view(-1, outputs.size(-1)),
                                             targets[1].view(-1), ignore_index=-1)


# examples/resnet50 and inception_v3: a loss module of the file, the labels moved to the GPU.
loss_fct = torch.nn.CrossEntropyLoss()


def resnet_loss_fn(preds, targets):
    targets = targets[1].to(torch.device('cuda'))
    return loss_fct(preds, targets)


def reads_inputs(preds, targets):
    x, y = targets
    return (preds - x.mean()).pow(2).mean()


# transformers' optimization.py (not a dependency here), as Ravnest's BERT example imports it.
def _get_linear_schedule_with_warmup_lr_lambda(current_step, *, num_warmup_steps,
                                               num_training_steps):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    return max(0.0, float(num_training_steps - current_step) /
               float(max(1, num_training_steps - num_warmup_steps)))


def get_linear_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps,
                                    last_epoch=-1):
    lr_lambda = functools.partial(_get_linear_schedule_with_warmup_lr_lambda,
                                  num_warmup_steps=num_warmup_steps,
                                  num_training_steps=num_training_steps)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda, last_epoch)


# examples/bert divides its loss by update_frequency itself, as Ravnest needs.
update_frequency = 4


class Config:  # transformers' BertConfig, read for its numbers
    vocab_size = 10


config = Config()


def divided_loss_fn(preds, targets):
    loss = loss_fct(preds.view(-1, config.vocab_size), targets[1].view(-1))
    loss.div_(update_frequency)
    return loss


# examples/bert: the labels loader's batch is a collator's dict.
def bert_loss_fn(y_pred, targets):
    labels = targets['labels']
    sentence_order_label = targets.get('sentence_order_label')
    return loss_fct(y_pred[0].view(-1, 30), labels.view(-1)) + \
        loss_fct(y_pred[1].view(-1, 2), sentence_order_label.view(-1))


# examples/bert/provider.py's loss_fn, reading its globals loss_fct, config and update_frequency.
def dict_loss_fn(y_pred, targets):
    targets = targets.to(torch.device('cuda'))
    labels = targets['labels']
    sentence_order_label = targets['sentence_order_label']

    masked_lm_loss = loss_fct(y_pred[0].view(-1, config.vocab_size), labels.view(-1))
    sentence_order_loss = loss_fct(y_pred[1].view(-1, 2), sentence_order_label.view(-1))
    total_loss = masked_lm_loss + sentence_order_loss
    total_loss.div_(update_frequency)
    return total_loss


class OnCpu(dict):
    def to(self, device):
        return self


class BERT_Trainer(ravnest.Trainer):  # examples/bert/bert_trainer.py
    def __init__(self, node=None, train_loader=None, epochs=1, **kwargs):
        super().__init__(node=node, train_loader=train_loader, epochs=epochs, **kwargs)

    def train(self):
        self.prelim_checks()
        for epoch in range(self.epochs):
            for batch in self.train_loader:
                self.node.forward_compute(input_ids=batch['input_ids'],
                                          attention_mask=batch['attention_mask'])
            self.node.wait_for_backwards()
        print('BERT Training Done!')


def recorded_checks():
    """A Trainer subclass's own train() recorded without a daemon (`ravnest train` replaced by
    a stand-in): the batches as its loop drew them, every epoch's random masking its own; the
    dict labels and tuple outputs through the scripted loss; its refusals in one line."""
    import json
    import ravnest._trainer as trainer_module

    class Rows(torch.utils.data.Dataset):  # a tokenized dataset's rows
        def __len__(self):
            return 8

        def __getitem__(self, i):
            ids = torch.arange(6) % 5 + i % 3 + 1
            return {"input_ids": ids, "attention_mask": torch.ones(6, dtype=torch.long),
                    "sentence_order_label": i % 2}

    def masking(rows):  # a masking collator: draws from torch's generator per batch
        batch = {k: torch.stack([torch.as_tensor(r[k]) for r in rows]) for k in rows[0]}
        chosen = torch.rand(batch["input_ids"].shape) < 0.3
        batch["labels"] = torch.where(chosen, batch["input_ids"], torch.full_like(
            batch["input_ids"], -100))
        batch["input_ids"] = torch.where(chosen, torch.zeros_like(batch["input_ids"]),
                                         batch["input_ids"])
        return batch

    def loader():
        generator = torch.Generator().manual_seed(3)
        return torch.utils.data.DataLoader(Rows(), batch_size=4, shuffle=True,
                                           collate_fn=masking, generator=generator)

    with tempfile.TemporaryDirectory() as work:
        plan, model_dir = os.path.join(work, "plan"), os.path.join(work, "model")
        os.makedirs(plan)
        os.makedirs(model_dir)
        with open(os.path.join(plan, "plan.json"), "w") as f:
            json.dump({"model": os.path.join(model_dir, "model.pt2")}, f)
        with open(os.path.join(model_dir, "model_io.json"), "w") as f:
            json.dump({"inputs": ["input_ids", "attention_mask"], "outputs": 2}, f)
        node = ravnest.Node(optimizer="adam", criterion=dict_loss_fn, update_frequency=4,
                            labels=None, device=torch.device("cuda"))
        ran = []
        real_run = trainer_module.run
        trainer_module.run = lambda args, stream=False: ran.append(args) or ""
        try:
            torch.manual_seed(5)
            trainer = BERT_Trainer(node=node, train_loader=loader(), epochs=2, plan=plan,
                                   work_dir=os.path.join(work, "w"))
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                trainer.train()
            assert len(ran) == 1 and ran[0][0] == "train", ran
            assert trainer.node is node and trainer.n_forwards == 4
            # The user's loop again, in one process: the same batches, masks drawn per epoch.
            torch.manual_seed(5)
            again = loader()
            batches = [b for _ in range(2) for b in again]
            inputs, labels = torch.load(os.path.join(work, "w", "train.pt"))
            assert torch.equal(inputs[0], torch.cat([b["input_ids"] for b in batches]))
            assert torch.equal(inputs[1], torch.cat([b["attention_mask"] for b in batches]))
            assert not torch.equal(inputs[0][:8], inputs[0][8:]), "the masks were drawn once"
            job = open(os.path.join(work, "w", "job.toml")).read()
            assert "epochs = 1" in job and "shuffle = false" in job and "batch_size = 4" in job
            scripted = torch.jit.load(os.path.join(work, "w", "loss.pt"))
            outputs = (torch.randn(4, 6, config.vocab_size), torch.randn(4, 2))
            for i, batch in enumerate(batches):
                got = scripted(outputs, labels[4 * i:4 * i + 4])
                want = dict_loss_fn(outputs, OnCpu(batch)) * update_frequency
                assert torch.allclose(got, want, rtol=0, atol=1e-6), (i, got, want)
            # What cannot be recorded, in one line each.
            trainer = BERT_Trainer(node=node, train_loader=loader(), epochs=2, plan=plan,
                                   work_dir=os.path.join(work, "w"))
            for call, needle in (
                    (lambda n, b: n.forward_compute(input_ids=b["input_ids"]),
                     "missing: attention_mask"),
                    (lambda n, b: n.forward_compute(input_ids=b["input_ids"], attention_mask=b[
                        "attention_mask"], position_ids=b["input_ids"]),
                     "not inputs: position_ids"),
                    (lambda n, b: n.no_grad_forward_compute(tensors=b["input_ids"]),
                     "Node.no_grad_forward_compute: not recorded"),
                    (lambda n, b: n.comm_session, "Node.comm_session: not recorded")):
                class Odd(ravnest.Trainer):
                    def train(self):
                        for batch in self.train_loader:
                            call(self.node, batch)

                refused(Odd(node=node, train_loader=loader(), plan=plan).train, needle)

            class Outside(ravnest.Trainer):
                def train(self):
                    self.node.forward_compute(input_ids=torch.zeros(4, 6, dtype=torch.long),
                                              attention_mask=torch.zeros(4, 6, dtype=torch.long))

            refused(Outside(node=node, train_loader=loader(), plan=plan).train,
                    "Node.forward_compute: called while no batch of train_loader is being "
                    "iterated")
            refused(lambda: BERT_Trainer(node=ravnest.Node(
                optimizer="adam", criterion=dict_loss_fn, lr_scheduler="step",
                lr_scheduler_params={"step_size": 1}), train_loader=loader(), epochs=2,
                plan=plan), "Node(lr_step_on_epoch_change=True): BERT_Trainer's own train()")
        finally:
            trainer_module.run = real_run


def refused(call, needle):
    try:
        call()
    except ravnest.RavnestError as e:
        assert needle in str(e) and "\n" not in str(e), str(e)
        return
    raise AssertionError("not refused: " + needle)


def main():
    # Issue 43 (low): a $RAVNEST_BIN naming no executable was a raw FileNotFoundError at the
    # first command; it is a RavnestError naming it.
    saved = os.environ.get("RAVNEST_BIN")
    os.environ["RAVNEST_BIN"] = "/nonexistent/ravnest"
    try:
        refused(binary, "$RAVNEST_BIN (/nonexistent/ravnest)")
    finally:
        if saved is None:
            del os.environ["RAVNEST_BIN"]
        else:
            os.environ["RAVNEST_BIN"] = saved

    params = list(torch.nn.Linear(3, 2).parameters())
    adam = torch.optim.Adam(params, lr=0.01, betas=(0.8, 0.99), weight_decay=0.1)
    warmup = torch.optim.lr_scheduler.LinearLR(adam, start_factor=0.25, total_iters=4)
    assert optimizer_table(adam) == {"name": "adam", "lr": 0.01, "betas": [0.8, 0.99],
                                     "eps": 1e-8, "weight_decay": 0.1, "amsgrad": False}, \
        optimizer_table(adam)
    assert scheduler_table(warmup) == {"name": "linear_warmup", "warmup_steps": 4,
                                       "start_factor": 0.25, "per": "epoch"}
    sgd = torch.optim.SGD(params, lr=0.1, momentum=0.9, nesterov=True)
    assert optimizer_table(sgd)["nesterov"] is True and optimizer_table(sgd)["name"] == "sgd"
    assert optimizer_table(torch.optim.RMSprop, {"lr": 0.01})["name"] == "rmsprop"
    assert optimizer_table("adamw", {"lr": 0.01}) == {"name": "adamw", "lr": 0.01}
    step = torch.optim.lr_scheduler.StepLR(sgd, step_size=3, gamma=0.5)
    assert scheduler_table(step, per_epoch=False) == {"name": "step", "step_size": 3,
                                                      "gamma": 0.5, "per": "update"}
    assert scheduler_table(torch.optim.lr_scheduler.MultiStepLR, {"milestones": [5, 2]}) == \
        {"name": "multistep", "milestones": [2, 5], "gamma": 0.1, "per": "epoch"}
    assert scheduler_table(torch.optim.lr_scheduler.CosineAnnealingLR, {"T_max": 10})["t_max"] == 10
    assert loss_table(torch.nn.CrossEntropyLoss(), ".") == {"name": "cross_entropy"}
    assert loss_table(torch.nn.MSELoss(), ".") == {"name": "mse"}
    with tempfile.TemporaryDirectory() as work:
        smoothed = loss_table(torch.nn.CrossEntropyLoss(label_smoothing=0.1), work)
        assert smoothed["name"] == "script", smoothed
        loaded = torch.jit.load(smoothed["path"])
        out, labels = torch.randn(4, 3), torch.tensor([0, 2, 1, 1])
        assert torch.equal(loaded(out, labels),
                           torch.nn.CrossEntropyLoss(label_smoothing=0.1)(out, labels))

    # torch_optimizer.Lamb, Ravnest's BERT example's: the class with its optimizer_params, or
    # the object (clamp_value, adam and debias are its attributes). Another package's Lamb is not it.
    bert_lamb = {"lr": 0.00176, "eps": 1e-6, "debias": True, "weight_decay": 0.01,
                 "clamp_value": 10000.0}
    try:
        import torch_optimizer
    except ImportError:  # Debian's Python
        torch_optimizer = None
    if torch_optimizer is not None:
        assert optimizer_table(torch_optimizer.Lamb, bert_lamb) == dict(name="lamb", **bert_lamb)
        lamb = torch_optimizer.Lamb(params, betas=(0.8, 0.99), **bert_lamb)
        assert optimizer_table(lamb) == dict(name="lamb", betas=[0.8, 0.99], adam=False,
                                             **bert_lamb), optimizer_table(lamb)
    assert optimizer_table("lamb", bert_lamb) == dict(name="lamb", **bert_lamb)
    other_lamb = type("Lamb", (torch.optim.Optimizer,), {"__module__": "timm.optim.lamb"})
    refused(lambda: optimizer_table(other_lamb, {"lr": 0.01}), "timm.optim.lamb.Lamb is not "
            "torch_optimizer.Lamb")
    refused(lambda: optimizer_table("lamb", {"amsgrad": True}), "amsgrad is not an option of lamb")
    refused(lambda: optimizer_table(torch.optim.Adamax(params)), "Adamax")
    refused(lambda: optimizer_table(torch.optim.SGD(params, lr=0.1, maximize=True)), "maximize")
    refused(lambda: optimizer_table(torch.optim.SGD(
        [{"params": params[:1], "lr": 0.1}, {"params": params[1:], "lr": 0.2}])), "groups")
    refused(lambda: optimizer_table("adam", {"momentum": 0.9}), "momentum")
    refused(lambda: scheduler_table(torch.optim.lr_scheduler.LambdaLR(sgd, lambda e: 1.0)),
            "lr_scheduler: LambdaLR whose lr_lambda (<lambda>) is Python")
    # transformers' linear warm-up and decay: the function with Ravnest's lr_scheduler_params
    # (its BERT example), or the LambdaLR it made; per update with lr_step_on_epoch_change=False.
    linear = {"name": "warmup_linear", "warmup_steps": 5000, "total_steps": 90000, "per": "update"}
    assert scheduler_table(get_linear_schedule_with_warmup,
                           {"num_warmup_steps": 5000, "num_training_steps": 90000},
                           per_epoch=False) == linear
    assert scheduler_table(get_linear_schedule_with_warmup(
        torch.optim.SGD(params, lr=0.1), 0, 7)) == {"name": "warmup_linear", "warmup_steps": 0,
                                                    "total_steps": 7, "per": "epoch"}
    refused(lambda: scheduler_table(get_linear_schedule_with_warmup, {"num_warmup_steps": 5}),
            "get_linear_schedule_with_warmup(optimizer, **lr_scheduler_params) fails")
    refused(lambda: scheduler_table(get_linear_schedule_with_warmup(sgd, 2, 0)),
            "num_training_steps=0")

    # A function of transformers' name that computes something else is not taken for it.
    def _get_linear_schedule_with_warmup_lr_lambda_other(step, *, num_warmup_steps,
                                                         num_training_steps):
        return 1.0 if step >= num_warmup_steps else step / num_warmup_steps
    _get_linear_schedule_with_warmup_lr_lambda_other.__name__ = \
        "_get_linear_schedule_with_warmup_lr_lambda"
    refused(lambda: scheduler_table(torch.optim.lr_scheduler.LambdaLR(sgd, functools.partial(
        _get_linear_schedule_with_warmup_lr_lambda_other, num_warmup_steps=3,
        num_training_steps=9))), "lr_lambda (_get_linear_schedule_with_warmup_lr_lambda) is Python")
    refused(lambda: scheduler_table(torch.optim.lr_scheduler.LinearLR(
        sgd, start_factor=1.0, end_factor=0.5)), "end_factor")
    with tempfile.TemporaryDirectory() as work:
        out, onehot = torch.randn(5, 10), torch.eye(10)[torch.tensor([1, 0, 3, 3, 9])]
        table = loss_table(cnn_loss_fn, work)
        assert table["name"] == "script", table
        assert torch.equal(torch.jit.load(table["path"])(out, onehot),
                           cnn_loss_fn(out, (None, onehot)))
        logits, tokens = torch.randn(2, 6, 3), torch.tensor([[0, 1, 2, -1, -1, 1]] * 2)
        table = loss_table(sorter_criterion, work)
        assert torch.equal(torch.jit.load(table["path"])(logits, tokens),
                           sorter_criterion(logits, (None, tokens)))
        table = loss_table(resnet_loss_fn, work)
        labels = torch.tensor([1, 0, 3, 3, 9])
        assert torch.equal(torch.jit.load(table["path"])(out, labels), loss_fct(out, labels))
    refused(lambda: loss_table(reads_inputs, "."), "targets[1]")
    refused(lambda: loss_table(lambda o, l: o.sum(), "."), "def")
    refused(lambda: loss_table(3, "."), "nn.Module")
    refused(lambda: loss_table(torch.nn.L1Loss(reduction="sum"), "."), "reduction")

    args = clusterize_args("m.pt", ["e.pt"], "pool.json", "node_data", 3, 1, True, True, False,
                           None)
    assert args[args.index("--stages") + 1] == 3 and args[args.index("--clusters") + 1] == 1
    assert "--push" in args and "--verify" in args and "--no-memory-probe" in args
    assert "--stages" not in clusterize_args("m.pt", [], "p", "o", None, None, False, False,
                                             True, None)
    assert job_text({"train": {"epochs": 2, "shuffle": False}, "scheduler": None}) == \
        "[train]\nepochs = 2\nshuffle = false\n"
    assert _parse_evaluation("m.pt on v.pt: loss 0.5, accuracy 0.25 (64 samples)\n") == \
        {"loss": 0.5, "accuracy": 0.25, "samples": 64}
    # Data: a Dataset in index order; a DataLoader in the order its own generator gives, batches
    # joined; two inputs a sample give a tuple of two tensors.
    xs, ys = torch.randn(10, 3), torch.arange(10)
    dataset = torch.utils.data.TensorDataset(xs, ys)
    inputs, labels, facts = collect(dataset)
    assert torch.equal(inputs, xs) and torch.equal(labels, ys) and facts is None
    def loader():
        return torch.utils.data.DataLoader(dataset, batch_size=4, shuffle=True,
                                           generator=torch.Generator().manual_seed(3))
    inputs, labels, facts = collect(loader())
    order = torch.cat([y for _, y in loader()])
    assert torch.equal(labels, order) and torch.equal(inputs, xs[order]), (labels, order)
    assert facts == {"batch_size": 4, "drop_last": False}
    # Each epoch's order as the user's loop draws it (its generator advanced as PyTorch does),
    # drop_last's left-out samples at each order's end; none for an order that is not a shuffle.
    for drop_last in (False, True):
        def shuffled():
            return torch.utils.data.DataLoader(dataset, batch_size=4, shuffle=True,
                                               drop_last=drop_last,
                                               generator=torch.Generator().manual_seed(3))
        orders = epoch_orders(shuffled(), 3)
        assert orders.shape == (3, 10) and orders.dtype == torch.int64, orders
        user = shuffled()
        for epoch in range(3):
            seen = torch.cat([y for _, y in user])
            assert torch.equal(orders[epoch, :len(seen)], seen), (epoch, orders, seen)
            assert sorted(orders[epoch].tolist()) == list(range(10)), orders
        assert not torch.equal(orders[0], orders[1])
    assert epoch_orders(torch.utils.data.DataLoader(dataset, batch_size=4), 2) is None
    replacement = torch.utils.data.RandomSampler(dataset, replacement=True,
                                                 generator=torch.Generator().manual_seed(1))
    assert epoch_orders(torch.utils.data.DataLoader(dataset, batch_size=4,
                                                    sampler=replacement), 2) is None
    # accuracy_fn: the argmax accuracy (a fraction or in percent, Ravnest's argument order) is
    # validation's own; any other, or one that fails, is refused in one line.
    def fraction(outputs, labels):
        return (outputs.argmax(dim=1) == labels).float().mean()

    def percent(outputs, labels):
        return (torch.max(outputs, 1)[1] == labels).sum().item() * 100.0 / len(labels)

    def top2(outputs, labels):
        return (outputs.topk(2, 1)[1] == labels[:, None]).any(1).float().mean()

    def swapped(labels, outputs):
        return (outputs.argmax(1) == labels).float().mean()

    node = ravnest.Node(optimizer="sgd")
    for good in (fraction, percent):
        ravnest.Trainer(node=node, train_loader=dataset, accuracy_fn=good)
    refused(lambda: ravnest.Trainer(node=node, train_loader=dataset, accuracy_fn=top2),
            "accuracy_fn gives")
    refused(lambda: ravnest.Trainer(node=node, train_loader=dataset, accuracy_fn=swapped),
            "accuracy_fn fails")
    pairs = [((xs[i], xs[i] * 2), ys[i]) for i in range(10)]
    inputs, labels, _ = collect(torch.utils.data.DataLoader(pairs, batch_size=3))
    assert isinstance(inputs, tuple) and torch.equal(inputs[1], xs * 2)

    # Ravnest's names: set_seed (also the job's seed), inputs_dtype (the inputs written cast;
    # NumPy's float64 cast to float32 with a line), Node's labels/test_labels/device said in one
    # line when not what is used, example_kwargs after example_args in forward's order.
    ravnest.set_seed(42)
    assert torch.initial_seed() == 42
    assert ravnest.Trainer(node=node, train_loader=dataset).train_table["seed"] == 42
    assert ravnest.Trainer(node=node, train_loader=dataset, seed=5).train_table["seed"] == 5
    doubles = torch.utils.data.TensorDataset(xs.double(), ys)
    for dtype, expected, said in ((None, torch.float32, "float64"),
                                  (torch.float64, torch.float64, ""),
                                  (torch.float32, torch.float32, "")):
        err = io.StringIO()
        with tempfile.TemporaryDirectory() as work, contextlib.redirect_stderr(err):
            trainer = ravnest.Trainer(node=node, train_loader=torch.utils.data.DataLoader(
                doubles, batch_size=4), inputs_dtype=dtype, work_dir=work)
            trainer.write_job()
            written, _ = torch.load(os.path.join(work, "train.pt"))
        assert written.dtype == expected, (dtype, written.dtype)
        assert (said in err.getvalue()) if said else err.getvalue() == "", err.getvalue()
    refused(lambda: ravnest.Trainer(node=node, train_loader=dataset, inputs_dtype="float32"),
            "inputs_dtype")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        other = ravnest.Node(optimizer="sgd", labels=dataset, test_labels=None,
                             device=torch.device("cuda"), submod_file="x")
        ravnest.Trainer(node=other, train_loader=torch.utils.data.DataLoader(dataset))
    lines = err.getvalue().splitlines()
    assert any("Node(labels=...) is not read" in l for l in lines), lines
    assert any("Node(device=cuda) is not read" in l for l in lines), lines
    assert any("Node(submod_file=...) is not read" in l for l in lines), lines
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        loader = torch.utils.data.DataLoader(dataset)
        ravnest.Trainer(node=ravnest.Node(optimizer="sgd", labels=loader,
                                          device=torch.device("cpu")), train_loader=loader)
    assert err.getvalue() == "", err.getvalue()

    class ThreeInputs(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None):
            return input_ids

    a, b, c = torch.zeros(1), torch.ones(1), torch.ones(2)
    assert positional_examples(ThreeInputs(), (), {"input_ids": a, "attention_mask": b,
                                                   "token_type_ids": c}) == (a, b, c)
    assert positional_examples(ThreeInputs(), (a,), {"attention_mask": b}) == (a, b)
    refused(lambda: positional_examples(ThreeInputs(), (a,), {"token_type_ids": c}),
            "attention_mask")
    refused(lambda: positional_examples(ThreeInputs(), (a,), {"mask": c}), "mask")
    refused(lambda: ravnest.clusterize(ThreeInputs(), (a,), pass_data=True, memory_probe=False),
            "pass_data")

    # The recipe is refused when the Trainer is made, before the data is read (this dataset
    # fails when read); step_size by its name; a function scheduler as a function.
    class Unreadable(torch.utils.data.Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            raise AssertionError("the data was read")

    unread = torch.utils.data.DataLoader(Unreadable(), batch_size=4)
    refused(lambda: ravnest.Trainer(node=ravnest.Node(optimizer="sgd", criterion=reads_inputs),
                                    train_loader=unread), "targets[1]")
    refused(lambda: ravnest.Trainer(node=ravnest.Node(optimizer=torch.optim.Adamax),
                                    train_loader=unread), "Adamax")

    def get_constant_lambda(optimizer, num_warmup_steps, num_training_steps):
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)

    refused(lambda: ravnest.Trainer(node=ravnest.Node(
        optimizer="sgd", lr_scheduler=get_constant_lambda,
        lr_scheduler_params={"num_warmup_steps": 5, "num_training_steps": 50}),
        train_loader=unread),
        "lr_scheduler: get_constant_lambda makes a LambdaLR whose lr_lambda (<lambda>)")
    bert_like = ravnest.Trainer(node=ravnest.Node(
        optimizer="adam", optimizer_params={"lr": 0.00176},
        lr_scheduler=get_linear_schedule_with_warmup,
        lr_scheduler_params={"num_warmup_steps": 5000, "num_training_steps": 90000},
        lr_step_on_epoch_change=False), train_loader=unread)
    assert bert_like.recipe["scheduler"] == linear, bert_like.recipe
    # Ravnest's BERT: dict samples, a criterion reading a dict of labels, a Trainer subclass
    # with its own train(): each refused in one line naming it, before the data pass.
    class Rows(torch.utils.data.Dataset):  # a Hugging Face dataset's rows
        def __len__(self):
            return 8

        def __getitem__(self, i):
            if i > 0:
                raise AssertionError("the data was read")
            return {"input_ids": torch.zeros(5, dtype=torch.long), "labels": torch.zeros(5)}

    refused(lambda: ravnest.Trainer(node=node, train_loader=torch.utils.data.DataLoader(
        Rows(), batch_size=4)), "data: train_loader gives a dict (input_ids, labels)")
    refused(lambda: ravnest.Trainer(node=node, train_loader=unread, val_loader=Rows()),
            "data: val_loader gives a dict")
    refused(lambda: ravnest.Trainer(node=ravnest.Node(optimizer="sgd", criterion=bert_loss_fn),
                                    train_loader=unread),
            "criterion: bert_loss_fn reads targets['labels'], targets['sentence_order_label'], "
            "a dict of labels")
    as_dicts = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(a, b), batch_size=2,
                                           collate_fn=lambda rows: {"x": torch.stack(
                                               [r[0] for r in rows])})
    refused(lambda: collect(as_dicts), "data: the DataLoader gives a dict (x)")

    class Evaluating(ravnest.Trainer):  # replaces a method the package runs besides train()
        def evaluate(self):
            return 1.0

    refused(lambda: Evaluating(node=node, train_loader=unread),
            "Trainer: Evaluating overrides evaluate(): here the loop over train_loader runs in "
            "the daemons")
    recorded_checks()

    class Helpful(ravnest.Trainer):  # adds and wraps only what the package never calls
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.note = "mine"

        def describe(self):
            return self.note

    assert Helpful(node=node, train_loader=unread, epochs=2).train_table["epochs"] == 2
    with tempfile.TemporaryDirectory() as work:  # globals' numbers become constants
        table = loss_table(divided_loss_fn, work)
        logits, labels = torch.randn(6, 10), torch.tensor([1, 0, 3, 3, 9, 2])
        assert torch.equal(torch.jit.load(table["path"])(logits, labels),
                           divided_loss_fn(logits, (None, labels)))
    with tempfile.TemporaryDirectory() as work:  # said in one line, not refused
        for frequency, said in ((4, True), (1, False), (2, False)):
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                ravnest.Trainer(node=ravnest.Node(optimizer="sgd", criterion=divided_loss_fn,
                                                  update_frequency=frequency),
                                train_loader=unread, work_dir=work)
            line = ("criterion: divided_loss_fn divides the loss by update_frequency (4), as "
                    "Ravnest needs; a job already weighs each micro-batch's loss by 1 / "
                    "update_frequency, so that division is dropped here")
            assert (line in err.getvalue()) == said, (frequency, err.getvalue())
        # Dropped from the scripted loss with update_frequency 4 (the job weighs it), kept
        # with 1 (nothing to drop: a job with update_frequency 1 does not divide).
        for frequency, expected in ((4, 1.0), (1, 0.25)):
            table = loss_table(divided_loss_fn, work, frequency)
            scripted = torch.jit.load(table["path"])(logits, labels)
            assert torch.equal(scripted, divided_loss_fn(logits, (None, labels)) *
                               (4 * expected)), (frequency, scripted)
    refused(lambda: ravnest.Trainer(node=node, train_loader=unread, step_size=64), "step_size=64")
    refused(lambda: ravnest.Trainer(node=node, train_loader=unread, step_size=0), "step_size=0")
    ravnest.Trainer(node=node, train_loader=unread, step_size=4)
    with tempfile.TemporaryDirectory() as work:  # a script loss written when the Trainer is made
        ravnest.Trainer(node=ravnest.Node(optimizer="sgd", criterion=torch.nn.CrossEntropyLoss(
            label_smoothing=0.1)), train_loader=unread, work_dir=os.path.join(work, "new"))
        assert os.path.exists(os.path.join(work, "new", "loss.pt"))

    class Untraceable(torch.nn.Module):
        def forward(self, x):
            return {"a": doubled(x), "n": len(x)}

    refused(lambda: script_or_trace(Untraceable(), (torch.randn(2, 3),)),
            "can be neither scripted")

    # Random augmentation and a collate_fn run once when the data is written: said in one line.
    class RandomCrop:
        def __call__(self, x):
            return x

    class Compose:
        def __init__(self, transforms):
            self.transforms = transforms

    class Augmented(torch.utils.data.TensorDataset):
        transform = Compose([RandomCrop()])

    augmented = torch.utils.data.DataLoader(Augmented(xs, ys), batch_size=5,
                                            collate_fn=lambda b: torch.utils.data.default_collate(b)
                                            if hasattr(torch.utils.data, "default_collate") else
                                            torch.utils.data._utils.collate.default_collate(b))
    for epochs, said in ((2, True), (1, False)):
        err = io.StringIO()
        with tempfile.TemporaryDirectory() as work, contextlib.redirect_stderr(err):
            ravnest.Trainer(node=node, train_loader=augmented, epochs=epochs,
                            work_dir=work).write_job()
        assert ("RandomCrop, collate_fn <lambda> run once" in err.getvalue()) == said, \
            err.getvalue()

    # A forward TorchScript cannot script (it calls code with try/except): traced, and said.
    class Untyped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(3, 2)

        def forward(self, x):
            return doubled(self.fc(x))

    model, x = Untyped(), torch.randn(4, 3)
    traced = script_or_trace(model, (x,))
    assert isinstance(traced, torch.jit.ScriptModule) and torch.equal(traced(x), model(x))
    refused(lambda: script_or_trace(Untyped(), ()), "example_args")

    print("package_recipe: torch %s: the recipe's tables and refusals as expected" % torch.__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main())

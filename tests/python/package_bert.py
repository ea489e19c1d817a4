#!/usr/bin/env python3
"""Ravnest's BERT example (examples/bert/provider.py, bert_trainer.py, cluster_formation.py's
BERT block) through the package, against plain PyTorch.

Usage: package_bert.py WORK_DIR [lamb]   (the package on PYTHONPATH; a torch 2.x venv with
transformers and torch-optimizer; $RAVNEST_BIN or $RAVNEST_BINARY_DIR names the binary)

Shaped as Ravnest's provider.py: set_seed(42) on import, preprocess_dataset() giving a
shuffling DataLoader (its own seeded generator, drop_last) over tokenized dict samples with
`sentence_order_label` and DataCollatorForLanguageModeling's random masking, loss_fn as Ravnest
writes it (targets.to(torch.device('cuda')), targets['labels'], y_pred[0], y_pred[1], the
globals loss_fct, config.vocab_size and update_frequency, total_loss.div_(update_frequency)),
Node(..., labels=train_loader, device=torch.device('cuda')) and bert_trainer.py's BERT_Trainer
(Ravnest's file, unchanged), whose own train() loops node.forward_compute(input_ids=...,
token_type_ids=..., attention_mask=...). What differs: no wikitext or tokenizer offline, so the
test writes a small vocabulary and sentences, and BertConfig is tiny, without dropout (the
daemons draw dropout from the job's seed, not from the loop's generator); the optimizer is Adam
(Lamb, Ravnest's, with `lamb`: the job's [optimizer] lamb); clusterize
asks for 3 stages.

Checked: every batch's loss (runs' metrics.csv) and the fused weights, loaded strictly into the
user's BertForPreTraining, against one process: the same loader and collator drawn in the same
order with the same seed, Ravnest's loss_fn, backward per batch, a step (and the scheduler's)
every update_frequency batches.
"""

import copy
import csv
import glob
import os
import random
import sys

import torch
from torch.utils.data import DataLoader
from transformers import (BertConfig, BertForPreTraining, BertTokenizerFast,
                          DataCollatorForLanguageModeling)
from transformers.optimization import get_linear_schedule_with_warmup

import ravnest
from ravnest import Node, clusterize, set_seed

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bert_trainer import BERT_Trainer  # noqa: E402  (Ravnest's examples/bert/bert_trainer.py)

WORDS = ("the a cat dog sat on mat ran fast slow big small red blue tree house bird sang "
         "under over").split()
SAMPLES, BATCH, LENGTH = 20, 4, 16

set_seed(42)


def write_tokenizer(folder):
    """A tokenizer folder as the example's ./examples/bert/data/bert_tokenizer: a vocab.txt."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "vocab.txt"), "w") as f:
        f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS) + "\n")


def tokenized_dataset(tokenizer):
    """wikitext's tokenized rows in their shape: dicts of input_ids, token_type_ids,
    attention_mask and sentence_order_label, padded alike (pad_to_multiple_of's role)."""
    draw = random.Random(7)
    rows = []
    for i in range(SAMPLES):
        first = " ".join(draw.choice(WORDS) for _ in range(draw.randint(3, 6)))
        second = " ".join(draw.choice(WORDS) for _ in range(draw.randint(3, 6)))
        order = i % 2
        if order:
            first, second = second, first
        row = dict(tokenizer(first, second, padding="max_length", max_length=LENGTH,
                             truncation=True))
        row["sentence_order_label"] = order
        rows.append(row)
    return rows


def preprocess_dataset():
    tokenizer = BertTokenizerFast.from_pretrained("./bert_tokenizer")
    input_s = tokenized_dataset(tokenizer)
    data_collator = DataCollatorForLanguageModeling(tokenizer=tokenizer)
    generator = torch.Generator()
    generator.manual_seed(42)
    train_loader = DataLoader(input_s, collate_fn=data_collator, batch_size=BATCH,
                              generator=generator, shuffle=True, drop_last=True)
    return train_loader


def loss_fn(y_pred, targets):
    targets = targets.to(torch.device('cuda'))
    labels = targets['labels']
    sentence_order_label = targets['sentence_order_label']

    masked_lm_loss = loss_fct(y_pred[0].view(-1, config.vocab_size), labels.view(-1))
    sentence_order_loss = loss_fct(y_pred[1].view(-1, 2), sentence_order_label.view(-1))
    total_loss = masked_lm_loss + sentence_order_loss
    # opt.zero_grad()
    total_loss.div_(update_frequency)
    return total_loss


def tiny_config():
    config = BertConfig(vocab_size=5 + len(WORDS), hidden_size=16, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=32,
                        max_position_embeddings=LENGTH, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    config.return_dict = False
    return config


def cluster_formation():
    """cluster_formation.py's BERT block: the model, one batch as example_kwargs."""
    set_seed(42)
    config = tiny_config()
    tokenizer = BertTokenizerFast.from_pretrained("./bert_tokenizer")
    data_collator = DataCollatorForLanguageModeling(tokenizer=tokenizer)
    dataloader = DataLoader(tokenized_dataset(tokenizer), collate_fn=data_collator,
                            batch_size=BATCH)
    test_ip = next(iter(dataloader))
    model = BertForPreTraining(config)
    start = copy.deepcopy(model.state_dict())
    clusterize(model=model, example_kwargs={'input_ids': test_ip['input_ids'],
                                            'attention_mask': test_ip['attention_mask'],
                                            'token_type_ids': test_ip['token_type_ids']},
               stages=3, memory_probe=False)
    return start


class OnCpu(dict):
    """The collator's batch as loss_fn reads it, its .to(cuda) a no-op on this CPU machine."""

    def to(self, device):
        return self


def one_process(start, optimizer, optimizer_params, scheduler_params, epochs):
    """Ravnest's loop in one process: the provider's loader drawn as BERT_Trainer draws it
    (set_seed(42), then epochs x `for batch in train_loader`), loss_fn's (divided) loss
    backward per batch, optimizer and scheduler step every update_frequency batches (and after
    the last, as a job does). The model runs in a forked RNG: the loop's draws (shuffle,
    masking) are the loader's alone, as in the recorded train()."""
    model = BertForPreTraining(config)
    model.load_state_dict(start)
    model.train()
    opt = optimizer(model.parameters(), **optimizer_params)
    scheduler = get_linear_schedule_with_warmup(opt, **scheduler_params)
    set_seed(42)
    train_loader = preprocess_dataset()
    losses, n = [], 0
    for epoch in range(epochs):
        for batch in train_loader:
            with torch.random.fork_rng(devices=[]):
                y_pred = model(input_ids=batch['input_ids'],
                               token_type_ids=batch['token_type_ids'],
                               attention_mask=batch['attention_mask'])
                loss = loss_fn(y_pred, OnCpu(batch))
                loss.backward()
            losses.append(loss.item() * update_frequency)
            n += 1
            if n % update_frequency == 0:
                opt.step()
                scheduler.step()
                opt.zero_grad()
    if n % update_frequency:
        opt.step()
        scheduler.step()
        opt.zero_grad()
    return losses, model.state_dict()


def job_losses(work):
    paths = glob.glob(os.path.join(work, "**", "metrics.csv"), recursive=True)
    assert len(paths) == 1, paths
    with open(paths[0]) as f:
        return [float(r["loss"]) for r in csv.DictReader(f) if r["loss"]]


if __name__ == '__main__':
    work = os.path.abspath(sys.argv[1])
    variant = sys.argv[2] if len(sys.argv) > 2 else "adam"
    os.makedirs(work, exist_ok=True)
    os.chdir(work)
    write_tokenizer("bert_tokenizer")

    if variant == "lamb":
        from torch_optimizer import Lamb
        optimizer = Lamb
        optimizer_params = {'lr': 0.00176, 'eps': 1e-6, 'debias': True, 'weight_decay': 0.01,
                            'clamp_value': 10000.0}
    else:
        optimizer = torch.optim.Adam
        optimizer_params = {'lr': 0.00176, 'eps': 1e-6, 'weight_decay': 0.01}

    with ravnest.local(nodes=3):
        start = cluster_formation()

        # provider.py runs in a process of its own: set_seed(42) on its import, then its
        # __main__, with the test's sizes.
        set_seed(42)
        train_loader = preprocess_dataset()

        config = tiny_config()

        loss_fct = torch.nn.CrossEntropyLoss()
        update_frequency = 2
        epochs = 2

        if len(train_loader) % update_frequency == 0:
            num_training_steps = len(train_loader)//update_frequency
        else:
            num_training_steps = len(train_loader)//update_frequency + 1

        num_training_steps *= epochs

        scheduler = get_linear_schedule_with_warmup
        scheduler_params = {'num_warmup_steps': 2, 'num_training_steps': num_training_steps}

        node = Node(name='node_0',
                    optimizer=optimizer,
                    optimizer_params=optimizer_params,
                    update_frequency=update_frequency,
                    lr_scheduler=scheduler,
                    lr_scheduler_params=scheduler_params,
                    lr_step_on_epoch_change=False,
                    criterion=loss_fn,
                    labels=train_loader,
                    device=torch.device('cuda')
                    )

        # Custom Trainer Class
        trainer = BERT_Trainer(node=node,
                               train_loader=train_loader,
                               epochs=epochs)

        trainer.train()
        state = ravnest.model_fusion()

    fused = BertForPreTraining(config)
    fused.load_state_dict(state, strict=True)
    losses = job_losses(work)
    expected_losses, expected = one_process(start, optimizer, optimizer_params,
                                            scheduler_params, epochs)
    assert len(losses) == len(expected_losses) == epochs * len(train_loader), \
        (len(losses), len(expected_losses))
    loss_gap = max(abs(a - b) for a, b in zip(losses, expected_losses))
    weight_gap = max((fused.state_dict()[k] - v).abs().max().item() for k, v in expected.items())
    print("package_bert: torch %s, %s, 3 stages, %d batches of %d over %d epochs, "
          "update_frequency %d: losses within %.3g (first %.6f, last %.6f), fused weights "
          "within %.3g of one process" % (torch.__version__, variant, len(losses), BATCH, epochs,
                                          update_frequency, loss_gap, losses[0], losses[-1],
                                          weight_gap))
    assert loss_gap <= 1e-5, "losses differ from one process's by %g:\n  job %s\n  one %s" % (
        loss_gap, losses, expected_losses)
    assert weight_gap <= 1e-5, "fused weights differ from one process's by %g" % weight_gap

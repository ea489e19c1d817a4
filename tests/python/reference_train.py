#!/usr/bin/python3
"""Train a TorchScript model from a ravnest job file in plain PyTorch, independently of the C++.

Usage: reference_train.py JOB.toml MODEL.pt OUT_STATE.pt [--max-batches N] [--losses OUT.json]
                          [--device DEV] [--deterministic] [--timing OUT.json] [--scales OUT.json]

--device cuda:0 trains on that GPU (the model, the data and the optimizer's state there; the
batch order still comes from a CPU generator, dropout from the device's). --deterministic:
torch.use_deterministic_algorithms(True, warn_only=True) (an operation without a deterministic
kernel warns on stderr instead of failing), TF32 off in cuBLAS and cuDNN and, off the CPU, the
optimizer one parameter at a time (foreach=False, as LibTorch steps), as the GPU fidelity tests
compare; without it PyTorch's defaults (what bench/gpu_pipeline.sh measures). --timing writes {"samples", "seconds", "samples_per_second", "device", "torch"}:
every batch from the first forward to the last step, the device synchronized at both ends (what
bench/gpu_pipeline.sh holds the daemons' samples/s against), and
"after_first_batch_samples_per_second" (the first batch pays for the kernels' and libraries'
first use; the device is synchronized after it too, only with --timing).

The C++ reference trainer (libs/training/reference_trainer.h) must produce the same weights:
  - TorchScript without the graph executor's optimizations, i.e. eager numerics (the daemons run
    their stages so, see libs/torch_support/eager_numerics.h);
  - torch.manual_seed(train.seed) first;
  - epoch e's order: torch.randperm(n) from a torch.Generator seeded with epoch_seed(seed, e)
    (splitmix64, see libs/data/batch_order.h) when shuffle, else 0..n-1; batches of batch_size,
    the last partial unless drop_last;
  - each batch cut into micro-batches like torch.tensor_split; each micro-batch's mean loss
    times samples / batch_samples / update_frequency, backward;
  - [train] autocast = "bf16"/"fp16": the forward and the loss under torch.autocast(device,
    dtype); fp16 scales the loss with a GradScaler (unscaled before clipping, the step skipped on
    inf/nan); grad_clip_value then grad_clip_norm (grad_clip_norm_type) clip before the step;
  - optimizer.step() + zero_grad() after every update_frequency batches (counted across epochs)
    and after the last batch; the scheduler (torch.optim.lr_scheduler) steps after each update
    (per = "update") or at each epoch's end (per = "epoch").
Supports data.format "csv" and "tensors". Writes a plain dict of the final state (parameters and
buffers by state-dict name) with torch.save, with --losses the per-batch losses as JSON, and with
--scales (fp16) the GradScaler's scale after each update as JSON (a step skipped on an inf shows
as a backoff).
"""

import argparse
import inspect
import json
import os
import sys
import time
import tomllib

import torch
import torch.nn.functional as F

MASK = (1 << 64) - 1


def is_exported(path: str) -> bool:
    """Whether `path` is a torch.export archive (.pt2): a zip holding models/*.json."""
    import zipfile
    try:
        with zipfile.ZipFile(path) as archive:
            return any("/models/" in "/" + n and n.endswith(".json") for n in archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def epoch_seed(seed: int, epoch: int) -> int:
    z = (seed + (epoch + 1) * 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return (z ^ (z >> 31)) >> 1


def resolve(job_dir: str, path: str) -> str:
    return path if os.path.isabs(path) else os.path.join(job_dir, path)


def load_csv(path: str, data: dict):
    header = data.get("header", True)
    with open(path) as f:
        lines = [line.strip() for line in f if line.strip()]
    names = None
    if header:
        names = [n.strip() for n in lines[0].split(",")]
        lines = lines[1:]
    rows = [[float(v) for v in line.split(",")] for line in lines]
    ncols = len(rows[0])
    label = data.get("label_column", "label" if header else -1)
    col = names.index(label) if isinstance(label, str) else (label % ncols)
    features = [r[:col] + r[col + 1:] for r in rows]
    labels = [r[col] for r in rows]
    x = torch.tensor(features, dtype=torch.float64).to(torch.float32)
    shape = data.get("input_shape", [ncols - 1])
    x = x.reshape([len(rows)] + list(shape))
    scale = data.get("scale", 1.0)
    if scale != 1.0:
        x = x.mul(scale)
    if all(v == int(v) for v in labels):
        y = torch.tensor([int(v) for v in labels], dtype=torch.int64)
    else:
        y = torch.tensor(labels, dtype=torch.float64).to(torch.float32)
    return [x], y


def load_tensors(path: str):
    obj = torch.load(path)
    if isinstance(obj, dict):
        inputs, labels = obj["inputs"], obj["labels"]
    else:
        inputs, labels = obj
    if isinstance(inputs, torch.Tensor):
        inputs = [inputs]
    return list(inputs), labels


def make_optimizer(spec: dict, params, single_tensor: bool = False):
    name = spec["name"]
    o = {k: v for k, v in spec.items() if k != "name"}
    if single_tensor:
        # One parameter at a time, as LibTorch's optimizers step (on CUDA PyTorch would
        # otherwise take the multi-tensor "foreach" kernels, which round differently).
        o["foreach"] = False
    if "betas" in o:
        o["betas"] = tuple(o["betas"])
    if name == "lamb":
        # torch_optimizer.Lamb (pytorch-optimizer): one parameter at a time already, no foreach.
        o.pop("foreach", None)
        try:
            import torch_optimizer
        except ImportError:
            print("reference_train.py: torch_optimizer is not installed for " + sys.executable,
                  file=sys.stderr)
            sys.exit(3)
        return torch_optimizer.Lamb(params, **o)
    cls = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW,
           "rmsprop": torch.optim.RMSprop, "adagrad": torch.optim.Adagrad}[name]
    return cls(params, **o)


def make_scheduler(spec: dict, opt):
    if not spec:
        return None, "epoch"
    s = torch.optim.lr_scheduler
    name = spec["name"]
    per = spec.get("per", "epoch")
    if name == "step":
        return s.StepLR(opt, step_size=spec["step_size"], gamma=spec.get("gamma", 0.1)), per
    if name == "multistep":
        return s.MultiStepLR(opt, milestones=spec["milestones"], gamma=spec.get("gamma", 0.1)), per
    if name == "exponential":
        return s.ExponentialLR(opt, gamma=spec["gamma"]), per
    if name == "cosine":
        return s.CosineAnnealingLR(opt, T_max=spec["t_max"], eta_min=spec.get("eta_min", 0.0)), per
    if name == "linear_warmup":
        return s.LinearLR(opt, start_factor=spec.get("start_factor", 1.0 / 3), end_factor=1.0,
                          total_iters=spec["warmup_steps"]), per
    if name == "warmup_cosine":
        w = spec["warmup_steps"]
        parts = [s.LinearLR(opt, start_factor=spec.get("start_factor", 1.0 / 3), total_iters=w),
                 s.CosineAnnealingLR(opt, T_max=spec["t_max"], eta_min=spec.get("eta_min", 0.0))]
        return s.SequentialLR(opt, parts, milestones=[w]), per
    if name == "warmup_linear":
        # transformers' get_linear_schedule_with_warmup: a LambdaLR over this lambda.
        w, n = spec["warmup_steps"], spec["total_steps"]

        def linear(step):
            if step < w:
                return float(step) / float(max(1, w))
            return max(0.0, float(n - step) / float(max(1, n - w)))
        return s.LambdaLR(opt, linear), per
    if name == "onecycle":
        keys = ["pct_start", "anneal_strategy", "div_factor", "final_div_factor", "three_phase",
                "cycle_momentum", "base_momentum", "max_momentum"]
        return s.OneCycleLR(opt, max_lr=spec["max_lr"], total_steps=spec["total_steps"],
                            **{k: spec[k] for k in keys if k in spec}), per
    raise ValueError(name)


def classes_last(out, y, spec: dict) -> bool:
    """A language model's logits [N, T, V] against [N, T] labels (docs/job-file.md [loss])."""
    if out.dim() < 3 or y.is_floating_point():
        return False
    if spec.get("class_dim") is not None:
        return spec["class_dim"] == -1
    last = tuple(y.shape) == tuple(out.shape[:-1])
    first = tuple(y.shape) == tuple(out.shape[:1]) + tuple(out.shape[2:])
    return last and (out.dim() == 3 or not first)


def counted(y, spec: dict):
    """The labels a cross_entropy or nll mean counts; None for other losses."""
    if spec["name"] not in ("cross_entropy", "nll") or y.is_floating_point():
        return None
    return int((y != spec.get("ignore_index", -100)).sum())


def loss_fn(spec, out, y):
    name = spec if isinstance(spec, str) else spec["name"]
    spec = {"name": name} if isinstance(spec, str) else spec
    if isinstance(out, (tuple, list)):
        out = out[0]
    elif isinstance(out, dict):
        out = next(iter(out.values()))
    if name in ("cross_entropy", "nll"):
        ignore = spec.get("ignore_index", -100)
        if classes_last(out, y, spec):
            # As a PyTorch user writes a language model's loss.
            out, y = out.reshape(-1, out.shape[-1]), y.reshape(-1)
        f = F.cross_entropy if name == "cross_entropy" else F.nll_loss
        return f(out, y.long(), ignore_index=ignore)
    y = y.to(out.dtype)
    if y.dim() + 1 == out.dim() and out.shape[-1] == 1:
        y = y.unsqueeze(-1)
    if name == "mse":
        return F.mse_loss(out, y)
    if name == "l1":
        return F.l1_loss(out, y)
    if name == "bce_with_logits":
        return F.binary_cross_entropy_with_logits(out, y)
    raise ValueError(name)


def tensor_split_ranges(n: int, k: int):
    k = min(k, n)
    base, longer = divmod(n, k)
    ranges, start = [], 0
    for i in range(k):
        length = base + (1 if i < longer else 0)
        ranges.append((start, start + length))
        start += length
    return ranges


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("job")
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--max-batches", type=int, default=-1)
    ap.add_argument("--losses", default="")
    ap.add_argument("--scales", default="")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--deterministic", action="store_true")
    ap.add_argument("--timing", default="")
    args = ap.parse_args()
    device = torch.device(args.device)
    if args.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    with open(args.job, "rb") as f:
        job = tomllib.load(f)
    job_dir = os.path.dirname(os.path.abspath(args.job))
    t = job.get("train", {})
    data = job["data"]
    epochs = t.get("epochs", 1)
    batch_size = t.get("batch_size", 64)
    micro = t.get("micro_batches", 1)
    uf = t.get("update_frequency", 1)
    seed = t.get("seed", 0)
    shuffle = t.get("shuffle", True)
    drop_last = t.get("drop_last", False)

    torch._C._set_graph_executor_optimize(False)
    torch.manual_seed(seed)
    if is_exported(args.model):
        # A torch.export archive runs eagerly as the GraphModule torch.export.load gives: the
        # program's ATen ops one by one, in the training mode it was exported in (its train()
        # and eval() are not supported by PyTorch).
        model = torch.export.load(args.model).module().to(device)
    else:
        model = torch.jit.load(args.model, map_location=device)
        model.train()
    if data["format"] == "csv":
        xs, y = load_csv(resolve(job_dir, data["train"]), data)
    else:
        xs, y = load_tensors(resolve(job_dir, data["train"]))
    n = y.shape[0]
    xs = [x.to(device) for x in xs]
    y = y.to(device)

    params, seen = [], set()
    for p in model.parameters():
        if p.requires_grad and id(p) not in seen:
            seen.add(id(p))
            params.append(p)
    opt = make_optimizer(job["optimizer"], params,
                         single_tensor=args.deterministic and device.type != "cpu")
    sched, per = make_scheduler(job.get("scheduler"), opt)
    opt.zero_grad()

    amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(t.get("autocast", "off"))
    scaler = None
    if amp == torch.float16:
        # [train] scaler_*: GradScaler's own arguments under their names.
        scaler_args = {k: t["scaler_" + k] for k in
                       ("init_scale", "growth_factor", "backoff_factor", "growth_interval")
                       if "scaler_" + k in t}
        scaler = (torch.amp.GradScaler(device.type, **scaler_args)
                  if hasattr(torch.amp, "GradScaler") else torch.cuda.amp.GradScaler(**scaler_args))
    scales = []
    clip_norm = t.get("grad_clip_norm")
    clip_type = float(t.get("grad_clip_norm_type", 2.0))
    clip_value = t.get("grad_clip_value")
    # As the daemons clip: a norm per gradient, then the norm of the stacked norms. PyTorch 2.x
    # on a GPU would take the per-gradient norms with _foreach_norm by default, another kernel.
    clip_options = {}
    if (args.deterministic and device.type != "cpu"
            and "foreach" in inspect.signature(torch.nn.utils.clip_grad_norm_).parameters):
        clip_options["foreach"] = False

    def update():
        if scaler is not None:
            scaler.unscale_(opt)
        if clip_value is not None:
            torch.nn.utils.clip_grad_value_(params, clip_value)
        if clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(params, clip_norm, clip_type, **clip_options)
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
            scales.append(scaler.get_scale())
        else:
            opt.step()

    per_epoch = n // batch_size if drop_last else (n + batch_size - 1) // batch_size
    total = per_epoch * epochs
    if "max_steps" in t:
        total = min(total, t["max_steps"])
    if args.max_batches >= 0:
        total = min(total, args.max_batches)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    losses, done, pending, samples = [], 0, 0, 0
    sync()
    started = time.perf_counter()
    first_done, first_samples = started, 0
    for epoch in range(epochs):
        if done >= total:
            break
        if shuffle:
            g = torch.Generator()
            g.manual_seed(epoch_seed(seed, epoch))
            order = torch.randperm(n, generator=g)
        else:
            order = torch.arange(n)
        for b in range(per_epoch):
            if done >= total:
                break
            idx = order[b * batch_size:(b + 1) * batch_size].to(device)
            bx = [x.index_select(0, idx) for x in xs]
            by = y.index_select(0, idx)
            bn = idx.shape[0]
            parts = []
            # With ignored labels in the batch, a micro-batch weighs the labels that count.
            batch_counted = counted(by, job["loss"])
            by_labels = batch_counted is not None and batch_counted != by.numel()
            for s, e in tensor_split_ranges(bn, micro):
                with torch.autocast(device.type, dtype=amp or torch.bfloat16,
                                    enabled=amp is not None):
                    out = model(*[x[s:e] for x in bx])
                    if by_labels:
                        c = counted(by[s:e], job["loss"])
                        weight = c / batch_counted / uf if c else 0.0
                    else:
                        weight = (e - s) / bn / uf
                    loss = loss_fn(job["loss"], out, by[s:e])
                weighted = loss * weight
                (scaler.scale(weighted) if scaler is not None else weighted).backward()
                if weight > 0:
                    parts.append(weighted.detach())
            # Read once per batch: on a GPU each .item() waits for the device.
            batch_loss = 0.0
            for part in parts:
                batch_loss += part.item()
            losses.append(batch_loss * uf)
            samples += bn
            done += 1
            if done == 1 and args.timing:
                sync()
                first_done, first_samples = time.perf_counter(), samples
            pending += 1
            if pending == uf or done == total:
                update()
                opt.zero_grad()
                pending = 0
                if sched is not None and per == "update":
                    sched.step()
            if b + 1 == per_epoch and sched is not None and per == "epoch":
                sched.step()

    sync()
    seconds = time.perf_counter() - started
    state = {k: v.detach().to("cpu").clone() for k, v in model.state_dict().items()}
    torch.save(state, args.out)
    if args.losses:
        with open(args.losses, "w") as f:
            json.dump(losses, f)
    if args.scales:
        with open(args.scales, "w") as f:
            json.dump(scales, f)
    if args.timing:
        with open(args.timing, "w") as f:
            rest = started + seconds - first_done
            json.dump({"samples": samples, "seconds": seconds,
                       "samples_per_second": samples / seconds if seconds > 0 else 0.0,
                       "after_first_batch_samples_per_second":
                           (samples - first_samples) / rest if rest > 0 else 0.0,
                       "device": str(device), "torch": torch.__version__}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The comparison tasks (SeqTask x encoder) as a kind of run of the one
training loop (trainer/run/loop.py).

Batches come from the task's train split, generated online by a seeded
NumPy generator (or read from `--data FILE.jsonl`, reshuffled every epoch);
AdamW with clipping and a cosine / constant / linear / root schedule; the
encoder's `aux_loss` (ACT ponder cost) is added to the task loss and its
`set_progress(step, total)` is called before every step.  The run directory
is every run's (trainer/run/loop.py, trainer/run/checkpoint.py: atomic safetensors
checkpoints, a `--resume` that continues bit-identically, one writer per
directory):

    run.json        kind "seq", task, model, preset, data, every hyper-parameter
    metrics.jsonl   loss, acc (the task's headline metric on the batch), lr,
                    grad_norm, steps_per_s; eval_<metric> on the validation split
    checkpoints/, latest.json
    summary.json    written last, {"finished": true, ...}
"""
from __future__ import annotations

import sys
from dataclasses import asdict, dataclass, field
from typing import Optional

import numpy as np
import torch

from rasp.errors import RaspError, RaspFileError
from trainer.run import checkpoint, loop
from trainer.run.device import on_host
from trainer.run.kind import RunKind
from trainer.benchmark import scoring
from trainer.models import get_encoder_spec
from trainer.models.base import EncoderConfig, param_groups
from trainer.models.heads import SeqModel, make_head
from trainer.benchmark.data import collate, example_length, position_curriculum_gap, read_jsonl
from trainer.settings.hparams import HParams, defaults, scored_positions
from trainer.benchmark.presets import lr_at
from trainer.tasks import get_task
from trainer.tasks.base import SeqTask


@dataclass
class SeqRunConfig:
    task: str
    model: str
    out: str
    preset: str = "cpu"
    hp: HParams = field(default_factory=lambda: defaults("seq"))
    data: Optional[str] = None          # a JSON-lines train set instead of online generation
    device: str = "cpu"
    resume: bool = False
    progress: bool = True
    max_wall: Optional[float] = None
    init: str = "random"                # or "compiled": the task's program (trainer/benchmark/compiled.py)
    config: Optional[dict] = None       # the settings of `--config FILE.toml`, as read (run.json keeps them)

    def to_dict(self) -> dict:
        return {"kind": "seq", "task": self.task, "model": self.model, "init": self.init,
                "preset": self.preset, "data": self.data, "device": self.device, "hparams": self.hp.to_dict(),
                **({"config": self.config} if self.config else {})}


def seq_task(name: str) -> SeqTask:
    task = get_task(name)
    if not isinstance(task, SeqTask):
        raise RaspError(f"task {name!r} is a Fan task, not a comparison task")
    return task


def encoder_config(task: SeqTask, hp: HParams) -> EncoderConfig:
    return EncoderConfig(vocab_size=len(task.vocab) + 1, causal=task.causal, extra=dict(hp.extra),
                         **hp.encoder_fields())


def build_model(task: SeqTask, model_name: str, hp: HParams) -> SeqModel:
    spec = get_encoder_spec(model_name)
    cfg = encoder_config(task, hp)
    try:
        encoder = spec.build(cfg)
    except (ValueError, KeyError, TypeError) as e:
        raise RaspError(f"model {model_name}: cannot build it with these settings ({e})") from None
    return SeqModel(encoder, make_head(task.kind, hp.d_model, len(task.labels), hp.pooling))


def model_config(cfg: SeqRunConfig, task: SeqTask, model: SeqModel) -> dict:
    """What a checkpoint records to rebuild its model."""
    out = {"kind": "seq", "task": task.name, "model": cfg.model, "encoder": asdict(encoder_config(task, cfg.hp)),
           "n_labels": len(task.labels), "pooling": cfg.hp.pooling, "init": cfg.init}
    if cfg.init == "compiled":
        from trainer.benchmark import compiled as benchmark_compiled
        out["looped"] = benchmark_compiled.model_config(model)
    return out


def initial_model(cfg: SeqRunConfig, task: SeqTask, hp: HParams) -> tuple:
    """(model, init_info or None): random weights, or the task's program compiled."""
    if cfg.init == "compiled":
        from trainer.benchmark import compiled as benchmark_compiled
        return benchmark_compiled.build(task, hp)
    if cfg.init != "random":
        raise RaspError(f"unknown --init {cfg.init!r} (random or compiled)")
    return build_model(task, cfg.model, hp), None


def checkpoint_model(task: SeqTask, model_name: str, init: str, hp: HParams, state: dict) -> SeqModel:
    """The model a comparison checkpoint holds, its weights still to load: a
    compiled one rebuilt from the checkpoint's config (not recompiled); built
    on the host, moved with its weights (trainer/run/device.py)."""
    with on_host():
        if init == "compiled":
            from trainer.benchmark import compiled as benchmark_compiled
            return benchmark_compiled.rebuild(task, state["config"]["looped"])
        return build_model(task, model_name, hp)


def check_splits(task: SeqTask, hp: HParams):
    for s in (hp.train_split, hp.valid_split):
        if s not in task.splits:
            raise RaspError(f"task {task.name} has no split {s!r} (splits: {', '.join(task.splits)})")
    shortfall = check_position_curriculum(task, hp)
    if shortfall:       # a short run (a smoke test) is the user's choice: say what it leaves out, train anyway
        print(f"warning: {shortfall}", file=sys.stderr)


def check_position_curriculum(task: SeqTask, hp: HParams) -> Optional[str]:
    """What a curriculum over positions will not reach by the last step (part of
    every training example never trained), said in a sentence; None when it
    reaches every target of the training examples, or there is none."""
    gap = position_curriculum_gap(task, hp)
    if not gap:
        return None
    return (f"loss_first {hp.loss_first}, loss_grow_every {hp.loss_grow_every}: by the last step (of {hp.steps}) "
            f"the loss scores {gap[0]} positions, but {hp.train_split} examples have up to {gap[1]}: positions "
            f"{gap[0] + 1}..{gap[1]} will never be trained (for all of them: raise the steps, lower "
            "loss_grow_every, or turn the curriculum off with --set loss_first=0)")


class TrainStream:
    """The training batches, a pure function of (seed, step) and the RNG state
    the checkpoint keeps."""

    def __init__(self, task: SeqTask, hp: HParams, data: Optional[list] = None):
        self.task, self.hp, self.data = task, hp, data
        self.params = task.splits[hp.train_split].params
        self.rng = np.random.default_rng(hp.seed)
        self.lengths = None             # [shortest, longest] example trained on so far

    def examples(self, step: int) -> list:
        out = self._examples(step)
        lengths = [example_length(e) for e in out]
        lo, hi = self.lengths or (min(lengths), max(lengths))
        self.lengths = [min(lo, *lengths), max(hi, *lengths)]
        return out

    def _examples(self, step: int) -> list:
        if self.data is None:
            return self.task.generate(self.rng, self.params, self.hp.batch_size)
        n, b = len(self.data), self.hp.batch_size
        out = []
        for i in range(step * b, (step + 1) * b):          # epoch e = a fresh permutation of the file
            epoch, pos = divmod(i, n)
            out.append(self.data[int(_permutation(self.hp.seed, epoch, n)[pos])])
        return out


_PERM_CACHE: dict = {}


def _permutation(seed: int, epoch: int, n: int) -> np.ndarray:
    key = (seed, epoch, n)
    if key not in _PERM_CACHE:
        _PERM_CACHE.clear()
        _PERM_CACHE[key] = np.random.default_rng([seed, epoch, 7]).permutation(n)
    return _PERM_CACHE[key]


def validation_set(task: SeqTask, hp: HParams) -> list:
    """Fixed validation examples from their own generator (never the training stream)."""
    return task.generate(np.random.default_rng([hp.seed, 1]), task.splits[hp.valid_split].params, hp.eval_samples)


@torch.no_grad()
def score_examples(task: SeqTask, model: SeqModel, examples: list, metrics, device, batch_size: int = 64):
    """Per-example metric values (None = nothing to score), lengths, groups
    and encoder stats, batching examples of similar length together."""
    from trainer.models.heads import sample_stat
    model.eval()
    order = sorted(range(len(examples)), key=lambda i: example_length(examples[i]))
    values = {m: np.full(len(examples), None, dtype=object) for m in metrics}
    lengths, groups = np.zeros(len(examples), dtype=int), np.zeros(len(examples), dtype=int)
    stats: dict = {}
    for s in range(0, len(order), batch_size):
        idx = order[s:s + batch_size]
        batch = collate(task, [examples[i] for i in idx]).to(device)
        logits, enc = model(batch.tokens, batch.mask, batch.tokens2, batch.mask2)
        pred = scoring.predictions(logits)
        for m in metrics:
            for i, v in zip(idx, scoring.example_values(m, pred, batch)):
                values[m][i] = v
        lengths[idx], groups[idx] = batch.lengths.cpu().numpy(), batch.groups.cpu().numpy()
        for k, v in enc.stats.items():
            if torch.is_tensor(v):
                stats.setdefault(k, np.zeros(len(examples)))[idx] = sample_stat(v, enc.mask).cpu().numpy()
    return {"values": values, "lengths": lengths, "groups": groups, "stats": stats}


def evaluate_metrics(task, model, examples, device) -> dict:
    r = score_examples(task, model, examples, task.metrics, device)
    return {m: scoring.summary(r["values"][m])["mean"] for m in task.metrics}


class SeqKind(RunKind):
    """The per-kind parts of a comparison-task run that trainer/run/loop.py calls (the contract:
    trainer/run/kind.py)."""

    def __init__(self, cfg: SeqRunConfig):
        self.cfg, self.hp = cfg, cfg.hp
        self.task = seq_task(cfg.task)
        check_splits(self.task, cfg.hp)
        self.data_lines: list = []         # the file's line of each example, for messages
        self.data = read_jsonl(self.task, cfg.data, self.data_lines) if cfg.data else None
        self.headline = self.task.metrics[0]
        self.stream = None

    # -- setting up ---------------------------------------------------------------
    def prepare(self, device):
        self.device = device
        self.valid = validation_set(self.task, self.hp)

    def check_memory(self, device):
        check_memory(self.task, self.cfg, self.data, device, self.data_lines)

    def seed_rng(self):
        self.stream = TrainStream(self.task, self.hp, self.data)

    def initial_model(self, device):
        model, info = initial_model(self.cfg, self.task, self.hp)
        self.model_config = model_config(self.cfg, self.task, model)
        return model, info

    def load_model(self, ckpt, state, device):
        model = checkpoint.load_model(ckpt, device, checkpoint_model(self.task, self.cfg.model, self.cfg.init,
                                                                     self.hp, state))
        self.model_config = model_config(self.cfg, self.task, model)
        return model

    def restore(self, state: dict):
        self.stream.rng.bit_generator.state = state["numpy_rng"]
        self.stream.lengths = state.get("train_lengths")

    def state(self, at: int) -> dict:
        return {"numpy_rng": self.stream.rng.bit_generator.state, "train_lengths": self.stream.lengths,
                "config": self.model_config}

    def run_record(self) -> dict:
        return self.cfg.to_dict()

    # -- optimising ---------------------------------------------------------------
    def param_groups(self, model) -> list:
        # groups: parameters tagged by their model (S4D's SSM lr cap, Mamba's no-decay A and D)
        return param_groups(model, self.hp.lr, self.hp.weight_decay)

    def adam_options(self) -> dict:
        return {"betas": tuple(self.hp.betas), "eps": self.hp.eps, "weight_decay": self.hp.weight_decay}

    def lr_at(self, step: int) -> float:
        return lr_at(step, self.hp)

    def before_step(self, model, step: int):
        model.set_progress(step, self.hp.steps)

    def train_batch(self, step: int, shard: slice, device):
        batch = collate(self.task, self.stream.examples(step)[shard])
        k = scored_positions(step, self.hp.loss_first, self.hp.loss_grow_every)
        batch.targets = scoring.keep_first_targets(batch.targets, k)
        return batch.to(device)

    def batch_weight(self, batch) -> float:
        return scoring.loss_weight(batch)

    def loss(self, net, batch, per_shard=None):
        logits, enc = net(batch.tokens, batch.mask, batch.tokens2, batch.mask2)
        loss = scoring.loss_fn(logits, batch, per_shard)
        if enc.aux_loss is not None:
            loss = loss + enc.aux_loss
        values = scoring.example_values(self.headline, scoring.predictions(logits.detach()), batch)
        return loss, scoring.summary(values)["mean"] or 0.0

    # -- measuring ----------------------------------------------------------------
    def evaluate(self, model) -> dict:
        res = evaluate_metrics(self.task, model, self.valid, self.device)
        return {**{f"eval_{m}": v for m, v in res.items()}, "eval_acc": res[self.headline]}

    def eval_description(self, row: dict) -> str:
        values = ", ".join(f"{m} {row[f'eval_{m}']:.4f}" for m in self.task.metrics
                           if row.get(f"eval_{m}") is not None)
        return f"{self.hp.valid_split} ({len(self.valid)} examples) {values} (measured at step {row['step']})"

    def guard_sample(self, model) -> list:
        return self._guard_parts(model)[0]

    def guard_long_sample(self, model) -> list:
        return self._guard_parts(model)[1]

    def _guard_parts(self, model) -> tuple:
        if not hasattr(self, "_guard"):         # drawn once: both parts come from one stream
            self._guard = tuple([b.to(self.device) for b in part] for part in guard_examples(self.task, self.hp, model))
        return self._guard

    def guard_scope(self) -> str:
        return "the guard sample of every split the model takes"

    def guard_eval(self, net, sample) -> tuple:
        """-> (mean loss, mean headline metric, 1.0) over the guard sample."""
        loss, acc, total = 0.0, 0.0, sum(len(b.lengths) for b in sample)
        for b in sample:
            l, a = self.loss(net, b)
            loss += float(l) * len(b.lengths) / total
            acc += float(a) * len(b.lengths) / total
        return loss, acc, 1.0

    def log_fields(self, step: int) -> dict:
        return {}

    def bar_fields(self, row: dict) -> dict:
        return {}

    def summary_fields(self) -> dict:
        return {"headline": self.headline, "valid_split": self.hp.valid_split, "valid_samples": len(self.valid),
                "train_lengths": self.stream.lengths}

    def plot_title(self) -> str:
        return f"{self.cfg.task} / {self.cfg.model}"

    def curve_labels(self) -> tuple:
        return f"training batch {self.headline}", f"{self.hp.valid_split} {self.headline}"


def guard_examples(task: SeqTask, hp, model, batch_size: int = 64) -> tuple:
    """The descent guard's fixed sample, from its own seed: `guard_samples`
    examples of every split the model can take (a compiled model: those within
    its design length), batched by length, as (short, long).  With
    `guard_short_factor` F > 0, the long part holds the examples longer than F
    times the training split's longest input, `guard_long_samples` of each
    split: the guard checks them only before a checkpoint and at the end
    (trainer/run/guard.py), since a compiled model's cost per example grows
    with the square of its length (words_z60: 0.03 s for 64 words of 8
    tokens, 5 s of 64 tokens, 25 s of 128, one thread).  F = 0: every example
    is short."""
    rng = np.random.default_rng([hp.seed, 999])
    longest = getattr(getattr(model, "encoder", None), "max_length", None)
    factor = getattr(hp, "guard_short_factor", 0)
    cut = factor * max(example_length(e) for e in task.generate(np.random.default_rng([hp.seed, 998]),
                                                                 task.splits[hp.train_split].params, 256)) \
        if factor else None
    short, long = [], []
    for name, split in task.splits.items():
        got = task.generate(rng, split.params, hp.guard_samples)
        if longest is None and name != hp.valid_split:
            continue                      # a trained model: its validation split
        got = [e for e in got if longest is None or example_length(e) <= longest]
        short += [e for e in got if cut is None or example_length(e) <= cut]
        long.append(sorted([e for e in got if cut is not None and example_length(e) > cut][:hp.guard_long_samples],
                           key=example_length))
    short.sort(key=example_length)
    # a batch runs every example to its longest one's length: the long ones are batched per split
    return ([collate(task, short[i:i + batch_size]) for i in range(0, len(short), batch_size)],
            [collate(task, part[i:i + batch_size]) for part in long for i in range(0, len(part), batch_size)])


def check_memory(task: SeqTask, cfg: SeqRunConfig, data, device, lines: Optional[list] = None):
    """Refuse a batch whose activations would not fit, before allocating
    them: the longest training example (the file's, or a generated batch's)
    times the batch size, through every layer (and every iteration of a
    looped or implicit model) at the model width, plus attention scores.
    `lines`: the --data file's line of each example (the longest is named)."""
    from trainer.settings.validate import available_memory
    hp = cfg.hp
    sample = data if data is not None else task.generate(np.random.default_rng([hp.seed, 5]),
                                                         task.splits[hp.train_split].params, min(hp.batch_size, 64))
    longest = max(range(len(sample)), key=lambda i: example_length(sample[i]))
    n_tokens = example_length(sample[longest]) + 2
    # block applications kept for backpropagation: the looped encoder's `loops`, an implicit
    # model's phantom steps `grad` (its solver's other iterations keep no graph)
    kept = [v for v in (hp.extra.get("loops"), hp.extra.get("grad")) if isinstance(v, int) and v > 0]
    depth = hp.n_layer * max(kept, default=1)
    width = max(hp.d_model, hp.d_ff)
    per_layer = hp.batch_size * n_tokens * (8 * hp.d_model + 2 * width + 2 * hp.n_head * n_tokens)
    params = 12 * depth * hp.d_model * width + 4 * len(task.vocab) * hp.d_model
    need = 4 * (depth * per_layer + 6 * params)
    have = available_memory(device)
    if need > have and data is not None:
        line = lines[longest] if lines and longest < len(lines) else None
        raise RaspFileError(f"{cfg.data}:{line}" if line else cfg.data,
                            f"example {longest + 1} is {n_tokens - 2} tokens long: a batch of {hp.batch_size} "
                            f"such examples through {depth} layers of width {hp.d_model} needs about "
                            f"{need / 2 ** 30:.1f} GiB to train; {device} has {have / 2 ** 30:.1f} GiB available "
                            "(use shorter rows, or a smaller d_model, n_layer, batch_size)")
    if need > have:
        raise RaspError(f"a batch of {hp.batch_size} examples of up to {n_tokens} tokens through {depth} layers of "
                        f"width {hp.d_model} needs about {need / 2 ** 30:.1f} GiB to train; {device} has "
                        f"{have / 2 ** 30:.1f} GiB available (use a smaller d_model, n_layer, batch_size)")
    return need


def train_seq(cfg: SeqRunConfig) -> dict:
    """Run (or resume) a comparison-task run; returns its summary."""
    return loop.train(SeqKind(cfg))

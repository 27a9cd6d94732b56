"""The hyper-parameters of every run: one class, two families of presets.

`HParams` holds the settings of both kinds of run of the training loop
(trainer/run/loop.py).  Most are shared (sizes, optimiser, cadence, the descent
guard, the EMA); some mean something for one kind only, and say so in their
field's metadata: Fan et al.'s tasks have a length curriculum and the looped
model's recipe switches (trainer/fan/presets.py: the `paper` and `cpu` presets
per task), the comparison tasks have splits, a pooled head, dropout and a
schedule (trainer/benchmark/presets.py: the presets per task family and model).
A run records only its own kind's fields (`to_dict`), so `run.json` lists
what applies to it and nothing else.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Optional

from rasp.errors import RaspError

KINDS = ("fan", "seq")
MAX_SIZE = 1 << 16           # widths, heads, layers: far above anything trainable here
MAX_SEED = 2 ** 32 - 1       # NumPy and PyTorch both take it
# integer hyper-parameters: (lowest, highest), however given (flag, --set, preset, run.json);
# the flags' argparse types (trainer/settings/validate.py) use the same ranges
INT_RANGES = {"d_model": (1, MAX_SIZE), "n_layer": (1, MAX_SIZE), "n_head": (1, MAX_SIZE), "d_ff": (1, 4 * MAX_SIZE),
              "batch_size": (1, 1 << 20), "steps": (0, 10 ** 9), "warmup": (0, 10 ** 9), "log_every": (1, 10 ** 9),
              "eval_every": (0, 10 ** 9), "eval_samples": (1, 1 << 20), "ckpt_every": (1, 10 ** 9),
              "keep_ckpts": (1, 1000), "seed": (0, MAX_SEED), "guard_samples": (1, 1 << 20),
              "guard_every": (1, 10 ** 9), "flat_stop": (0, 10 ** 9)}
FAN, SEQ = {"kind": "fan"}, {"kind": "seq"}

# the recipe's switches and their values (the first is Fan et al.'s)
CHOICES = {"wd_params": ("all", "matrices"), "init_scheme": ("gpt2", "normal"),
           "read_in": ("linear", "embedding"), "arch": ("fan", "legacy"),
           "loss_reduction": ("token", "sample"), "padding": ("scored", "ignored"),
           "schedule": ("cosine", "constant", "linear", "root"), "pooling": ("mean", "end", "cls")}


@dataclass
class HParams:
    kind: str = "fan"             # which family of runs: "fan" (Fan et al.'s tasks) or "seq" (comparison tasks)
    # ---- model size
    d_model: int = 256
    n_head: int = 8
    n_layer: int = 1              # layers (in the looped block, for the looped model)
    d_mlp: Optional[int] = field(default=None, metadata=FAN)   # default 4 * d_model
    d_ff: int = field(default=128, metadata=SEQ)
    dropout: float = field(default=0.0, metadata=SEQ)
    pooling: str = field(default="mean", metadata=SEQ)    # classify / pair tasks: mean | end | cls
    # ---- optimiser (AdamW)
    batch_size: int = 64
    lr: float = 1e-4
    weight_decay: float = 0.01    # torch.optim.AdamW's default, as in Fan et al.'s code
    wd_params: str = field(default="all", metadata=FAN)   # "all" (Fan et al.) | "matrices" (no decay on biases, norms)
    betas: list = field(default_factory=lambda: [0.9, 0.999], metadata=SEQ)
    eps: float = field(default=1e-8, metadata=SEQ)
    warmup: int = 0               # linear warm-up steps
    schedule: str = field(default="cosine", metadata=SEQ)  # cosine | constant | linear | root (JRC rootwarmup)
    decay_start: Optional[int] = field(default=None, metadata=FAN)  # cosine decay from here (None: end of curriculum)
    ema: float = 0.0              # decay of an EMA of the weights kept after decay_from() (0: off)
    # ---- Fan et al.'s recipe switches (trainer/README.md lists each with its source)
    init_scheme: str = field(default="gpt2", metadata=FAN)
    read_in: str = field(default="linear", metadata=FAN)
    arch: str = field(default="fan", metadata=FAN)
    loss_reduction: str = field(default="token", metadata=FAN)
    padding: str = field(default="scored", metadata=FAN)
    read_in_dims: Optional[int] = field(default=None, metadata=FAN)   # fan-in of the one-hot read-in's init
    read_out_dims: Optional[int] = field(default=None, metadata=FAN)  # read-out logits (Fan et al.: their n_dims)
    steps: int = 100_000          # total optimizer steps
    grad_clip: float = 1.0        # 0 = no clipping
    # ---- Fan et al.'s length curriculum and baselines
    start_n: int = field(default=1, metadata=FAN)          # max length at step 0
    max_train_n: int = field(default=20, metadata=FAN)     # final max length
    interval: int = field(default=1000, metadata=FAN)      # steps per +1 of the max length
    baseline_depth: int = field(default=20, metadata=FAN)  # FAP/NTP baselines: layers = this x the block's
    pause_tokens: int = field(default=20, metadata=FAN)    # *-Pause baselines
    loop_steps: int = field(default=20, metadata=FAN)      # NTP-Loop: fixed number of iterations
    # ---- comparison tasks' data
    train_split: str = field(default="train", metadata=SEQ)
    valid_split: str = field(default="valid", metadata=SEQ)
    # a curriculum over positions (per-position tasks): the loss scores each example's first
    # loss_first targets (0: all), one more every loss_grow_every steps (0: never more);
    # for a causal model this is training on the words' prefixes, shortest first
    loss_first: int = field(default=0, metadata=SEQ)
    loss_grow_every: int = field(default=0, metadata=SEQ)
    # ---- bookkeeping
    log_every: int = 50
    ckpt_every: int = 1000
    keep_ckpts: int = 2
    eval_every: int = 500         # evaluation during training (0: only at the end)
    eval_samples: int = 256
    # ---- the descent guard (trainer/run/guard.py) and a compiled start
    guard: bool = False           # keep only steps that do not hurt the batch and a fixed guard sample
    guard_samples: int = 256
    guard_max_n: Optional[int] = field(default=None, metadata=FAN)  # guard lengths 1..this (None: max_train_n)
    guard_every: int = 1          # check the guard sample every this many kept steps (undo them all if it fails)
    flat_stop: int = 0            # guarded runs: stop once exact and the loss gained < 5% over this many steps
    keep_zeros: bool = False      # train only the nonzero weights (a compiled start's sparsity pattern)
    freeze_fragile: bool = field(default=False, metadata=FAN)  # freeze tensors whose tolerance shrinks with length
    seed: int = 0
    extra: dict = field(default_factory=dict, metadata=SEQ)    # the comparison model's own options (--set)

    # ---- reading and writing ---------------------------------------------------------------
    @classmethod
    def names(cls, kind: str) -> list:
        """The fields a run of `kind` records."""
        return [f.name for f in fields(cls) if f.name != "kind" and f.metadata.get("kind", kind) == kind]

    def to_dict(self) -> dict:
        return {k: _copy(getattr(self, k)) for k in self.names(self.kind)}

    @classmethod
    def from_dict(cls, d: dict, kind: str = "fan") -> "HParams":
        """A run's recorded settings; a field it lacks (recorded before the
        field existed) takes the kind's default."""
        hp = defaults(kind)
        for k in cls.names(kind):
            if k in d:
                setattr(hp, k, _copy(d[k]))
        return hp

    # ---- derived -----------------------------------------------------------------------------
    def curriculum_end(self) -> int:
        return max(0, self.max_train_n - self.start_n) * self.interval

    def decay_from(self) -> int:
        """Where the learning rate starts to decay, and the EMA to average:
        Fan's tasks, the curriculum's end (or decay_start); else the warm-up's."""
        if self.kind == "seq":
            return self.warmup
        return self.curriculum_end() if self.decay_start is None else self.decay_start

    def encoder_fields(self) -> dict:
        return {k: getattr(self, k) for k in ("d_model", "n_layer", "n_head", "d_ff", "dropout")}

    # ---- checking ------------------------------------------------------------------------------
    def validate(self) -> "HParams":
        if self.kind not in KINDS:
            raise RaspError(f"kind {self.kind!r}: one of {', '.join(KINDS)}")
        mine = set(self.names(self.kind))
        for name, allowed in CHOICES.items():
            if name in mine and getattr(self, name) not in allowed:
                raise RaspError(f"{name} = {getattr(self, name)!r}: one of {', '.join(allowed)}")
        for k, (lo, hi) in INT_RANGES.items():
            v = getattr(self, k)
            if k in mine and (not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi):
                raise RaspError(f"{k} = {v!r}: an integer from {lo} to {hi}")
        for k in ("lr", "weight_decay", "eps", "grad_clip", "dropout"):
            v = getattr(self, k)
            if k in mine and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0):
                raise RaspError(f"{k} = {v!r}: a finite number >= 0")
        if self.lr <= 0:
            raise RaspError(f"lr = {self.lr}: must be positive")
        for k in ("guard", "keep_zeros", "freeze_fragile"):
            if not isinstance(getattr(self, k), bool):
                raise RaspError(f"{k} = {getattr(self, k)!r}: true or false")
        if isinstance(self.ema, bool) or not isinstance(self.ema, (int, float)) or not 0.0 <= self.ema < 1.0:
            raise RaspError(f"ema = {self.ema!r}: a decay in [0, 1) (0 = off)")
        if self.kind == "seq":
            self._validate_seq()
        return self

    def _validate_seq(self):
        if not self.dropout < 1:
            raise RaspError(f"dropout = {self.dropout}: below 1")
        if not (isinstance(self.betas, (list, tuple)) and len(self.betas) == 2
                and all(isinstance(b, (int, float)) and 0 <= b < 1 for b in self.betas)):
            raise RaspError(f"betas = {self.betas!r}: two numbers in [0, 1)")
        self.betas = [float(b) for b in self.betas]
        if not isinstance(self.extra, dict):
            raise RaspError("extra must be a mapping")
        for k in ("loss_first", "loss_grow_every"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 1_000_000:
                raise RaspError(f"{k} = {v!r}: an integer from 0 to 1000000 (0 = off)")


def scored_positions(step: int, first: int, grow_every: int) -> int:
    """A curriculum over positions: how many leading targets per example the
    loss of `step` scores -- `first`, one more every `grow_every` steps (0:
    never more); 0 (first = 0) means all."""
    if not first:
        return 0
    return first + (step // grow_every if grow_every else 0)


# What a comparison run starts from before its presets (trainer/benchmark/presets.py).
SEQ_DEFAULTS = {"d_model": 64, "n_head": 4, "batch_size": 32, "lr": 1e-3, "steps": 1000, "eval_every": 250,
                "ckpt_every": 500}


def defaults(kind: str) -> HParams:
    """A kind's starting settings, before any preset."""
    hp = HParams(kind=kind)
    if kind == "seq":
        for k, v in SEQ_DEFAULTS.items():
            setattr(hp, k, v)
    return hp


def _copy(v):
    return dict(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v

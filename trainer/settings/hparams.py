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

Each field is described once, in its `Setting` (trainer/settings/setting.py):
range or values, which kinds of run record it, its `rasp train` flag and
help line, whether a resume may change it.  A new hyper-parameter is a new
field here (and its values in the presets, where they differ).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Optional

from rasp.errors import RaspError
from trainer.settings.setting import (BOTH, CLOCK_UNIT, COMPILED_START, DEEP, FAN, FIRST_POSITIONS, GUARDED, HALT_FROM_RANDOM,
                                      HALT_UNIT, HALTING_LOSS, LOOP_COUNT, LOOPED, PAUSED, RANDOM_START, RUN_FLAGS, SEQ,
                                      Setting)

PRESET_NAMES = ("paper", "cpu")     # trainer/fan/presets.py and the comparison presets define each
RECIPE_NAMES = ("clock", "marker", "halting", "fan")   # how a looped model learns when it is done (trainer/fan/presets.py RECIPES)
DEFAULT_RECIPE = "clock"
MARKER_TARGETS = ("marker", "clock")
CLOCK_REACHES = ("auto", "window", "wide", "max", "global")   # --clock-reach: what a halting clock sees (trainer/models/looped.py)
KINDS = BOTH


def clock_plan(hp, needs: bool, by_size: bool = True) -> tuple:
    """(reach, every): what a halting clock sees and on every how many optimiser steps it
    is taught, for a run whose clock is taught each position's need (`needs`: the loop
    counts positions other than the query's first ones) or the marker, and whose loop count
    is the same on every input of a size (`by_size`; trainer/fan/kind.py probe_counts).
    `--clock-reach auto`, the clock recipe's, resolves here:

    * a count by size, taught as the marker (Fan et al.'s tasks): the window clock, taught on
      every --clock-every-th step, as before;
    * a count that depends on the content: the max clock, whose running maximum reads "some
      earlier position is still counting" alike at every length where the window sees two
      positions back (a count of ones is timed by a chain, "every earlier 1 was done a step
      ago"; a carry chain's end by "a 0 came before me");
    * taught each position's need, on every step: taught on every 4th, that chain held on
      0.68-0.74 of the inputs beyond the training sizes, against 0.94-1.00 on every step
      (bench/BENCH.md, "A clock with a running maximum")."""
    reach = getattr(hp, "clock_reach", "window")
    every = getattr(hp, "clock_every", 1)
    if reach != "auto":
        return reach, every
    return ("window" if by_size and not needs else "max"), (1 if needs else every)


MAX_SIZE = 1 << 16           # widths, heads, layers: far above anything trainable here
MAX_SEED = 2 ** 32 - 1       # NumPy and PyTorch both take it
MAX_N = 2000                 # training problem sizes (the paper's largest is 20)
LONG = 10 ** 9               # step counts


def _set(default=None, factory=None, **meta):
    """A field and its Setting (trainer/settings/setting.py)."""
    if factory is not None:
        return field(default_factory=factory, metadata={"setting": Setting(**meta)})
    return field(default=default, metadata={"setting": Setting(**meta)})


def _flag(group: str, at: int, help: str, **meta) -> dict:
    return dict(group=group, at=at, help=help, **meta)


@dataclass
class HParams:
    kind: str = "fan"             # which family of runs: "fan" (Fan et al.'s tasks) or "seq" (comparison tasks)
    # ---- model size
    d_model: int = _set(256, lo=1, hi=MAX_SIZE, used_if=(RANDOM_START,),
                        **_flag("size", 1, "width of the residual stream"))
    n_head: int = _set(8, used_if=(RANDOM_START,), lo=1, hi=MAX_SIZE, **_flag("size", 3, "attention heads"))
    n_layer: int = _set(1, lo=1, hi=MAX_SIZE, used_if=(RANDOM_START,),
                        **_flag("size", 2, "layers (of the looped block, for the looped model)"))
    d_mlp: Optional[int] = _set(None, kinds=FAN)   # default 4 * d_model
    d_ff: int = _set(128, kinds=SEQ, lo=1, hi=4 * MAX_SIZE)
    dropout: float = _set(0.0, kinds=SEQ, lo=0.0, hi=1.0, hi_open=True)
    pooling: str = _set("mean", kinds=SEQ, choices=("mean", "end", "cls"))    # classify / pair tasks
    # ---- optimiser (AdamW)
    batch_size: int = _set(64, lo=1, hi=1 << 20, **_flag("optimiser", 2, "examples per step"))
    lr: float = _set(1e-4, lo=0.0, lo_open=True, **_flag("optimiser", 3, "peak learning rate"))
    # torch.optim.AdamW's default, as in Fan et al.'s code
    weight_decay: float = _set(0.01, lo=0.0, **_flag("optimiser", 4, "AdamW's weight decay"))
    # "all" (Fan et al.) | "matrices" (no decay on biases, norms)
    wd_params: str = _set("all", kinds=FAN, choices=("all", "matrices"),
                          **_flag("optimiser", 5, "decay all parameters, or only the weight matrices"))
    betas: list = _set(factory=lambda: [0.9, 0.999], kinds=SEQ)
    eps: float = _set(1e-8, kinds=SEQ, lo=0.0)
    warmup: int = _set(0, lo=0, hi=LONG, **_flag("optimiser", 6, "steps of linear warm-up"))
    # cosine | constant | linear | root (JRC rootwarmup)
    schedule: str = _set("cosine", kinds=SEQ, choices=("cosine", "constant", "linear", "root"))
    decay_start: Optional[int] = _set(None, kinds=FAN, lo=0, hi=LONG, none_means="the curriculum's end", **_flag(
        "optimiser", 7, "step where the cosine decay starts ((max-train-n + 1) x interval)"))
    # an EMA of the weights kept after decay_from() (0: off)
    ema: float = _set(0.0, lo=0.0, hi=1.0, hi_open=True, flag_kinds=FAN, **_flag(
        "optimiser", 9, "decay of an average of the weights kept from the decay's start (0: off)"))
    # ---- Fan et al.'s recipe switches (trainer/README.md lists each with its source)
    init_scheme: str = _set("gpt2", used_if=(RANDOM_START,), kinds=FAN, choices=("gpt2", "normal"),
                            **_flag("switches", 1, "initialisation of the weights"))
    read_in: str = _set("linear", used_if=(RANDOM_START,), kinds=FAN, choices=("linear", "embedding"),
                        **_flag("switches", 2, "how input tokens enter the model"))
    arch: str = _set("fan", used_if=(RANDOM_START,), kinds=FAN, choices=("fan", "legacy"),
                     **_flag("switches", 5, "block layout: Fan et al.'s, or this project's older one"))
    loss_reduction: str = _set("token", kinds=FAN, choices=("token", "sample"),
                               **_flag("switches", 6, "average the loss over tokens or over samples"))
    padding: str = _set("scored", kinds=FAN, choices=("scored", "ignored"),
                        **_flag("switches", 7, "whether padded answer positions are scored"))
    read_in_dims: Optional[int] = _set(None, kinds=FAN, lo=1, hi=MAX_SIZE, none_means="the input's tokens",
                                       used_if=(RANDOM_START,), **_flag(
        "switches", 3, "fan-in of the one-hot read-in's initialisation"))
    # Fan et al.: their n_dims
    read_out_dims: Optional[int] = _set(None, kinds=FAN, lo=1, hi=MAX_SIZE, none_means="the output's tokens",
                                        used_if=(RANDOM_START,), **_flag(
        "switches", 4, "logits of the read-out (at least the task's output tokens)"))
    # ---- knowing when to stop (issue 39): 0 = Fan et al.'s loss at T(n) only; added after run
    # format 2, so a run recorded without them (Fan et al.'s recipe) still matches its checkpoints
    past_t: int = _set(0, used_if=(LOOPED,), kinds=FAN, lo=0, hi=MAX_N, added=True, **_flag(
        "halting", 1, "also train past T(n): each sample's loss at T(n) + k, k uniform on 0..this "
                      "(0: at T(n) only, Fan et al.), so the answer becomes a fixed point of the loop"))
    settle: int = _set(0, used_if=(LOOPED,), kinds=FAN, lo=0, hi=MAX_N, added=True, **_flag(
        "halting", 2, "also score every step T(n)+1..T(n)+this beside T(n) itself, so the answer holds "
                      "once reached (0: Fan et al.)"))
    unsure: float = _set(0.0, used_if=(LOOPED,), kinds=FAN, lo=0.0, hi=100.0, added=True, **_flag(
        "halting", 3, "weight of a loss that keeps every step before T(n) uncommitted (its output pulled "
                      "toward uniform), so the first confident step is T(n) (0: Fan et al.)"))
    halt: float = _set(0.0, used_if=(LOOPED, HALT_FROM_RANDOM,), kinds=FAN, lo=0.0, hi=100.0, added=True, **_flag(
        "halting", 4, "weight of the loss of a 'done' unit trained with the model on whether each step "
                      "has reached T(n) (ACT, PonderNet; the `head` rule reads it; 0: none, Fan et al.)"))
    halt_target: str = _set("answer", kinds=FAN, choices=("answer", *MARKER_TARGETS), added=True,
                            used_if=(HALT_UNIT,), **_flag(
        "halting", 5, "what the --halt unit is taught: answer (on the answer's averaged state, whether the step "
                      "has reached T(n)) or marker (at every position i < T(n), whether a marker moved one position "
                      "per step has passed it, t > i; at the later ones, t >= T(n); the model is done when every "
                      "position says so) or clock (a looped network of its own with a BOS position and attention "
                      "to the two positions before each, taught at every position the step from which the program's "
                      "loop no longer waits on it: the marker where the loop counts the first positions, the later "
                      "ones done at every step; the answering model trains exactly as Fan et al.'s)"))
    halt_past: int = _set(2, used_if=(HALT_UNIT,), kinds=FAN, lo=0, hi=MAX_N, added=True, **_flag(
        "halting", 6, "steps after T(n) on which the --halt unit is also taught 'done', so it stays done when "
                      "the loop runs longer than any trained input needed (the clock recipe: 10)"))
    clock_reach: str = _set("window", used_if=(CLOCK_UNIT,), kinds=FAN, choices=CLOCK_REACHES, added=True, **_flag(
        "halting", 8, "--halt-target clock: auto (the clock recipe's: window where the loop's count is fixed by "
                      "the size, max where it depends on the content, then taught on every step where each position "
                      "waits on its own count), window (the clock sees two "
                      "positions back, every position saying done), wide (one head of it sees every earlier "
                      "position, so a position can find a token anywhere before it; every position saying done), "
                      "max (one head of it reads the largest of its values over every earlier position: 'some "
                      "earlier 1 is not done yet' at any length; every position saying done) or global (a narrow one-block clock, width 32, "
                      "one head of it seeing every earlier position, done when the sum of its score over the "
                      "positions is positive: it can weigh the steps run against a count over the input)"))
    clock_width: int = _set(0, used_if=(CLOCK_UNIT,), kinds=FAN, lo=0, hi=MAX_SIZE, added=True, **_flag(
        "halting", 9, "--halt-target clock: the clock's width (at most the model's); such a clock has one block of heads 8 wide "
                      "(0: the answering model's width and layers, or 32 for --clock-reach wide and global; the clock "
                      "recipe: 32, a fraction of the step's cost)"))
    clock_mlp: int = _set(0, used_if=(CLOCK_UNIT,), kinds=FAN, lo=0, hi=MAX_SIZE, added=True, **_flag(
        "halting", 11, "--halt-target clock with --clock-width: the units of the clock's MLP (0: 4 times its "
                       "width, as in the clock recipe)"))
    clock_every: int = _set(1, used_if=(CLOCK_UNIT,), kinds=FAN, lo=1, hi=LONG, added=True, **_flag(
        "halting", 10, "--halt-target clock: train the clock on every this-th step only (its own "
                       "parameters; the answering model trains on every step; the clock recipe: 4, and every "
                       "step where --clock-reach auto picks max)"))
    halting_from: int = _set(0, used_if=(HALTING_LOSS,), kinds=FAN, lo=0, hi=LONG, added=True, **_flag(
        "halting", 7, "the step from which --settle, --unsure and --halt apply; before it the loss is Fan et al.'s "
                      "(0: from the start)"))
    steps: int = _set(100_000, lo=0, hi=LONG, resumable=True, **_flag("optimiser", 1, "optimizer steps in all"))
    # 0 = no clipping
    grad_clip: float = _set(1.0, lo=0.0, flag_lo_open=True, **_flag("optimiser", 8, "clip the gradient norm to this"))
    # ---- Fan et al.'s length curriculum and baselines
    start_n: int = _set(1, kinds=FAN, lo=1, hi=MAX_N, **_flag("curriculum", 2, "longest length at step 0"))
    max_train_n: int = _set(20, kinds=FAN, lo=1, hi=MAX_N, **_flag(
        "curriculum", 1, "longest training length (the curriculum's end)"))
    interval: int = _set(1000, kinds=FAN, lo=1, hi=LONG, **_flag("curriculum", 3, "steps per +1 of the longest length"))
    baseline_depth: int = _set(20, used_if=(DEEP,), kinds=FAN, lo=1, hi=MAX_SIZE, **_flag(
        "curriculum", 4, "FAP/NTP baselines: layers, in multiples of the looped block's"))
    pause_tokens: int = _set(20, used_if=(PAUSED,), kinds=FAN, lo=0, hi=MAX_N, **_flag(
        "curriculum", 5, "*-Pause baselines: pause tokens per input"))
    loop_steps: int = _set(20, kinds=FAN, lo=1, hi=100_000, used_if=(LOOP_COUNT,),
                           **_flag("curriculum", 6, "NTP-Loop: iterations per token"))
    # ---- comparison tasks' data
    train_split: str = _set("train", kinds=SEQ)
    valid_split: str = _set("valid", kinds=SEQ)
    # a curriculum over positions (per-position tasks): the loss scores each example's first
    # loss_first targets (0: all), one more every loss_grow_every steps (0: never more);
    # for a causal model this is training on the words' prefixes, shortest first
    loss_first: int = _set(0, kinds=SEQ, lo=0, hi=1_000_000)
    loss_grow_every: int = _set(0, used_if=(FIRST_POSITIONS,), kinds=SEQ, lo=0, hi=1_000_000)
    # ---- bookkeeping
    log_every: int = _set(50, lo=1, hi=LONG, resumable=True, **_flag(
        "logging", 1, "steps per row of metrics.jsonl (mean loss, accuracy, learning rate)"))
    ckpt_every: int = _set(1000, lo=1, hi=LONG, resumable=True, **_flag("logging", 4, "steps per checkpoint"))
    keep_ckpts: int = _set(2, lo=1, hi=1000, resumable=True)
    eval_every: int = _set(500, lo=0, hi=LONG, resumable=True, **_flag(
        "logging", 2, "steps per evaluation (0: only at the end)"))
    eval_samples: int = _set(256, lo=1, hi=1 << 20, resumable=True, **_flag("logging", 3, "inputs per evaluation"))
    # ---- the descent guard (trainer/run/guard.py) and a compiled start
    guard: bool = _set(False)     # keep only steps that do not hurt the batch and a fixed guard sample
    guard_samples: int = _set(256, used_if=(GUARDED,), lo=1, hi=1 << 20)
    # a compiled comparison model costs (input length)^2 per example (a loop step per token), so
    # its guard checks the short examples after its steps and the long ones only before a
    # checkpoint and at the end, rolling back to the last state they passed (issue 41)
    # 0: every example at every check
    guard_short_factor: int = _set(0, kinds=SEQ, lo=0, hi=1000, added=True, used_if=(GUARDED,))
    guard_long_samples: int = _set(8, used_if=(GUARDED,), kinds=SEQ, lo=1, hi=1 << 20, added=True)
    guard_max_n: Optional[int] = _set(None, kinds=FAN, lo=1, hi=MAX_N, none_means="--max-train-n",
                                      used_if=(GUARDED,), **_flag(
        "guard", 1, "lengths of the guard's fixed sample: 1..this"))
    # undo them all if it fails
    guard_every: int = _set(1, used_if=(GUARDED,), lo=1, hi=LONG, flag_kinds=FAN, **_flag(
        "guard", 2, "check the guard sample every this many kept steps"))
    flat_stop: int = _set(0, used_if=(GUARDED,), lo=0, hi=LONG, flag_kinds=FAN, **_flag(
        "guard", 3, "stop once exact and the loss gained < 5%% over this many steps (0: never)"))
    keep_zeros: bool = _set(False)   # train only the nonzero weights (a compiled start's sparsity pattern)
    # freeze tensors whose tolerance shrinks with length
    freeze_fragile: bool = _set(False, added=True, used_if=(COMPILED_START,))
    # ---- speed on a GPU (trainer/run/device.py): the defaults are every earlier run's behaviour
    precision: str = _set("fp32", choices=("fp32", "bf16"), added=True, **_flag(
        "speed", 1, "training forward passes and losses in float32, or under bfloat16 autocast"))
    tf32: str = _set("off", choices=("off", "on"), added=True, resumable=True, **_flag(
        "speed", 2, "TF32 matrix products on CUDA"))
    compile: str = _set("off", choices=("off", "on"), added=True, resumable=True, **_flag(
        "speed", 3, "torch.compile the model's forward (CUDA devices only)"))
    seed: int = _set(0, lo=0, hi=MAX_SEED, **_flag("optimiser", 10, "random seed of the weights and the data"))
    extra: dict = _set(factory=dict, kinds=SEQ)    # the comparison model's own options (--set)

    # ---- reading and writing ---------------------------------------------------------------
    @classmethod
    def names(cls, kind: str) -> list:
        """The fields a run of `kind` records."""
        return [name for name, s in SETTINGS.items() if kind in s.kinds]

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
        for name in self.names(self.kind):
            why = _refusal(SETTINGS[name], _TYPES[name], getattr(self, name))
            if why:
                raise RaspError(f"{name} = {getattr(self, name)!r}: {why}")
        if self.kind == "seq":
            self._validate_seq()
        return self

    def _validate_seq(self):
        if not (isinstance(self.betas, (list, tuple)) and len(self.betas) == 2
                and all(isinstance(b, (int, float)) and 0 <= b < 1 for b in self.betas)):
            raise RaspError(f"betas = {self.betas!r}: two numbers in [0, 1)")
        self.betas = [float(b) for b in self.betas]
        if not isinstance(self.extra, dict):
            raise RaspError("extra must be a mapping")


SETTINGS = {f.name: f.metadata["setting"] for f in fields(HParams) if "setting" in f.metadata}


def setting_of(name: str) -> Setting:
    """The Setting of a hyper-parameter or of a run-level flag that is used only with others."""
    return SETTINGS.get(name) or RUN_FLAGS[name]
_TYPES = {f.name: f.type for f in fields(HParams)}      # annotations, as text
CHOICES = {name: s.choices for name, s in SETTINGS.items() if s.choices}
RESUMABLE = tuple(name for name, s in SETTINGS.items() if s.resumable)
# fields a run recorded before they existed had their defaults: {name: default}
ADDED = {f.name: f.default for f in fields(HParams) if "setting" in f.metadata and f.metadata["setting"].added}


def _refusal(s: Setting, annotation: str, v) -> str:
    """Why `v` is not a value of the setting ("" if it is)."""
    if v is None and annotation.startswith("Optional"):
        return ""
    if s.choices:
        return "" if v in s.choices else f"one of {', '.join(s.choices)}"
    if "bool" in annotation:
        return "" if isinstance(v, bool) else "true or false"
    if "int" in annotation and s.lo is not None:
        ok = isinstance(v, int) and not isinstance(v, bool) and s.lo <= v <= s.hi
        return "" if ok else s.int_text()
    if "float" in annotation and s.lo is not None:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and s.number_ok(v, s.lo_open)
        return "" if ok else s.number_text(s.lo_open)
    return ""


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

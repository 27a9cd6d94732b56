"""Fan et al.'s tasks as a kind of run of the one training loop
(trainer/run/loop.py), §4.2.2 of the paper: online batches of lengths drawn from
a length curriculum, labels computed by the task's program, the loss at each
sample's own step T_i (FAP) or the NTP objectives of the baselines, AdamW
with warm-up + cosine, and in-distribution exact match (oracle stop) as the
evaluation during training."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch

from trainer.run import checkpoint, loop
from trainer.run.kind import RunKind

from trainer.fan import objectives, stopping

from trainer.settings import validate
from trainer.settings.setting import Chosen
from trainer.fan.compiled import has_clock
from trainer.fan.coverage import coverage, exact_size_batches, guard_sizes, never_checked, size_list
from trainer.fan.data import TaskData, scored_once
from trainer.fan.evalfile import describe_origin
from trainer.fan.halting import clock_stops
from trainer.fan.initialise import initial_model
from trainer.tasks.labels import ProgramLabeler
from trainer.models import get_model_spec
from trainer.settings.hparams import MARKER_TARGETS, HParams
from trainer.run.schedule import curriculum_max_n, lr_at, sample_lengths
from trainer.tasks import get_task
from trainer.tasks.program import inputs_origin, task_of


@dataclass
class RunConfig:
    task: str
    out: str
    model: str = "looped"
    init: str = "random"            # "random" | "compiled"
    compress: Optional[int] = None  # compiled init projected into this width
    compress_method: str = "merge"
    preset: str = "cpu"
    device: str = "cpu"
    hp: HParams = field(default_factory=HParams)
    resume: bool = False
    progress: bool = True
    max_wall: Optional[float] = None   # stop (after a checkpoint) once this many seconds pass
    config: Optional[dict] = None      # the settings of `--config FILE.toml`, as read (run.json keeps them)
    program: Optional[dict] = None     # a task made from a program file (trainer/tasks/program.py)

    def to_dict(self):
        d = {k: getattr(self, k) for k in ("task", "model", "init", "compress", "compress_method",
                                           "preset", "device")}
        if self.program is not None:
            d["program"] = self.program
        d["hparams"] = self.hp.to_dict()
        return d | ({"config": self.config} if self.config else {})


def build_data(task, spec, hp, labeler=None) -> TaskData:
    """`task`: a registered task's name, or a Task (task_of(run) of a run trained from a program)."""
    task = get_task(task) if isinstance(task, str) else task
    labeler = labeler or ProgramLabeler(task.program_path, source=task.source or None)
    data = TaskData(task, labeler, spec.layout(), spec.pause_count(hp), needs=clock_reads_needs(spec, hp))
    if data.needs:
        first, data.count_by_size = probe_counts(data, hp.max_train_n)
        data.needs = not first
    return data


def clock_reads_needs(spec, hp) -> bool:
    """Whether a model's halting clock may be taught each position's need (Batch.need)."""
    return (spec.adaptive and bool(getattr(hp, "halt", 0.0)) and getattr(hp, "halt_target", "answer") == "clock"
            and getattr(hp, "clock_reach", "window") != "global")


PROBE_SIZES, PROBE_PER_SIZE = 16, 8


def probe_counts(data, max_train_n: int) -> tuple:
    """(first positions, by size) of the task's loop on a fixed probe (the first 16 training
    sizes, 8 inputs each, drawn or from the file):

    * first positions: on every input the loop counts a run of positions from the first on,
      as a count of the query's size does (parity's n, addition's n + 1) and a carry chain
      does (`programs/increment.rasp`).  The clock is then taught the first T(n) positions,
      each done one step after the one before (trainer/fan/objectives.py `first_positions`);
      otherwise (a count of ones, an erosion until stable) each position is taught its own
      need, wherever the loop counts.
    * by size: the count is the same on every input of a size.  Where it is not (a carry
      chain that ends at the first 0, parity of the bits before a padding), a position after
      the counted ones may have to know what came anywhere before it, which the window
      clock cannot see (trainer/settings/hparams.py `clock_plan`)."""
    rng = np.random.default_rng(0)
    pools = data.file_inputs(True)
    if pools is not None:
        groups = [group[:PROBE_PER_SIZE] for _, group in sorted(pools.items())[:PROBE_SIZES]]
    else:
        lo = data.task.min_n
        groups = [data.sample_inputs(rng, [n] * PROBE_PER_SIZE)
                  for n in range(lo, max(lo, min(lo + PROBE_SIZES - 1, max_train_n)) + 1)]
    first, by_size = True, True
    for inputs in groups:
        _, _, needs = data.labeler(inputs, needs=True)
        by_size &= len({int(need.max(initial=0)) for need in needs}) <= 1
        for need in needs:
            counted = need > 0
            first &= not counted[int(counted.sum()):].any()      # no counted position after one that is not
    return first, by_size


def in_distribution_files(data, hp) -> Optional[tuple]:
    """The file inputs the in-distribution evaluation scores: (train, {n: distinct
    inputs} of sizes min_n..max_train_n) from the held-out file, else from the
    training file when the held-out one has none of those sizes; None when inputs
    are drawn fresh."""
    for train in (False, True):
        pool = data.file_inputs(train, data.task.min_n, hp.max_train_n)
        if pool is None:
            return None
        if pool:
            return train, pool
    return True, {}


def in_distribution_accuracy(spec, hp, model, batches: list) -> float:
    """Exact match over lengths uniform on 1..max_train_n, oracle stop, on the batches
    of `in_distribution_batches`."""
    correct = total = 0
    for batch in batches:
        correct += int(objectives.oracle_correct(spec, hp, model, batch).sum())
        total += len(batch)
    return correct / max(total, 1)


def in_distribution_batches(hp, data, seed: int, n_samples: int, device) -> list:
    """The inputs of `in_distribution_accuracy`, one batch per size: lengths uniform on
    1..max_train_n; own RNG so evaluating never changes the training stream, and the same
    inputs at every evaluation of a run.  Inputs from a file: each distinct input of those
    sizes once (at most n_samples of them, drawn without replacement), never one input twice."""
    rng = np.random.default_rng([seed, 12345])
    files = in_distribution_files(data, hp)
    if files is None:
        lengths = rng.integers(data.task.min_n, hp.max_train_n + 1, size=n_samples)
        groups = [(int(n), None, int((lengths == n).sum())) for n in np.unique(lengths)]
    else:
        chosen = scored_once(rng, [(n, x) for n in sorted(files[1]) for x in files[1][n]], n_samples)
        groups = [(n, [x for m, x in chosen if m == n], 0) for n in sorted({m for m, _ in chosen})]
    return [(data.batch(rng, [n] * k, train=False) if inputs is None else
             data.make_batch(inputs, [n] * len(inputs))).to(device) for n, inputs, k in groups]


def train_padding(hp, data, step: int) -> dict:
    """make_batch arguments of a training batch.  padding "scored" (Fan et al.,
    generate_training_data.py:7-29): every row is padded to the length of a row
    of the curriculum's current longest size and the padding is scored (`#`),
    so the loss sees answer and padding tokens of every row."""
    if not (getattr(hp, "padding", "ignored") == "scored" and data.layout == "fap" and data.task.target == "fap"
            and "#" in data.sym and data.sym["#"] in data.output_tokens):      # the padding is scored as `#`
        return {}
    return {"pad_to": data.row_length(curriculum_max_n(step, hp)), "score_padding": True}


def past_t_offsets(rng, past_t: int, size: int) -> torch.Tensor:
    """k uniform on 0..past_t per sample: the sample is scored after T(n) + k
    iterations instead of T(n), so the answer must hold once it is reached.
    After Bansal et al. 2022 ("End-to-end Algorithm Synthesis with Recurrent
    Networks: Logical Extrapolation Without Overthinking", NeurIPS), whose
    networks must stay right when run for more iterations than they were
    trained with; their progressive loss does it by running from a random
    earlier iteration without gradient and training a random number more.
    Here T(n) is known for every training input, so the loss is simply placed
    at a random step from T(n) on."""
    return torch.as_tensor(rng.integers(0, past_t + 1, size=size), dtype=torch.long)


def param_groups(model, weight_decay: float, which: str = "all") -> list:
    """AdamW parameter groups.  "all": every parameter decays (Fan et al.'s
    `AdamW(model.parameters(), lr)`, default decay 0.01); "matrices": only
    weight matrices and embeddings decay, biases and LayerNorm gains do not."""
    params = [p for p in model.parameters()]
    if which == "all":
        return [{"params": params, "weight_decay": weight_decay}]
    if which != "matrices":
        raise ValueError(f"unknown wd_params {which!r}")
    decay = [p for p in params if p.dim() >= 2]
    rest = [p for p in params if p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]



class FanKind(RunKind):
    """The per-kind parts of a Fan-task run that trainer/run/loop.py calls (the contract: trainer/run/kind.py)."""

    def __init__(self, cfg: RunConfig, labeler=None):
        self.cfg, self.hp = cfg, cfg.hp
        self.spec = get_model_spec(cfg.model)
        self.data = build_data(task_of(cfg.to_dict()), self.spec, cfg.hp, labeler)
        validate.check_hparams(cfg.hp, self.data.task)
        validate.refuse_inert_teaching(cfg.hp, Chosen("fan", cfg.hp, self.spec, cfg.init))
        self.rng = None
        self.step = None        # the optimiser step under way (before_step); the loss reads it
        self.eval_batches = None    # in_distribution_batches, drawn at the first evaluation

    # -- setting up ---------------------------------------------------------------
    def prepare(self, device):
        self.device = device

    def check_memory(self, device):
        if self.cfg.init == "random":        # a compiled start's size comes from its program
            validate.check_memory(self.spec, self.hp, self.data, device)
        if self.hp.halt_target in MARKER_TARGETS:      # after the memory check: it runs the program
            validate.check_marker_fits(self.data, self.hp)

    def seed_rng(self):
        self.rng = np.random.default_rng(self.hp.seed)

    def initial_model(self, device):
        return initial_model(self.cfg, self.spec, self.hp, self.data, device)

    def load_model(self, ckpt, state, device):
        return checkpoint.load_model(ckpt, device)

    def restore(self, state: dict):
        self.rng.bit_generator.state = state["numpy_rng"]

    def state(self, at: int) -> dict:
        hp = self.hp
        return {"numpy_rng": self.rng.bit_generator.state,
                "curriculum": {"max_n": curriculum_max_n(at, hp), "start_n": hp.start_n,
                               "interval": hp.interval, "max_train_n": hp.max_train_n}}

    def run_record(self) -> dict:
        return self.cfg.to_dict()

    # -- optimising ---------------------------------------------------------------
    def param_groups(self, model) -> list:
        return param_groups(model, self.hp.weight_decay, self.hp.wd_params)

    def adam_options(self) -> dict:
        return {}                   # torch's AdamW defaults, as Fan et al.'s code

    def lr_at(self, step: int) -> float:
        return lr_at(step, self.hp)

    def before_step(self, model, step: int):
        self.step = step

    def train_batch(self, step: int, shard: slice, device):
        hp, data = self.hp, self.data
        lengths = sample_lengths(self.rng, step, hp, data.task.min_n, hp.batch_size)
        inputs = data.sample_inputs(self.rng, lengths, train=True)
        batch = data.make_batch(inputs[shard], lengths[shard], taught=True, **train_padding(hp, data, step))
        if hp.past_t:       # drawn only then, so a run without it keeps its random stream
            batch.steps = batch.steps + past_t_offsets(self.rng, hp.past_t, hp.batch_size)[shard]
        return batch.to(device)

    def batch_weight(self, batch) -> float:
        """What the loss of a shard is normalised by (token-mean: its scored tokens)."""
        return float(batch.mask.sum())

    def loss(self, net, batch, per_shard=None):
        return objectives.train_step_outputs(self.spec, self.hp, net, batch, per_shard, self.step)

    # -- measuring ----------------------------------------------------------------
    def evaluate(self, model) -> dict:
        if self.eval_batches is None:       # drawn and labelled once: every evaluation scores the same inputs
            self.eval_batches = in_distribution_batches(self.hp, self.data, self.hp.seed, self.hp.eval_samples,
                                                        self.device)
        return {"eval_acc": in_distribution_accuracy(self.spec, self.hp, model, self.eval_batches)}

    def eval_description(self, row: dict) -> str:
        return (f"in-distribution exact match {row['eval_acc']:.3f} (oracle stop, {self.scored_inputs()}, "
                f"measured at step {row['step']})")

    def scored_inputs(self) -> str:
        """What `evaluate` scores, in words: how many inputs, of which sizes, from where."""
        task, hp, lo = self.data.task, self.hp, self.data.task.min_n
        files = in_distribution_files(self.data, hp)
        if files is None:
            # a registered task's generator is its own; a program's `sample` statement is named
            drawn = "" if self.cfg.program is None else f", drawn by {describe_origin(inputs_origin(task, False))}"
            return f"{hp.eval_samples} inputs of lengths {lo}..{hp.max_train_n}{drawn}"
        train, pool = files
        distinct = sum(map(len, pool.values()))
        where = describe_origin(inputs_origin(task, train))
        sizes = (f"of size{'s' * (len(pool) > 1)} {', '.join(map(str, sorted(pool)))}" if 0 < len(pool) <= 4 else
                 f"of sizes {min(pool)}..{max(pool)}" if pool else f"of sizes {lo}..{hp.max_train_n}")
        if distinct <= hp.eval_samples:
            return f"the {distinct} distinct input{'s' * (distinct != 1)} {sizes} in {where}, each scored once"
        return f"{hp.eval_samples} of the {distinct} distinct inputs {sizes} in {where}, none twice"

    def guard_sample(self, model) -> list:
        # a compiled start's halting clock: the guard also keeps Eq. 2 finding T(n)
        self.clock_extra = self.data.task.t_max_extra if self.spec.adaptive and has_clock(model) else 0
        return guard_batch(self.data, self.hp, self.device)

    def guard_long_sample(self, model) -> list:
        return []           # Fan et al.'s lengths are short: every one is checked after the steps

    def guard_scope(self) -> str:
        missing = never_checked(self.data.task, guard_sizes(self.data.task, self.hp))
        return (f"every guard length up to {self.hp.guard_max_n or self.hp.max_train_n}"
                + (f" but n = {size_list(missing)}, which no input has" if missing else ""))

    def guard_eval(self, net, sample) -> tuple:
        return _guard_eval(self.spec, self.hp, net, sample, self.clock_extra)

    def log_fields(self, step: int) -> dict:
        return {"max_n": curriculum_max_n(step - 1, self.hp)}

    def bar_fields(self, row: dict) -> dict:
        return {"n": row["max_n"]}

    def summary_fields(self) -> dict:
        # a compiled start's sizes its fine-tune could not check (no input of them)
        missing, note = coverage(self.data.task, self.hp, self.cfg.init, self.hp.steps)
        return {"never_checked": missing, "never_checked_note": note} if missing else {}

    def plot_title(self) -> str:
        return f"{self.cfg.task} / {self.cfg.model} ({self.cfg.init} init)"

    def curve_labels(self) -> tuple:
        return ()


def train(cfg: RunConfig, labeler=None) -> dict:
    """Run (or resume) training; returns a summary dict."""
    return loop.train(FanKind(cfg, labeler))


def guard_batch(data, hp, device):
    """The guard's fixed sample, drawn from its own seed, so it is the same on
    every rank and after a resume: lengths uniform on 1..max_train_n, or, with
    `guard_max_n` (a compiled start: every length it was compiled for), each
    length 1..guard_max_n equally often; a task whose inputs come from files
    draws each size from the inputs of exactly that size (trainer/fan/coverage.py),
    so a size none holds is not checked.  Returned as a list of batches of
    similar lengths (a batch runs to its longest sample's T)."""
    rng = np.random.default_rng([hp.seed, 999])
    hi = hp.guard_max_n or hp.max_train_n
    exact = data.task.draw_exact is not None        # inputs from files: each size drawn as itself
    if hi <= hp.max_train_n and not exact:
        lengths = rng.integers(data.task.min_n, hp.max_train_n + 1, size=hp.guard_samples)
        return [data.batch(rng, lengths, train=True, taught=True).to(device)]
    # labels at every length come from the task program (the interpreter), as in training
    lengths = np.sort(np.resize(np.arange(data.task.min_n, hi + 1), max(hp.guard_samples, hi)))
    if exact:       # a size no file holds is left out (coverage.never_checked names it)
        sizes, counts = np.unique(lengths, return_counts=True)
        by_size = dict(zip(sizes.tolist(), counts.tolist()))
        return [b.to(device) for b in exact_size_batches(data, by_size, rng, taught=True)]
    return [data.batch(rng, chunk, train=True, taught=True).to(device) for chunk in np.array_split(lengths, 4)]


def _guard_eval(spec, hp, net, gb, clock_extra: int = 0):
    """-> (mean per-sample loss, exact-match fraction, fraction where maximum
    confidence over T(n) + clock_extra steps picks T(n) and the clock's margin
    (what the default rule, head, reads) first says done at T(n)) over the guard
    batches (the last is 1 without a clock: clock_extra = 0)."""
    loss, correct, confident = 0.0, 0, 0
    total = sum(len(b) for b in gb)
    with torch.no_grad():
        for b in gb:
            if clock_extra:
                every = getattr(net, "module", net).all_steps(b.tokens, int(b.steps.max()) + clock_extra)
                l, a = objectives.loss_and_accuracy(every[b.steps - 1, torch.arange(len(b))], b)
                stats = stopping.step_stats(every, b.targets, b.mask)
                # the clock keeps stopping at T(n) both ways: Eq. 2 and the default rule's (head's)
                confident += int((stopping.confidence_finds(stats, b.steps)
                                  & (clock_stops(every, b.mask) == b.steps)).sum())
            else:
                l, a = objectives.train_step_outputs(spec, hp, net, b)
                confident += len(b)
            loss += float(l) * len(b) / total
            correct += round(float(a) * len(b))
    return loss, correct / total, confident / total



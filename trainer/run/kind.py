"""The contract between the one training loop (trainer/run/loop.py, with its
descent guard, trainer/run/guard.py) and a kind of run: what a kind must
supply, declared once.  `FanKind` (trainer/fan/kind.py) and `SeqKind`
(trainer/benchmark/kind.py) subclass it; tests/test_run_kind.py checks that
the loop and the guard call nothing a kind is not declared here to have.

The loop calls, in order: prepare; check_memory and initial_model (a fresh
run) or load_model and restore (a resume), with seed_rng between torch's seed
and either; param_groups, adam_options; run_record; evaluate at step 0;
guard_sample with `--guard on`; then every step lr_at, before_step,
train_batch, batch_weight (data parallel), loss, and as their cadence falls
log_fields, guard_scope, evaluate, bar_fields, state (a checkpoint); at the
end eval_description, summary_fields, plot_title and curve_labels.  The
guard calls guard_sample, guard_long_sample, guard_eval and loss.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any


# init_info["fragile_probe"] of a fresh run whose "frozen" tensors were not looked for: it trained
# no step, so none could move (trainer/fan/compiled.py `fragile_info`); a resume that would train refuses
FRAGILE_NOT_PROBED = "not run: the run trains no step (--steps 0)"


class RunKind(ABC):
    """What trainer/run/loop.py needs of a kind of run beyond what it does the
    same way for every run.  Every method is abstract: a kind states each of
    its choices, a no-op included, so none is taken by accident."""

    # the run's settings; the loop reads out, resume, device, task, model, init, progress, max_wall
    cfg: Any
    # the hyper-parameters (trainer/settings/hparams.py HParams); the loop reads batch_size, lr,
    # seed, steps, grad_clip, guard, log_every, eval_every, ckpt_every, keep_ckpts, decay_from()
    # and, where the kind has them, keep_zeros and ema
    hp: Any

    # -- setting up -----------------------------------------------------------
    @abstractmethod
    def prepare(self, device) -> None:
        """Keep the device and build what evaluation needs; called first, before any checkpoint is read."""

    @abstractmethod
    def check_memory(self, device) -> None:
        """Refuse (RaspError) a fresh run whose training batch would not fit on `device`."""

    @abstractmethod
    def seed_rng(self) -> None:
        """Seed the kind's own random streams from hp.seed (a resume then overwrites them in restore)."""

    @abstractmethod
    def initial_model(self, device) -> tuple:
        """(model, init_info or None) of a fresh run; init_info's "frozen" names parameters never updated
        (with "fragile_probe": FRAGILE_NOT_PROBED where they were not looked for)."""

    @abstractmethod
    def load_model(self, ckpt, state: dict, device):
        """The model checkpoint folder `ckpt` holds (its state.json read into `state`), weights loaded."""

    @abstractmethod
    def restore(self, state: dict) -> None:
        """Continue the kind's random streams (and what else `state` kept) from a checkpoint's state."""

    @abstractmethod
    def state(self, at: int) -> dict:
        """What a checkpoint at step `at` keeps for the kind; restore reads it back."""

    @abstractmethod
    def run_record(self) -> dict:
        """The run's settings as written to run.json."""

    # -- optimising -----------------------------------------------------------
    @abstractmethod
    def param_groups(self, model) -> list:
        """AdamW's parameter groups (a group's "lr_scale" multiplies every step's learning rate)."""

    @abstractmethod
    def adam_options(self) -> dict:
        """torch.optim.AdamW's keyword arguments other than the parameters and lr."""

    @abstractmethod
    def lr_at(self, step: int) -> float:
        """The learning rate of 0-based step `step`, before the guard's scale."""

    @abstractmethod
    def before_step(self, model, step: int) -> None:
        """Called before step `step`'s batch is drawn (a model told its training progress)."""

    @abstractmethod
    def train_batch(self, step: int, shard: slice, device):
        """Slice `shard` of step `step`'s global batch (drawn alike on every rank), on `device`."""

    @abstractmethod
    def batch_weight(self, batch) -> float:
        """What a shard's loss is normalised by; its mean over ranks is loss's `per_shard`."""

    @abstractmethod
    def loss(self, net, batch, per_shard=None) -> tuple:
        """(loss tensor to backpropagate, the batch's training accuracy as a float)."""

    # -- measuring ------------------------------------------------------------
    @abstractmethod
    def evaluate(self, model) -> dict:
        """An evaluation row's fields: eval_acc (the headline, 1.0 = solved) and any other eval_<metric>."""

    @abstractmethod
    def eval_description(self, row: dict) -> str:
        """The sentence summary.json gives evaluation row `row` (what was measured, on what, at which step)."""

    @abstractmethod
    def guard_sample(self, model) -> list:
        """The descent guard's fixed sample: the same on every rank and after a resume."""

    @abstractmethod
    def guard_long_sample(self, model) -> list:
        """The examples too costly to check after every step, checked before a
        checkpoint and at the end (may be empty)."""

    @abstractmethod
    def guard_scope(self) -> str:
        """What the guard sample covers, as the message of a fine-tune's early stop names it."""

    @abstractmethod
    def guard_eval(self, net, sample: list) -> tuple:
        """(mean loss, accuracy, share where halting finds its step) over the guard sample."""

    @abstractmethod
    def log_fields(self, step: int) -> dict:
        """The kind's own fields of a metrics.jsonl log row at `step`."""

    @abstractmethod
    def bar_fields(self, row: dict) -> dict:
        """The kind's own progress-bar fields, from the last log row."""

    @abstractmethod
    def summary_fields(self) -> dict:
        """The kind's own fields of summary.json."""

    @abstractmethod
    def plot_title(self) -> str:
        """The title of train_curves.png."""

    @abstractmethod
    def curve_labels(self) -> tuple:
        """(training accuracy label, evaluation label) of train_curves.png; () keeps the plot's defaults."""

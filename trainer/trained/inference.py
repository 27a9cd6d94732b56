"""Running a trained model on inputs: `rasp run RUN`, `rasp.load(RUN)`, for a
training run (its newest checkpoint) or a directory written by `rasp export`.

rasp/loaders.py names `load_run`, `load_export` and `run_trained` in its table
of directory kinds (this package is above rasp, which reaches it by name).

The model answers input text in the program's (Fan et al.'s tasks) or the
task's (comparison tasks) own tokens, as `rasp run` prints them:

* Fan et al.'s tasks: the input is parsed by the task's program, which also
  checks its `require` contract and gives T(n); the answer is the model's
  output at the scored positions (from `>` on), decoded with the stopping rule
  (`--stop`, default oracle: T(n) iterations; `confidence` picks one step per
  batch of up to BATCH inputs of one length, as `rasp eval` does).  Fixed-depth
  baselines run their own depth; NTP models decode greedily.  An output logit
  that no token has (a read-out wider than the outputs) prints as `?`.
* comparison tasks: the input is the task's tokens (a sentence pair: two
  sentences separated by `|`); the answer is a label per position (per-position
  tasks, every position, including those the task does not score, e.g.
  flip-flop's before a read) or one label (pooled tasks).

Limits are those of `rasp run`: --max-len (tokens per input), --max-steps (loop
iterations, from T(n) or the model's own settings), --max-work (multiply-adds
of one input, estimated before the run starts, the bound and default of
compiled models: compiler.limits.check_input_work), so a long inputs file runs
in batches.  The task program's answers are not needed to run the model: an
answer value the run never saw refuses no input.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Optional

import torch

from rasp.errors import RaspError, RaspFileError, RaspInputError, RaspRequireError, shorten
from rasp.limits import RunLimits
from rasp.program import describe_score
from rasp.stop import DEFAULT_RULE, THRESHOLD
from trainer.settings import evaluation
from trainer.trained.layout import EXPORT_FORMAT, model_files

BATCH = evaluation.BATCH        # inputs run together, as `rasp eval` runs them
PAIR_SEPARATOR = "|"            # between the two sentences of a pair task's input
NO_TOKEN = "?"                  # an output logit beyond the task's output tokens


def _device(device) -> torch.device:
    from trainer.run.device import api_device
    return torch.device(api_device(device))


def _check_work(works: list, lines, where: str, max_work):
    """The per-input bound of `rasp run DIR` (compiler.limits.check_input_work):
    the inputs then run in batches of one length, so a long file is never
    refused for its length alone."""
    from compiler.limits import DEFAULT_MAX_MULADDS, check_input_work
    check_input_work(works, DEFAULT_MAX_MULADDS if max_work is None else max_work, [ln for ln, _ in lines], where,
                     "for this model (use a shorter input, or raise the limit with --max-work)")


def _chunks(order: list, key) -> list:
    """`order` (indices sorted by key) cut into runs of one key, at most BATCH each."""
    out: list[list] = []
    for i in order:
        if out and key(out[-1][0]) == key(i) and len(out[-1]) < BATCH:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def _params(module) -> int:
    return sum(p.numel() for p in module.parameters())


class FanModel:
    """A model trained on one of Fan et al.'s tasks, called on input texts in
    the task program's tokens.  `model(["1 0 1 1 > # #"])` -> [["1", "#", "#"]]:
    per input, its answer at the positions it was scored on (from `>` on by
    default; `rasp train --score`), the shape every model `rasp.load` returns
    answers in (the task's program, loaded with the run's scoring,
    `rasp.load(P, score=...)`, answers the same inputs alike).
    `model.stop` is the stopping rule (`rasp.load(..., stop=...)`)."""

    kind = "fan"

    def __init__(self, module, spec, hp, data, stop=None, threshold=None, step=None, device="cpu", fit=None):
        self.module, self.spec, self.hp, self.data, self.step = module.eval(), spec, hp, data, step
        self.device = device
        self.labeler = data.labeler
        self.program = data.labeler.program
        if not spec.adaptive and (stop is not None or threshold is not None):
            raise RaspError(f"--stop/--threshold: model {spec.name} runs a fixed number of iterations "
                            f"({spec.iterations(hp)}); stopping rules are for looped models")
        from rasp.stop import CALIBRATED, RULES, unknown_rule
        self.stop = stop or DEFAULT_RULE
        if self.stop not in RULES:
            raise RaspError(unknown_rule(self.stop))
        from trainer.settings.hparams import setting_of
        from trainer.settings.setting import Chosen
        unused = setting_of("threshold").unused(Chosen("fan", stop=self.stop)) if threshold is not None else ""
        if unused:                      # the rule of `rasp train` and `rasp eval`: it would change nothing
            raise RaspError(f"--threshold {threshold}: {unused}")
        self.threshold = THRESHOLD if threshold is None else threshold
        if not (isinstance(self.threshold, (int, float)) and math.isfinite(self.threshold) and self.threshold > 0):
            raise RaspError(f"--threshold must be a positive number, got {self.threshold}")
        if data.input_tokens != module.cfg.extra.get("input_tokens"):
            raise RaspError(f"the model's token table does not match task {data.task.name}'s program "
                            f"{self.labeler.path} (the program changed after training)")
        # a fitted rule: the fit saved with the run or export, made (and saved) now if missing
        self.halting = fit(module, data) if self.stop in CALIBRATED and spec.adaptive and fit else None

    def __repr__(self) -> str:
        stop = f"{self.stop}" if self.spec.adaptive else f"fixed {self.spec.iterations(self.hp)} iterations"
        return (f"<trained model (Fan task): task {self.data.task.name}, model {self.spec.name}, "
                f"{_params(self.module):,} parameters, step {self.step}; answer {self.answers_where()}; stop: {stop}>")

    @property
    def score(self) -> str:
        """The positions the model answers, the ones it was scored on, as `rasp train --score`
        says them: its program answers alike loaded with `rasp.load(P, score=model.score)`."""
        task = self.data.task
        return {"per_position": "all", "per_sequence": "last"}.get(task.target, f"after:{task.marker}")

    def answers_where(self) -> str:
        """`score` in words (repr)."""
        kind, _, marker = self.score.partition(":")
        return describe_score(kind, marker or None)

    def token_text(self, value: int) -> str:
        return "<pause>" if value == self.data.pause_token else self.program.token_text(int(value))

    def vocabulary(self) -> dict:
        """Model ids -> tokens: the input ids the model reads, the outputs it predicts."""
        return {"input": [self.token_text(v) for v in self.data.input_tokens],
                "output": [self.token_text(v) for v in self.data.output_tokens]}

    def __call__(self, inputs, limits: Optional[RunLimits] = None, max_work=None) -> list:
        from rasp.inputs import api_inputs
        return self.answers(api_inputs(inputs), "input", limits, max_work)

    def answers(self, lines, where: str = "input", limits: Optional[RunLimits] = None, max_work=None) -> list:
        """The answer tokens of input texts [(line, text)] (errors at WHERE:LINE)."""
        from compiler.limits import flops
        from trainer.fan import objectives
        limits = limits or RunLimits()
        inputs = [self.program.parse_input(text, line, where) for line, text in lines]
        # the program checks lengths, vocabulary, `require`, and its loop's --max-steps; gives T(n)
        try:
            outputs, steps = self.labeler(inputs, RunLimits(max_len=limits.max_len, max_steps=limits.max_steps), where)
        except RaspRequireError as e:        # at the user's line, not at the task program's `require`
            first = e.input_indices[0]
            message = next(m for m, _, bad in e.failures if first in bad)
            more = len(e.input_indices) - 1
            others = f"; {more} more input{'s break' if more > 1 else ' breaks'} it" if more else ""
            raise RaspInputError(f"input rejected: {message} (the input contract of task {self.data.task.name}'s "
                                 f"program{others})", lines[first][0], where=where) from None
        fixed = self.spec.iterations(self.hp)
        t_extra = self.data.task.t_max_extra if self.stop != "oracle" else 0
        iters = [fixed if fixed is not None else int(t) + t_extra for t in steps]
        most = max(range(len(iters)), key=iters.__getitem__)
        if iters[most] > limits.max_steps:
            raise RaspInputError(f"the model would run {iters[most]} loop iterations; the limit is {limits.max_steps} "
                                 "(raise it with --max-steps)", lines[most][0], where=where)
        ntp = self.spec.objective == "ntp"
        _check_work([flops(self.module.cfg, len(x) + self.data.pause, 1, k) * (len(x) if ntp else 1)
                     for x, k in zip(inputs, iters)], lines, where, max_work)
        chunks = _chunks(sorted(range(len(inputs)), key=lambda i: len(inputs[i])), lambda i: len(inputs[i]))
        # the program's answers are not needed to run the model, only their positions: a value the run
        # never saw (a longer or larger answer than any it trained on) stands in as a known one
        known, stand_in = self.data.out_id, self.data.output_tokens[0]
        outputs = [[v if v in known else stand_in for v in out] for out in outputs]
        answers: list[Optional[list[str]]] = [None] * len(inputs)     # each set below
        with torch.no_grad():
            for c in chunks:
                xs = [inputs[i] for i in c]
                sizes = [self.data.task.size_of(x, self.data.sym) for x in xs]     # n, what depth_law reads
                batch = self.data.make_batch(xs, sizes,
                                             labels=([outputs[i] for i in c], [steps[i] for i in c]))
                batch = batch.to(self.device)
                pred = objectives.evaluate_batch(self.spec, self.hp, self.module, batch, self.stop, t_extra,
                                                 self.threshold, self.halting)["pred"]
                for row, i in enumerate(c):
                    answers[i] = [self._output_text(int(v)) for v in pred[row][batch.mask[row]].tolist()]
        return answers

    def _output_text(self, out_id: int) -> str:
        tokens = self.data.output_tokens
        return self.token_text(tokens[out_id]) if out_id < len(tokens) else NO_TOKEN


class SeqModel:
    """A model trained on a comparison task, called on input texts in the
    task's tokens: per-position tasks answer a label per position, pooled
    ones a single label (these tasks have no `>`: the answer covers the input,
    as a program's does when it has no `>`)."""

    kind = "seq"

    def __init__(self, module, task, hp, stop=None, threshold=None, step=None, device="cpu", name="?"):
        self.name = name        # the model's registry name (repr)
        if stop is not None or threshold is not None:
            raise RaspError(f"--stop/--threshold: for looped models of Fan et al.'s tasks; a model of the "
                            f"comparison task {task.name} runs its own settings")
        self.module, self.task, self.hp, self.step, self.device = module.eval(), task, hp, step, device
        self.index = {t: i + 1 for i, t in enumerate(task.vocab)}

    def vocabulary(self) -> dict:
        return {"input": ["<pad>", *self.task.vocab], "output": list(self.task.labels)}

    def __repr__(self) -> str:
        answer = "a label per position" if self.task.kind == "per_position" else "one label"
        return (f"<trained model (comparison task): task {self.task.name}, model {self.name}, "
                f"{_params(self.module):,} parameters, step {self.step}; answer {answer}; "
                f"stop: its own settings (up to {self.iterations()} iterations)>")

    def __call__(self, inputs, limits: Optional[RunLimits] = None, max_work=None) -> list:
        from rasp.inputs import api_inputs
        return self.answers(api_inputs(inputs), "input", limits, max_work)

    def _ids(self, text: str, line, where: str, limits: RunLimits) -> list:
        pair = self.task.kind == "pair"
        parts = text.split(PAIR_SEPARATOR) if pair else [text]
        if pair and len(parts) != 2:
            raise RaspInputError(f"a {self.task.name} input is two sentences separated by '{PAIR_SEPARATOR}'",
                                 line, where=where)
        out, position = [], 0
        for part in parts:
            words = part.split()
            if not words:
                raise RaspInputError("empty input" if not pair else "an empty sentence", line, where=where)
            if len(words) > limits.max_len:
                raise RaspInputError(f"the input has {len(words)} tokens; the limit is {limits.max_len} "
                                     "(raise it with --max-len)", line, where=where)
            ids = []
            for word in words:
                position += 1
                if word not in self.index:
                    raise RaspInputError(f"unknown token '{shorten(word)}' at position {position} (the vocabulary "
                                         f"of {self.task.name}: {' '.join(self.task.vocab)})", line, word, where)
                ids.append(self.index[word])
            out.append(ids)
        return out

    def iterations(self) -> int:
        """The most iterations the model runs (its `loops`, or an implicit model's test-time cap)."""
        return max([1] + [int(v) for k, v in self.hp.extra.items()
                          if k in ("loops", "test_max_iter") and isinstance(v, int) and not isinstance(v, bool)])

    def answers(self, lines, where: str = "input", limits: Optional[RunLimits] = None, max_work=None) -> list:
        from trainer.benchmark.data import collate
        from trainer.tasks.base import Example
        limits = limits or RunLimits()
        parsed = [self._ids(text, line, where, limits) for line, text in lines]
        longest = getattr(self.module.encoder, "max_length", None)
        for (line, _), sentences in zip(lines, parsed):
            n = max(map(len, sentences))
            if longest is not None and n > longest:
                raise RaspInputError(f"the input has {n} tokens, more than the {longest} tokens this compiled "
                                     "model was built for (its design length)", line, where=where)
        iters = self.iterations()
        if iters > limits.max_steps:
            raise RaspError(f"the model runs up to {iters} iterations (its settings); the limit is "
                            f"{limits.max_steps} (raise it with --max-steps)")
        n_params = _params(self.module)
        size = lambda i: max(map(len, parsed[i]))
        chunks = _chunks(sorted(range(len(parsed)), key=size), lambda i: 0)
        width = self.hp.d_model * self.hp.n_layer
        _check_work([len(p) * iters * (n_params * size(i) + width * size(i) ** 2) for i, p in enumerate(parsed)],
                    lines, where, max_work)
        answers: list[Optional[list[str]]] = [None] * len(parsed)     # each set below
        with torch.no_grad():
            for c in chunks:
                examples = [Example(parsed[i][0], [-1] * len(parsed[i][0]) if self.task.kind == "per_position" else 0,
                                    parsed[i][1] if len(parsed[i]) > 1 else None) for i in c]
                batch = collate(self.task, examples).to(self.device)
                logits, _ = self.module(batch.tokens, batch.mask, batch.tokens2, batch.mask2)
                pred = logits.argmax(-1).tolist()
                for row, i in enumerate(c):
                    labels = pred[row][:len(parsed[i][0])] if self.task.kind == "per_position" else [pred[row]]
                    answers[i] = [self.task.labels[j] for j in labels]
        return answers


# ---- loading ------------------------------------------------------------------------

def _fan_model(run: dict, hp, module, labeler, stop, threshold, step, device, fit_from=None, fit_doc=None):
    """`fit_from`: the run folder whose halting.json holds (or will hold) the fit of
    depth_law and head; `fit_doc`: an export's copy of it."""
    from trainer.models import get_model_spec
    from trainer.fan.kind import build_data
    from trainer.fan.halting import Halting, current, feature_width, saved_or_fit
    from trainer.tasks.program import task_of
    spec = get_model_spec(run["model"])

    def fit(module, data):
        if fit_doc is not None and current(fit_doc[0], module):
            return Halting.from_json(fit_doc[0], fit_doc[1], feature_width(module), device)
        # (an export of a compiled start made before its head read the compiled clock: read it now, unsaved)
        return saved_or_fit(fit_from, step, module, data, hp, evaluation.SEED, device)
    return FanModel(module, spec, hp, build_data(task_of(run), spec, hp, labeler), stop, threshold, step, device,
                    fit)


def load_run(path, stop=None, threshold=None, device="cpu"):
    """The newest checkpoint of training run `path`, ready to answer inputs
    (rasp.load's loader of training runs)."""
    from trainer.run import checkpoint
    from trainer.settings.hparams import HParams
    path = Path(path)
    dev = _device(device)
    if checkpoint.is_seq_run_dir(path):
        from trainer.benchmark.evaluate import load_run_model
        run, task, hp, module, state = load_run_model(path, {}, dev)
        return SeqModel(module, task, hp, stop, threshold, state["step"], dev, run["model"])
    from trainer.fan.evaluate import load_run as load_fan_run
    run, module, step = load_fan_run(path, dev)
    hp = HParams.from_dict(run["hparams"])
    return _fan_model(run, hp, module, None, stop, threshold, step, dev, fit_from=path)


def read_export(path) -> dict:
    """DIR/config.json of an exported model, its files checked against the
    manifest and its run description against the schema of run.json."""
    from model.files import verify_manifest
    from rasp.readfile import read_json
    from trainer.run import checkpoint
    d = Path(path)
    config = read_json(d / "config.json")
    ok = (isinstance(config, dict) and config.get("format") == EXPORT_FORMAT and config.get("kind") in ("fan", "seq")
          and isinstance(config.get("run"), dict) and isinstance(config.get("model_config"), dict))
    if not ok:
        raise RaspFileError(d / "config.json", f"not an exported model's config (format {EXPORT_FORMAT}: kind, run, "
                                               "model_config)")
    missing = [n for n in model_files(config["kind"]) if not (d / n).is_file()]
    if missing:
        raise RaspFileError(d, f"not a complete exported model (missing {', '.join(missing)})")
    if not verify_manifest(d, model_files(config["kind"]), EXPORT_FORMAT):
        raise RaspFileError(d / "manifest.json", "missing: every exported model has one (export it again)")
    from rasp.stop import RULES
    if config.get("stop") is not None and config["stop"] not in RULES:
        raise RaspFileError(d / "config.json", f"stop: expected one of {', '.join(RULES)}")
    run = checkpoint.check_run(config["run"], d / "config.json")
    if checkpoint.is_seq_run(run) != (config["kind"] == "seq"):
        raise RaspFileError(d / "config.json", f"kind {config['kind']!r} does not match its run")
    return config


def load_export(path, stop=None, threshold=None, device="cpu"):
    """A directory written by `rasp export`, ready to answer inputs (rasp.load's
    loader of exported models); every file is checked before use."""
    from rasp.readfile import read_json
    from trainer.run import checkpoint
    from trainer.settings.hparams import HParams
    d = Path(path)
    config = read_export(d)
    run, kind, dev = config["run"], config["kind"], _device(device)
    hp = HParams.from_dict(run["hparams"], kind)
    if kind == "seq":
        from trainer.benchmark.kind import checkpoint_model, seq_task
        task = seq_task(run["task"])
        shell = checkpoint_model(task, run["model"], run["init"], hp, {"config": config["model_config"]})
        module = checkpoint.model_from_files(d / "model.safetensors", None, d / "config.json", "model_config", dev,
                                             shell)
        model = SeqModel(module, task, hp, stop, threshold, config.get("step"), dev, run["model"])
    else:
        from trainer.tasks.labels import ProgramLabeler
        module = checkpoint.model_from_files(d / "model.safetensors", config["model_config"], d / "config.json",
                                             "model_config", dev)
        fit = (config["halting"], d / "config.json") if isinstance(config.get("halting"), dict) else None
        model = _fan_model(run, hp, module, ProgramLabeler(d / "program.rasp"),
                           stop if stop is not None else config.get("stop"), threshold, config.get("step"), dev,
                           fit_doc=fit)
    if read_json(d / "vocab.json") != model.vocabulary():
        raise RaspFileError(d / "vocab.json", "does not match the model's vocabulary")
    return model


# ---- rasp run RUN -------------------------------------------------------------------

def run_trained(args) -> int:
    """`rasp run RUN|EXPORTED --input ...` (options: rasp.commands.add_run_arguments)."""
    import rasp
    from rasp.options import refuse_flags, run_limits
    from rasp.inputs import read_inputs
    from trainer.run.device import set_threads
    refuse_flags(args, ("trace", "param", "steps"), "for programs and compiled models; a trained model's "
                                                    "iterations come from its task program and --stop")
    limits = run_limits(args)
    limits.check()                  # as for a program: --max-work 0 is refused, never the default
    set_threads(None)
    model = rasp.load(args.program, stop=args.stop, threshold=args.threshold, device=getattr(args, "device", None)
                      or "cpu")
    where, lines = read_inputs(args.input, args.inputs)
    for answer in model.answers(lines, where, limits, getattr(args, "max_work", None)):
        sys.stdout.write(" ".join(answer) + "\n")
    return 0

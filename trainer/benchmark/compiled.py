"""A comparison task's own program, compiled, as a comparison model:

    rasp train --task words_z60 --model looped --init compiled [--set compile_max_len=M] --out DIR
    rasp eval DIR --splits valid,test_16,test_32

The task names the n-RASP-L program whose outputs are its labels
(`SeqTask.program`; the word problems: programs/words_<group>.rasp).  The
compiler (compiler.compile_program, via trainer.fan.compiled.compile_task_model)
turns it into a looped transformer; `trainer.fan.compiled.remap_vocab` puts that
model into the task's token tables (embedding row i = vocab entry i, whose
program value is int(vocab[i]); unembedding row j = label j, value
int(labels[j])), and the run is an ordinary comparison run: a `SeqModel`
whose encoder is the compiled model (every sample runs the T(n) iterations
its program's loop count gives, computed host-side by the compiler's
`CompiledModel.loop_counts`, as `rasp run` does) and whose per-position head
is the compiled unembedding.  Scoring, eval.json and checkpoints are the
comparison runs' own (trainer/benchmark/kind.py, trainer/benchmark/evaluate.py).

Why `--model looped --init compiled`, not an encoder name of its own: it is
the Fan-task runs' spelling of the same thing (the looped transformer class,
weights from the compiler), and the build needs the task (its program and
token tables), which an encoder's `build(EncoderConfig)` never sees.

Lengths: the model is compiled at `compile_max_len` (an `extra` key; default
the task's longest split / 4), so its numeric tables cover inputs up to the
design length 4 x compile_max_len.  Nothing promises outputs beyond it, so the
encoder refuses longer inputs (RaspError) and `rasp eval` refuses a split
with longer examples before scoring anything.

Steps: 0 by default (the compiled model is exact as it is).  `--steps N`
fine-tunes it in the one training loop under what keeps any compiled start
exact (INIT_DEFAULTS, trainer/benchmark/presets.py): the descent guard, whose fixed
sample holds examples of every split within the design length, its zero
weights kept, no weight decay.  Unguarded, one plain AdamW step at lr 1e-4
took words_z60's token accuracy from 1.00 to 0.19 (compile_max_len 2, batch
8; gradient norm 9e5: the compiled weights are large and their thresholds
tight).
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

import torch
import torch.nn as nn

from model import LoopedConfig, LoopedTransformer
from rasp.errors import RaspError
from trainer.fan import compiled
from trainer.models.base import EncoderOutput
from trainer.models.heads import PositionHead, SeqModel

MAX_LEN_KEY = "compile_max_len"


def check_compilable(task):
    """A RaspError unless the task names a program a compiled run can answer with
    (cheap: the program is parsed only when the model is built)."""
    if not task.program:
        raise RaspError(f"--init compiled: task {task.name} names no program (its labels do not come from an "
                        "n-RASP-L program), so there is nothing to compile")
    if task.kind != "per_position":
        raise RaspError(f"--init compiled: task {task.name} is a {task.kind} task; a compiled program answers "
                        "at every position (per_position tasks only)")


def task_program(task):
    """The task's program (a rasp.Program), or a RaspError saying it has none."""
    import rasp
    check_compilable(task)
    return rasp.load(task.program)


def split_max_length(task, name: str) -> int:
    """The longest input of split `name`, from its generator parameters."""
    params = task.splits[name].params
    for key in ("max_len", "L"):
        if key in params:
            return int(params[key])
    raise RaspError(f"--init compiled: task {task.name}, split {name}: its longest input is not a parameter "
                    f"(max_len or L); give the compile length with --set {MAX_LEN_KEY}=M")


def default_max_len(task) -> int:
    """The smallest compile max-len whose design length covers every split."""
    from compiler.compiled import DESIGN_FACTOR
    longest = max(split_max_length(task, name) for name in task.splits)
    return math.ceil(longest / DESIGN_FACTOR)


def resolve_hparams(task, hp):
    """Fill in `compile_max_len` (default: every split of the task) and check it."""
    check_compilable(task)      # not task_program: `rasp compare` resolves this for every run it checks
    m = hp.extra.setdefault(MAX_LEN_KEY, default_max_len(task))
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise RaspError(f"--set {MAX_LEN_KEY}={m!r}: a positive integer")
    return hp


def design_length(model: LoopedTransformer) -> int:
    return int(model.cfg.extra["compiler"]["design_length"])


def _program_value(token: str, symbols: dict, what: str, task) -> int:
    if token in symbols:
        return int(symbols[token])
    try:
        return int(token)
    except ValueError:
        raise RaspError(f"--init compiled: task {task.name}'s {what} {token!r} is neither a number nor a name "
                        "of its program") from None


def token_values(task, program) -> tuple:
    """(input values in vocab order, output values in label order)."""
    symbols = dict(program.ir.symbols)
    return ([_program_value(t, symbols, "input token", task) for t in task.vocab],
            [_program_value(t, symbols, "label", task) for t in task.labels])


class CompiledEncoder(nn.Module):
    """The compiled looped transformer as a comparison encoder: hidden = what
    its unembedding reads (the head holds the unembedding), after each
    sample's own T(n) iterations."""

    def __init__(self, core: LoopedTransformer, program):
        super().__init__()
        from compiler import CompiledModel
        self.core = core
        info = core.cfg.extra["compiler"]
        if info.get("until_stable"):
            raise RaspError(f"--init compiled: {program.ir.path}: a loop that runs until stable is not supported "
                            "here (only a loop count the host computes)")
        # for the loop count only (CompiledModel.loop_counts: the program's own T(n))
        self.runner = CompiledModel(core, program.ir.source, program.ir.path, program=program)
        self.values = torch.tensor(core.cfg.extra["input_tokens"], dtype=torch.long)
        self.max_length = design_length(core)

    def loop_counts(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        ids = (tokens.cpu() - 1).clamp(min=0)
        batch = [self.values[ids[b, :int(n)]].tolist() for b, n in enumerate(lengths.cpu())]
        return torch.as_tensor(self.runner.loop_counts(batch), device=tokens.device)

    def forward(self, tokens, mask):
        lengths = mask.long().sum(1)
        if tokens.shape[0] and int(lengths.max()) > self.max_length:
            raise RaspError(f"an input of {int(lengths.max())} tokens is longer than the {self.max_length} tokens "
                            f"this compiled model was built for (--set {MAX_LEN_KEY}="
                            f"{self.core.cfg.extra['compiler']['max_len']}); train a new run with a larger one")
        counts = self.loop_counts(tokens, lengths)
        # embedding row = vocab index; padding (id 0, on the right) reads row 0: attention is
        # causal, so real positions never see it, and its outputs are masked out
        ids = (tokens - 1).clamp(min=0)
        hidden = self.core(ids, counts, read=self.core.readout)
        zero = counts == 0
        if bool(zero.any()):    # 0 iterations: the prelude's values e, not h_0 = 0 (as CompiledModel.logits)
            hidden = torch.where(zero[:, None, None], self.core.readout(self.core.encode(ids)), hidden)
        c = self.core.cfg
        depth = (c.n_prelude + counts * c.n_body + c.n_postlude).float()
        return EncoderOutput(hidden, mask, None, {"depth": depth})


def _assemble(core: LoopedTransformer, program) -> SeqModel:
    """SeqModel(encoder = core without its unembedding, head = that unembedding)."""
    head = PositionHead(core.cfg.d_model, core.cfg.out_vocab_size)
    with torch.no_grad():
        head.out.weight.copy_(core.unembed.weight)
        if core.unembed.bias is not None:
            head.out.bias.copy_(core.unembed.bias)
        else:
            head.out.bias.zero_()
    del core.unembed
    return SeqModel(CompiledEncoder(core, program), head)


def build(task, hp) -> tuple:
    """Compile the task's program -> (SeqModel, init_info for run.json)."""
    program = task_program(task)
    max_len = hp.extra[MAX_LEN_KEY]
    cmodel = compiled.compile_task_model(program, max_len, f"{MAX_LEN_KEY} (--set {MAX_LEN_KEY}=M)")
    inputs, outputs = token_values(task, program)
    core = compiled.remap_vocab(cmodel, inputs, outputs, extra={"task": task.name, MAX_LEN_KEY: max_len})
    info = core.cfg.extra["compiler"]
    model = _assemble(core, program)
    init_info = {"init": "compiled", "program": Path(task.program).name, MAX_LEN_KEY: max_len,
                 "design_length": info["design_length"], "compile_time_s": info.get("compile_time_s"),
                 "width": core.cfg.d_model, "mlp": core.cfg.d_mlp,
                 "layers": core.cfg.n_prelude + core.cfg.n_body + core.cfg.n_postlude,
                 "params": sum(p.numel() for p in model.parameters())}
    t0 = time.perf_counter()
    init_info.update(compiled.fragile_info(hp, lambda: fragile_tensors(model, task, hp)))
    if "frozen" in init_info:
        init_info["fragile_probe_s"] = round(time.perf_counter() - t0, 1)
    return model, init_info


def fragile_tensors(model: SeqModel, task, hp, samples: int = 32, long_samples: int = 4) -> list:
    """The compiled start's length-fragile tensors (trainer.fan.compiled.length_fragile,
    as a compiled Fan-task start freezes them), probed on `samples` inputs of
    the training split and `long_samples` of the longest split the compile
    length M covers itself (words_z60: test_128 of a design length 512; if
    none, the longest within the design length).

    Why M and not the design length: one probe at 512 tokens costs about a
    minute on a CPU core, one at 128 about a second (a loop step per token).
    A tensor fragile only beyond M is left to the descent guard's long sample,
    which every split within the design length is in and which a checkpoint
    must pass (trainer/run/guard.py `Guard.confirm`).  Empty where the start
    is not exact on the probes.  Measured (words_z60, cpu preset, seed 0): 39
    of 50 guarded steps with nothing frozen kept the inputs up to 64 tokens
    exact and took test_128 to 0.79, test_512 to 0.21 (token accuracy)."""
    import numpy as np
    from trainer.benchmark.data import collate, example_length
    rng = np.random.default_rng([hp.seed, 31])
    lengths = {n: split_max_length(task, n) for n in task.splits}
    within = [n for n in lengths if lengths[n] <= int(hp.extra[MAX_LEN_KEY])] or \
        [n for n in lengths if lengths[n] <= design_length(model.encoder.core)]
    if not within:
        return []
    probe = max(within, key=lengths.__getitem__)
    train = task.generate(rng, task.splits[hp.train_split].params, 4 * samples)
    longest = max(example_length(e) for e in train)
    short = collate(task, [e for e in train if example_length(e) == longest][:samples])
    long = collate(task, task.generate(rng, task.splits[probe].params, long_samples))

    def exact(b):
        def check():
            pred = model(b.tokens, b.mask, b.tokens2, b.mask2)[0].argmax(-1)
            return bool(((pred == b.targets) | (b.targets < 0)).all())
        return check

    return compiled.length_fragile(model, exact(short), exact(long))


def model_config(model: SeqModel) -> dict:
    """What a checkpoint records to rebuild the compiled model without compiling."""
    return json.loads(model.encoder.core.cfg.to_json())


def rebuild(task, config: dict) -> SeqModel:
    """The model of a checkpoint's `config["looped"]` (weights still to load)."""
    cfg = LoopedConfig.from_dict(config)
    core = LoopedTransformer(cfg)
    return _assemble(core, task_program(task))

"""Initial weights: random (the paper's setting) or the compiler's (optionally
compressed into a smaller width)."""
from __future__ import annotations

import numpy as np

from rasp.errors import RaspError
from trainer.fan import compiled, stopping
from trainer.fan.coverage import exact_size_batches
from trainer.fan.data import MIN_STEPS
from trainer.fan.presets import compiled_max_n


def compile_max_len(data, hp) -> int:
    """Longest input the compiled model must handle: the task's paper test
    length (and at least 2x the training length), as a token count."""
    n = compiled_max_n(data.task, hp.max_train_n)
    rng = np.random.default_rng(0)
    # inputs from files: one of size n where there is one (the `sample` statement's), else the file's nearest
    exact = data.task.draw_exact(rng, n, 1, data.sym) if data.task.draw_exact is not None else []
    x = exact[0] if exact else data.task.sample(rng, n, data.sym, False)
    return len(x) + 8


def initial_model(cfg, spec, hp, data, device):
    """-> (model, info dict recorded in run.json)."""
    if cfg.init == "random":
        if cfg.compress:
            raise RaspError("--compress needs --init compiled")
        model = spec.make(hp, data)
        return model, {"init": "random", "params": model.num_params()}
    if cfg.init != "compiled":
        raise RaspError(f"unknown --init {cfg.init!r} (random or compiled)")
    if spec.name != "looped":
        raise RaspError(f"--init compiled builds the looped model; --model {spec.name} has no compiled form")
    program = getattr(data.labeler, "program", None)
    if program is None:
        raise RaspError("--init compiled needs the task's program")
    max_len = compile_max_len(data, hp)
    cmodel = compiled.compile_task_model(program, max_len, "--max-train-n")
    model = compiled.remap_vocab(cmodel, data.input_tokens, data.output_tokens,
                                 extra={**data.meta(), "model": spec.name, "compile_max_len": max_len})
    check_zero_loops(model, data, hp)
    info = {"init": "compiled", "compiled_width": model.cfg.d_model, "compile_max_len": max_len,
            "compiled_params": model.num_params()}
    if cfg.compress:
        # Inputs only (no labels), over every length the compiled model was
        # built for, so the kept directions serve long inputs too.
        rng = np.random.default_rng([hp.seed, 7])
        n_hi = compiled_max_n(data.task, hp.max_train_n)
        lengths = rng.integers(data.task.min_n, n_hi + 1, size=128)
        batch = data.batch(rng, lengths, train=True)
        # T_max steps, so liveness also covers the steps confidence stopping runs
        model, shrunk, exact = compiled.shrink(model, cfg.compress, cfg.compress_method, batch.tokens,
                                               int(batch.steps.max()) + data.task.t_max_extra, hp.seed)
        info.update(shrunk)
    else:
        exact = model
    # probed on an exact model: after a lossy projection the same tensors
    # carry the same length-scaled quantities, but the probe needs exactness
    info.update(compiled.fragile_info(hp, lambda: fragile_tensors(exact, spec, hp, data)))
    info["params"] = model.num_params()
    return model.to(device), info


def check_zero_loops(model, data, hp, samples: int = 16):
    """A compiled start runs an input whose loop the program runs 0 times for one
    iteration (trainer/fan/data.py MIN_STEPS): refuse it, at the loop, when that
    iteration changes such an input's answer (the start would not be exact);
    probed on `samples` inputs of each size it is built for."""
    rng = np.random.default_rng([hp.seed, 37])
    sizes = [n for n in range(data.task.min_n, compiled_max_n(data.task, hp.max_train_n) + 1) for _ in range(samples)]
    inputs = data.sample_inputs(rng, sizes, True)
    outputs, steps = data.labeler(inputs)
    zero = [i for i, t in enumerate(steps) if t == 0]
    if not zero:
        return
    b = data.make_batch([inputs[i] for i in zero], [sizes[i] for i in zero],
                        labels=([outputs[i] for i in zero], [0] * len(zero)))
    wrong = (~((model(b.tokens, b.steps).argmax(-1) == b.targets) | ~b.mask).all(-1)).nonzero()
    if len(wrong):
        program = data.labeler.program
        loop = program.ir.loops[0]
        x = inputs[zero[int(wrong[0])]]
        raise RaspError(f"--init compiled: this loop runs 0 times on some inputs (e.g. {program.format_output(x)}, "
                        f"n = {sizes[zero[int(wrong[0])]]}), and a looped model answers after {MIN_STEPS} iteration "
                        "at the earliest; one iteration changes that input's answer, so the compiled start would not "
                        "be exact: write the count so that it is at least 1, or train from --init random",
                        loop.loc, program.ir.source)


def fragile_tensors(model, spec, hp, data, samples: int = 32, long_samples: int = 8) -> list:
    """The compiled start's length-fragile tensors (compiled.length_fragile),
    probed at the longest training length (`samples` inputs) and at the
    longest compiled length (`long_samples`); labels from the task program.
    Empty if the start is not exact there.  With a halting clock, "exact" on
    the long inputs also asks that maximum confidence (Eq. 2) picks T(n), so
    the tensors the clock depends on at long lengths are kept too.

    Cost: one long evaluation (T(n) + t_max_extra steps, read out at each)
    per tensor and direction.  It runs on the model itself (its blocks are as
    wide as their ops, so skipping its zero weights, model.zero_skipping, no
    longer pays: compiled addition's start ran 1.1-1.4x slower that way), and on
    few long inputs: a perturbation that breaks a long input breaks
    most of them (all inputs share the length, and the position-scaled
    quantities with it; every failing long check on parity and copy, seed 0,
    failed on 14 to 32 of 32 inputs), so 8 inputs find the same tensors."""
    rng = np.random.default_rng([hp.seed, 31])
    n_long = compiled_max_n(data.task, hp.max_train_n)
    short = data.batch(rng, [hp.max_train_n] * samples, train=True)
    if data.task.draw_exact is None:
        long = data.batch(rng, [n_long] * long_samples, train=True)
    else:       # inputs from files: the longest size they hold up to n_long, drawn as itself
        n_long = max([n for n in range(hp.max_train_n, n_long + 1) if data.task.draw_exact(rng, n, 1, data.sym)])
        long = exact_size_batches(data, {n_long: long_samples}, rng, chunks=1)[0]
    t_extra = data.task.t_max_extra if compiled.has_clock(model) else 0

    def exact(b, confident=False):
        if not (confident and t_extra):
            return lambda: bool(((model(b.tokens, b.steps).argmax(-1) == b.targets) | ~b.mask).all())

        def exact_and_confident():
            stats = stopping.step_stats(model.all_steps(b.tokens, int(b.steps.max()) + t_extra), b.targets, b.mask)
            return bool(stopping.confidence_finds(stats, b.steps).all() and stopping.pick(stats, b.steps)[0].all())
        return exact_and_confident

    return compiled.length_fragile(model, exact(short), exact(long, True))

"""The limits of `rasp run DIR`, checked before a compiled model runs: the
same --max-len and --max-steps as the interpreter, and a bound on the
arithmetic of each input, so that no input, --param, --steps or config.json
value can make a compiled run hang (CompiledModel.run_batch runs inputs of
similar length together, so padding adds little to it)."""
from __future__ import annotations

import numpy as np

from rasp.errors import RaspError, RaspFileError, RaspInputError

# multiply-adds per input (a different unit from the interpreter's element operations,
# rasp.limits.DEFAULT_MAX_WORK): ~10-20 s of one CPU thread (measured: 1.5e9 multiply-adds/s
# on parity); a `max_work` argument, when the CLI has one, replaces it
DEFAULT_MAX_MULADDS = 3 * 10 ** 10


def check_steps_flag(steps, max_steps: int):
    if steps is None:
        return
    if steps < 0:
        raise RaspError(f"--steps must be >= 0, got {steps}")
    if steps > max_steps:
        raise RaspError(f"--steps {steps} is above the limit of {max_steps} loop iterations "
                        "(raise it with --max-steps)")


def flops(cfg, n_tokens: int, batch: int, steps: int) -> float:
    """Multiply-adds of one padded chunk: every block applied, attention
    quadratic in the length."""
    n = n_tokens + (1 if cfg.bos else 0)

    def block(shape):
        h, w, m = shape
        return n * n * h * w * 2 + n * (4 * cfg.d_model * h * w + 2 * cfg.d_model * m)
    work = [block(s) for s in cfg.shapes()]
    pre, body = cfg.n_prelude, cfg.n_prelude + cfg.n_body
    applied = sum(work[:pre]) + sum(work[pre:body]) * steps + sum(work[body:]) * (1 + min(steps, batch))
    return float(batch) * applied


def check_compiled_run(cm, batch, params, max_len: int, max_steps: int, where: str = "input",
                       lines=None, max_work: float = DEFAULT_MAX_MULADDS, config_path=None):
    """Refuse (exit 2) a run that exceeds a limit; returns the loop counts."""
    lines = lines or list(range(1, len(batch) + 1))
    for i, x in enumerate(batch):
        if len(x) > max_len:
            raise RaspInputError(f"the input has {len(x)} tokens; the limit is {max_len} "
                                 "(raise it with --max-len)", lines[i], where=where)
    counts = np.asarray(cm.loop_counts(batch, params), dtype=np.int64)
    if len(counts) and counts.max() > max_steps:
        i = int(counts.argmax())
        why = (f"{config_path}: extra.compiler.steps" if cm.fixed_steps is not None and config_path
               else None)
        msg = (f"the loop would run {int(counts[i])} iterations; the limit is {max_steps} "
               "(raise it with --max-steps)")
        if why and cm.fixed_steps == cm.model.cfg.extra["compiler"].get("steps"):
            raise RaspFileError(config_path, f"extra.compiler.steps = {int(counts[i])}: {msg}")
        raise RaspInputError(msg, lines[i], where=where)
    check_input_work([flops(cm.model.cfg, len(x), 1, int(c)) for x, c in zip(batch, counts)], max_work, lines,
                     where, "for a compiled model (use a shorter input, --max-work, or the interpreter)")
    return counts


def check_input_work(works, max_work: float, lines, where: str = "input",
                     advice: str = "(use a shorter input or --max-work)"):
    """Refuse (exit 2, at the input's line) the first input whose multiply-adds
    `works[i]` exceed `max_work`.  The bound is per input, as the
    interpreter's: a long inputs file runs in chunks of similar inputs (a
    compiled model's RUN_CHUNK, a trained one's batches), each chunk's work
    near the sum of its inputs', so no file is refused for its length alone."""
    for i, work in enumerate(works):
        if work > max_work:
            raise RaspInputError(f"this input would take about {work:.2g} multiply-adds, above the limit of "
                                 f"{max_work:.2g}: too long, or its loop too many iterations, {advice}", lines[i],
                                 where=where)

"""compile_program(): program -> CompiledModel (a LoopedTransformer + what it
needs to run: token maps, loop count, halting), with save/load and a report."""
from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Optional

import numpy as np
import torch
from safetensors.torch import save

import rasp
from model import LoopedConfig, LoopedTransformer
from rasp.atomic import write_bytes_atomic, write_text_atomic
from rasp.errors import RaspError, RaspFileError
from rasp.interpreter import host_values

from .assemble import assemble
from .clock import Clock, try_clock
from .craft import Crafter
from .graph import ProgramGraph
from .layers import caps, copy_ops, plan_body, schedule, schedule_compact, stage_weights
from .loops import one_loop
from .params import causal_params, value_params
from .validate import requires_record
from .values import ValueSets

DESIGN_FACTOR = 4        # numeric tables cover lengths up to DESIGN_FACTOR * max_len
BEYOND_DESIGN = ("warn", "error", "run")
RUN_CHUNK = 256          # inputs run_batch gives the model at once


class DesignLengthWarning(UserWarning):
    """`CompiledModel.run_batch` got inputs longer than the design length
    (4 x max-len): nothing promises their outputs (numeric tables, sel_width
    decoders and one-hot codes end there), so they may be wrong."""


def compile_program(prog, max_len: int, steps: Optional[int] = None,
                    design_factor: int = DESIGN_FACTOR, clock: bool = True) -> "CompiledModel":
    """Compile a rasp.Program (or ProgramIR).  Raises RaspError (located) for
    constructs the compiler cannot make exact.  With `clock` (and no fixed
    `steps`), count loops get the halting clock of `clock.py` where the
    program allows it; the model then says in `cfg.extra["compiler"]["clock"]`
    whether it has one and, if not, why."""
    t0 = time.perf_counter()
    program = prog if isinstance(prog, rasp.Program) else None
    pir = prog.ir if program is not None else prog
    if max_len < 1:
        raise RaspError("--max-len must be at least 1")
    L = design_factor * max_len
    pir = one_loop(pir)     # empty loops dropped, nested then sequential loops -> one looped block
    computed = value_params(pir)
    pir = causal_params(pir)    # params used as values -> causal s-ops (or a located refusal)
    gate, why = None, "not asked for" if not clock else "the loop runs a fixed --steps count"
    if clock and steps is None:
        clocked, got = try_clock(pir, L)
        if isinstance(got, Clock):
            try:
                model, layout = _build(clocked, L, max_len, steps, got)
                gate = got
            except RaspError as e:       # the clock's own nodes are beyond the compiler
                why = f"the loop count could not be compiled into the model ({e.message})"
        else:
            why = got
    if gate is None:
        model, layout = _build(pir, L, max_len, steps, None)
    info = model.cfg.extra["compiler"]
    info["clock"] = {"count": gate.count, "offset": gate.offset} if gate else {"none": why}
    # the input contract: not in the weights; the runner checks it on program.rasp
    info["value_params"] = computed      # computed by the model: not overridable at run time
    info["requires"] = requires_record(pir.requires)
    elapsed = time.perf_counter() - t0
    cm = CompiledModel(model, pir.source, pir.path, program=program, layout=layout)
    cm.compile_time = elapsed
    info["compile_time_s"] = round(elapsed, 4)
    info["layout"] = layout
    return cm


def _build(pir, L: int, max_len: int, steps, gate: Optional[Clock]):
    """The compiler's stages on one program: (LoopedTransformer, layout).
    Wide value sets of small ints are first encoded as numbers (a residual
    dim each instead of one per value: the compact model); a program some op
    of which needs them one-hot (e.g. a lookup table of two of them) is
    built with one-hot codes instead, and refused only if that fails too."""
    pg = ProgramGraph(pir)
    keep = set(pg.g)
    sets = ValueSets(pir, L, pg.names, keep).sets
    sets2 = ValueSets(pir, 2 * L, pg.names, keep).sets
    try:
        return _build_crafted(pir, pg, sets, sets2, L, max_len, steps, gate, compact=True)
    except RaspError:
        pg = ProgramGraph(pir)
        return _build_crafted(pir, pg, sets, sets2, L, max_len, steps, gate, compact=False)


def _build_crafted(pir, pg, sets, sets2, L, max_len, steps, gate, compact):
    cr = Crafter(pg, sets, sets2, L, compact=compact, gate=gate)
    out_rep = cr.run()
    stages = {s: [op for op in cr.ops if op.stage == s] for s in ("pre", "body", "post")}
    outer = {s: stages[s] for s in ("pre", "post")}
    # every block is as wide as its own ops (assemble.layer_shape): try caps on the
    # body's layers (its loop bookkeeping is planned on each try: all variables
    # committed in one layer, then each in its own), and for each the prelude and
    # postlude split that costs least
    best = None
    body_caps = caps({"body": stages["body"]}) if pg.loop is not None else [(None, None)]
    tries = [(cu, ch, spread) for spread in ((False, True) if pg.loop is not None else (False,))
             for cu, ch in body_caps]
    tried = set()
    for cu, ch, spread in tries:
        body = copy_ops(stages["body"]) if len(tries) > 1 else stages["body"]
        n_body = schedule(body, cu, ch)
        placed = (spread, tuple(op.layer for op in body))
        if placed in tried:     # caps that place every op alike plan and cost alike
            continue
        tried.add(placed)
        if pg.loop is not None:
            n_body = plan_body(cr, body, spread)
        cost, _ = schedule_compact(outer, stage_weights(body, n_body, len(cr.res)), len(cr.res))
        if best is None or cost < best[0]:
            best = (cost, body, n_body)
    _, body, n_body = best
    _, ns = schedule_compact(outer, stage_weights(body, n_body, len(cr.res)), len(cr.res))
    stages = {"pre": (outer["pre"], ns["pre"]), "body": (body, n_body), "post": (outer["post"], ns["post"])}
    loop = pg.loop
    extra = {"compiler": {"max_len": max_len, "design_length": L, "steps": steps,
                          "has_loop": loop is not None,
                          "until_stable": bool(loop.until_stable) if loop else False}}
    return assemble(cr, stages, out_rep, extra, gate)


class CompiledModel:
    def __init__(self, model: LoopedTransformer, source: str, path: str, program=None, layout=None):
        self.model = model
        self.source, self.path = source, path
        self.program = program or rasp.loads(source, path)
        self.layout = layout or model.cfg.extra.get("compiler", {}).get("layout", {})
        self.compile_time = model.cfg.extra.get("compiler", {}).get("compile_time_s", float("nan"))
        ex = model.cfg.extra
        self.in_index = {v: i for i, v in enumerate(ex["input_tokens"])}
        self.out_tokens = np.array(ex["output_tokens"], dtype=np.int64)
        self.state_dims = ex["state_dims"]
        info = ex["compiler"]
        self.has_loop, self.until_stable = info["has_loop"], info["until_stable"]
        self.fixed_steps = info.get("steps")
        self.loop = self.program.ir.loops[0] if self.has_loop else None

    @property
    def config(self) -> LoopedConfig:
        return self.model.cfg

    # ---- running ------------------------------------------------------------------
    def loop_counts(self, batch, params=None) -> np.ndarray:
        if not self.has_loop:
            return np.zeros(len(batch), dtype=np.int64)
        if self.fixed_steps is not None:
            return np.full(len(batch), int(self.fixed_steps), dtype=np.int64)
        pir = one_loop(self.program.ir)    # the loop the model runs
        assert self.loop is not None       # set when has_loop
        return host_values(pir, batch, pir.loops[0].count, self.loop.loc, params).clip(min=0)

    def encode_batch(self, batch):
        n = max(len(x) for x in batch)
        toks = torch.zeros((len(batch), n), dtype=torch.long)
        for b, x in enumerate(batch):
            toks[b, :len(x)] = torch.tensor([self.in_index[int(v)] for v in x], dtype=torch.long)
        return toks

    @torch.no_grad()
    def logits(self, tokens: torch.Tensor, counts: np.ndarray, lengths=None):
        """Run the looped model: each sample for its own count (until stable:
        stop after the first step that leaves every state dim unchanged)."""
        m = self.model
        if not self.has_loop:
            return m(tokens, 1), np.zeros(len(counts), dtype=np.int64)
        steps = torch.as_tensor(counts).clamp(min=0)
        if self.until_stable:
            # halting by convergence lives in the model class (LoopedTransformer.run_until_stable)
            out, ran = m.run_until_stable(tokens, steps, self.state_dims, lengths,
                                          first_step_changes=self._undefined_init())
            zero = steps == 0
            if bool(zero.any()):            # 0 iterations: the prelude's values, read by the postlude
                out = torch.where(zero[:, None, None], m.decode(m.encode(tokens)), out)
            return out, ran.numpy()
        e = m.encode(tokens)
        h = m.initial_state(e)
        out = m.decode(e)                    # 0 iterations: the prelude's values, read by the postlude
        ran = torch.zeros_like(steps)
        active = steps > 0
        t = 0
        while bool(active.any()):
            t += 1
            h = torch.where(active[:, None, None], m.step(h, e), h)
            ran += active.long()
            done_now = active & (steps <= t)
            if bool(done_now.any()):
                out = torch.where(done_now[:, None, None], m.decode(h), out)
            active = active & ~done_now
        return out, ran.numpy()

    @torch.no_grad()
    def loop_states(self, tokens: torch.Tensor, steps: int) -> list:
        """Decoded loop variables after 0..steps iterations: list of
        {name: LongTensor [B, n]} (read from h_t + e, BOS dropped)."""
        m = self.model
        e = m.encode(tokens)
        h = m.initial_state(e)
        out = []
        for t in range(steps + 1):
            if t:
                h = m.step(h, e)
            x = (h + e)[:, 1:]
            vals = {}
            for var in self.model.cfg.extra.get("loop_vars", []):
                cols = []
                for form in var["forms"]:
                    w = torch.zeros(x.shape[-1])
                    for k, c in form.items():
                        w[int(k)] = c
                    cols.append(x @ w)
                if var["kind"] == "cat":
                    idx = torch.stack(cols, -1).argmax(-1)
                    vals[var["name"]] = torch.tensor(var["values"])[idx]
                else:
                    vals[var["name"]] = torch.round(cols[0]).long()
            out.append(vals)
        return out

    def _undefined_init(self):
        return any(v.init is None for v in self.loop.vars)

    def beyond_design(self, batch) -> list:
        """Indices of inputs longer than the length the numeric tables were
        built for: the model may still be exact there, but nothing promises it."""
        L = self.model.cfg.extra["compiler"]["design_length"]
        return [i for i, x in enumerate(batch) if len(x) > L]

    def beyond_design_message(self, batch, longer) -> str:
        info = self.model.cfg.extra["compiler"]
        return (f"{len(longer)} input(s) (first: input {longer[0] + 1}, {len(batch[longer[0]])} tokens) are "
                f"longer than the {info['design_length']} tokens this model was built for "
                f"(from --max-len {info['max_len']}); their outputs may be wrong: recompile with a larger --max-len")

    def checked_batch(self, lines, where: str = "input", params=None, limits=None, max_work=None,
                      config_path=None) -> list:
        """The token lists of input texts [(line, text)], refused (exit 2) like
        `rasp run DIR` refuses them: vocabulary, --max-len, --max-steps, and the
        multiply-adds of the run (`max_work`, default DEFAULT_MAX_MULADDS)."""
        from .limits import check_compiled_run
        limits = limits or rasp.RunLimits()
        batch = [self.program.parse_input(text, line, where) for line, text in lines]
        check_compiled_run(self, batch, params, limits.max_len, limits.max_steps, where, [ln for ln, _ in lines],
                           **({"max_work": max_work} if max_work else {}), config_path=config_path)
        return batch

    def __call__(self, inputs, params=None, limits=None, max_work=None) -> list:
        """The answers to a batch of input texts, as tokens, in the one shape of
        every model `rasp.load` returns: from `>` on where the program has an
        end-of-query `>`, else every position (Program.answer_texts).  Checks
        and limits are `rasp run DIR`'s; an input beyond the design length gives
        a `DesignLengthWarning`.  The whole output (what `rasp run DIR` prints)
        is `model.outputs(...)`."""
        batch, outs = self._run_texts(inputs, params, limits, max_work)
        return self.program.answer_texts(batch, outs)

    def outputs(self, inputs, params=None, limits=None, max_work=None) -> list:
        """The whole output of each input text, as tokens (what `rasp run DIR` prints)."""
        _, outs = self._run_texts(inputs, params, limits, max_work)
        return [[self.program.token_text(int(v)) for v in out] for out in outs]

    def _run_texts(self, inputs, params, limits, max_work) -> tuple:
        from rasp.inputs import api_inputs
        batch = self.checked_batch(api_inputs(inputs), "input", params, limits, max_work)
        return batch, self.run_batch(batch, params, beyond_design="warn")

    def __repr__(self) -> str:
        info = self.model.cfg.extra["compiler"]
        clock = info.get("clock", {})
        stop = ("no loop" if not self.has_loop else "until stable" if self.until_stable
                else f"fixed {self.fixed_steps} iterations" if self.fixed_steps is not None
                else "T(n) from the input" + (" (halting clock)" if "count" in clock else ""))
        return (f"<compiler.CompiledModel of {self.program.describe()}; {self.model.num_params():,} parameters, "
                f"design length {info['design_length']}; stop: {stop}>")

    def run_batch(self, batch, params=None, beyond_design: str = "warn"):
        """Same contract as Program.run_batch(...).outputs: list of token-value
        lists.  Inputs are validated like the interpreter does.  Inputs longer
        than the design length (4 x max-len), where the model is not promised
        to be exact, give a `DesignLengthWarning` (`beyond_design="warn"`), a
        RaspError (`"error"`), or nothing (`"run"`: the caller has said so)."""
        if beyond_design not in BEYOND_DESIGN:
            raise ValueError(f"beyond_design must be one of {BEYOND_DESIGN}, not {beyond_design!r}")
        batch = [list(map(int, x)) for x in batch]
        self.program.check_batch(batch, rasp.RunLimits())
        longer = self.beyond_design(batch)
        if longer and beyond_design == "error":
            raise RaspError(self.beyond_design_message(batch, longer))
        if longer and beyond_design == "warn":
            warnings.warn(self.beyond_design_message(batch, longer), DesignLengthWarning, stacklevel=2)
        self.program.check_params(params)
        fixed = sorted(set(params or {}) & set(self.model.cfg.extra["compiler"].get("value_params", ())))
        if fixed:       # the model computes these from the input, like the interpreter does without --param
            raise RaspError(f"--param {fixed[0]}: the compiled model computes this param from the input (the "
                            "program uses it as a value), so it cannot be overridden; recompile the program "
                            "with the value written in")
        self.program.check_requires(batch, params)      # the input contract, host-side
        counts = self.loop_counts(batch, params)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)        # compiled models are small: one thread is fastest (and
        try:                            # immune to other processes holding the cores)
            # inputs of similar length (and loop count) run together, so that a long one
            # pads no short ones: the work of a chunk stays near the sum of its inputs'
            order = sorted(range(len(batch)), key=lambda i: (len(batch[i]), int(counts[i])))
            outs = [None] * len(batch)
            for start in range(0, len(order), RUN_CHUNK):
                idx = order[start:start + RUN_CHUNK]
                chunk = [batch[i] for i in idx]
                logits, _ = self.logits(self.encode_batch(chunk), counts[idx], [len(x) for x in chunk])
                ids = logits.argmax(-1).numpy()
                for b, (i, x) in enumerate(zip(idx, chunk)):
                    outs[i] = self.out_tokens[ids[b, :len(x)]].tolist()
        finally:
            torch.set_num_threads(threads)
        return outs

    def run(self, tokens, params=None, beyond_design: str = "warn"):
        return self.run_batch([tokens], params, beyond_design)[0]

    # ---- description --------------------------------------------------------------
    def sizes(self) -> dict:
        c = self.model.cfg
        layers = c.n_prelude + c.n_body + c.n_postlude
        heads = sum(1 for stage in self.layout.values() for layer in stage for op in layer
                    if not op.startswith("mlp:"))
        return {"layers": layers, "prelude": c.n_prelude, "body": c.n_body, "postlude": c.n_postlude,
                "heads": heads, "n_head": c.n_head, "d_head": c.d_head, "residual": c.d_model,
                "mlp": c.d_mlp, "params": self.model.num_params(), "compile_time_s": self.compile_time}

    def report(self) -> str:
        s = self.sizes()
        lines = [f"{self.path}: compiled looped transformer",
                 f"  layers      {s['layers']} (prelude {s['prelude']}, body {s['body']} x T, postlude {s['postlude']})",
                 f"  heads       {s['heads']} used (at most {s['n_head']} per layer, d_head at most {s['d_head']})",
                 f"  residual    {s['residual']}",
                 f"  MLP width   at most {s['mlp']} (each layer as wide as its own ops)",
                 f"  parameters  {s['params']:,}",
                 f"  compile     {s['compile_time_s']:.3f} s"]
        info = self.model.cfg.extra["compiler"]
        lines.append(f"  lengths     numeric tables cover lengths <= {info['design_length']} (4 x --max-len "
                     f"{info['max_len']}): positions and counts up to")
        lines.append("              that length are decoded exactly; `rasp run` warns about longer inputs, "
                     "whose outputs nothing promises")
        clock = info.get("clock", {})
        if "count" in clock:
            lines.append(f"  clock       output margin peaks after exactly T = {clock['count']} iterations "
                         "(confidence stopping finds T)")
        elif info["has_loop"]:
            lines.append(f"  clock       none: {clock.get('none', 'compiled before clocks existed')}")
        lines.append("  layers, one line each: attention heads (REDUCTION [VAR] @LINE: the aggregate giving VAR at "
                     "source line LINE), then 'mlp:' element-wise ops ([fused]: several in one table)")
        for stage in ("pre", "body", "post"):
            for i, layer in enumerate(self.layout.get(stage, [])):
                lines.append(f"  {stage} {i}: " + "; ".join(layer))
        return "\n".join(lines)

    # ---- files ----------------------------------------------------------------------
    def save(self, directory):
        """config.json, model.safetensors, program.rasp and manifest.json (their
        SHA-256), each written atomically."""
        from safetensors import SafetensorError

        from model.files import write_manifest

        from .validate import COMPILED_FILES
        d = Path(directory)
        state = {k: v.contiguous() for k, v in self.model.state_dict().items()}
        try:
            d.mkdir(parents=True, exist_ok=True)
            write_text_atomic(d / "config.json", self.model.cfg.to_json())
            write_bytes_atomic(d / "model.safetensors", save(state))
            write_text_atomic(d / "program.rasp", self.source)
            write_manifest(d, COMPILED_FILES, "rasp-compiled/1")     # checked by load_compiled
        except (OSError, SafetensorError) as e:    # a full disk, no permission: each file is whole or absent
            reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            raise RaspFileError(d, f"could not write the compiled model: {reason}") from None


def load_compiled(directory) -> CompiledModel:
    """Every file is checked first (compiler/validate.py, model/files.py): a damaged or edited
    directory is a `DIR/FILE: error: ...`, never a loader's traceback."""
    from .validate import load_compiled_parts
    cfg, state, program, source = load_compiled_parts(directory)
    with torch.device("meta"):           # every tensor comes from the file
        model = LoopedTransformer(cfg)
    model.load_state_dict(state, assign=True)
    model.eval()
    return CompiledModel(model, source, str(Path(directory) / "program.rasp"), program=program)

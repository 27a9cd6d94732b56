"""A loaded program: input parsing, output formatting, and running it."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from .errors import RaspError, RaspInputError, shorten
from .inputs import INT64_MAX, INT64_MIN, INT_TEXT, api_inputs, int64_of
from .ir import ProgramIR
from .limits import RunLimits
from .lower import lower
from .readfile import read_text


class Program:
    def __init__(self, ir: ProgramIR, warnings: list):
        self.ir = ir
        self.warnings = warnings
        self._vocab = frozenset(ir.vocab)

    @property
    def path(self) -> str:
        return self.ir.path

    # -- text <-> tokens --
    def parse_input(self, text: str, line: Optional[int] = None, where: str = "input") -> list:
        """'1 0 > # #' -> [1, 0, -1, -2, -2]; a bad token is an input error."""
        words = text.split()
        if not words:
            raise RaspInputError("empty input", line, where=where)
        tokens = []
        for position, word in enumerate(words, 1):
            if word in self.ir.symbols:
                value = self.ir.symbols[word]
            elif INT_TEXT.fullmatch(word):
                value = int64_of(word)      # None (too large) is in no vocabulary
            else:
                raise RaspInputError(f"unknown token '{shorten(word)}' at position {position} (symbols: "
                                     f"{' '.join(self.ir.symbols) or 'none'})", line, word, where)
            if value not in self._vocab:
                raise RaspInputError(f"token '{shorten(word)}' at position {position} is not in the input "
                                     f"vocabulary {self.vocab_text()}", line, word, where)
            tokens.append(value)
        return tokens

    def vocab_text(self) -> str:
        shown = [self.token_text(v) for v in self.ir.vocab[:20]]
        more = " …" if len(self.ir.vocab) > 20 else ""
        return "{" + ", ".join(shown) + more + "}"

    def token_text(self, value: int) -> str:
        symbol = self.ir.symbol_text(value)
        return symbol if symbol is not None else str(value)

    def format_output(self, values) -> str:
        return " ".join(self.token_text(int(v)) for v in values)

    def scored_start(self, tokens) -> int:
        """docs/language.md §13: outputs before the end-of-query symbol `>` are not
        scored.  Every position counts when the program or input has no `>`."""
        eoq = self.ir.symbols.get(">")
        return tokens.index(eoq) if eoq is not None and eoq in tokens else 0

    def answer_texts(self, batch, outputs) -> list:
        """The answers of `outputs` (token values, one list per input of `batch`):
        from `>` on, as tokens; the whole output when there is no `>`.  The one
        shape every model `rasp.load` returns answers in (a trained model is
        trained and scored only there)."""
        return [[self.token_text(int(v)) for v in out[self.scored_start(list(tokens)):]]
                for tokens, out in zip(batch, outputs)]

    def describe(self) -> str:
        """What repr() shows of a program and of a model compiled from it."""
        loops = ", ".join(("until stable" if loop.until_stable else "counted") for loop in self.ir.loops)
        lines = self.ir.source.splitlines()
        title = lines[0].lstrip("# ").strip() if lines and lines[0].startswith("#") else ""    # the header's line
        title = f" {shorten(title)!r}" if title else ""
        return (f"{Path(self.path).name}{title} ({len(lines)} lines), inputs {self.vocab_text()}, "
                f"{len(self.ir.loops)} loop{'s' * (len(self.ir.loops) != 1)}{f' ({loops})' if loops else ''}, "
                f"answer {'from > on' if '>' in self.ir.symbols else 'every position'}")

    def __repr__(self) -> str:
        return f"<rasp.Program {self.describe()}; stop: {'T(n) from the input' if self.ir.loops else 'no loop'}>"

    # -- running --
    def check_batch(self, batch, limits: RunLimits, where: str = "input"):
        """Lengths and vocabulary; an error names `where`:LINE (input i is line i + 1)."""
        seen = set()
        for i, tokens in enumerate(batch):
            if len(tokens) == 0:
                raise RaspInputError("empty input", i + 1, where=where)
            if len(tokens) > limits.max_len:
                raise RaspInputError(f"the input has {len(tokens)} tokens; the limit is {limits.max_len} "
                                     f"({limits.advice('--max-len')})", i + 1, where=where)
            seen.update(tokens)
        if seen <= self._vocab:
            return          # the common case: one set check for the whole batch
        for i, tokens in enumerate(batch):
            for position, value in enumerate(tokens, 1):
                if value not in self._vocab:
                    raise RaspInputError(f"token '{self.token_text(value)}' at position {position} is not in "
                                         f"the input vocabulary {self.vocab_text()}", i + 1,
                                         self.token_text(value), where)

    def check_params(self, params: Optional[dict]):
        from .interpreter import check_param_names
        check_param_names(self.ir, params)
        for name, value in (params or {}).items():
            if not INT64_MIN <= int(value) <= INT64_MAX:
                raise RaspError(f"param '{name}': the value {shorten(str(value))} does not fit in a "
                                "64-bit int")

    def check_requires(self, batch, params: Optional[dict] = None):
        """The program's input contract (`require`), for back ends that do not
        run the program itself; `run_batch` checks it anyway."""
        from .interpreter import check_requires
        check_requires(self.ir, batch, params)

    def run_batch(self, batch, params: Optional[dict] = None, *, trace: bool = False,
                  limits: Optional[RunLimits] = None, where: str = "input"):
        from .interpreter import execute
        limits = limits or RunLimits()
        limits.check()
        batch = [tokens if isinstance(tokens, list) else [int(t) for t in tokens] for tokens in batch]
        self.check_batch(batch, limits, where)
        self.check_params(params)
        return execute(self.ir, batch, params, trace=trace, limits=limits)

    def run(self, tokens, params: Optional[dict] = None) -> list:
        return self.run_batch([tokens], params).outputs[0]

    def __call__(self, inputs, params: Optional[dict] = None, limits: Optional[RunLimits] = None) -> list:
        """The answers to a batch of input texts, as tokens, in the shape every
        model `rasp.load` returns answers in: from `>` on where the program has
        an end-of-query `>` (what a trained model answers), else every position.
        `prog(["1 0 1 > # #"])` -> [["0", "#", "#"]].  The whole output (what
        `rasp run P.rasp` prints) is `prog.outputs(...)`."""
        batch, outputs = self._run_texts(inputs, params, limits)
        return self.answer_texts(batch, outputs)

    def outputs(self, inputs, params: Optional[dict] = None, limits: Optional[RunLimits] = None) -> list:
        """The whole output of each input text, as tokens (what `rasp run`
        prints): `prog.outputs(["1 0 1 > # #"])` -> [["0", "1", "1", "0", "#", "#"]]."""
        _, outputs = self._run_texts(inputs, params, limits)
        return [[self.token_text(int(v)) for v in out] for out in outputs]

    def _run_texts(self, inputs, params, limits) -> tuple:
        batch = [self.parse_input(text, line) for line, text in api_inputs(inputs)]
        return batch, self.run_batch(batch, params, limits=limits).outputs

MAX_PROGRAM_BYTES = 64 << 20     # far past the parser's 100,000 tokens, with comments


def loads(source: str, path: str = "<string>") -> Program:
    ir, warnings = lower(source, path)
    return Program(ir, warnings)


def load(path) -> Program:
    path = str(path)
    if not os.path.lexists(path):
        raise RaspError(f"{path}: no such file")
    source = read_text(path, MAX_PROGRAM_BYTES, encoding="utf-8-sig")   # tolerate a byte-order mark
    return loads(source, path)

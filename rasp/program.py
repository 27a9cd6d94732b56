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


SCORES = ("all", "last", "after:TOKEN")


def parse_score(ir: ProgramIR, score: Optional[str], flag: str = "score") -> tuple:
    """A scoring (`rasp train --score`, `rasp.load(P, score=...)`) -> (kind, marker):
    ("all", None) every position, ("last", None) the last one, ("after", TOKEN)
    from TOKEN on.  None: from `>` on when the program declares it, else every
    position (("default", ">") or ("all", None))."""
    if score is None:
        return ("default", ">") if ">" in ir.symbols else ("all", None)
    if score in ("all", "last"):
        return score, None
    if isinstance(score, str) and score.startswith("after:") and score[6:]:
        marker = score[6:]
        if marker not in ir.symbols:
            raise RaspError(f"{flag} {score}: {marker!r} is not a symbol of {ir.path} (its symbols: "
                            f"{' '.join(ir.symbols) or 'none'})")
        return "after", marker
    raise RaspError(f"{flag} {score}: one of {', '.join(SCORES)}")


def describe_score(kind: str, marker: Optional[str]) -> str:
    """The answer's positions in words (repr of programs and models)."""
    if kind in ("default", "after"):
        return f"from {marker} on"
    return "at the last position" if kind == "last" else "every position"


class Program:
    def __init__(self, ir: ProgramIR, warnings: list, score: Optional[str] = None):
        self.ir = ir
        self.warnings = warnings
        self._vocab = frozenset(ir.vocab)
        self.score = score          # the positions an answer covers (parse_score)
        self.scoring = parse_score(ir, score)

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

    def scored_start(self, tokens, line: Optional[int] = None, where: str = "input") -> int:
        """The first scored position of an input.  By default (docs/language.md
        §13) outputs before the end-of-query symbol `>` are not scored, and every
        position counts when the program or input has no `>`; a scoring given
        (`score=`) counts from its marker (an input without it is an input error),
        the last position, or every one."""
        kind, marker = self.scoring
        if kind == "all":
            return 0
        if kind == "last":
            return len(tokens) - 1
        code = self.ir.symbols[marker]
        if code in tokens:
            return tokens.index(code)
        if kind == "after":
            raise RaspInputError(f"the input has no {marker!r}, where the answer starts (score after:{marker})",
                                 line, where=where)
        return 0

    def answer_texts(self, batch, outputs, lines=None, where: str = "input") -> list:
        """The answers of `outputs` (token values, one list per input of `batch`)
        at the scored positions (`scored_start` on), as tokens: by default from
        `>` on, the whole output when there is no `>`.  The one shape every model
        `rasp.load` returns answers in (a trained model is trained and scored
        only there, and a run trained with `--score S` answers as the program
        loaded with `score=S`)."""
        lines = lines or [i + 1 for i in range(len(batch))]
        return [[self.token_text(int(v)) for v in out[self.scored_start(list(tokens), line, where):]]
                for tokens, out, line in zip(batch, outputs, lines)]

    def describe(self) -> str:
        """What repr() shows of a program and of a model compiled from it."""
        loops = ", ".join(("until stable" if loop.until_stable else "counted") for loop in self.ir.loops)
        lines = self.ir.source.splitlines()
        title = lines[0].lstrip("# ").strip() if lines and lines[0].startswith("#") else ""    # the header's line
        title = f" {shorten(title)!r}" if title else ""
        return (f"{Path(self.path).name}{title} ({len(lines)} lines), inputs {self.vocab_text()}, "
                f"{len(self.ir.loops)} loop{'s' * (len(self.ir.loops) != 1)}{f' ({loops})' if loops else ''}, "
                f"answer {describe_score(*self.scoring)}")

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

    def loop_needs(self, batch, result, params: Optional[dict] = None) -> list:
        """Per input of `batch`, run as `result` (`run_batch`): the step from which
        each position stops the first loop from being done, 0 where it does not
        count (rasp/interpreter/needs.py)."""
        from .interpreter import loop_needs
        return loop_needs(self.ir, batch, result, params)

    def run(self, tokens, params: Optional[dict] = None) -> list:
        return self.run_batch([tokens], params).outputs[0]

    def __call__(self, inputs, params: Optional[dict] = None, limits: Optional[RunLimits] = None) -> list:
        """The answers to a batch of input texts, as tokens, in the shape every
        model `rasp.load` returns answers in: from `>` on where the program has
        an end-of-query `>` (what a trained model answers), else every position.
        `prog(["1 0 1 > # #"])` -> [["0", "#", "#"]].  The whole output (what
        `rasp run P.rasp` prints) is `prog.outputs(...)`."""
        batch, outputs, lines = self._run_texts(inputs, params, limits)
        return self.answer_texts(batch, outputs, lines)

    def outputs(self, inputs, params: Optional[dict] = None, limits: Optional[RunLimits] = None) -> list:
        """The whole output of each input text, as tokens (what `rasp run`
        prints): `prog.outputs(["1 0 1 > # #"])` -> [["0", "1", "1", "0", "#", "#"]]."""
        _, outputs, _ = self._run_texts(inputs, params, limits)
        return [[self.token_text(int(v)) for v in out] for out in outputs]

    def _run_texts(self, inputs, params, limits) -> tuple:
        """(token lists, outputs, the line number of each input)."""
        items = api_inputs(inputs)
        batch = [self.parse_input(text, line) for line, text in items]
        return batch, self.run_batch(batch, params, limits=limits).outputs, [line for line, _ in items]

MAX_PROGRAM_BYTES = 64 << 20     # far past the parser's 100,000 tokens, with comments


def loads(source: str, path: str = "<string>", score: Optional[str] = None) -> Program:
    """`score`: the positions its answers cover (parse_score), as a run trained with
    `rasp train --program P --score SCORE` answers."""
    ir, warnings = lower(source, path)
    return Program(ir, warnings, score)


def load(path, score: Optional[str] = None) -> Program:
    path = str(path)
    if not os.path.lexists(path):
        raise RaspError(f"{path}: no such file")
    source = read_text(path, MAX_PROGRAM_BYTES, encoding="utf-8-sig")   # tolerate a byte-order mark
    return loads(source, path, score)

"""`rasp train --config FILE.toml`: a run's settings from a TOML file.

The file's keys are the flags' names (`d_model = 64` for `--d-model 64`,
`set = ["loops=4"]` for `--set loops=4`, `no_progress = true` for
`--no-progress`).  Each value is checked by its flag's own type and choices,
and a bad one is a located error, FILE:LINE.  The file is then read as the
flags it stands for, placed before the command line's: argparse keeps the
last value of a flag, so a flag given on the command line overrides the file
(a repeatable flag such as --set takes both, the command line's last).  The
run records the file's settings in run.json (`config`).  Torch-free, like the
rest of the parser.
"""
from __future__ import annotations

import argparse
import re
import sys

from rasp.errors import Loc, RaspError
from rasp.readfile import read_text

NOT_IN_FILE = {"help", "config"}
MAX_CONFIG_BYTES = 1 << 20      # a run's settings are a few lines


# a table's header line: [name], [name.sub], [[name]] (a quoted name too), then at most a comment
_HEADER = re.compile(r"""\s*\[\[?\s*(?:"([^"]*)"|'([^']*)'|([A-Za-z0-9_-]+))\s*[.\]][^,]*$""")


def _line_of(text: str, key: str) -> int:
    """The line of a top-level `key = ...` or `key.x = ...` before the first table,
    or of the header of its table `[key]` (the file's keys are flat, so a table
    is refused there); 1 when neither is found."""
    assign = re.compile(rf"\s*(?:\"{re.escape(key)}\"|'{re.escape(key)}'|{re.escape(key)})\s*[.=]")
    in_tables = False
    for i, line in enumerate(text.split("\n"), 1):
        header = _HEADER.match(line)
        if header:
            if key in header.groups():
                return i
            in_tables = True
        elif not in_tables and assign.match(line):
            return i
    return 1


def load_toml(text: str, path: str) -> dict:
    """The TOML document of `text`, its syntax errors located (FILE:LINE:COL)."""
    import tomllib
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"at line (\d+), column (\d+)", str(e))
        line, col = (int(m.group(1)), int(m.group(2))) if m else (1, 1)
        raise RaspError(f"not valid TOML: {re.sub(r' [(]at line.*', '', str(e))}", Loc(path, line, col), text) from None
    except RecursionError:          # tomllib recurses per level of nested arrays / inline tables
        raise RaspError("not valid TOML: nested too deeply", Loc(path, 1, 1), text) from None


def _flag_words(parser: argparse.ArgumentParser, path: str) -> tuple:
    """(argv words the file stands for, {key: value} as read, {dest: (path, line, text,
    key, value)}: where each was given, for errors found once the run is resolved)."""
    # a regular file or a pipe with a writer (`--config <(...)`), bounded, never waited on forever
    text = read_text(path, MAX_CONFIG_BYTES, pipe=True)
    doc = load_toml(text, path)
    actions = {a.dest: a for a in parser._actions if a.option_strings and a.dest not in NOT_IN_FILE}
    words, places = [], {}
    for key, value in doc.items():
        where = Loc(path, _line_of(text, key), 1)
        places[key.replace("-", "_")] = (path, where.line, text, key, value)
        if isinstance(value, dict):         # [key] or key.x = ...: the file has no tables
            raise RaspError(f"{key}: a table, where a settings file is flat: `key = value` lines whose keys are the "
                            "flags of `rasp train` without their dashes", where, text)
        dest = key.replace("-", "_")
        action = actions.get(dest)
        if action is None:
            raise RaspError(f"unknown setting {key!r}: the keys are the flags of `rasp train` without their dashes "
                            "(`rasp train --help`), config excepted", where, text)
        flag = action.option_strings[-1]
        many = isinstance(action, argparse._AppendAction)
        if action.nargs == 0:               # a switch: true gives it, false leaves it out
            if not isinstance(value, bool):
                raise RaspError(f"{key} = {value!r}: true or false ({flag} is a switch)", where, text)
            words += [flag] if value else []
            continue
        values = value if many and isinstance(value, list) else [value]
        for v in values:
            if isinstance(v, (dict, list)) or v is None:
                raise RaspError(f"{key}: expected {'a value or a list of values' if many else 'one value'} "
                                f"(the value of {flag})", where, text)
            word = str(v).lower() if isinstance(v, bool) else str(v)
            try:                            # the flag's own check, so that the error names the file's line
                converted = action.type(word) if action.type else word
            except (argparse.ArgumentTypeError, ValueError, TypeError) as e:
                raise RaspError(f"{key} = {v!r}: {e}", where, text) from None
            if action.choices is not None and converted not in action.choices:
                raise RaspError(f"{key} = {v!r}: one of {', '.join(map(str, action.choices))}", where, text)
            words += [f"{flag}={word}"]
    return words, doc, places


def expand_config(parser: argparse.ArgumentParser, argv: list) -> tuple:
    """(`argv` with the flags of each `--config FILE` put first, so that the command
    line's own flags, which come after, win; {key: value} of the files; where in them
    each flag the command line does not give was given).  A bad file
    exits 2 with a located error, as argparse does for a bad flag."""
    argv = list(argv)
    files = [argv[i + 1] for i, w in enumerate(argv[:-1]) if w == "--config"]
    files += [w.split("=", 1)[1] for w in argv if w.startswith("--config=")]
    front, settings, where = [], {}, {}
    for path in files:
        try:
            words, doc, places = _flag_words(parser, path)
        except RaspError as e:
            print(e.format(), file=sys.stderr)
            parser.exit(2)
        front += words
        settings.update(doc)
        where.update(places)
    # a flag on the command line overrides the file's: an error about it names the flag
    flags = {a.dest: a.option_strings for a in parser._actions}
    on_line = {dest for dest in where for w in argv for f in flags.get(dest, ())
               if w == f or w.startswith(f + "=")}
    return front + argv, settings, {dest: p for dest, p in where.items() if dest not in on_line}


def add_config(p: argparse.ArgumentParser):
    """--config on `rasp train`'s parser, whose parsing reads the file first; the
    namespace keeps the file's settings as `config_settings` (recorded in run.json)."""
    p.add_argument("--config", metavar="FILE.toml", default=None,
                   help="read the run's settings from a TOML file: the flags' names as keys (d_model = 64, "
                        "set = [\"loops=4\"]); flags on the command line override it (default: none)")
    parse = p.parse_known_args

    def parse_known_args(args=None, namespace=None):
        argv, settings, where = expand_config(p, sys.argv[1:] if args is None else args)
        namespace, extras = parse(argv, namespace)
        namespace.config_settings = settings or None
        namespace.config_where = where
        return namespace, extras
    p.parse_known_args = parse_known_args       # type: ignore[method-assign]

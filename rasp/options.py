"""The argument parser of every `rasp` command (and `python -m trainer`).

argparse as it is, with two changes that make a mistyped flag obvious:

* no abbreviations (`allow_abbrev=False`): `--inp` is not silently `--input`,
  and a flag added later can never change what an old command line means;
* an unknown flag is named before anything else is checked, with the
  closest known flag: `rasp run p.rasp --inptu x` says "unrecognized argument
  --inptu (did you mean --input?)", not that --input is missing;
* a mistyped choice gets the closest one: `rasp trian` -> "did you mean train?";
* an epilog may be a function, called when the help is shown: what it lists
  may take long to import, and parsing (or refusing) arguments never needs it;
* a command with many flags may show only its common ones on -h/--help, with
  a pointer to --help-all for the rest (`split_help`), as pip and pytest do.

Subcommand parsers made by `add_subparsers` are of this class too.  The option
helpers several commands share (`run_limits`, `refuse_flags`) are here too, so
no command imports another command's module.
"""
from __future__ import annotations

import argparse
import difflib
import re
import sys

from .errors import RaspError

_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")     # a negative number is a value, not a flag
_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")


class _HelpAll(argparse.Action):
    """--help-all: every flag, in its groups (the full help that -h shortens)."""

    def __init__(self, option_strings, dest, help=None):
        super().__init__(option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        parser.print_help(full=True)
        parser.exit()


class ArgumentParser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        if sys.version_info >= (3, 14):             # argparse's own did-you-mean for choices
            kwargs.setdefault("suggest_on_error", True)
        super().__init__(*args, **kwargs)
        self.common_flags: tuple = ()     # split_help: the flags -h shows (none: -h shows all)
        self.common_epilog = None

    def split_help(self, common: tuple, epilog):
        """-h/--help shows only the flags in `common` (in that order) and then
        `epilog` (a string or a function, as the epilog); --help-all shows the
        full help, every flag in its group.  Call it after adding the flags."""
        self.add_argument("--help-all", action=_HelpAll, help="show every flag, in groups, and exit")
        unknown = set(common) - set(self.known_flags())
        if unknown:
            raise ValueError(f"split_help: no such flags {sorted(unknown)}")
        self.common_flags = ("-h", "--help-all", *common)
        for action in self._actions:
            if "-h" in action.option_strings:
                action.help = "show the common flags and exit"
        self.common_epilog = epilog

    def print_help(self, file=None, full: bool = False):
        self._print_message(self.format_help(full), file or sys.stdout)

    def _resolve_help(self, actions):
        # an epilog or a help line may be a function: what it shows can cost imports
        # (registries, presets) that parsing never needs
        for action in actions:
            if callable(action.help):
                action.help = action.help()

    def parse_known_args(self, args=None, namespace=None):
        argv = list(sys.argv[1:] if args is None else args)
        unknown = self.unknown_flags(argv)
        if unknown:
            self.error(self.unrecognized(unknown))
        return super().parse_known_args(args, namespace)

    def format_help(self, full: bool = False):
        if self.common_flags and not full:
            return self._format_common_help()
        if callable(self.epilog):
            self.epilog = self.epilog()
        self._resolve_help(self._actions)
        return super().format_help()

    def _format_common_help(self) -> str:
        """usage, description, the common flags, the short epilog: only what they
        need is computed (a flag's help function, the epilog's function)."""
        by_flag = {s: a for a in self._actions for s in a.option_strings}
        shown = list(dict.fromkeys(by_flag[f] for f in self.common_flags if f in by_flag))   # no -h: add_help=False
        self._resolve_help(shown)
        formatter = self._get_formatter()
        formatter.add_usage(self.usage, self._actions, self._mutually_exclusive_groups)
        formatter.add_text(self.description)
        formatter.start_section("common options")
        formatter.add_arguments(shown)
        formatter.end_section()
        epilog = self.common_epilog() if callable(self.common_epilog) else self.common_epilog
        formatter.add_text(epilog)
        return formatter.format_help()

    def error(self, message):
        """argparse's error, with the closest choice to a mistyped one
        (Python 3.14's suggest_on_error does this itself)."""
        wrong = _INVALID_CHOICE.search(message)
        if wrong and "maybe you meant" not in message:
            close = difflib.get_close_matches(wrong.group(1), [c.strip(" '") for c in wrong.group(2).split(",")], n=1)
            message += f" (did you mean {close[0]}?)" if close else ""
        super().error(message)

    def known_flags(self) -> list:
        return [s for a in self._actions for s in a.option_strings]

    def unknown_flags(self, argv: list) -> list:
        """The tokens of argv that argparse would read as flags and that this
        parser does not have (those after a subcommand are its parser's: a
        parser with subcommands looks only before its first word)."""
        known = set(self.known_flags())
        has_subcommands = any(a.nargs == argparse.PARSER for a in self._actions)
        found = []
        for token in argv:
            if token == "--" or (has_subcommands and not token.startswith("-")):
                break                               # the rest is the subcommand's (or a mistyped one's)
            if (not token.startswith("-") or token == "-" or " " in token or _NUMBER.match(token)):
                continue                            # a value (argparse reads these as values too)
            flag = token.split("=", 1)[0]
            if flag in known or (not flag.startswith("--") and flag[:2] in known):   # -n5
                continue
            found.append(flag)
        return found

    def unrecognized(self, flags: list) -> str:
        def named(flag):
            close = difflib.get_close_matches(flag, [f for f in self.known_flags() if f != "-h"], n=1, cutoff=0.6)
            return flag + (f" (did you mean {close[0]}?)" if close else "")
        return ("unrecognized argument " if len(flags) == 1 else "unrecognized arguments ") + \
            ", ".join(named(f) for f in flags)


def run_limits(args):
    """The RunLimits of --max-len, --max-steps, --max-work (defaults where not given)."""
    from .limits import RunLimits   # here: rasp run loads it anyway
    limits = RunLimits()
    if getattr(args, "max_len", None) is not None:
        limits.max_len = args.max_len
    if getattr(args, "max_steps", None) is not None:
        limits.max_steps = args.max_steps
    if getattr(args, "max_work", None) is not None:
        limits.max_work = args.max_work
    return limits


def refuse_flags(args, names, reason: str):
    """Refuse the flags among `names` that were given: they do nothing here."""
    given = ["--" + k.replace("_", "-") for k in names if getattr(args, k, None) not in (None, False, [])]
    if given:
        raise RaspError(f"{', '.join(given)}: {reason}")

"""n-RASP-L: the language, its checker and its NumPy interpreter."""
from .errors import RaspError, RaspInputError, RaspRuntimeError, RaspWarning
from .loaders import load
from .program import Program, RunLimits, loads

DISTRIBUTION = "rasp-looped"      # the name on the package index (pyproject.toml); the import name is rasp

__all__ = ["__version__", "Program", "RunLimits", "load", "loads", "check", "RaspError", "RaspInputError",
           "RaspRuntimeError", "RaspWarning"]


def check(path, strict: bool = False) -> list:
    """Check a program file; return its warnings.  With strict=True a
    RASP-L discipline warning is raised as an error."""
    from .program import load as load_program
    program = load_program(path)
    if strict and program.warnings:
        w = program.warnings[0]
        raise RaspError(w.message, w.loc, w.source)
    return program.warnings


def __getattr__(name: str):
    """`rasp.__version__`, computed on first use (importlib.metadata costs start-up time
    that `rasp run` does not need): the installed distribution's version, else, in a
    checkout that is not installed, pyproject.toml's."""
    if name != "__version__":
        raise AttributeError(f"module 'rasp' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version
    try:
        found = version(DISTRIBUTION)
    except PackageNotFoundError:
        found = _pyproject_version()
    globals()["__version__"] = found
    return found


def _pyproject_version() -> str:
    # a regular expression, not tomllib: mypy checks for Python 3.10, which lacks it
    import re
    from pathlib import Path
    try:
        text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return "0+unknown"
    m = re.search(r'^version\s*=\s*"([^"]+)"', text, re.M)
    return m.group(1) if m else "0+unknown"

"""n-RASP-L: the language, its checker and its NumPy interpreter."""
from .errors import RaspError, RaspInputError, RaspRuntimeError, RaspWarning
from .loaders import load
from .program import Program, RunLimits, loads

__all__ = ["Program", "RunLimits", "load", "loads", "check", "RaspError", "RaspInputError",
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

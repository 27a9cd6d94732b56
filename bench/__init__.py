"""Benchmarks, run from the repository root as `python -m bench.NAME [...]`.  A package,
so they import each other (`from bench.x import ...`) and the tests import them (pytest's
pythonpath in pyproject.toml), with nothing editing sys.path.  Not `python bench/NAME.py`:
that puts bench/ first on the path, where bench/compiler.py shadows the compiler package."""

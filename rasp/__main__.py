"""`python -m rasp ...` is the `rasp` command (useful from a source checkout with
PYTHONPATH set, where the installed console script would run another copy)."""
from .cli import main

raise SystemExit(main())

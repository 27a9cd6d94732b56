"""Progress bars: on a terminal only, never in a redirected log.

tqdm's `disable=None` turns a bar off when its stream (stderr) is not a
terminal, so `rasp train ... 2> log` writes no progress into the log;
`--no-progress` turns it off on a terminal too.
"""
from __future__ import annotations

import sys

from tqdm import tqdm


def bar(iterable=None, enabled: bool = True, **options) -> tqdm:
    """A tqdm bar on stderr, shown only when `enabled` and stderr is a terminal."""
    return tqdm(iterable, disable=None if enabled else True, file=sys.stderr, dynamic_ncols=True, **options)

"""How a trained looped model stops looping when `rasp run` or `rasp.load`
are not told (`--stop`, `--threshold`): stated by `rasp run --help`
(rasp/commands.py) and applied by the trainer's inference and evaluation,
which import them from here (rasp imports nothing above it)."""

RUN_STOP = "oracle"        # `rasp run`'s rule: the task program's T(n) (`rasp eval` fits its own: depth_law)
THRESHOLD = 0.01           # `--stop threshold`: the confidence cross-entropy to stop at

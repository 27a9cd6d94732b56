"""The test-time stopping rules of a trained looped model, listed once: their
names and one-line help, used by `rasp run --help` (rasp/commands.py), `rasp
eval --help` and every command's error (they live here, where the trainer
imports them too, because `rasp run --help` imports nothing above rasp), and
which rule each command takes when it is not told (`--stop`, `--threshold`)."""

THRESHOLD = 0.01           # `--stop threshold`: the confidence cross-entropy to stop at

RULES = ("depth_law", "oracle", "confidence", "confidence_sample", "threshold", "stable", "head")
# the rule every command stops a looped model by when it is not told (`rasp eval`, `rasp run
# RUN`, `rasp.load`, an export and its card, `rasp compare`'s adaptive rows); a fixed-depth
# model runs its one depth
DEFAULT_RULE = "head"
# fitted on the training lengths (trainer/fan/halting.py), once per checkpoint: saved in the run
# (halting.json) and the export (config.json), then read by every command
CALIBRATED = ("depth_law", "head")
STABLE_K = 2                            # `stable`: steps the answer must stay unchanged
# one line each, for --help
RULE_HELP = {"depth_law": "on the training lengths, the step where the model answers best, "
                          "fitted as a line in the input's size n and extrapolated (never reads a test input's T(n))",
             "oracle": "each input's own T(n) iterations (the task's known count)",
             "confidence": "one step for all inputs of a length: the lowest mean confidence cross-entropy "
                           "over T_max iterations (Fan et al.'s Eq. 2)",
             "confidence_sample": "the same criterion, each input its own step",
             "threshold": "stop each input at its first step whose confidence cross-entropy is below "
                          "--threshold",
             "stable": f"the first step after which the decoded answer stays unchanged for {STABLE_K} more steps",
             "head": "the model's own 'done' unit (ACT-style), trained with it: with rasp train's default "
                     "recipe (clock), the first step where every position of its halting clock says done; "
                     "a run without a unit (--recipe fan) gets one fitted on the training lengths; a compiled "
                     "start (--init compiled) reads its compiled halting clock, or T(n) from the program where "
                     "it has none"}


def rules_text() -> str:
    """'a, b or c': the rules, as a help line or an error lists them."""
    return ", ".join(RULES[:-1]) + " or " + RULES[-1]


def unknown_rule(rule) -> str:
    """The one refusal of a rule no command knows."""
    return f"unknown --stop {str(rule)[:40]!r}: one of {rules_text()}"

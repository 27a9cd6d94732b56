"""The names of the test-time stopping rules and their one-line help, apart
from trainer/fan/stopping.py (which runs them, with torch) so that `rasp
eval`'s parser is built without torch."""
from rasp.stop import THRESHOLD  # noqa: F401 (the `threshold` rule's default)

RULES = ("depth_law", "oracle", "confidence", "confidence_sample", "threshold", "stable", "head")
DEFAULT_RULE = "depth_law"              # `rasp eval`'s, for a looped model (a fixed-depth one: oracle)
CALIBRATED = ("depth_law", "head")      # fitted on held-in lengths first (trainer/fan/halting.py)
STABLE_K = 2                            # `stable`: steps the answer must stay unchanged
# one line each, for --help
RULE_HELP = {"depth_law": "the default: on the training lengths, the step where the model answers best, "
                          "fitted as a line in the input's size n and extrapolated (never reads a test input's T(n))",
             "oracle": "each input's own T(n) iterations (the task's known count)",
             "confidence": "one step for all inputs of a length: the lowest mean confidence cross-entropy "
                           "over T_max iterations (Fan et al.'s Eq. 2)",
             "confidence_sample": "the same criterion, each input its own step",
             "threshold": "stop each input at its first step whose confidence cross-entropy is below "
                          "--threshold",
             "stable": f"the first step after which the decoded answer stays unchanged for {STABLE_K} more steps",
             "head": "a logistic 'done' unit on the step's state, fitted on the training lengths (ACT-style)"}

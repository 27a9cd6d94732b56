"""The test-time stopping rules, as the trainer imports them: the one list
is rasp/stop.py (`rasp run --help` reads it there without importing the
trainer); trainer/fan/stopping.py runs them, with torch."""
from rasp.stop import (CALIBRATED, DEFAULT_RULE, RULE_HELP, RULES, STABLE_K, THRESHOLD,  # noqa: F401
                       rules_text, unknown_rule)

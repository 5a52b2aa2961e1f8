"""What workers report, as the results and monitoring read it (kept apart from apps/base.py so that
readers of a log need not import the kinds' config models).

A worker reports running totals by unit (``progress(unit, value)``): barriers, iterations, frames, bytes
... A deadline is reported as one of two such counters, one increment per deadline due."""

DEADLINES_MET = "deadlines_met"
DEADLINES_MISSED = "deadlines_missed"
DEADLINE_UNITS = (DEADLINES_MET, DEADLINES_MISSED)
#: A worker's finish time (emulated s), reported once: results take each job's spread of them
#: (``finish_spread_s``, a divisible load's workers should finish together).
FINISH_UNIT = "finish_s"

"""What workers report, as the results and monitoring read it (kept apart from apps/base.py so that
readers of a log need not import the kinds' config models).

A worker reports running totals by unit (``progress(unit, value)``): barriers, iterations, frames, bytes
... A deadline is reported as one of two such counters, one increment per deadline due. A *sample* unit
(:data:`SAMPLE_UNITS`) is the exception: each report is one observation (a frame's end-to-end latency), not a
running total; results average them and monitoring feeds them to a histogram."""

DEADLINES_MET = "deadlines_met"
DEADLINES_MISSED = "deadlines_missed"
DEADLINE_UNITS = (DEADLINES_MET, DEADLINES_MISSED)

#: Seconds from a frame's release to its leaving the last stage of a pipeline: one report per frame.
FRAME_LATENCY = "frame_latency_s"
SAMPLE_UNITS = (FRAME_LATENCY,)
#: A worker's finish time (emulated s), reported once: results take each job's spread of them
#: (``finish_spread_s``, a divisible load's workers should finish together).
FINISH_UNIT = "finish_s"

#: A local user's session (apps/localuser.py), running totals: the emulated time its cycles took, the same
#: work's time alone at its node's rate, and the bytes it sent to its sink. Its slowdown is their ratio.
SESSION_ELAPSED = "session_elapsed_s"
SESSION_IDEAL = "session_ideal_s"
SESSION_BYTES = "session_bytes"
#: Units that are times, not work done: no progress rate is computed from them.
SESSION_TIMES = (SESSION_ELAPSED, SESSION_IDEAL)

#: An MPI rank's compute, reported once at its end: its main thread's CPU seconds between its MPI calls,
#: what a measured model records as compute (apps/mpi_wrap.py, ComputeClock). Beside the model's, it says
#: how fast the host did the job's own work during the run (benchmarks/fidelity.py). A time: no rate.
COMPUTE_UNIT = "compute_s"
#: An MPI rank's CPU inside its MPI calls but for the CPU it spun waiting for a message (the mirror's relay,
#: MPI's own work on the data), reported once at its end with :data:`COMPUTE_UNIT`. Beside what the
#: simulator's replay charges the same calls (apps/mpi.py, ``mpi_cpu_s``) it says what the run's messages
#: cost the ranks (benchmarks/fidelity.py). A time: no rate.
MPI_CPU_UNIT = "mpi_cpu_s"
#: The CPU it spun waiting for messages inside its calls (tbcomm's spins), reported with the two above: the
#: wait a spinning scheme asks for, which the simulator models itself. A time: no rate.
SPIN_CPU_UNIT = "spin_cpu_s"
#: The units above that are CPU times reported once, not work done: no rate is made of them.
CPU_TIME_UNITS = (COMPUTE_UNIT, MPI_CPU_UNIT, SPIN_CPU_UNIT)

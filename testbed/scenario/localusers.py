"""Paper 004's local users (§3; docs/policies.md, "Local users"): the ``workload.local_users`` section of a
scenario and the sessions it draws.

Each entry gives one local user to each node of ``nodes``, with ``count`` sessions of ``profile`` one after
another: the first arrives at ``start_s``, each next one an exponential gap (mean ``mean_gap_s``; 0: at
once) after the previous one's length alone. A session's length is drawn from the paper's two-stage
hyper-exponential (means 10 and 60 minutes, weights 0.6 and 0.4) times ``scale`` (0.01 by default: 6 and 36
emulated seconds, so a run takes minutes, not hours). Arrivals are drawn from the lengths alone; a session
slowed down by the parallel jobs may still run when its successor arrives. ``overlap`` says what then:
``wait`` (the default) starts the successor when it ends, as one user working one session at a time (the
decision core holds it back: ``Job.after``); ``share`` starts it as drawn, and the two share the node as
two of the owner's programs would. With ``share`` and sessions back to back (no gap) every slowed session
overlaps the next, which is slowed in turn: the sessions pile up on the node without bound, and where they
declare memory they push it into paging, which slows them more (docs/measurements.md, "Paper 004, five
seeds").

The draws come from their own stream of the workload seed (entry i: ``(seed, LOCAL_STREAM, i)``), so adding
local users changes no other job of the workload.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from testbed.apps.localuser import MAX_SESSION_S
from testbed.schedulers.inputs import InputModel

if TYPE_CHECKING:  # numpy is imported where it is used: every scenario loads these models, few draw
    import numpy as np

#: The paper's session lengths: two-stage hyper-exponential means (s) and weights.
PAPER_MEANS_S = (600.0, 3600.0)
PAPER_WEIGHTS = (0.6, 0.4)
#: The default time scale of session lengths (and gaps are the scenario's own, unscaled).
SESSION_SCALE = 0.01
#: The longest mean session (scale x a stage's mean), emulated s: a session is at most the localuser
#: kind's MAX_SESSION_S, and an exponential draw 100 means long happens with probability e^-100.
MAX_MEAN_SESSION_S = MAX_SESSION_S / 100
#: The seed stream of local users' draws, apart from the generator's.
LOCAL_STREAM = 4004


class _Model(InputModel):
    """schedulers/inputs.py says what every input model refuses."""


class SessionLengths(_Model):
    """A two-stage (or k-stage) hyper-exponential: with probability ``weights[i]`` an exponential of mean
    ``means_s[i]``; every draw times ``scale``."""

    means_s: tuple[float, ...] = Field(PAPER_MEANS_S, min_length=1, description="each stage's mean, s")
    weights: tuple[float, ...] = Field(PAPER_WEIGHTS, min_length=1, description="each stage's probability")
    scale: float = Field(SESSION_SCALE, gt=0, description="multiplies every drawn length")

    @model_validator(mode="after")
    def _stages(self):
        if len(self.means_s) != len(self.weights):
            raise ValueError(
                f"means_s has {len(self.means_s)} stage(s) and weights {len(self.weights)}; give one weight "
                "per mean"
            )
        if any(m <= 0 for m in self.means_s):
            raise ValueError(f"means_s: {list(self.means_s)}: every mean must be above 0")
        if any(w <= 0 for w in self.weights):
            raise ValueError(f"weights: {list(self.weights)}: every weight must be above 0")
        longest = self.scale * max(self.means_s)  # inf where the product overflows: refused too
        if longest > MAX_MEAN_SESSION_S:
            raise ValueError(
                f"scale ({self.scale:g}) x the longest of means_s ({max(self.means_s):g}) is a mean session "
                f"of {longest:.3g} emulated s, above the {MAX_MEAN_SESSION_S:g} s allowed (a session lasts "
                f"at most {MAX_SESSION_S:g} s); lower scale or means_s"
            )
        return self

    def mean(self) -> float:
        """The expected length (scaled): sum of w_i m_i over the weights' sum, times scale."""
        import numpy as np

        return self.scale * float(np.dot(self._p(), self.means_s))

    def second_moment(self) -> float:
        """E[X^2] (scaled): sum of w_i 2 m_i^2, as an exponential's is twice its mean squared."""
        import numpy as np

        return self.scale**2 * float(np.dot(self._p(), 2.0 * np.square(self.means_s)))

    def _p(self) -> np.ndarray:
        import numpy as np

        # Scaled to the largest first: weights near the float maximum would sum to infinity.
        w = np.asarray(self.weights, dtype=float)
        w = w / w.max()
        return w / w.sum()

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` lengths, emulated seconds."""
        import numpy as np

        stage = rng.choice(len(self.means_s), size=n, p=self._p())
        return self.scale * rng.exponential(np.asarray(self.means_s)[stage])


class LocalUsers(_Model):
    """One local user on each of ``nodes``, each with ``count`` sessions of ``profile``."""

    nodes: list[int] = Field(..., min_length=1, description="the nodes that have a local user, one each")
    profile: Literal["cpu", "xwin"] = Field("cpu", description="cpu (65 % CPU, 35 MB) or xwin (20 %, 84 MB)")
    count: int = Field(1, ge=1, le=10_000, description="sessions per node, one after another")
    start_s: float = Field(0.0, ge=0, description="the first session's arrival, emulated s")
    mean_gap_s: float = Field(
        0.0, ge=0, description="mean exponential gap between a session's length and the next arrival; 0: none"
    )
    overlap: Literal["wait", "share"] = Field(
        "wait",
        description="a session that arrives while its user's previous one still runs (slowed down): wait = "
        "it starts when that one ends (one session at a time); share = at once, beside it",
    )
    session: SessionLengths = Field(default_factory=SessionLengths)
    job_class: str | None = Field(None, description="the sessions' class; null: cpu-user or xwin-user")

    @model_validator(mode="after")
    def _distinct(self):
        dup = sorted({n for n in self.nodes if self.nodes.count(n) > 1})
        if dup:
            raise ValueError(f"nodes: node(s) {dup} listed twice; a node has one local user per entry")
        if any(n < 0 for n in self.nodes):
            raise ValueError(f"nodes: {self.nodes}: node numbers start at 0")
        return self


def session_id(entry: int, node: int, k: int) -> str:
    """Session k of entry ``entry``'s user on ``node``."""
    return f"u{entry}.n{node}.s{k}"


def previous(job_id: str) -> str | None:
    """The id of the same user's session before ``job_id`` (a :func:`session_id`), None for the first."""
    user, _, k = job_id.rpartition(".s")
    return f"{user}.s{int(k) - 1}" if int(k) > 0 else None


def draw(users: list[LocalUsers], seed: int) -> list[tuple[str, int, float, float, LocalUsers]]:
    """Every session: (job id, node, arrival, length alone, its entry), in entry, node and session order."""
    if not users:  # (every workload is asked: numpy only where there are sessions to draw)
        return []
    import numpy as np

    out = []
    for i, u in enumerate(users):
        rng = np.random.default_rng((seed, LOCAL_STREAM, i))
        for node in u.nodes:
            lengths = u.session.draw(rng, u.count)
            gaps = rng.exponential(u.mean_gap_s, u.count) if u.mean_gap_s > 0 else np.zeros(u.count)
            t = u.start_s
            for k in range(u.count):
                out.append((session_id(i, node, k), node, round(float(t), 6), float(lengths[k]), u))
                t += float(lengths[k]) + float(gaps[k])
    return out


def ids(users: list[LocalUsers]) -> list[str]:
    """The sessions' job ids, without drawing (the scenario's duplicate-id check)."""
    return [session_id(i, n, k) for i, u in enumerate(users) for n in u.nodes for k in range(u.count)]

"""Token authentication for a run's own Ray (issue 19, "closed by default").

Ray 2.60's gRPC servers (GCS, raylets, workers) listen on every interface whatever address the node is
given (measured here: ``::`` for all of them with ``_node_ip_address="127.0.0.1"``), and anyone who
reaches them can run code. With token authentication every RPC must carry the cluster's token, so a run
that starts a Ray of its own gives it a random token of its own. Ray reads the mode and the token once,
when it is imported: :func:`enable_for_local_run` must run before ``import ray`` (the runner calls it
before it imports the Ray backend). A joined cluster (``cluster.ray_address``) keeps whatever the user's
environment says: its token is the cluster's. A run refuses to join without token authentication
(:func:`joined_cluster_problem`): a cluster that takes RPCs from anyone runs anyone's code.
"""

from __future__ import annotations

import logging
import os
import secrets
import sys

log = logging.getLogger("testbed")

MODE_ENV = "RAY_AUTH_MODE"
TOKEN_ENV = "RAY_AUTH_TOKEN"


def enable_for_local_run() -> bool:
    """Turns token authentication on for the Ray this process will start, with a fresh token, unless the
    environment already chose (then that choice stands). True when token authentication is on."""
    if os.environ.get(MODE_ENV):
        return os.environ[MODE_ENV] == "token"
    if "ray" in sys.modules:
        log.warning(
            "Ray was imported before the run could give it a token: this run's Ray takes RPCs from anyone "
            "who reaches its ports"
        )
        return False
    os.environ[MODE_ENV] = "token"
    os.environ[TOKEN_ENV] = secrets.token_hex(32)
    return True


def joined_cluster_problem() -> str | None:
    """Why this environment cannot join a Ray cluster (``cluster.ray_address``), or None. The driver must
    run with ``RAY_AUTH_MODE=token``, as every node of the cluster must: Ray's servers listen on every
    interface, and without token authentication anyone who reaches them runs code on every node."""
    mode = os.environ.get(MODE_ENV)
    if mode == "token":
        return None
    now = f"{MODE_ENV} is {mode!r}" if mode else f"{MODE_ENV} is not set"
    return (
        f"cluster.ray_address: a joined Ray cluster must use token authentication, but {now} here; start "
        f"every node of the cluster and this run with {MODE_ENV}=token and the cluster's token in "
        f'{TOKEN_ENV} (README, "On a Ray cluster of your own")'
    )

"""Token authentication for a run's own Ray (issue 19, "closed by default").

Ray 2.60's gRPC servers (GCS, raylets, workers) listen on every interface whatever address the node is
given (measured here: ``::`` for all of them with ``_node_ip_address="127.0.0.1"``), and anyone who
reaches them can run code. With token authentication every RPC must carry the cluster's token, so a run
that starts a Ray of its own gives it a random token of its own. Ray reads the mode and the token once,
when it is imported: :func:`enable_for_local_run` must run before ``import ray`` (the runner calls it
before it imports the Ray backend). A joined cluster (``cluster.ray_address``) keeps whatever the user's
environment says: its token is the cluster's.
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

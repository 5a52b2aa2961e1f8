"""Mechanism layer of a node agent (docs/architecture.md, "The emulated node", "One clock"): envelopes
(envelope.py, docker_envelope.py, the factory in envelopes.py), worker processes (process.py, the fork
server in forkserver.py), priority (priority.py) and CPU accounting (accounting.py). Import the module
you need; this package's init imports nothing, so no module here depends on it."""

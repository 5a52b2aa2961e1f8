"""Live monitoring (docs/architecture.md, "The event log is the truth", "Real parts"; see
monitoring/README.md): Prometheus metrics of node agents and the coordinator (:mod:`.metrics`), discovery
files and a local Prometheus (:mod:`.prometheus`), Grafana dashboards generated from Python
(:mod:`.dashboards`, pushed by :mod:`.grafana`), and a terminal view without Prometheus (:mod:`.watch`).
Metrics are for watching a run live; results come from the event log."""

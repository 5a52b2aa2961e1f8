"""Whether this host hands freed memory back to its hypervisor, which makes a real job pay for memory twice.

docs/measurements.md, "Memory the host takes back, and how long it waits". On a virtual machine whose
balloon device reports free pages (``VIRTIO_BALLOON_F_REPORTING``), the guest returns memory a process
freed to the hypervisor, and the next process to touch it faults in the hypervisor first: measured here,
a process filling 400 MB spent 0.94-1.15 s of system CPU when the pages had been reported and 0.04-0.13 s
when they had not. A job of a real run that follows an idle gap on its node then costs CPU that a
bare-metal node would not spend: NAS MG.A and FT.A alone read 0.12-0.16 further from the simulator with
freed pages reported at once than with them kept two minutes (benchmarks/fidelity.py).

Some kernels let root say how long a freed page waits before it is reported
(``/sys/module/page_reporting/parameters/min_free_ms``); with two minutes the same refill after 20 s idle
cost 0.06-0.13 s. The testbed does not change the host's memory policy itself: it says so, once per run,
with the setting to change (:func:`page_reporting_note`).
"""

from __future__ import annotations

import os

PARAMS = "/sys/module/page_reporting/parameters"
BALLOON = "/sys/bus/virtio/drivers/virtio_balloon"
#: Bit of a virtio balloon's feature string: the device takes reports of free pages.
VIRTIO_BALLOON_F_REPORTING = 5
#: How long a freed page should wait before it is reported: longer than a run's idle gaps on a node and
#: than the pause between a model's recordings (measured: 10 s let a 20 s gap be reported, 120 s did not).
RECOMMENDED_MIN_FREE_MS = 120_000


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def reporting_devices(balloon: str = BALLOON) -> list[str]:
    """The balloon devices bound here that take free-page reports (none on bare metal)."""
    try:
        names = sorted(n for n in os.listdir(balloon) if n.startswith("virtio"))
    except OSError:
        return []
    found = []
    for name in names:
        bits = _read(os.path.join(balloon, name, "features")) or ""
        if len(bits) > VIRTIO_BALLOON_F_REPORTING and bits[VIRTIO_BALLOON_F_REPORTING] == "1":
            found.append(name)
    return found


def page_reporting_note(params: str = PARAMS, balloon: str = BALLOON) -> str:
    """One sentence when freed memory goes back to the hypervisor soon enough to cost jobs, else ""."""
    devices = reporting_devices(balloon)
    if not devices:
        return ""
    cost = (
        "a job's first touch of memory then costs CPU a bare-metal node would not (up to 2.7 ms a MB, "
        "docs/measurements.md, 'Memory the host takes back')"
    )
    raw = _read(os.path.join(params, "min_free_ms"))
    if raw is None:
        return (
            "this virtual machine returns freed memory to its hypervisor "
            f"(free page reporting, {devices[0]}): {cost}; turn page reporting off in the VM's "
            "configuration for faithful timings"
        )
    try:
        wait_ms = int(raw)
    except ValueError:
        return f"{os.path.join(params, 'min_free_ms')} reads {raw!r}, not a number of ms: {cost}"
    if wait_ms >= RECOMMENDED_MIN_FREE_MS:
        return ""
    return (
        f"this virtual machine returns memory to its hypervisor {wait_ms} ms after it is freed "
        f"(page_reporting.min_free_ms): {cost}; as root, "
        f"echo {RECOMMENDED_MIN_FREE_MS} > {os.path.join(params, 'min_free_ms')}"
    )

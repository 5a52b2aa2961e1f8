"""Discrete-event simulator driving the same policy objects as the emulator (docs/architecture.md, "Policy and
mechanism")."""

from .engine import Simulation, simulate

__all__ = ["Simulation", "simulate"]

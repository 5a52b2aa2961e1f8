"""Discrete-event simulator driving the same policy objects as the emulator (DESIGN.md, decision 1)."""

from .engine import Simulation, simulate

__all__ = ["Simulation", "simulate"]

"""Proof on purpose: faults injected at named points, a deterministic simulation, and ``firesafe drill``."""

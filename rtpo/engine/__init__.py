"""The engine seam (base.py) and its CPU/one-GPU implementation (local.py)."""

from rtpo.engine.base import Completion, PolicyEngine, Row, SamplingParams, UpdateConfig, UpdateStats

__all__ = ["Completion", "PolicyEngine", "Row", "SamplingParams", "UpdateConfig", "UpdateStats"]

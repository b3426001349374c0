"""The engine seam (base.py: the Sampler / PolicyEngine / ExportingEngine contracts and their data)
and its CPU/one-GPU implementation (local.py)."""

from rtpo.engine.base import (Completion, ExportingEngine, PolicyEngine, Row, Sampler, SamplingParams, UpdateConfig,
                              UpdateStats)

__all__ = ["Completion", "ExportingEngine", "PolicyEngine", "Row", "Sampler", "SamplingParams", "UpdateConfig",
           "UpdateStats"]

"""RTPO reproducibility artifact: Reverse-Turn Policy Optimization for multi-turn tool-using agents.

Data flows one way: data -> rollout -> method (advantages, loss masks) -> engine.update -> eval -> report.
Methods never touch model internals; engines never know which method runs.
"""

__version__ = "0.1.0"

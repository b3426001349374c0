"""The pilot: what one paper-shape job of each cell costs, measured before the DAG is submitted.

`snakemake --profile slurm pilot` (docs/cluster.md: the first cluster command after `download`) runs,
for each piloted (method, task) cell, the first `pilot.steps` steps of its seed-0 run into that run's
own directory (RTPO_STOP_AFTER_STEP: the trainer stops there with a checkpoint, as at a deadline), and
for each piloted task the first shard of vanilla's seed-0 evaluation (RTPO_EVAL_MAX_SHARDS). The full
run and the full evaluation resume from them, so no step is spent twice. Each pilot job writes what it
measured to results/pilot/<task>/<method>.json (`collect_train`) or results/pilot/<task>/eval.json
(`collect_eval`); rule `pilot` gathers them into results/pilot/pilot.json (`gather`), which
`rtpo check-config` reads (rtpo.verl_ext.sizing).
"""

from __future__ import annotations

from typing import Any


def device_memory(*_: Any) -> dict[str, Any]:
    """This process's peak memory: torch's allocated and reserved peaks on its accelerator (the actor's
    own, not the colocated vLLM server's) and what the device has in use now, all in GiB; on the CPU
    harness the process's peak resident set. Runs in every actor worker (the trainer's stop)."""
    import os
    import resource

    out: dict[str, Any] = {"pid": os.getpid()}
    try:
        import torch

        if torch.cuda.is_available():
            free, total = torch.cuda.mem_get_info()
            return {**out, "device": torch.cuda.get_device_name(), "kind": "cuda",
                    "max_allocated_gib": round(torch.cuda.max_memory_allocated() / 2 ** 30, 2),
                    "max_reserved_gib": round(torch.cuda.max_memory_reserved() / 2 ** 30, 2),
                    "device_used_gib": round((total - free) / 2 ** 30, 2), "device_total_gib": round(total / 2 ** 30, 2)}
    except Exception:  # noqa: BLE001 - no torch or no CUDA: the CPU's figure below
        pass
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {**out, "device": "cpu", "kind": "cpu", "max_rss_gib": round(rss_kib / 2 ** 20, 3)}

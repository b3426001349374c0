"""Tree-GRPO: tree search rollouts with intra- and inter-tree group advantages (Ji et al. 2025,
"Tree Search for LLM Agent Reinforcement Learning"), as its public code does it
(github.com/AMAP-ML/Tree-GRPO: search_r1/llm_agent/generation_ts.py, tree_node.py,
verl/trainer/ppo/ray_trainer_ts.py, adv_estimator=tree).

Tree structure. A node is one full turn (the action and its tool result); the root is the prompt.
Node depth d <-> boundary S_d: continuing from a depth-d node means restoring S_d of a trajectory
that passes through it and sampling turn d onwards. A node is a leaf when its turn ended the episode.

One training step on a batch of prompts:

  sync; M trees per prompt: one complete chain each (`trees`)
  repeat L times (`rounds`):
      for each tree, draw N nodes (`expansions`) uniformly *with replacement* among the root and the
      tree's non-leaf nodes (TreeNode.get_expand_node: random.choices over [root] + non-leaf
      descendants, each distinct node once), all draws of a round made before any expansion runs;
      from each drawn node continue one new chain to termination (Start(source, k=depth))
  every trajectory is one leaf: M * (1 + L * N) trajectories per prompt (the public scripts set
  ts_k = 1 + L * N, so every leaf is kept)
  A = A_inter + A_intra with A_inter = GRPO over the prompt's leaves, A_intra = GRPO over the tree's
      leaves, each (r - mean) / (std + 1e-6)  (adv_estimator=tree: compute_grpo_outcome_advantage
      called with index=uid and with index=tree_uid, summed); one scalar per trajectory
  flattened rows as GRPO (rtpo.methods.base.flatten_row).

Shared prefixes. In the public code every leaf's row is the whole root-to-leaf response (the node
stores the cumulative response), so a prefix shared by several leaves is trained in each of their
rows with each leaf's advantage: the "implicit step-level preference" of the paper. That is the
default here (shared_prefix = "every_leaf"); "once" masks a branch's copied turns instead, so each
turn is trained once, through the trajectory that generated it.

Entropy bonus 0.001 and KL 0.001 are the public trainer's settings; they belong to the run config
(UpdateConfig.entropy_coef / kl_coef), not to this file.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from rtpo.envs.base import Task
from rtpo.instrument import StepLog
from rtpo.methods.advantages import tree_grpo_advantages
from rtpo.methods.base import Method, cfg_int, flatten_row
from rtpo.rollout import Start, Trajectory

SHARED_PREFIX_MODES = ("every_leaf", "once")


def expandable_nodes(tree: list[Trajectory]) -> list[tuple[Trajectory, int]]:
    """The candidates of one expansion draw: the root and every non-leaf node, each once.

    A node is named by (a trajectory that generated it, its depth d): the trajectory's turn d-1,
    which starts at boundary S_{d-1}. Non-leaf means the episode went on after it, i.e. the
    trajectory has a turn d. Copied turns (k < start_k) are nodes of the source trajectory and are
    listed there, not again. Returns [(tree[0], 0)] + [(t, d) for t, d with start_k < d < len(t.turns)].
    """
    if not tree:
        raise ValueError("a tree needs at least its first chain")
    nodes = [(tree[0], 0)]
    for t in tree:
        nodes.extend((t, d) for d in range(t.start_k + 1, len(t.turns)))
    return nodes


class TreeGRPO(Method):
    """cfg keys: trees (M, 4 in the paper), expansions (N, 3), rounds (L, 1), shared_prefix
    ("every_leaf" as the public code, or "once"), seed (node draws).

    After a step, `last_groups[i]` holds the trajectories of prompt i (for inspection and tests).
    """

    name = "tree_grpo"

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.M = cfg_int(self.cfg, "trees", self.name)
        self.N = cfg_int(self.cfg, "expansions", self.name)
        self.L = cfg_int(self.cfg, "rounds", self.name, minimum=0)
        self.shared_prefix = str(self.cfg["shared_prefix"])
        if self.shared_prefix not in SHARED_PREFIX_MODES:
            raise ValueError(f"tree_grpo.shared_prefix must be one of {SHARED_PREFIX_MODES}, got {self.shared_prefix!r}")
        self.seed = int(self.cfg["seed"])

    @property
    def per_prompt(self) -> int:
        """Trajectories (leaves) per prompt: M * (1 + L * N)."""
        return self.M * (1 + self.L * self.N)

    def step(self, tasks: list[Task], step: int) -> dict[str, Any]:
        log = StepLog()
        rng = random.Random(f"tree_grpo/{self.seed}/{step}")  # resumable: depends on the step only
        self.sync(log)
        roots = self.chains(tasks, self.M, "chain", log)  # tree (i, m) = roots[i * M + m]
        forest: list[list[Trajectory]] = [[t] for t in roots]
        with log.phase("rollout"):
            for _ in range(self.L):
                starts, owner = [], []
                for ti, tree in enumerate(forest):
                    for src, d in rng.choices(expandable_nodes(tree), k=self.N):
                        starts.append(Start(src.task, source=src, k=d, first_kind="tree", rest_kind="tree"))
                        owner.append(ti)
                new = self.roller.run(starts)
                log.add_trajectories(new)
                for ti, t in zip(owner, new):
                    forest[ti].append(t)

        leaves = [t for tree in forest for t in tree]
        tree_keys = [ti for ti, tree in enumerate(forest) for _ in tree]
        prompt_keys = [ti // self.M for ti in tree_keys]
        self.last_groups = [[t for ti in range(i * self.M, (i + 1) * self.M) for t in forest[ti]]
                            for i in range(len(tasks))]
        with log.phase("update"):
            adv = tree_grpo_advantages(torch.tensor([t.reward for t in leaves], dtype=torch.float), tree_keys, prompt_keys)
            advs = [float(a) for a in adv]
            # a prompt's M trees are one group (verl's ppo_mini_batch_size keeps a prompt's responses together)
            rows = [flatten_row(t, a, self.engine.max_context, self.shared_prefix == "every_leaf",
                                group=f"{t.task.id}/{pk}")
                    for t, a, pk in zip(leaves, advs, prompt_keys)]
            stats = self.engine.update(rows, self.update_cfg, self.temperature)
            log.add_update(stats, advs)
        return log.record(roots, len(tasks))

"""Planning a DP-SGD run before running it (``dpcalc plan``): the noise multiplier of every
(batch size, epochs) cell, the inverse solvers at a fixed σ, and the utility proxies that
rank the cells. See :mod:`dpcalc.planning.plan`."""

from dpcalc.planning.plan import (
    Plan,
    PlanCell,
    max_batch_size_for_sigma,
    max_steps_for_sigma,
    pareto_front,
    plan_grid,
    total_amount_of_noise,
)

__all__ = ["Plan", "PlanCell", "plan_grid", "max_steps_for_sigma", "max_batch_size_for_sigma",
           "pareto_front", "total_amount_of_noise"]

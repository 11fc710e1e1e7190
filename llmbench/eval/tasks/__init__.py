"""The evaluation tasks, by name (see `TASKS` in llmbench.eval.registry)."""

"""Sweeps: everything a multirun does beyond running its jobs one by one.

- ``callback``: the Hydra callback ``SweepCallback`` (the MLflow parent run, the sweep's context file
  ``gpdlm_sweep.json``, every job's outcome, the summary and exit code) and what the sweepers ask of
  a job (``job_objective``, ``jobs_to_compose`` for ``hydra_plugins/gpdlm_sweeper``);
- ``plan``: what a multirun will do before it does it (jobs, protocol, sharing, batching, ``--dry-run``'s
  estimate); ``compose``: composing every job's config, also from inside a running Hydra app;
- ``beta_free``: a beta sweep of a model that ignores ``objective.beta`` runs it once;
- ``batched`` (``sweep.batched=true``): the jobs of one shape trained as one batched model, each
  job taking its own member; ``batched_model``: that batched model and its trainer.

The layer sits above ``build`` and ``prepare`` (it prepares each job as its run would) and below
``run``, which asks it for a job's batched member. Nothing is imported here: the launching process
of a multirun imports ``callback`` without torch.
"""

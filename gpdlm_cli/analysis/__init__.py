"""The analysis of tracked runs: what ``gpdlm compare``, ``select``, ``report`` and ``runs`` compute.

* ``records``: a run reduced to what the analysis needs (``RunRecord``), grouping keys, values;
* ``store``: reading the FINISHED training runs back from MLflow, the commands' own runs;
* ``tables``: CSV, Markdown and terminal tables;
* ``declarations``: what a run's model family declares (selection metric, reference beta), from
  the run's tags;
* ``selection``: choosing beta on the validation set per group (``gpdlm select``);
* ``summary``, ``figures``: mean ± standard error per group and the DLM paper's figure types
  (``gpdlm compare``);

and reading experiments back as the papers present them (``gpdlm report``):

* ``claims``: the papers' results tables and claims as data (``gpdlm_cli/claims/<paper>.yaml``):
  the printed numbers, how a table cell maps onto runs (params and tags), and each claim's
  comparison, paired test and significance level;
* ``stats``: mean +- standard error, paired tests over shared seeds/splits (scipy.stats), ranks;
* ``report``: a paper's tables and verdicts from an experiment's runs, as Markdown, LaTeX or a
  self-contained HTML page with the paper's figure types.

Nothing here imports torch (a test checks it): the package reads MLflow runs and needs only
numpy, scipy, PyYAML, rich and matplotlib. The one exception is a fallback at run time: a run made
before the declaration tags existed is looked up in its model family (``declarations``).
"""

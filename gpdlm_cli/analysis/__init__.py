"""Reading experiments back as the papers present them (``gpdlm report``).

* ``claims``: the papers' results tables and claims as data (``gpdlm_cli/claims/<paper>.yaml``):
  the printed numbers, how a table cell maps onto runs (params and tags), and each claim's
  comparison, paired test and significance level;
* ``stats``: mean +- standard error, paired tests over shared seeds/splits (scipy.stats), ranks;
* ``report``: a paper's tables and verdicts from an experiment's runs, as Markdown, LaTeX or a
  self-contained HTML page with the paper's figure types.

Nothing here imports torch: the package reads MLflow runs (through ``gpdlm_cli.commands.runs``)
and needs only numpy, scipy, PyYAML and matplotlib.
"""

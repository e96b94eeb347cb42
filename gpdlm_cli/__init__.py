"""gpdlm: a command-line experiment runner for scalable Gaussian-process training.

Subpackages, each with one job:
``data`` (datasets, splits), ``likelihoods`` (p(y|f) and its closed forms), ``estimators``
(log E_q[p(y|f)] and E_q[log p(y|f)]), ``models`` (sparse variational, collapsed and exact GPs),
``objectives`` (ELBO, DLM, square-loss DLM, collapsed bounds), ``training`` (the loop and stopping
rule), ``metrics`` (NLL, RMSE, error, MRE), ``tracking`` (MLflow), ``commands`` (what the CLI runs),
and ``build`` (the one place that turns a composed config into objects).

Glossary used across code and docstrings: N training points, M inducing points, D input dimension,
X inputs, Z inducing inputs, y targets, mu/var the marginal mean and variance of q(f_i), m/V the
mean and covariance of q(u), beta the KL weight, L the number of Monte Carlo samples.
"""

__version__ = "0.1.0"

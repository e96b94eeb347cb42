"""Models whose training ignores ``objective.beta`` (the collapsed and exact GPs, PIC, the recurrent
GPs, the RKHS methods, SSGP): a sweep over beta would train each of them once per beta value to the
same result. ``collapse_beta_free`` keeps one job of each -- what gpdlm's sweeper launches and the
sweep plan counts. Pure strings, no torch: the launching process of a multirun imports this.
The families declare the same with ``USES_BETA`` (``methods.base.DECLARATIONS``; a test keeps the
two in step)."""

from __future__ import annotations

BETA_FREE_MODELS = ("sgpr", "fitc", "exact", "pic", "gp_lstm", "gp_gru", "gp_rnn", "gp_narx", "lstm", "gru", "rnn",
                    "narx", "scgd", "minimax", "bsgd", "ssgp", "minimax_paper", "scgd_paper")
BETA_KEY = "objective.beta"


def _key(line: str) -> str:
    return line.split("=", 1)[0].lstrip("+~")


def collapse_beta_free(jobs: list[list[str]]) -> tuple[list[list[str]], dict[str, int]]:
    """(the jobs without the repeats of a beta-free model at another beta, {model: jobs dropped}).
    A job is a list of ``key=value`` overrides; a job whose ``model=`` names a beta-free model is a
    repeat of an earlier job when the two differ only in ``objective.beta``. Order is kept."""
    seen, kept, dropped = set(), [], {}
    for job in jobs:
        model = next((ln.split("=", 1)[1] for ln in job if _key(ln) == "model"), None)
        if model not in BETA_FREE_MODELS or not any(_key(ln) == BETA_KEY for ln in job):
            kept.append(job)
            continue
        rest = tuple(ln for ln in job if _key(ln) != BETA_KEY)
        if rest in seen:
            dropped[model] = dropped.get(model, 0) + 1
            continue
        seen.add(rest)
        kept.append(job)
    return kept, dropped


def collapse_note(dropped: dict[str, int]) -> str:
    """'model=fitc ignores objective.beta: 2 repeated jobs not launched (one run per beta-free configuration)'."""
    models = ", ".join(f"model={m}" for m in dropped)
    n = sum(dropped.values())
    verb = "ignores" if len(dropped) == 1 else "ignore"
    return (f"{models} {verb} objective.beta: {n} job(s) that would repeat a run at another beta not launched "
            f"(one run per configuration; its objective.beta param is the first swept value)")


__all__ = ["BETA_FREE_MODELS", "collapse_beta_free", "collapse_note"]

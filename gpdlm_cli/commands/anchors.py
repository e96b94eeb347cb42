"""``python -m gpdlm_cli.commands.anchors <overrides>``: the anchors of ``metrics.anchors`` (constant,
2-NN, same-segment neighbours) on a configured split, in target units (issue 40)."""

from __future__ import annotations

import sys

from ..metrics.anchors import anchor_rmse


def main(argv: list[str] | None = None) -> int:
    """Print the anchors of the configured split (target units): the first four AIMPEAK inputs are the
    segment, the fifth the slot; other datasets get ``constant`` and ``knn2`` only."""
    from ..build import load_data
    from ..sweep.compose import compose_jobs

    argv = list(sys.argv[1:] if argv is None else argv)
    (cfg,) = compose_jobs([argv + ["tracking.enabled=false"]])
    table, splits, _ = load_data(cfg)
    tr, te = splits.indices["train"], splits.indices["test"]
    aimpeak = cfg.dataset.name == "aimpeak"
    res = anchor_rmse(
        table.X[tr],
        table.y[tr],
        table.X[te],
        table.y[te],
        group_cols=(0, 1, 2, 3) if aimpeak else (),
        time_col=4 if aimpeak else None,
    )
    print(" ".join(f"{k} {v:.4f}" for k, v in res.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

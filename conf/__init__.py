"""Hydra configs of gpdlm (a package so Hydra can find them in an installed gpdlm)."""

"""The run: what a training run leaves behind and how it comes back (saved models)."""

"""gpdlm's Hydra sweeper plugin (``hydra/sweeper=gpdlm``, gpdlm's default): see ``gpdlm_sweeper``."""

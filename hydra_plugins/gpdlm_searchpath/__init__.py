"""gpdlm's Hydra search-path plugin (``GPDLM_CONFIG_PATH``): see ``gpdlm_searchpath``."""

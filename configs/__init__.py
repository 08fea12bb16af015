"""Packaged YAML presets (``default``, ``areal``, ...); read them with ``adaptive_eval.load_config(name)``."""

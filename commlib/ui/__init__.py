"""What the notebooks draw: plots.py (matplotlib figures), widgets.py (ipywidgets), animation.py (step-through
players that need no kernel), replay.py (a Flight Recorder dump, rank by rank). Thin layers over the pure
functions; nothing else in commlib imports them, but for language.py (what a learner reads, in the notebook's
language) and wrap.py (its lines wrapped by display width), which the checkers' verdicts, the cluster's and
diagnose's and whatif's text reports and commlib.set_language use: they import nothing of commlib but the
ground floor's display width (columns.width), so every floor may speak (tests/test_layout.py)."""

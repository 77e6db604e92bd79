"""What the notebooks draw: plots.py (matplotlib figures), widgets.py (ipywidgets), animation.py (step-through
players that need no kernel), replay.py (a Flight Recorder dump, rank by rank). Thin layers over the pure
functions; nothing else in commlib imports them, but for language.py (what a learner reads, in the notebook's
language), which the checkers' verdicts, the text tables (columns.py), diagnose's and whatif's text reports and
commlib.set_language use: it imports nothing of commlib."""

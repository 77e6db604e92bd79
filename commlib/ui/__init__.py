"""What the notebooks draw: plots.py (matplotlib figures), widgets.py (ipywidgets), animation.py (step-through
players that need no kernel), replay.py (a Flight Recorder dump, rank by rank). Thin layers over the pure
functions; nothing else in commlib imports them."""

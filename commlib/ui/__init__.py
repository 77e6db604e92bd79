"""What the notebooks draw: plots.py (matplotlib figures), widgets.py (ipywidgets), animation.py (step-through
players that need no kernel). Thin layers over the pure functions; nothing else in commlib imports them."""

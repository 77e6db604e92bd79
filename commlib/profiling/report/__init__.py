"""The report stage: what the analyses and the replay found, as text and strict JSON; it computes nothing.
diagnosis.py formats diagnose()'s report, whatif.py the what-if's."""

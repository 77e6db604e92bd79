"""The report stage: what the analyses and the replay found, as text and strict JSON; it computes nothing.
diagnosis.py formats diagnose()'s report, whatif.py the what-if's; words.py says the analyses' records (flags, notes,
the hardware's why). The text speaks the notebook's language (commlib.ui.language, report.po); the JSON is English."""

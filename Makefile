# Shortcuts for those who have make; course.py does the work (and needs only Python).
.PHONY: lab test book bench
lab:
	python3 course.py lab
test:
	python3 course.py test
book:
	python3 course.py book
bench:
	python3 -c "import course; course.ensure_env()"
	.venv/bin/python benchmarks/cluster_start_dispatch.py

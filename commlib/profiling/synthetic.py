"""The import path benchmarks/diagnose_scale.py and whatif_scale.py use; the module is profiling/jobs/synthetic.py."""

from commlib.profiling.jobs.synthetic import write_job  # noqa: F401

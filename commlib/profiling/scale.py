"""The import path chapter 9 uses; the module is profiling/jobs/scale.py."""

from commlib.profiling.jobs.scale import live_point, load_scale, summary  # noqa: F401

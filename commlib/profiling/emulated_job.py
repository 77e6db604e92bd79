"""The import path chapter 9 and benchmarks/whatif_accuracy.py use; the module is profiling/jobs/emulated_job.py."""

from commlib.profiling.jobs.emulated_job import (ACCURACY_KERNEL, JOBS, RECORDED, STEPS, fit_nic,  # noqa: F401
                                                 job_step, load_accuracy, median_error, predict_and_run, train)

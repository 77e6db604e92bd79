"""The read stage: the only code in profiling/ that opens a trace. files.py reads bounded, checked blocks;
reader.py streams a torch.profiler trace into typed Records; parallel.py reads many in worker processes;
fields, kernels, annotations, streams and steps name what one event or one run of events means."""

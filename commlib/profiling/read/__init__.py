"""The read stage: the only code in profiling/ that opens a trace. files.py reads bounded, checked blocks;
reader.py streams a torch.profiler trace, decoded into typed Events (events.py), into a rank's Records
(records.py); parallel.py reads many in worker processes; fields, kernels, annotations, streams and steps name
what one event or one run of events means."""

"""The live side, apart from the stages that read a trace: live.py profiles a run of this course's ranks under
torch.profiler, recording.py records a trace file from ranks, synthetic.py writes traces of any size,
emulated_job.py runs the jobs whose traces the what-if predicts, scale.py holds how diagnose scales."""

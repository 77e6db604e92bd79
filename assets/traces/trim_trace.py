"""Trim a torch.profiler trace to what `python -m commlib diagnose` and the profiling chapter read.

    python assets/traces/trim_trace.py SOURCE.json.gz OUT.json.gz

Kept: the header (deviceProperties, distributedInfo, ...), the metadata events, every GPU event (kernels,
memcpy, memset, GPU annotations), the CPU ops that carry collective arguments (record_param_comms,
nccl:*), the CUDA runtime calls that launched NCCL kernels (to correlate kernels with their CPU op) and
the ProfilerStep annotations. Dropped: every other CPU op and runtime call, and the flow events (ac2g,
fwdbwd). Kept events are written unchanged; the file is gzipped without a timestamp (reproducible bytes).
"""

import gzip
import json
import sys


def trim(data: dict) -> dict:
    events = data["traceEvents"]
    nccl = {e["args"].get("correlation") for e in events
            if e.get("cat") == "kernel" and e.get("name", "").lower().startswith("nccl")}

    def keep(e):
        cat, name = e.get("cat"), e.get("name", "")
        if e.get("ph") == "M" or cat in ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "Trace"):
            return True
        if cat == "cuda_runtime":
            return e.get("args", {}).get("correlation") in nccl
        if cat in ("cpu_op", "user_annotation"):
            return name == "record_param_comms" or name.startswith(("nccl:", "ProfilerStep"))
        return False

    return {**data, "traceEvents": [e for e in events if keep(e)]}


if __name__ == "__main__":
    src, out = sys.argv[1], sys.argv[2]
    with gzip.open(src, "rt") as f:
        data = json.load(f)
    trimmed = trim(data)
    with open(out, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as f:
        f.write(json.dumps(trimmed, separators=(",", ":")).encode())
    print(f"{src}: {len(data['traceEvents'])} events -> {out}: {len(trimmed['traceEvents'])}")

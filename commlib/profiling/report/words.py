"""Every sentence the analyses' records stand for: a call's flag (model.cause), a note (checks.doubts, and the
what-if's own), the hardware's why (model.infer_hardware). The analyses return numbers and short codes; the
text and the JSON say them here, in one wording (the JSON's, never translated, is the English). The text
reports put each sentence through language.tr: in the zh_CN edition the catalog's templates
(locales/zh_CN/LC_MESSAGES/commlib/report.po) say it in Chinese, and wrap() breaks it by display columns."""

from __future__ import annotations

import textwrap

from commlib.columns import width as columns
from commlib.profiling.read.reader import printable
from commlib.ui.language import language
from commlib.ui.wrap import wrap as by_columns


def wrap(text: str, width: int, first: str = "", rest: str = "") -> list[str]:
    """text in lines of at most width columns, the first line opened by `first`, the others by `rest`: English
    exactly as textwrap.wrap; another language by display columns (a Chinese character takes two), between
    words, after a Chinese mark or between Chinese characters (commlib.ui.wrap)."""
    if language() is None:
        return textwrap.wrap(text, width, initial_indent=first, subsequent_indent=rest)
    whole = first + text
    head = by_columns(whole, width)
    if len(head) < 2 or not rest:
        return head
    tail = whole[len(head[0]):].lstrip()   # by_columns keeps the first line's characters as they are
    return head[:1] + [rest + line for line in by_columns(tail, width - columns(rest))]


def indent(prefix: str) -> str:
    """The spaces under a prefix ("note: " -> six; "注：" -> four: its display columns)."""
    return " " * columns(prefix)


def flag_text(f: dict) -> str:
    """A call's flag (model.cause's record) in words."""
    kind = f["kind"]
    if kind == "waited":
        text = f"waited {f['wait_us']:.0f} us for rank {f['rank']} to arrive: not the network"
    elif kind == "small":
        text = "message too small: latency-bound, every call pays it again; fuse calls (bigger buckets)"
    elif kind == "slower":
        text = (f"{f['times']:.1f}x its fastest identical call ({f['fastest_us']:.0f} us): waiting or contention, "
                "not the link")
    elif kind == "ll":
        text = ("LL (small-message protocol) on a large message: half the bandwidth; check "
                + ("NCCL_SYM_KERNEL" if f["symmetric"] else "NCCL_PROTO"))
    elif kind == "beside":
        text = ("other CPU ops ran beside it: they share the cores and memory bandwidth with the backend's threads"
                if f["cpu"] else "compute kernels ran beside it: they share the GPU's SMs and memory with NCCL")
    elif kind == "busbw":
        text = (f"busbw far below the link's: check the link, {'the backend' if f['cpu'] else 'NCCL'}'s transport, "
                "other traffic")
    else:
        raise ValueError(f"flag kind must be one of model.cause's kinds, got {kind!r}")
    return text + ("; or a late peer (not in these traces)" if f.get("or_missing_peer") else "")


def hardware_text(why: dict) -> str:
    """Why the calls are priced on a preset, or on none (model.pick_hardware's or infer_hardware's record)."""
    kind = why["kind"]
    if kind == "given":
        return f"{why['preset']} (given)" + ("; the traces are a CPU job's: the model prices the calls on that "
                                              "hardware" if why["cpu_job"] else "")
    if kind == "network":
        return (f"the emulated network the traces ran on, {why['network']}: calls priced on its links as the "
                "what-if fits them")
    if kind == "no_gpu_named":
        text = "no GPU named in the traces (no deviceProperties): no preset inferred"
    elif kind == "cpu":
        text = "no GPU in the traces (CPU/Gloo): no preset inferred"
    elif kind == "sxm":
        text = f"{why['gpu']} in the trace: an SXM board, priced as {why['preset']} (its NVLink generation)"
    elif kind == "no_preset":
        text = f"{why['gpu']} in the trace: no preset matches its links"
    else:
        raise ValueError(f"hardware kind must be one of model.infer_hardware's kinds, got {kind!r}")
    return text + (": --hardware PRESET prices the calls" if why.get("unpriced") else "")


def _call(c: dict) -> str:
    return f"{c['op']} {c['bytes'] if c['bytes'] is not None else '?'} B"


def flat_ring_text(n: dict) -> list[str]:
    """The what-if's note on Gloo's flat rings in a scenario with more (or fewer) NICs per node, as its sentences
    (each translated on its own): what the prediction leaves out, then what the kernel network measured."""
    names, m, k = "; ".join(printable(s) for s in n["scenarios"]), n["measured_nics"], n["nics"]
    said = [f"{names}: Gloo's calls are priced as one flat ring, crossing each node once each way, so {k} NICs per "
            f"node instead of {m} do not shorten them; Gloo's own schedules use every NIC: the real step can be "
            "shorter." if k > m else
            f"{names}: Gloo's calls are priced as one flat ring, crossing each node once each way, so {k} NIC(s) "
            f"per node instead of {m} do not lengthen them; Gloo's own schedules use every NIC: the real step can "
            "be longer."]
    seen = n.get("kernel_network")
    if seen:
        (few, many), (a, b), (p, q) = seen["nics"], seen["measured_s"], seen["predicted_s"]
        said.append(f"On the course's kernel network, {seen['job']} on nodes of {seen['gpus_per_node']} GPUs took "
                    f"{a:.2f} s a step with {few} NIC per node, {b:.2f} s with {many} (predicted {p:.2f} s, "
                    f"{q:.2f} s).")
    return said


def note_text(n) -> str:
    """A note in words: a record of checks.doubts (or checks.assumed_dtypes, or the what-if's measured_on and
    flat_ring_nics), or a
    sentence already (a reader's or the replay's own note)."""
    if isinstance(n, str):
        return n
    kind = n["kind"]
    if kind == "reader":
        return n["text"]
    if kind == "measured_on":
        return f"measured on: {hardware_text(n['why'])}"
    if kind == "ranks_missing":
        return f"{n['traces']} of {n['world']} ranks' traces: stragglers are found only among these"
    if kind == "late_start":
        return (f"rank {n['rank']}'s trace starts {n['us'] / 1e3:.2f} ms after its peers in group {n['group']} began "
                "waiting for it: a late start of tracing, not straggling")
    if kind == "unknown_group":
        return (f"the process group of {n['calls']} call(s) is not known (the trace names none, or Gloo's worker "
                "threads did not settle it): they are matched with no peer and charged no wait")
    if kind == "unmatched" and n["case"] == "differs":
        shown = "; ".join(f"rank {c['rank']}: {_call(c)}" for c in n["seen"])
        return (f"group {printable(n['group'])}: call {n['call']} differs across ranks ({shown}): every rank of a "
                "group calls the same collectives with the same sizes, so either the job hung there (NCCL waits "
                "forever on such calls) or the traces do not start at the same call")
    if kind == "unmatched":
        behind = ", ".join(f"rank {b['rank']} ({b['calls']})" for b in n["behind"])
        return (f"group {printable(n['group'])}: calls {n['short']} to {n['most'] - 1} (from {_call(n['first'])}) "
                f"have no match on {behind}: {n['most']} calls on rank {n['longest']}, fewer there. A rank that "
                "stopped calling (a hung or crashed job) or a profiler window that ended at another call")
    if kind == "too_fast":
        return (f"{n['calls']} call(s) move bytes faster than any link ({n['limit_GBps']:g} GB/s), e.g. rank "
                f"{n['rank']} {printable(n['op'])} of {n['bytes']} B in {n['duration_us']:.1f} us "
                f"({n['busbw_GBps']:.3g} GB/s): its size field ('In msg nelems' or 'Input Dims') or its 'dur' is "
                "not what the job did")
    if kind == "flat_ring_nics":
        return " ".join(flat_ring_text(n))
    if kind == "dtype_assumed":
        return "some dtypes are not in the trace (Gloo, tensor lists): their bytes assume 4-byte elements"
    raise ValueError(f"note kind must be one of checks.doubts' kinds, got {kind!r}")

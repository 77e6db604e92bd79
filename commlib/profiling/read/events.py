"""One torch.profiler (Chrome-trace) event, typed for msgspec's decoder: the fields some analysis reads, every
other one skipped by the decoder, never built (reader.py decodes into these, records.py sorts them).

    decode_shapes(e)    # a collective's record_shapes lists, left undecoded (Raw) by the decoder, decoded
"""

from __future__ import annotations

from typing import Any

import msgspec


class Args(msgspec.Struct, gc=False):
    """The `args` fields some analysis reads (kernels, launches, collective ops); every other one is skipped.
    Collective arguments (torch >= 2.2 writes them on the NCCL kernel and on record_param_comms) are kept as
    written (Any): a later check, not the decoder, decides what an odd value means."""
    # ids are compared, never computed with: any JSON scalar is kept (ROCm traces write the stream as a string)
    external_id: int | str | None = msgspec.field(default=None, name="External id")
    correlation: int | str | None = None
    stream: int | str | None = None
    device: int | str | None = None
    # a "Stream Wait Event" (cuda_sync, with enable_cuda_sync_events): the stream it waits on and the event's record
    wait_on_stream: int | str | None = None
    record_corr: int | str | None = msgspec.field(default=None, name="wait_on_cuda_event_record_corr_id")
    collective: Any = msgspec.field(default=None, name="Collective name")
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    group_size: Any = msgspec.field(default=None, name="Group size")
    dtype: Any = None
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")
    pg_desc: Any = msgspec.field(default=None, name="Process Group Description")
    pg_ranks: Any = msgspec.field(default=None, name="Process Group Ranks")
    # record_shapes' lists: left undecoded (Raw) on the many ops that are not collectives, decoded on the rest
    input_dims: Any = msgspec.field(default=None, name="Input Dims")
    input_type: Any = msgspec.field(default=None, name="Input type")


class KernelArgs(msgspec.Struct, gc=False):
    """A compute kernel's args: only its stream and correlation are read (streams.py); every other field is
    None. A third of an Args' memory, on the commonest event kept (200k of a 1M-event trace); a Struct, so that
    making one is a C call."""
    stream: Any
    correlation: Any
    external_id = device = wait_on_stream = record_corr = collective = in_nelems = out_nelems = group_size = None
    dtype = pg_name = pg_desc = pg_ranks = input_dims = input_type = None


class _LazyArgs(Args):
    input_dims: msgspec.Raw = msgspec.field(default=None, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=None, name="Input type")


class Event(msgspec.Struct, gc=False):
    """One Chrome-trace event: complete events (ph "X") are the ones read; ts and dur in microseconds. gc=False:
    no cycles through it, so the garbage collector need not track a million of them."""
    ph: str | None = None
    cat: str | None = None
    name: str = ""
    ts: float | None = None
    dur: float = 0.0
    pid: int | str | None = None
    tid: int | str | None = None
    args: _LazyArgs | None = None
    # its place in traceEvents (set by Records.add)
    index: int = msgspec.field(default=-1, name="__commlib_event_index__")


_ANY = msgspec.json.Decoder()


def decode_shapes(e: Event) -> None:
    """e's Input Dims and Input type, left undecoded by the decoder (msgspec.Raw), decoded: a collective's."""
    a = e.args
    if a is not None:
        a.input_dims = None if a.input_dims is None else _ANY.decode(a.input_dims)
        a.input_type = None if a.input_type is None else _ANY.decode(a.input_type)

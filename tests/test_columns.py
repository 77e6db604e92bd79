"""commlib.columns and the tables that use it: column widths come from the values, so none runs into the next."""

import copy
import re

import pytest

from commlib import columns
from commlib.profiling import diagnosis as td
from commlib.profiling.report import diagnosis as rp
from commlib.profiling import traces as tr


def test_a_column_grows_to_its_widest_cell_plus_a_space_and_keeps_its_width_otherwise():
    assert columns.fit([["op", "p"], ["ring", "4"]], [6, 4], "<>") == ["op       p", "ring     4"]
    assert columns.fit([["op", "p"], ["all_reduce", "1000"]], [6, 4], "<>") == \
        ["op             p", "all_reduce  1000"]
    with pytest.raises(ValueError, match="every row needs 2 cells"):
        columns.fit([["a"]], [3, 3], "<>")


def test_diagnose_table_parts_a_huge_message_from_a_group_of_1000_ranks():
    """Before: '1000000000000' and the next column printed as one ('10000000000001000' with a group size of
    1000 before the group column; 'default_pg (1000)' is wider than that column too)."""
    report = copy.deepcopy(td.diagnose([tr.SAMPLE]))
    for c in report["calls"]:
        c["bytes"], c["group"], c["group_size"] = 10**12, "default_pg", 1000   # both wider than their columns
    row = next(line for line in rp.format_report(report).splitlines() if line.startswith("all_reduce"))
    assert re.search(r" 1000000000000 +default_pg \(1000\) ", row), row   # bytes, then the group: name (size)


def test_bench_and_tradeoff_tables_part_wide_values():
    from commlib.bench import format_table
    from commlib.compression.tradeoff import table

    row = {"nbytes": 10**15, "count": 10**14, "dtype": "bfloat16", "time_s": 12345.6, "algbw_GBps": 123456.789,
           "busbw_GBps": 1.0, "wrong": 0}
    assert format_table([row], "all_reduce").splitlines()[2].split() == \
        ["1000000000000000", "100000000000000", "bfloat16", "sum", "12345600000.0", "123456.789", "1.000", "0"]
    r = {"variant": "powersgd rank=4 ef", "bytes_per_step": 1e15, "test_loss": 1.0, "test_accuracy": 0.5,
         "overhead_s": 1.0, "comm_s": 2.0, "step_s": 3.0}
    assert table([r]).splitlines()[1].split() == ["powersgd", "rank=4", "ef", "1,000,000,000,000,000", "1.000",
                                                   "1.0000", "0.500", "1000.000", "2000.000", "3000.000"]

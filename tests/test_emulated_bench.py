"""commlib.bench.emulated: its traces count what topology's closed forms say; its rows price what it ran with
topology's model. How close measured and model come is a benchmark (benchmarks/topology_emulated.py), not a test."""

import json

import pytest

import commlib as cl
from commlib import cost
from commlib.bench import emulated as eb
from commlib import topology as topo


@pytest.fixture(scope="module")
def cluster():
    with cl.Cluster(world_size=4, timeout=120) as c:
        yield c


def test_traced_bytes_are_topologys_exact_and_closed_form_counts(cluster):
    shape = topo.Topology(2, 2, "nvlink4", "ib_ndr", 2)
    got = cluster.run(eb.traced_bytes, 1000, 2)
    for name, (op, _) in eb.RUNNABLE.items():
        exact = topo.bytes_by_rank(op, 4000, shape, name, itemsize=4)
        assert [g[name] for g in got] == [(e["intra"], e["inter"]) for e in exact], name
        closed = topo.bytes_per_rank(op, 4000, shape, name)
        assert max(g[name][1] for g in got) == closed["inter"], name


def test_a_small_run_prices_each_row_with_the_model_of_its_links(cluster):
    result = eb.run(cluster, sizes=[64 << 10], latency=1e-4, nics=(2,), repeats=1)
    assert json.loads(json.dumps(result))["rows"] == result["rows"]  # JSON-ready: the benchmark saves it
    intra = cost.Link("x", result["intra"]["bandwidth"], result["intra"]["latency"], "")
    nic = cost.Link("y", result["nic"]["bandwidth"], 1e-4, "")
    assert result["nic"]["bandwidth"] == pytest.approx(intra.bandwidth / 8)
    model = topo.Topology(2, 2, intra, nic, 2)
    assert [r["algorithm"] for r in result["rows"]] == list(eb.RUNNABLE)
    for r in result["rows"]:
        assert r["measured_s"] > 0 and r["nics"] == 2 and r["nbytes"] == 64 << 10
        assert r["model_s"] == pytest.approx(topo.collective_time(r["op"], r["nbytes"], model, r["algorithm"],
                                                                  gamma=result["gamma"]))
    assert result["pacing"][0]["messages"] > 0 and len(result["builtin"]) == 1
    text = eb.format_result(result)
    assert all(name in text for name in eb.RUNNABLE) and "not paced" in text


def test_bad_runs_are_named(cluster):
    with pytest.raises(ValueError, match="multiples of 4 x world size"):
        eb.run(cluster, sizes=[1000])
    for g in (3, 4):
        with pytest.raises(ValueError, match="at least 2 nodes of gpus_per_node"):
            eb.run(cluster, sizes=[1 << 20], gpus_per_node=g)


@pytest.mark.parametrize("kwargs, words", [({"ratio": 0}, "ratio must be a finite number > 0"),
                                           ({"ratio": float("inf")}, "ratio"),
                                           ({"gpus_per_node": 0}, "gpus_per_node must be an int >= 1"),
                                           ({"nics": (0,)}, "nics[0] must be an int >= 1"),
                                           ({"repeats": 0}, "repeats must be an int >= 1"),
                                           ({"latency": -1}, "latency must be")])
def test_bad_parameters_are_named_before_anything_runs(cluster, kwargs, words):
    with pytest.raises((ValueError, TypeError)) as info:
        eb.run(cluster, sizes=[1 << 20], **kwargs)
    assert words in str(info.value)


def test_the_committed_report_fits_the_column():
    from commlib.bench import emulated

    text = emulated.format_result(emulated.load_committed())
    assert max(len(line) for line in text.splitlines()) <= 100 and "hierarchical over the flat ring" in text


def test_a_calibration_whose_times_do_not_grow_still_gives_a_link():
    """A loaded machine timed 4 MiB no slower than 256 KiB: the fit has beta = 0, and the chapter's 1 / beta
    raised ZeroDivisionError (chapter 3 under nbval). The bound from the largest size stands in."""
    sizes = [1 << 18, 1 << 20, 4 << 20]
    alpha, beta = eb.fit_loopback(sizes, [2e-3, 1.9e-3, 2e-3])
    assert (alpha, beta) == (0.0, 2e-3 / (4 << 20))
    alpha, beta = eb.fit_loopback(sizes, [1e-4 + n * 1e-9 for n in sizes])   # a clean line is the fit itself
    assert abs(alpha - 1e-4) < 1e-9 and abs(beta - 1e-9) < 1e-15

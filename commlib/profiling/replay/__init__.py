"""The replay stage: graph.py builds each rank's dependency graph from its calls (waits.py: where its compute lane
waited for a call) and replays it (critical.py walks its critical path, clocks.py sets each rank's clock against
the first's), regroup.py rebuckets data-parallel calls, pricing.py prices one call on new hardware, whatif.py runs
a scenario through them."""

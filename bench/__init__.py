"""Kafkernel benchmarks: the same workloads against librdkafka's mock cluster and against
Kafkernel, in one run (``python -m bench.run``); see bench/README.md."""

"""Seeded simulations of 3 and 5 voters plus an observer, under message loss, delay,
reordering, crashes with restart, partitions and graceful leader shutdowns. After every
event: at most one leader per epoch, committed entries never truncated, every leader
holds what earlier epochs committed; at the end, every node's committed prefix is the
committed log's prefix.
Once the network heals, a write is committed within a bounded simulated time.

More seeds: ``python -m tests.unit.kraft.test_raft_sim 0 5000``."""

from __future__ import annotations

import sys

import pytest

from plugins.metadata_kraft.raft.leader import LeaderProgress

from .sim import InvariantViolation, Scenario, Simulation

# Crash-heavy: short outages, slow fsyncs, a node may die between two of its actions.
CHAOS = Scenario(crash_rate=0.003, restart_ms=(20, 400), flush_ms=(0, 40),
                 write_interval_ms=50, mid_action_crash=0.02)


def _scenario(seed: int, base: Scenario) -> Scenario:
    voters = 5 if seed % 3 == 2 else 3
    return Scenario(**{**base.__dict__, "voters": voters})


def run_seed(seed: int, base: Scenario) -> Simulation:
    sim = Simulation(seed, _scenario(seed, base))
    try:
        sim.run()
    except InvariantViolation as exc:
        raise AssertionError(f"seed {seed}: {exc}") from exc
    assert sim.first_commit_after_heal is not None, (
        f"seed {seed}: no write committed within {sim.sc.progress_bound_ms} ms of healing")
    return sim


@pytest.mark.parametrize("base, seeds", [
    pytest.param(Scenario(), range(0, 120), id="lossy"),
    pytest.param(CHAOS, range(1000, 1080), id="chaos"),
])
def test_simulated_quorums_stay_safe_and_make_progress(base: Scenario, seeds: range) -> None:
    totals = {"elections": 0, "crash": 0, "partition": 0, "resign": 0}
    for seed in seeds:
        sim = run_seed(seed, base)
        for key in totals:
            totals[key] += sim.counts[key]
    # The runs exercised what they claim: failovers, crashes, partitions, resignations.
    assert totals["elections"] > len(seeds) and totals["crash"] > len(seeds), totals
    assert totals["partition"] > 0 and totals["resign"] > 0, totals


def test_the_simulator_catches_a_broken_commit_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """A leader that counts only itself (no majority) loses committed entries: the
    invariants must see it, or the passing runs above would prove nothing."""

    def leader_alone(self: LeaderProgress) -> bool:
        own = self.replicas[self.local_id].end_offset
        if own is None or own <= self.epoch_start_offset or \
                (self.high_watermark is not None and own <= self.high_watermark):
            return False
        self.high_watermark = own
        return True

    monkeypatch.setattr(LeaderProgress, "_maybe_update_high_watermark", leader_alone)
    with pytest.raises(AssertionError, match="seed"):
        for seed in range(60):
            run_seed(seed, Scenario())


if __name__ == "__main__":
    first, last = (int(a) for a in sys.argv[1:3])
    for seed in range(first, last):
        run_seed(seed, CHAOS if seed % 2 else Scenario())
    print(f"seeds {first}-{last}: safe, and progress after every heal")

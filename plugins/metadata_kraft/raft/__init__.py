"""The KRaft Raft core (KIP-595 with KIP-996 pre-vote), sans-io: no sockets, no files
(except ``quorum_store.write_atomic``), no asyncio, no module-level state. A driver
feeds ``core.RaftNode`` events and executes the actions it returns; the unit tests
drive it with a seeded simulator (tests/unit/kraft).

Our modules and the Kafka 4.3.1 classes (``org.apache.kafka.raft``) they follow:

- ``state``: ``QuorumState`` and the epoch states ``UnattachedState``,
  ``ProspectiveState``, ``CandidateState``, ``LeaderState`` (the state part),
  ``FollowerState``, ``ResignedState``; ``QuorumConfig`` (as ``RaftConfig``); ``VoterSet``.
- ``election``: ``EpochElection``, each state's ``canGrantVote``, ``ReplicaKey``,
  ``KafkaRaftClient.randomElectionTimeoutMs`` / ``strictExponentialElectionBackoffMs``.
- ``leader``: ``LeaderState``'s replica progress, high watermark, check quorum and
  DescribeQuorum view.
- ``quorum_store``: ``FileQuorumStateStore`` and ``ElectionState`` (``QuorumStateData``).
- ``log``: ``RaftLog`` (``ValidOffsetAndEpoch`` as ``Validation``), with an in-memory
  implementation.
- ``messages``: ``RaftUtil``'s request/response builders, on kio's dataclasses.
- ``core``: ``KafkaRaftClient`` (request handlers, response handling, the poll loop).
- ``actions``: what ``core`` asks its driver to do (Kafka's client does it itself:
  ``NetworkChannel.send``, ``QuorumStateStore.writeElectionState``, ``RaftLog.flush``).

- ``versions``: every served version of a Raft RPC to and from the core's one version.
- ``snapshotting``: the quorum node's ``SnapshotGenerator``; the leader serves the files
  by FetchSnapshot.

Not yet here: a follower loading a snapshot (it stops with a Fatal), and KIP-853
membership (voters are a ``VoterSet``).
"""

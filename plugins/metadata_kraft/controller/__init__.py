"""The KRaft controller's rules, sans-io: functions and classes that take the controller's
state (:class:`ControllerState`), a request (kio) and ``now``, and return the records to
append and the answer to send once they are committed (:class:`ControllerResult`).
The quorum controller appends them through Raft and replays them into the next state."""

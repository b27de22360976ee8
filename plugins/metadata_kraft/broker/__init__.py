"""The broker's side of KRaft: the channel to the active controller (``channel``) and
the registration, heartbeats, fencing and controlled shutdown (``lifecycle``)."""

"""The network layer: listeners, connections (framing, limits, in-order responses) and
the dispatcher (frame -> decode -> route -> handler -> encode)."""

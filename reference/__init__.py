"""The reference Apache Kafka broker that Kafkernel's behaviour (and later its speed) is
compared against: fetched as Maven artifacts (fetch.py), run as a local process (kafka.py)."""

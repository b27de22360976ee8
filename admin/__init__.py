"""``kafkernel`` admin commands: topics, consumer groups, the cluster and broker configs
of any Kafka-compatible broker, over the protocol (Kafka's AdminClient calls, made by
confluent-kafka; DescribeLogDirs, which it lacks, by kafka-python). Output is a table
(rich) or ``--output json``; a broker's error or one that cannot be reached is one line
on stderr and exit code 1. The admin extra (``pip install kafkernel[admin]``)."""

"""Partition roles (leader/follower), high watermark, ISR."""


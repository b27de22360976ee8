"""Plugins that tests load (enabled as ``tests.plugin_fixtures.<module>:<Class>``): the
README's example plugin, plugins that fail on purpose, stand-in coordinators, session and
TLS probes. Nothing here tests a plugin: tests of the shipped plugins (``plugins/``) live
in tests/unit, tests/integration, tests/zk and tests/spark, by what they exercise."""

"""The plugin API: the one package a plugin imports (``spark/`` and ``admin/`` too).

Everything else in ``kernel`` is the kernel's own and may change; the import contracts
in pyproject.toml (``plugins-through-the-api``) refuse a plugin that reaches past this
package. Its modules, by theme:

- ``hooks``: ``hookimpl`` and every hook a plugin may implement.
- ``handlers``: the handler contract (``RequestContext``, ``Session``, ``Handler``,
  ``ApiRegistry``).
- ``services``: what plugins see of the broker (``PluginServices``,
  ``RequestServices``, a partition view and writer, ``lock_log_dir``).
- ``config``: a plugin's settings (``ConfigSchema``, ``setting`` and its checks).
- ``errors``: the errors plugins raise and catch.
- ``protocol``: building kio requests and responses.
- ``records``: v2 record batches, built and walked.
- ``cluster``: the cluster image, the ``MetadataBackend`` protocol, client quota
  entities.
- ``controller``: the controller's rules over the image, for metadata backends.
- ``coordination``: the coordinator runtime and registry.
- ``sasl``: the SASL mechanism registry.

A handler is one signature for the kernel and plugins: ``handler(ctx, request)``.
"""

__all__: list[str] = []

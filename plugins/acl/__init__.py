"""Authorization: the ``acl`` plugin.

Kafka's authorizer model (StandardAuthorizer): ACLs of principals on topics, groups, the
cluster and transactional ids, LITERAL and PREFIXED, ALLOW and DENY with deny winning,
``super.users`` and ``allow.everyone.if.no.acl.found``. The ACLs are kept in the metadata
log (AccessControlEntryRecord) and managed with CreateAcls, DescribeAcls and DeleteAcls;
the plugin answers the kernel's ``kafkernel_authorize`` hook, which every handler asks.
"""

from __future__ import annotations

from plugins.acl.plugin import PLUGIN_NAME, AclPlugin

__all__ = ["PLUGIN_NAME", "AclPlugin"]

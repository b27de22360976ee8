"""Shared bits of the controller's answers."""

from __future__ import annotations

import datetime
from typing import Any

from kio.static.primitive import i32Timedelta

NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))

# A kio request of any version of one API: the rules read the fields every version has
# and getattr the ones later versions add.
AnyRequest = Any

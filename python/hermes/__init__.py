"""hermes: durable, fast and coherent conversation transcripts for agent gateways.

The public faces are :mod:`hermes.state` (the session database),
:mod:`hermes.agent` (the agent and its transcript flush), :mod:`hermes.gateway`
(the gateway runner) and :mod:`hermes.errors`.
"""

from hermes._core import SCHEMA_VERSION, SQLITE_VERSION, __version__

__all__ = ["SCHEMA_VERSION", "SQLITE_VERSION", "__version__"]

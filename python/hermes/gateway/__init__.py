"""The gateway: chat platforms in, one coherent agent per conversation, transcripts in state.db.

Start at ``hermes.gateway.run`` (``GatewayRunner``); its docstring maps each behaviour to the
module that implements it. Types shared with adapters: ``hermes.gateway.config``,
``hermes.gateway.session``, ``hermes.gateway.platforms.base``.
"""

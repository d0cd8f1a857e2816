"""The gateway: chat platforms in, one coherent agent per conversation, transcripts in state.db.

Start at ``hermes.gateway.run`` (``GatewayRunner``); its docstring maps each behaviour to the
module that implements it. Types shared with adapters: ``hermes.gateway.events`` (re-exported
by ``hermes.gateway.platforms.base``, the adapters' contract) and ``hermes.gateway.config``.
The core never imports the adapter layer (``platforms/``); only the runner, which starts the
adapters, does.
"""

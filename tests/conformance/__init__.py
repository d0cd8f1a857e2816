"""hermes-agent 0.19.0's own SessionDB tests as a conformance suite (``python -m conformance``).

Run it with ``scripts/conformance``; the README's "The conformance suite" says what it does.
"""

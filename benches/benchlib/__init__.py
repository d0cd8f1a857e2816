"""What the benchmark pipelines share (``run.py`` + ``driver.py``, ``scale.py``,
``gateway_turn.py``, ``store_ops.py``, ``cli.py``, and ``report.py``, which renders them).

* ``stats``: one percentile rule (nearest rank) and one summary of samples;
* ``protocol``: one way to keep a serving process per system and send it work;
* ``machine``: the facts about the host, the code and each worker's interpreter;
* ``render``: the number formats and the Markdown table every report uses;
* ``paths``: where results go (untracked unless a run is published);
* ``indexes``: whether a file's search indexes hold every message.

Standard library only: the same modules run in our interpreter and in the peer venv.
"""

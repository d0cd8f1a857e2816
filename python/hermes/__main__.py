"""``python -m hermes``: the ``hermes`` command, whatever ``hermes`` on PATH runs."""

import sys

from hermes.cli import main

sys.exit(main())

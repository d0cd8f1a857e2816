"""``python -m hermes.cli``: the ``hermes`` command."""

import sys

from hermes.cli import main

sys.exit(main())

"""``python -m kforge``: see :mod:`kforge.cli`."""

from .cli import main

raise SystemExit(main())

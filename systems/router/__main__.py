"""``python -m systems.router``: see :mod:`systems.router.cli`."""

import sys

from systems.router.cli import main

sys.exit(main())

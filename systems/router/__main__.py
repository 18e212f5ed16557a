"""``python -m systems.router {colocated|disaggregated} ...``: the suite's two routers behind one entry point.

``colocated`` routes whole requests to colocated instances with a :mod:`systems.policies` policy
(:mod:`systems.router.cli`); ``disaggregated`` places prefills and decodes with the simulator's
``PDScheduler`` from a JSON config the deployment writes (:mod:`systems.router.pd_cli`). Both listen on
the ``--host`` address (127.0.0.1 by default) and exit 0 on SIGTERM or SIGINT.
"""

import sys

from systems.router.commands import main

sys.exit(main())

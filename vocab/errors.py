"""The one base class of every error a user causes (bad config, missing file, malformed trace, a
deployment that cannot start), and the configuration error.

``python -m harness`` turns any :class:`UserError` into one line on stderr that names the file, line or
key, exit code 2 and no traceback; the job folder keeps a ``summary.json`` with ``status: failed``.
Anything else is a bug and keeps its traceback. This module imports nothing of the suite, so every
package (``workloads``, ``systems``, ``harness``) can raise these.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input or an environment the run cannot use; the message says which file, line or key, and
    what was expected."""


class ConfigError(UserError, ValueError):
    """A configuration value is missing or invalid; the message starts with the key, e.g. ``system.router``."""

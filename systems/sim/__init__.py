"""The discrete-event cluster simulator behind ``engine=sim``: paper-scale deployments of the four
systems, driven by the same workloads, policies, records and metrics as the real engines. Its hot modules
are imported from their compiled build when it matches the sources (:mod:`systems.compiled_core`)."""

from systems.compiled_core import package_path

__path__ = package_path(__name__, __path__)

"""The discrete-event cluster simulator behind ``engine=sim``: paper-scale deployments of the four
systems, driven by the same workloads, policies, records and metrics as the real engines. Its hot modules
load from their compiled build when one matches the sources (:mod:`systems.sim.native`)."""

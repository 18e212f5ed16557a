"""Single-node clusters on this machine for the sweep launchers of ``conf/hydra/launcher/``.

``python -m tests.clusters.slurm_local up|down|status|env`` runs Slurm (munged, slurmctld, slurmd from
Debian's ``slurm-wlm`` and ``munge``) for ``hydra/launcher=slurm_local``; ``python -m
tests.clusters.ray_local up|down|status|env`` runs a loopback Ray head for ``hydra/launcher=ray_cluster``.
Each daemon runs in its own process group with a pid record in the cluster's folder, and ``down`` stops
exactly the processes those records name (never ``pkill``/``killall``/``ray stop``). docs/launchers.md.
"""

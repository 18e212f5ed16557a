"""Plotting only: reads job folders under ``results/`` and writes PNG figures plus the CSV each one
plotted. Never launches runs and never recomputes metrics."""

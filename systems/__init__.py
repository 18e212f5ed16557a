"""Deployments under test: simulator, real-process launchers, routing policies and KV-cache models."""

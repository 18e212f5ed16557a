"""Performance models: how long a prefill chunk or a decode step takes on one instance."""

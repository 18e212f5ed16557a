"""Performance models: how long a prefill chunk or a decode step takes on one instance. The roofline model's
loops are imported from the compiled core when it is built (:mod:`systems.compiled_core`)."""

from systems.compiled_core import package_path

__path__ = package_path(__name__, __path__)

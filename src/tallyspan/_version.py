"""The distribution's version, in a module of its own so plugins read it without importing the package's API."""

__all__ = ["__version__"]

__version__ = "0.1.0"

"""The package's version, in a module of its own so that anything (``run.identity``) reads it
without importing the root package's lazy attributes."""

__version__ = "0.1.0"

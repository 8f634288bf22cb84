"""The ``llmqueue`` command line.  The top layer: it may import everything."""

from llmqueue.cli.main import main

__all__ = ["main"]

"""``python -m llmqueue`` runs the command line."""

import sys

from llmqueue.cli import main

sys.exit(main())

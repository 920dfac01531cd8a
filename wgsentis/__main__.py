"""``python -m wgsentis`` runs the command line."""

import sys

from wgsentis.cli import main

sys.exit(main())

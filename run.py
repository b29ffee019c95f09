"""Run the ``ceb`` command line from a checkout: ``python run.py --help``."""

from ceb.cli import main

main()

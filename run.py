"""Run the ``ceb`` command line from a checkout: ``python run.py --help``."""

from ceb.cli import main

# The guard matters: the in-process vLLM backend's engine core runs in a spawned process, which re-imports this
# module; without it the child would start the command line again.
if __name__ == "__main__":
    main()

"""``python -m ceb``: the ``ceb`` command line, for an environment whose scripts directory is not on ``PATH``."""

from ceb.cli import main

if __name__ == "__main__":  # a process vLLM's engine spawns re-imports this module as __mp_main__ (see run.py)
    main()

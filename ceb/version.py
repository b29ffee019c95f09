"""The package version and the name it is installed by, kept apart so every layer can read them cheaply.

Neither needs the package root imported (:mod:`ceb` loads its public names lazily).
"""

__all__ = ["DISTRIBUTION", "PUBLISHED", "__version__", "install_command"]

__version__ = "0.1.0"

DISTRIBUTION = "critic-experience-bank"
"""The distribution name (the wheel's and, once published, the package registry's). The import name and the command
stay ``ceb``; the registry's ``ceb`` is someone else's (an unrelated, empty 2021 package)."""

PUBLISHED = False
"""Whether :data:`DISTRIBUTION` is on the package registry. It is not yet: installing it from there answers
"No matching distribution", so every install hint names a checkout. Set it at the first upload."""


def install_command(extra: str | None = None) -> str:
    """The command that installs ceb (with an optional extra) as things stand: from a checkout until published.

    Args:
        extra: The ``[project.optional-dependencies]`` name (``"ray"``), or ``None`` for ceb alone.

    Returns:
        ``pip install -e '.[ray]' in ceb's checkout`` (once :data:`PUBLISHED`:
        ``pip install -e '.[ray]'``).
    """
    if PUBLISHED:
        return f"pip install '{DISTRIBUTION}[{extra}]'" if extra else f"pip install {DISTRIBUTION}"
    return (f"pip install -e '.[{extra}]'" if extra else "pip install -e .") + " in ceb's checkout"

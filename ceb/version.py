"""The package version and the name it is installed by, kept apart so every layer can read them cheaply.

Neither needs the package root imported (:mod:`ceb` loads its public names lazily).
"""

__all__ = ["DISTRIBUTION", "__version__", "install_command"]

__version__ = "0.1.0"

DISTRIBUTION = "critic-experience-bank"
"""The distribution name on the package registry: ``pip install critic-experience-bank``. The import name and the
command stay ``ceb``; the registry's ``ceb`` is someone else's (an unrelated, empty 2021 package)."""


def install_command(extra: str | None = None) -> str:
    """The command that installs ceb from the registry, with an optional extra.

    Args:
        extra: The ``[project.optional-dependencies]`` name (``"ray"``), or ``None`` for ceb alone.

    Returns:
        ``pip install 'critic-experience-bank[ray]'`` (or ``pip install critic-experience-bank``).
    """
    return f"pip install '{DISTRIBUTION}[{extra}]'" if extra else f"pip install {DISTRIBUTION}"

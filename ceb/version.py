"""The package version and distribution name, importable without the package root."""

__all__ = ["DISTRIBUTION", "PUBLISHED", "__version__", "install_command"]

__version__ = "0.1.0"

DISTRIBUTION = "critic-experience-bank"
"""The wheel's name; imports and the command stay ``ceb`` (the registry's ``ceb`` is an unrelated package)."""

PUBLISHED = False
"""Whether :data:`DISTRIBUTION` is on the package registry; until then install hints name a checkout."""


def install_command(extra: str | None = None) -> str:
    """The command installing ceb with ``extra``: ``pip install -e '.[ray]' in ceb's checkout`` until published."""
    if PUBLISHED:
        return f"pip install '{DISTRIBUTION}[{extra}]'" if extra else f"pip install {DISTRIBUTION}"
    return (f"pip install -e '.[{extra}]'" if extra else "pip install -e .") + " in ceb's checkout"

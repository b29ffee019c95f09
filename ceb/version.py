"""The package version, kept apart so every layer can record it without importing the package root."""

__version__ = "0.1.0"

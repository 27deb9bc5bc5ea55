"""The package version (the build backend, _build/kforge_build.py, reads it from here)."""

__version__ = "0.1.0"

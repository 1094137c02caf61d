"""The version of torch_amore (a leaf module: the build backend and the package read it here)."""

__version__ = "0.1.0"

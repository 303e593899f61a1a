"""torch_fl: one runtime API over every flsdk backend."""

__version__ = "0.1.0"

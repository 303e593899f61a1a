"""flsdk: generate a PyTorch PrivateUse1 backend from op specs and a device descriptor."""

__version__ = "0.1.0"

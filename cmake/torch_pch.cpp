// Object that owns the precompiled header; see TorchPch.cmake.

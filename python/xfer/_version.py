"""The package version: equal to XFER_VERSION_MAJOR.MINOR.PATCH in include/xfer.h
(CMake refuses to configure otherwise) and to the loaded library's
xfer_version() (import checks it)."""
__version__ = "0.1.0"

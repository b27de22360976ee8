"""The one thing pyproject.toml cannot say in setuptools' stable configuration: the C
extensions, the record walk of a compressed batch (kernel/log/_scan.c) and the log
cleaner's offset map and record walks (kernel/log/_cleaner.c). Optional: without a C
compiler the install still succeeds and the same work runs in Python."""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("kernel.log._scan", ["kernel/log/_scan.c"], depends=["kernel/log/_varint.h"],
              optional=True),
    Extension("kernel.log._cleaner", ["kernel/log/_cleaner.c"],
              depends=["kernel/log/_varint.h"], optional=True),
])

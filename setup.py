"""The one thing pyproject.toml cannot say in setuptools' stable configuration: the C
record walk of a compressed batch (kernel/log/_scan.c). Optional: without a C compiler
the install still succeeds and the same walk runs in Python."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("kernel.log._scan", ["kernel/log/_scan.c"], optional=True)])

#!/usr/bin/env python3
"""Runs a test's Python client script in the environment tests/support/python-clients.lock pins.

    python3 python_clients.py SCRIPT [ARGS...]

The environment is created on first use and cached exactly as the deepagents runtime's own
(runtimes/deepagents/errand-deepagents, whose `prepare` this loads), named `test-clients-*`.
"""

import importlib.machinery
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.realpath(__file__))
LAUNCHER = os.path.join(HERE, "..", "..", "runtimes", "deepagents", "errand-deepagents")


def main():
    sys.dont_write_bytecode = True  # no __pycache__ beside the launcher, in the checkout
    loader = importlib.machinery.SourceFileLoader("errand_deepagents_launcher", LAUNCHER)
    spec = importlib.util.spec_from_loader(loader.name, loader)
    launcher = importlib.util.module_from_spec(spec)
    loader.exec_module(launcher)
    python = launcher.prepare(os.path.join(HERE, "python-clients.lock"), "test-clients")
    os.execv(python, [python, *sys.argv[1:]])


if __name__ == "__main__":
    main()

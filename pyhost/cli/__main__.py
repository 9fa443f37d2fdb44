"""`python -m pyhost.cli`: the pvperf command (how the sweep runs a cell
and the tests run pvperf without the venv's entry point)."""
from . import main

main()

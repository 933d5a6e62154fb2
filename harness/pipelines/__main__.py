"""`python -m harness.pipelines validate|run|junit-annotate`: the same as `moe-harness pipeline ...`,
usable before the package is installed (and by the tests, independent of harness.cli)."""
import argparse
import sys

from harness.pipelines import command

parser = argparse.ArgumentParser(prog="python -m harness.pipelines")
command.add_arguments(parser)
sys.exit(command.main(parser.parse_args()))

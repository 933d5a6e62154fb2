# The plugin's fixtures, for this suite without relying on the installed
# package's entry points (a stale editable install may not declare pytest11).
from harness.conformance.pytest_plugin import conformance, format_strategies, moe_conformance  # noqa: F401

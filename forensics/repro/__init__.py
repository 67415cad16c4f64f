"""The reproducer: concurrent agent sessions against an OpenAI-compatible server, every
reply judged by named validators, one result per request (`forensics repro`)."""

from ..statuses import FAILURES
from .run import ReproResult, RunStats, repro
from .scenario import Scenario, Tool, load_scenario
from .validators import CORRUPTION, MARKUP, Reply, ToolCall, Validators

__all__ = [
    "CORRUPTION", "FAILURES", "MARKUP", "Reply", "ReproResult", "RunStats", "Scenario", "Tool",
    "ToolCall", "Validators", "load_scenario", "repro",
]  # fmt: skip

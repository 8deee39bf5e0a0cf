"""megaactors: build, run and measure MegaAgent-style multi-agent systems as actors.

Agent logic is written once as a :class:`~megaactors.core.behaviour.Behaviour` (pure
functions over serializable state that return effects) and executed by a runtime;
the deterministic simulation runtime is the default.
"""

from megaactors.behaviours import ChatRound, MegaAgent, RetryLimitError, expected_messages
from megaactors.core.agent import Agent, AgentState, Phase, TransitionError
from megaactors.core.behaviour import (
    AgentContext,
    Behaviour,
    BehaviourError,
    Effects,
    Interrupt,
    LLMRequest,
    OrganisationCheck,
    Send,
    ToolBehaviour,
    ToolCall,
    ToolResult,
)
from megaactors.core.ledger import Ledger
from megaactors.core.llm import PRICES, LatencyModel, LLMReply, SimulatedLLM, TokenModel
from megaactors.core.messages import (
    ADMIN,
    CHANNELS,
    HIERARCHY,
    HUMAN,
    HUMAN_SENDER,
    INTRA,
    Batch,
    Message,
    MessageError,
    Packet,
    decode,
    encode,
)
from megaactors.core.organisation import Organisation, OrganisationError, RecruitError, RouteError
from megaactors.core.trace import Trace
from megaactors.experiments.spec import ParameterError, RunSpec
from megaactors.experiments.sweep import ResultsError, SweepError, load_results, run_sweep
from megaactors.runtime import RUNTIMES, AsyncioRuntime, PykkaRuntime, RunResult, SimRuntime

__version__ = "0.1.0"

__all__ = [
    "ADMIN",
    "CHANNELS",
    "HIERARCHY",
    "HUMAN",
    "HUMAN_SENDER",
    "INTRA",
    "PRICES",
    "RUNTIMES",
    "Agent",
    "AgentContext",
    "AgentState",
    "AsyncioRuntime",
    "Batch",
    "Behaviour",
    "BehaviourError",
    "ChatRound",
    "Effects",
    "Interrupt",
    "LLMReply",
    "LLMRequest",
    "LatencyModel",
    "Ledger",
    "MegaAgent",
    "Message",
    "MessageError",
    "Organisation",
    "OrganisationCheck",
    "OrganisationError",
    "Packet",
    "ParameterError",
    "Phase",
    "PykkaRuntime",
    "RecruitError",
    "ResultsError",
    "RetryLimitError",
    "RouteError",
    "RunResult",
    "RunSpec",
    "Send",
    "SimRuntime",
    "SimulatedLLM",
    "SweepError",
    "TokenModel",
    "ToolBehaviour",
    "ToolCall",
    "ToolResult",
    "Trace",
    "TransitionError",
    "decode",
    "encode",
    "expected_messages",
    "load_results",
    "run_sweep",
]

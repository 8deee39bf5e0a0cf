"""The core concepts, which depend on no runtime: agents and their state machine,
messages and their codec, organisations and routing, the behaviour protocol and its
effects, the simulated LLM, the cost ledger and the trace."""

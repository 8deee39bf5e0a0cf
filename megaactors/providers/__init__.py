"""LLM providers beyond the simulated one (:mod:`megaactors.core.llm`): an
OpenAI-compatible chat-completions client for a real endpoint."""

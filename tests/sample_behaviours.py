"""Small behaviours the runtime tests share (they ship with the runtime conformance
suite): a function-call loop, a failing one, a trespasser, a recruiter and a git user
behind one global lock; and a spender that asks for a human once it has spent its
budget."""

from typing import Any

from megaactors.core.behaviour import Effects, Interrupt, LLMRequest, Send
from megaactors.core.messages import HUMAN, INTRA
from megaactors.runtime.conformance import Faulty, GitUser, Recruiter, ToolLoop, Trespasser

__all__ = ["Faulty", "GitUser", "Recruiter", "Spender", "ToolLoop", "Trespasser"]


class Spender:
    """Every agent makes ``calls`` LLM calls in a row, passing a note to the next agent
    after each, and reads what it is sent (one call per batch; a human's text is kept).
    An agent whose calls have cost more than ``budget`` dollars asks for a human, once."""

    name = "spender"

    def __init__(self, calls: int = 6, budget: float = 0.0005) -> None:
        self.calls, self.budget = calls, budget

    def init(self, agent: int, org: Any) -> dict[str, Any]:
        return {"left": self.calls, "spent": 0.0, "asked": False, "notes": 0, "heard": []}

    def on_start(self, ctx: Any, state: dict[str, Any]) -> Effects:
        return Effects(llm=LLMRequest(new_tokens=50, stage="work"))

    def on_batch(self, ctx: Any, state: dict[str, Any], batch: Any) -> Effects:
        for p in batch.packets:
            if p.channel == HUMAN:
                state["heard"].append(p.payload)
            else:
                state["notes"] += 1
        return Effects(llm=LLMRequest(stage="read"))

    def on_reply(self, ctx: Any, state: dict[str, Any], reply: Any) -> Effects:
        state["spent"] += reply.cost_usd
        eff = Effects()
        if reply.stage == "work":
            state["left"] -= 1
            nxt = (ctx.agent + 1) % ctx.org.n
            eff = Effects(sends=[Send([nxt], INTRA, "note", state["left"])])
            if state["left"]:
                eff.llm = LLMRequest(new_tokens=50, stage="work")
        if state["spent"] > self.budget and not state["asked"]:
            state["asked"] = True
            eff.interrupt = Interrupt(f"spent ${state['spent']:.4f}, over the budget of ${self.budget:g}")
        return eff

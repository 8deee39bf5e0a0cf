"""Small behaviours the runtime tests share: a function-call loop, a failing one, a
trespasser, a recruiter and a git user behind one global lock."""

from megaactors import Effects, LLMRequest, Send, ToolCall
from megaactors.core.messages import INTRA

__all__ = ["Faulty", "GitUser", "Recruiter", "ToolLoop", "Trespasser"]


class ToolLoop:
    """Agent 0 thinks in a loop of ``calls`` LLM calls; the others message it at once."""

    name = "tool-loop"

    def __init__(self, calls: int) -> None:
        self.calls = calls

    def init(self, agent, org):
        return {"left": 0, "batches": []}

    def on_start(self, ctx, state):
        if ctx.agent == 0:
            state["left"] = self.calls
            return Effects(llm=LLMRequest(new_tokens=5, stage="plan"))
        return Effects(sends=[Send([0], INTRA, "note", ctx.agent)])

    def on_batch(self, ctx, state, batch):
        state["batches"].append((ctx.now, sorted(m.payload for m in batch)))
        return Effects()

    def on_reply(self, ctx, state, reply):
        state["left"] -= 1
        if state["left"]:
            return Effects(llm=LLMRequest(new_tokens=20, stage="tool"))
        return Effects()


class Faulty(ToolLoop):
    def on_batch(self, ctx, state, batch):
        raise ValueError("boom")


class Trespasser(ToolLoop):
    def on_start(self, ctx, state):
        if ctx.agent == 1:
            return Effects(sends=[Send([4], INTRA, "gossip", None)])
        return None


class Recruiter:
    name = "recruiter"

    def init(self, agent, org):
        return []

    def on_start(self, ctx, state):
        return Effects(recruits=2, llm=LLMRequest(new_tokens=1)) if ctx.agent == 0 else None

    def on_batch(self, ctx, state, batch):
        return Effects(state=[*state, *(m.payload for m in batch)])

    def on_reply(self, ctx, state, reply):
        return Effects(sends=[Send(ctx.recruited, INTRA, "welcome", "hi")], state=list(ctx.recruited))


class GitUser:
    """Every agent commits once through one global lock, then sends nothing."""

    name = "git-user"

    def init(self, agent, org):
        return None

    def on_start(self, ctx, state):
        return Effects(tool=ToolCall("git-commit", duration_s=5.0, lock="git", args=ctx.agent))

    def on_batch(self, ctx, state, batch):
        return Effects()

    def on_reply(self, ctx, state, reply):
        return Effects()

    def on_tool(self, ctx, state, result):
        return Effects(state=(result.result, result.started_s, result.finished_s, result.waited_s))

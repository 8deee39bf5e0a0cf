"""Small behaviours the runtime tests share (they ship with the runtime conformance
suite): a function-call loop, a failing one, a trespasser, a recruiter and a git user
behind one global lock."""

from megaactors.runtime.conformance import Faulty, GitUser, Recruiter, ToolLoop, Trespasser

__all__ = ["Faulty", "GitUser", "Recruiter", "ToolLoop", "Trespasser"]

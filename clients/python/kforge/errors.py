"""The exceptions the client raises, one per way a request can fail.

The server answers every error with an RFC 7807 problem document
(``{"type", "title", "status", "detail", "errors": [{"field", "message"}], ...}``);
each exception keeps that document whole in ``.problem`` so nothing the server
said is lost, and exposes the parts a caller acts on as attributes.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional


class KforgeError(Exception):
    """Base of every kforge client error.

    ``status`` is the HTTP status (None when no answer came), ``problem`` the
    server's problem JSON (empty when there was none).
    """

    def __init__(self, message: str, *, status: Optional[int] = None,
                 problem: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__(message)
        self.status = status
        self.problem: Dict[str, Any] = dict(problem or {})

    @property
    def detail(self) -> str:
        """The problem's ``detail`` (or the message when the server sent none)."""
        return str(self.problem.get("detail") or self.args[0])


class BadRequest(KforgeError):
    """400 or 413: the request was refused as malformed or too large.

    ``fields`` lists the JSON pointers (``/arch``, ``/params/mc``) the server
    named in ``errors[].field``; ``str()`` names them with their messages.
    """

    @property
    def fields(self) -> List[str]:
        return [str(e.get("field", "")) for e in self.problem.get("errors", [])
                if isinstance(e, Mapping)]

    def __str__(self) -> str:
        errors = [e for e in self.problem.get("errors", []) if isinstance(e, Mapping)]
        if not errors:
            return self.detail
        return "; ".join(f"{e.get('field') or '/'}: {e.get('message', '')}" for e in errors)


class CompileError(KforgeError):
    """422: the compiler failed or ran out of time.

    ``log`` is the compiler's output, ``argv`` its command line, ``key`` the
    kernel key the failure is cached under.
    """

    @property
    def log(self) -> str:
        return str(self.problem.get("log", ""))

    @property
    def argv(self) -> List[str]:
        return list(self.problem.get("argv", []))

    @property
    def key(self) -> Optional[str]:
        return self.problem.get("key")

    def __str__(self) -> str:
        return f"{self.detail}\n{self.log}" if self.log else self.detail


class Unauthorized(KforgeError):
    """401: no token, or one the server does not know."""


class Forbidden(KforgeError):
    """403: the token's role does not allow this route."""


class NotFound(KforgeError):
    """404: no such kernel, job, template or file."""


class Unavailable(KforgeError):
    """503 still, after every retry: the server's build queue stayed full.

    ``retry_after`` is the server's last ``Retry-After`` in seconds (None if it sent none).
    """

    retry_after: Optional[float] = None


class ConnectionFailed(KforgeError):
    """No answer at all (refused, reset, timed out), after every retry."""


class Stalled(ConnectionFailed):
    """The server took the connection (or had a job under way) and then sent nothing, not
    even a keep-alive, for longer than the client's timeout or heartbeat window: it is hung,
    stopped (``SIGSTOP``) or cut off."""


class IntegrityError(KforgeError):
    """A downloaded file's bytes do not hash to the sha256 the server announced."""


def error_from_problem(status: int, problem: Mapping[str, Any]) -> KforgeError:
    """The exception for an HTTP error ``status`` with the server's ``problem`` body."""
    kinds = {400: BadRequest, 413: BadRequest, 422: CompileError, 401: Unauthorized,
             403: Forbidden, 404: NotFound, 503: Unavailable}
    title = problem.get("title") or f"HTTP {status}"
    detail = problem.get("detail")
    message = f"{title}: {detail}" if detail else str(title)
    return kinds.get(status, KforgeError)(message, status=status, problem=problem)

"""What a failure of the Hugging Face client means to the user, in one line: what failed and
what to do, with its kind (HubError.reason, one of engine.errors.HUB_REASONS) for a caller
that offers the next step."""
from __future__ import annotations

import errno

from ...files.outputs import device_of
from .catalogue import close_names

_NO_SPACE = {errno.ENOSPC, errno.EDQUOT}


def describe_failure(exc: BaseException, repo: str, client) -> tuple[str, str] | None:
    """(message, reason) for what the client or the network raised, asking `repo` through
    `client` (the HubClient: its endpoint, token and cache); None for anything else (a bug, to
    be raised as it is)."""
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )
    if isinstance(exc, LocalEntryNotFoundError) and exc.__cause__ is not None:
        # Raised for any failure of the request before a download (the client says only that
        # the file is not cached): what that request met is the reason.
        described = describe_failure(exc.__cause__, repo, client)
        if described is not None:
            return described
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    if isinstance(exc, GatedRepoError):
        if status == 403 or client.token:
            return (f"{repo}: the licence is not accepted for this token's account; accept it at "
                    f"{client.page(repo)}, then download again"), "licence"
        return client.gated_hint(repo), "gated"
    # A mirror answers a missing repository with a bare 404 where the Hub says RepoNotFound.
    if isinstance(exc, RepositoryNotFoundError) or status == 404 and "/api/models/" in _url(response):
        return _not_found(repo, client), "not_found"
    if isinstance(exc, HFValidationError):
        return f"{repo}: not a repository name (owner/name, of letters, digits, '-', '_' and '.'){_close(repo)}", \
            "not_found"
    if isinstance(exc, RevisionNotFoundError):
        return f"{repo}: the Hub has no 'main' revision for it; its owner may have renamed it", "server"
    if isinstance(exc, LocalEntryNotFoundError) or _is_network_error(exc):  # a subclass of the next
        return (f"{repo}: cannot reach {client.endpoint} ({type(exc).__name__}); check the network connection, "
                "then try again"), "network"
    if isinstance(exc, EntryNotFoundError):
        return f"{repo}: a file it lists is missing on the Hub ({str(exc).splitlines()[0]}); try again later", \
            "server"
    if isinstance(exc, HfHubHTTPError) and status == 401:
        return (f"{repo}: the Hub refused the access token (invalid or expired); give a new one "
                "(huggingface.co/settings/tokens)"), "token"
    if isinstance(exc, HfHubHTTPError) and status is not None:
        return f"{repo}: the Hub answered HTTP {status}; try again later", "server"
    if isinstance(exc, OSError) and exc.errno in _NO_SPACE:
        return (f"{repo}: no space left on {device_of(client.cache_dir / 'x')}; free some space or set HF_HOME to a "
                "larger disk, then download again"), "disk"
    if isinstance(exc, OSError):  # the client's size/hash checks, a read-only cache
        return f"{repo}: {exc}", "other"
    return None


def _not_found(repo: str, client) -> str:
    return f"{repo}: no such model repository on {client.endpoint} (check the spelling{_private(client)}){_close(repo)}"


def _private(client) -> str:
    return "" if client.token else "; a private one needs an access token"


def _close(name: str) -> str:
    names = close_names(name)
    if not names:
        return ""
    return "; did you mean " + (names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]) + "?"


def _url(response) -> str:
    try:
        return str(response.request.url)
    except (AttributeError, RuntimeError):  # httpx raises RuntimeError for a response without its request
        return ""


def _is_network_error(exc: BaseException) -> bool:
    """The client's HTTP library raises its own connection and timeout errors (httpx or
    requests, by version), which are not OSErrors."""
    return type(exc).__module__.split(".")[0] in {"httpx", "httpx2", "requests", "urllib3", "httpcore"}

"""`GET .../pods/<name>/log`: the container log a kubelet serves, streamed through the API
server as it grows when `follow=true` (kubectl logs -f)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping

from aiohttp import web

from . import errors

# (namespace, pod, query) -> chunks; raises ApiError before the first chunk for an unknown
# container. The kubelet of the local substrate provides it.
PodLogs = Callable[[str, str, Mapping[str, str]], AsyncIterator[bytes]]


async def serve(
    request: web.Request, namespace: str | None, name: str | None, provider: PodLogs | None
) -> web.StreamResponse:
    if request.method != "GET" or provider is None or name is None:
        raise errors.no_such_path(request.path)  # no kubelet serves logs
    chunks = provider(namespace or "", name, request.query)
    first = await anext(chunks, b"")  # errors (no such container) surface before a 200
    response = web.StreamResponse(status=200)
    response.content_type = "text/plain"
    response.enable_chunked_encoding()
    try:
        await response.prepare(request)
        if first:
            await response.write(first)
        async for chunk in chunks:
            await response.write(chunk)
    except ConnectionResetError:
        pass  # the client went away
    finally:
        await chunks.aclose()  # type: ignore[attr-defined]
    return response

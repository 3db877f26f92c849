"""Chat completions against any OpenAI-compatible endpoint, through the ``openai`` SDK.

Why our own retry loop instead of the SDK's ``max_retries``: every retry must
be visible (an ``error``-free ``llm_call`` with ``attempts``, a progress line),
``Retry-After`` must be honoured with a cap, and a failure must end as a
*result* (``ok=False`` with a one-line ``error``) so the agent loop records a
``no_patch`` step and goes on instead of dying.

An endpoint that has never answered this client and fails a call at the endpoint itself
(connection refused, no reply in time, the key refused, no such path or model) is a
configuration mistake, not bad luck: that result says so (``endpoint_unusable``), so that a
run stops after the first call's retries instead of spending every step on the same failure.

The API key is read from the environment variable named in config at call
time; it is never stored on this object's public state, in results or in
error messages (any occurrence is masked).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, TypeAlias

# a reply longer than ``[llm] max_reply_chars`` (within these bounds) is not a model's answer
from l2tui.config import REPLY_CAP_CHARS, REPLY_CAP_MAX_CHARS, REPLY_CAP_MIN_CHARS

if TYPE_CHECKING:
    from l2tui.config import Config

#: the ``openai`` SDK's client: its ``create`` overloads type every keyword, and the request here
#: is a dict built once and sent through either the streamed or the bounded-read call
SdkClient: TypeAlias = Any

RETRY_CAP_S = 60.0
#: streamed text reaches the session as one ``llm_delta`` event per DELTA_BATCH_S seconds or
#: DELTA_BATCH_CHARS characters, whichever comes first: each event is an fsynced line, so a
#: fast endpoint must not turn every token into one
DELTA_BATCH_CHARS = 16384
DELTA_BATCH_S = 0.25
#: live deltas of one call stop after this much text (the whole reply still comes back)
DELTA_LIVE_CAP_CHARS = 256 * 1024
#: a non-streamed body may take this many bytes per character of text (JSON's ``\uXXXX``
#: escapes) plus this much for the envelope before reading stops
REPLY_BYTES_PER_CHAR = 6
REPLY_ENVELOPE_BYTES = 64 * 1024


class CallFailed(Exception):
    """One attempt that failed in a way the SDK does not report (deadline, truncation, size).

    ``endpoint``: the endpoint itself failed (nothing came back in time), not its reply."""

    def __init__(self, reason: str, retryable: bool, endpoint: bool = False):
        super().__init__(reason)
        self.retryable = retryable
        self.endpoint = endpoint


class EndpointUnusable(Exception):
    """The configured endpoint has never answered and its first call failed at the endpoint.

    Raised by a policy after it recorded the failed call, so that the agent loop pauses the
    tracks that need the model (and a headless run stops) with one line, rather than charging
    a failed step to the model at every step of every track."""


#: HTTP statuses that mean the endpoint is set up wrong (key, path, model), not busy
CONFIG_STATUSES = (401, 403, 404)


@dataclass
class LLMResult:
    ok: bool
    text: str
    usage: dict = field(default_factory=lambda: {"prompt_tokens": 0, "completion_tokens": 0})
    seconds: float = 0.0
    error: str | None = None        # one line when not ok
    attempts: int = 1
    model: str = ""
    finish_reason: str | None = None
    endpoint_unusable: bool = False  # see EndpointUnusable: this endpoint never answered


def _one_line(s: str, limit: int = 300) -> str:
    s = " ".join(str(s).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


class DeltaBatcher:
    """Collect streamed tokens; flush every ``chars`` characters or ``seconds``, up to ``cap`` in all."""

    def __init__(self, sink: Callable[[str], None] | None, chars: int | None = None,
                 seconds: float | None = None, cap: int | None = None):
        # the module's settings as they are now (not as they were at import), so a caller can tune them
        self.sink = sink
        self.chars = DELTA_BATCH_CHARS if chars is None else chars
        self.seconds = DELTA_BATCH_S if seconds is None else seconds
        self.cap = DELTA_LIVE_CAP_CHARS if cap is None else cap
        self.buf: list[str] = []
        self.n = 0
        self.sent = 0
        self.capped = False
        self.last = time.monotonic()

    def add(self, text: str) -> None:
        if not text or self.sink is None or self.capped:
            return
        room = self.cap - self.sent - self.n
        if len(text) >= room:
            self.buf.append(text[:max(0, room)])
            self.n += max(0, room)
            self.flush()
            self.sink(" [... the rest of this reply is not shown live]")
            self.capped = True
            return
        self.buf.append(text)
        self.n += len(text)
        now = time.monotonic()
        if self.n >= self.chars or now - self.last >= self.seconds:
            self.flush(now)

    def flush(self, now: float | None = None) -> None:
        if self.buf and self.sink is not None and self.n:
            self.sink("".join(self.buf))
            self.sent += self.n
        self.buf, self.n = [], 0
        self.last = now if now is not None else time.monotonic()


def _completion_fields(data: dict[str, object]) -> tuple[str, dict | None, str | None]:
    """(text, usage, finish reason) of a chat completion's JSON, each field checked for its type."""
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ValueError("the endpoint answered something that is not a chat completion")
    message = choices[0].get("message")
    text = message.get("content") if isinstance(message, dict) else None
    finish = choices[0].get("finish_reason")
    usage = data.get("usage")
    return (text if isinstance(text, str) else "", usage if isinstance(usage, dict) else None,
            finish if isinstance(finish, str) and finish else None)


def _in_thread(fn: Callable[[], object], out: "queue.Queue[tuple[str, object]]", cancel: threading.Event) -> threading.Thread:
    """Run ``fn`` (which feeds ``out``) in a daemon thread; its exceptions arrive as ``("error", exc)``."""

    def body() -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            if not cancel.is_set():
                out.put(("error", e))

    t = threading.Thread(target=body, name="llm-call", daemon=True)
    t.start()
    return t


@dataclass
class _Attempt:
    """One attempt's request and the channel between its reader thread and the waiting caller:
    the reader feeds ``out``, the caller sets ``cancel`` when it stops listening, and ``stream``
    is the open stream, which either side may close."""
    client: SdkClient
    kw: dict[str, object]
    deadline: float
    out: queue.Queue[tuple[str, object]] = field(default_factory=queue.Queue)
    cancel: threading.Event = field(default_factory=threading.Event)
    stream: object = None

    def close_stream(self) -> None:
        close = getattr(self.stream, "close", None)
        if close:
            try:
                close()
            except Exception:  # noqa: BLE001 - closing a half-read stream from either side
                pass


def _read_stream(call: _Attempt) -> None:
    """The reader thread of a streamed attempt: every chunk into ``call.out``, then ``("end", None)``;
    it stops early once the caller has cancelled."""
    stream = call.client.chat.completions.create(stream=True, **call.kw)
    call.stream = stream
    try:
        for chunk in stream:
            if call.cancel.is_set():
                return
            call.out.put(("chunk", chunk))
        call.out.put(("end", None))
    finally:
        call.close_stream()


@dataclass
class _StreamedReply:
    """The text, usage and finish reason gathered from a stream's chunks, counted against ``cap``."""
    cap: int
    batch: DeltaBatcher
    parts: list[str] = field(default_factory=list)
    size: int = 0
    usage: dict | None = None
    finish: str | None = None
    chunks: int = 0

    def take(self, chunk: object) -> bool:
        """Adds one chunk; False as soon as the text passes the cap (that piece is not shown)."""
        self.chunks += 1
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            self.usage = usage.model_dump()
        for ch in getattr(chunk, "choices", None) or []:
            delta = getattr(ch, "delta", None)
            piece = getattr(delta, "content", None) if delta is not None else None
            if piece:
                self.parts.append(piece)
                self.size += len(piece)
                if self.size > self.cap:
                    return False
                self.batch.add(piece)
            if getattr(ch, "finish_reason", None):
                self.finish = ch.finish_reason
        return True


class LLMClient:
    """One endpoint + model.  ``chat`` never raises for endpoint problems."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_s: float = 120.0,
        max_retries: int = 4,
        backoff_s: float = 1.0,
        temperature: float = 0.2,
        max_tokens: int = 4096,
        stream: bool = True,
        max_reply_chars: int = REPLY_CAP_CHARS,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.base_url = base_url
        self.model = model
        self.api_key_env = api_key_env
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.stream = stream
        self.max_reply_chars = min(REPLY_CAP_MAX_CHARS, max(REPLY_CAP_MIN_CHARS, int(max_reply_chars)))
        self._sleep = sleep
        self._client: SdkClient = None
        self._stream_options_ok = True
        self.answered = False  # the endpoint has sent something back (a reply or a chunk)

    @classmethod
    def from_config(cls, cfg: Config | None) -> "LLMClient":
        llm = cfg.llm if cfg is not None else {}
        return cls(
            base_url=llm["base_url"], model=llm["model"], api_key_env=llm["api_key_env"],
            timeout_s=llm["timeout_s"], max_retries=llm["max_retries"], backoff_s=llm["backoff_s"],
            temperature=llm["temperature"], max_tokens=llm["max_tokens"], stream=llm["stream"],
            max_reply_chars=llm.get("max_reply_chars", REPLY_CAP_CHARS),
        )

    # -------------------------------------------------------------- internals
    def _key(self) -> str | None:
        return os.environ.get(self.api_key_env) or None

    def _mask(self, text: str) -> str:
        key = self._key()
        if key and len(key) >= 4:
            text = text.replace(key, "***")
        return text

    def _get_client(self) -> SdkClient:
        if self._client is None:
            import openai

            self._client = openai.OpenAI(
                base_url=self.base_url,
                api_key=self._key() or "EMPTY",   # local servers (vLLM, Ollama) accept any key
                timeout=self.timeout_s,
                max_retries=0,                     # we retry ourselves, visibly
            )
        return self._client

    @staticmethod
    def _retry_after(exc: BaseException) -> float | None:
        resp = getattr(exc, "response", None)
        headers = getattr(resp, "headers", None)
        if not headers:
            return None
        try:
            val = headers.get("retry-after") or headers.get("Retry-After")
            return float(val) if val is not None else None
        except (TypeError, ValueError):
            return None

    def _classify(self, exc: BaseException) -> tuple[bool, str]:
        """(retryable?, one-line reason)."""
        import openai

        if isinstance(exc, openai.APITimeoutError):
            return True, f"timed out after {self.timeout_s:g} s"
        if isinstance(exc, openai.APIConnectionError):
            return True, f"cannot reach {self.base_url}: {_one_line(str(exc.__cause__ or exc), 120)}"
        if isinstance(exc, openai.APIStatusError):
            code = exc.status_code
            if code == 429:
                return True, "rate limited (HTTP 429)"
            if code >= 500:
                return True, f"server error (HTTP {code})"
            if code in (401, 403):
                return False, f"HTTP {code}: the endpoint refused the key; export ${self.api_key_env} with a valid key"
            if code == 404:
                return False, f"HTTP 404: check [llm] base_url ({self.base_url}) and model ({self.model})"
            return False, f"HTTP {code}: {_one_line(getattr(exc, 'message', str(exc)), 200)}"
        if isinstance(exc, openai.APIResponseValidationError):
            return False, "the endpoint answered something that is not a chat completion"
        return False, f"{type(exc).__name__}: {_one_line(str(exc), 200)}"

    def _reply_cap(self) -> int:
        return self.max_reply_chars

    def _too_long(self) -> CallFailed:
        return CallFailed(f"the reply passed {self._reply_cap()} characters ([llm] max_reply_chars); "
                          "reading stopped, the reply is ignored", False)

    def _read_bounded(self, client: SdkClient, kw: dict[str, object]) -> dict[str, object]:
        """A non-streamed completion read as raw bytes that stop at the cap, then parsed as JSON.

        The SDK's own ``create`` reads the whole body into memory first, whatever its size."""
        import json

        limit = REPLY_BYTES_PER_CHAR * self._reply_cap() + REPLY_ENVELOPE_BYTES
        body = bytearray()
        with client.chat.completions.with_streaming_response.create(**kw) as resp:
            for piece in resp.iter_bytes():
                body += piece
                if len(body) > limit:
                    raise self._too_long()
        try:
            data = json.loads(bytes(body))
        except (UnicodeDecodeError, ValueError):
            raise ValueError("the endpoint answered something that is not JSON") from None
        if not isinstance(data, dict):
            raise ValueError("the endpoint answered something that is not a chat completion")
        return data

    def _deadline_error(self) -> CallFailed:
        return CallFailed(f"timed out after {self.timeout_s:g} s without a complete reply "
                          "([llm] timeout_s bounds the whole call, streaming included)", True, endpoint=True)

    @staticmethod
    def _endpoint_fault(exc: BaseException) -> bool:
        """Whether ``exc`` is the endpoint failing (unreachable, silent, refusing the key or the
        path) rather than a reply that was wrong."""
        import openai

        if isinstance(exc, CallFailed):
            return exc.endpoint
        if isinstance(exc, openai.APIConnectionError):   # includes APITimeoutError
            return True
        return isinstance(exc, openai.APIStatusError) and exc.status_code in CONFIG_STATUSES

    def _once(self, messages: list[dict], role: str, on_delta: Callable[[str], None] | None) -> tuple[str, dict | None, str | None]:
        """One attempt, within ``timeout_s`` from request to last byte.

        The SDK's timeout bounds each socket read, so a server that drips a token
        a second never trips it; here the request runs in a helper thread and this
        thread waits on its output with the attempt's deadline.  A reply that ends
        without its finish reason was cut short and is a failed attempt, never a plan.
        """
        call = _Attempt(client=self._get_client(), deadline=time.monotonic() + self.timeout_s, kw=dict(
            model=self.model, messages=messages, temperature=self.temperature,
            max_tokens=self.max_tokens, extra_headers={"X-L2tui-Role": role}, timeout=self.timeout_s,
        ))
        if not self.stream:
            return self._once_whole(call, on_delta)
        if self._stream_options_ok:
            call.kw["stream_options"] = {"include_usage": True}
        return self._once_streamed(call, on_delta)

    def _once_whole(self, call: _Attempt, on_delta: Callable[[str], None] | None) -> tuple[str, dict | None, str | None]:
        """A non-streamed attempt: the whole reply read (bounded) in the helper thread, shown at once."""
        _in_thread(lambda: call.out.put(("done", self._read_bounded(call.client, call.kw))), call.out, call.cancel)
        try:
            kind, resp = call.out.get(timeout=max(0.0, call.deadline - time.monotonic()))
        except queue.Empty:
            call.cancel.set()
            raise self._deadline_error() from None
        if kind == "error" and isinstance(resp, BaseException):
            raise resp
        if not isinstance(resp, dict):
            raise ValueError("the endpoint answered something that is not a chat completion")
        self.answered = True
        text, usage, finish = _completion_fields(resp)
        if not finish:
            raise CallFailed("the reply has no finish reason (cut short)", True)
        if len(text) > self._reply_cap():
            raise self._too_long()
        if on_delta and text:
            shown = DeltaBatcher(on_delta)
            shown.add(text)
            shown.flush()
        return text, usage, finish

    def _once_streamed(self, call: _Attempt, on_delta: Callable[[str], None] | None) -> tuple[str, dict | None, str | None]:
        """A streamed attempt: chunks gathered as they come, shown in batches, stopped at the cap
        or the deadline; the stream is closed however the attempt ends."""
        reply = _StreamedReply(cap=self._reply_cap(), batch=DeltaBatcher(on_delta))
        _in_thread(lambda: _read_stream(call), call.out, call.cancel)
        try:
            while True:
                kind, chunk = self._next_item(call)
                if kind == "end":
                    break
                self.answered = True
                if not reply.take(chunk):
                    raise self._too_long()
        finally:
            call.cancel.set()
            reply.batch.flush()
            call.close_stream()
        if reply.chunks == 0:
            raise ValueError("the endpoint sent no stream chunks (not an OpenAI-compatible streaming reply)")
        if not reply.finish:
            raise CallFailed("the stream ended before its finish reason (reply cut short)", True)
        return "".join(reply.parts), reply.usage, reply.finish

    def _next_item(self, call: _Attempt) -> tuple[str, object]:
        """The reader thread's next ``(kind, payload)``; the reader's error, or the deadline's once
        it has passed, is raised here."""
        left = call.deadline - time.monotonic()
        if left <= 0:
            raise self._deadline_error()
        try:
            kind, item = call.out.get(timeout=left)
        except queue.Empty:
            raise self._deadline_error() from None
        if kind == "error" and isinstance(item, BaseException):
            raise item
        return kind, item

    # -------------------------------------------------------------- public
    def chat(
        self,
        messages: list[dict],
        *,
        role: str = "coder",
        on_delta: Callable[[str], None] | None = None,
        on_retry: Callable[[int, str, float], None] | None = None,
    ) -> LLMResult:
        """Send ``messages``; returns the full text, usage and timing (never raises for endpoint trouble)."""
        import openai

        t0 = time.monotonic()
        attempt = 0
        last_err = "no attempt made"
        endpoint_fault = False
        while True:
            attempt += 1
            try:
                text, usage, finish = self._once(messages, role, on_delta)
                est = usage is None
                if usage is None:  # servers without usage reporting: estimate (4 chars a token)
                    usage = {
                        "prompt_tokens": sum(len(str(m.get("content", ""))) for m in messages) // 4,
                        "completion_tokens": len(text) // 4,
                    }
                usage = {"prompt_tokens": int(usage.get("prompt_tokens") or 0),
                         "completion_tokens": int(usage.get("completion_tokens") or 0)}
                if est:
                    usage["estimated"] = True
                if not text.strip():
                    return LLMResult(False, text, usage, time.monotonic() - t0, "the model sent an empty reply",
                                     attempt, self.model, finish)
                return LLMResult(True, text, usage, time.monotonic() - t0, None, attempt, self.model, finish)
            except Exception as exc:  # noqa: BLE001 - every endpoint failure becomes a result
                if (isinstance(exc, openai.BadRequestError) and self._stream_options_ok and self.stream
                        and "stream_options" in str(exc)):
                    self._stream_options_ok = False   # old servers: retry at once without it
                    attempt -= 1
                    continue
                if isinstance(exc, CallFailed):
                    retryable, reason = exc.retryable, str(exc)
                elif isinstance(exc, openai.OpenAIError):
                    retryable, reason = self._classify(exc)
                else:
                    retryable, reason = False, "garbage reply from the endpoint: " + _one_line(str(exc), 200)
                last_err = self._mask(reason)
                endpoint_fault = self._endpoint_fault(exc)
                if isinstance(exc, openai.APIStatusError) and exc.status_code not in CONFIG_STATUSES:
                    self.answered = True   # a busy or picky server is still a server
                if not retryable or attempt > self.max_retries:
                    break
                delay = min(RETRY_CAP_S, self.backoff_s * (2 ** (attempt - 1)))
                ra = self._retry_after(exc)
                if ra is not None:
                    delay = min(RETRY_CAP_S, max(delay, ra))
                if on_retry is not None:
                    on_retry(attempt, last_err, delay)
                self._sleep(delay)
        suffix = f" (after {attempt} attempts)" if attempt > 1 else ""
        return LLMResult(False, "", {"prompt_tokens": 0, "completion_tokens": 0}, time.monotonic() - t0,
                         _one_line(last_err + suffix), attempt, self.model,
                         endpoint_unusable=endpoint_fault and not self.answered)

"""From a request frame to a response frame: decode, route, handle, encode, measure.

The dispatcher is transport-free: the connection hands it a frame and gets back the
response bytes, None (no response, e.g. Produce acks=0) or an awaitable of either.
Synchronous handlers are answered without creating a task, which keeps small requests
cheap; handlers that wait (long-poll Fetch, acks=all Produce, group joins) return an
awaitable and the connection holds back later requests until it resolves.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import datetime
import inspect
import time
from collections.abc import Awaitable, Generator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kio.schema.errors import ErrorCode

from kernel.client_quotas import (
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
)
from kernel.fetch_session import INVALID_SESSION_ID
from kernel.handlers.api_versions import unsupported_version_response
from kernel.handlers.fetch import fetch_replica_id
from kernel.metrics import BrokerMetrics
from kernel.network.client_quota_manager import ClientQuotaManager
from kernel.protocol.build import has_field
from kernel.protocol.codec import (
    InvalidRequest,
    RecentRequests,
    RecentResponses,
    ResponseFrame,
    decode_peeked,
    default_entity,
    encode_response_frame,
    peek_header,
    response_class,
)
from kernel.protocol.errors import KafkaError
from kernel.requests import Authorize, AuthorizeByResourceType, RequestContext, Session
from kernel.routing import BROKER, Routes
from kernel.services import BrokerServices

API_VERSIONS = 18
# Requests allowed before SASL authentication completes (KIP-152 ordering).
PRE_AUTH_APIS = frozenset({17, 18, 36})

ResponseBytes = bytes | ResponseFrame | None
PRODUCE = 0
FETCH = 1
# A request frame this large (thousands of entries) is decoded, and its answer encoded,
# off the event loop: 100,000 topic names take 0.1 s to decode and 0.3 s to answer.
# Produce and Fetch are left on it: their size is record bytes, which cost little.
OFF_LOOP_FRAME_BYTES = 64 * 1024
RECORD_APIS = frozenset({PRODUCE, FETCH})
CODEC_THREADS = 2


# Kafka does not throttle the SASL exchange (its authenticator answers it) nor cluster
# actions such as WriteTxnMarkers between brokers.
QUOTA_EXEMPT_APIS = frozenset({17, 27, 36})
# KIP-599: the APIs controller_mutation_rate applies to (CreateTopics, DeleteTopics,
# CreatePartitions), and the version from which each is strict (Kafka's ControllerApis).
MUTATION_STRICT_SINCE = {19: 6, 20: 5, 37: 3}


class _Timed:
    """A handler's awaitable, with the time its steps ran on the event loop (Kafka
    measures a request's time on its handler threads; waits are not counted here
    either)."""

    __slots__ = ("_pending", "seconds")

    def __init__(self, pending: Awaitable[Any]) -> None:
        self._pending = pending
        self.seconds = 0.0

    def __await__(self) -> Generator[Any, Any, Any]:
        steps = self._pending.__await__()
        value: Any = None
        error: BaseException | None = None
        while True:
            began = time.perf_counter()
            try:
                yielded = steps.throw(error) if error is not None else steps.send(value)
            except StopIteration as done:
                self.seconds += time.perf_counter() - began
                return done.value
            except BaseException:
                self.seconds += time.perf_counter() - began
                raise
            self.seconds += time.perf_counter() - began
            try:
                value, error = (yield yielded), None
            except BaseException as e:  # a cancellation goes to the handler
                value, error = None, e



class RequestDispatcher:
    def __init__(self, routes: Routes, services: BrokerServices, authorize: Authorize,
                 authorize_by_resource_type: AuthorizeByResourceType,
                 metrics: BrokerMetrics, log: Any) -> None:
        # This dispatcher's listener role's table (for_role gives the others').
        self._all_routes = routes
        self._routes = routes.table(BROKER)
        self._services = services
        self._authorize = authorize
        self._authorize_by_resource_type = authorize_by_resource_type
        self._metrics = metrics
        self._log = log
        self.log = log
        # Types of the answers handlers gave that are not awaitable (kio responses):
        # inspect.isawaitable goes through an ABC check on every call.
        self._answer_types: set[type] = {type(None)}
        self.recent_requests = RecentRequests()
        self.recent_responses = RecentResponses()
        self.client_quotas = ClientQuotaManager(lambda: services.metadata.client_quotas(),
                                                metrics)
        # Big frames' decoding and encoding, in threads of their own: the loop's default
        # executor also writes the metadata log, which big requests must not hold up.
        self._codec_threads = ThreadPoolExecutor(CODEC_THREADS,
                                                 thread_name_prefix="request-codec")

    def close(self) -> None:
        self._codec_threads.shutdown(wait=False, cancel_futures=True)

    def for_role(self, role: str) -> RequestDispatcher:
        """This dispatcher for the listeners of ``role``: everything shared (quotas,
        codec threads, recent frames, metrics), routing through that role's table. A
        listener takes it once, so a request's route stays one dict index."""
        view = copy.copy(self)
        view._routes = self._all_routes.table(role)
        return view

    def dispatch(
        self, frame: bytes | memoryview, session: Session,
        decoded: tuple[str | None, Any] | None = None,
    ) -> ResponseBytes | Awaitable[ResponseBytes]:
        """Raises InvalidRequest when the connection must be closed. ``decoded``: the
        frame's (client id, body), when it was decoded off the loop."""
        api_key, api_version, correlation_id = peek_header(frame)
        route = self._routes.get(api_key)
        if route is None or not route.min_version <= api_version <= route.max_version:
            if api_key == API_VERSIONS:
                return unsupported_version_response(correlation_id, self._routes)
            if route is None:
                # Kafka closes the connection too ("request for disabled api").
                raise InvalidRequest(f"unsupported API key {api_key} on a "
                                     f"{self._routes.role} listener")
            raise InvalidRequest(
                f"unsupported version {api_version} of API key {api_key} "
                f"(serving {route.min_version}..{route.max_version})"
            )
        if not session.authenticated and api_key not in PRE_AUTH_APIS:
            raise InvalidRequest(f"API key {api_key} before authentication completed")
        expires = session.session_expires_at
        if expires is not None and api_key not in PRE_AUTH_APIS and time.monotonic() >= expires:
            self._metrics.expired_connections_killed.inc()
            raise InvalidRequest(f"API key {api_key} after the SASL session expired "
                                 "without re-authentication (KIP-368)")
        if decoded is not None:
            client_id, body = decoded
        elif len(frame) >= OFF_LOOP_FRAME_BYTES and api_key not in RECORD_APIS:
            return self._decoded_off_loop(frame, session)
        else:
            client_id, body = self.recent_requests.decode(frame, api_key, api_version)
        ctx = RequestContext(
            self._services, self._authorize, session, api_key, api_version, correlation_id,
            client_id, len(frame), self._authorize_by_resource_type, self.recent_responses,
        )
        quotas_on = self.client_quotas.active
        if quotas_on and api_key == FETCH:
            body = self._fetch_within_quota(ctx, body)
        mutations = quotas_on and api_key in MUTATION_STRICT_SINCE
        if mutations and self.client_quotas.applies(CONTROLLER_MUTATION_RATE):
            ctx.mutation_quota = self.client_quotas.mutation_quota(
                session.principal, client_id, api_version >= MUTATION_STRICT_SINCE[api_key])
        # The handler's time counts only where a request quota could apply.
        timed = quotas_on and api_key not in QUOTA_EXEMPT_APIS and self.client_quotas.applies(
            REQUEST_PERCENTAGE)
        started = time.perf_counter()
        try:
            result = route.handler(ctx, body)
        except InvalidRequest:
            raise  # the handler closes the connection (Produce acks=0 failing)
        except KafkaError as e:
            return self._finish(ctx, self._error_response(ctx, e.error_code, e.message), started)
        except Exception:
            self._log.exception("handler failed", api_key=api_key, api_version=api_version)
            return self._finish(
                ctx, self._error_response(ctx, ErrorCode.unknown_server_error, None), started
            )
        if type(result) not in self._answer_types:
            if inspect.isawaitable(result):
                if timed:
                    return self._finish_later(ctx, body, _Timed(result), started)
                return self._finish_later(ctx, body, result, started)
            self._answer_types.add(type(result))
        if quotas_on and (api_key <= FETCH or timed or mutations):
            result = self._throttled(ctx, body, result,
                                     time.perf_counter() - started if timed else None)
        return self._finish(ctx, result, started)

    async def _decoded_off_loop(self, frame: bytes | memoryview,
                                session: Session) -> ResponseBytes:
        """A big frame (thousands of entries) is decoded in a thread: kio's reading is
        a pure function of the bytes, and the loop serves other clients meanwhile. The
        handler then runs on the loop as for any request."""
        api_key, api_version, _ = peek_header(frame)
        decoded = await asyncio.get_running_loop().run_in_executor(
            self._codec_threads, decode_peeked, frame, api_key, api_version)
        result = self.dispatch(frame, session, decoded)
        return await result if inspect.isawaitable(result) else result

    async def _finish_later(
        self, ctx: RequestContext, request: Any, pending: Awaitable[Any], started: float
    ) -> ResponseBytes:
        try:
            result = await pending
        except InvalidRequest:
            raise
        except KafkaError as e:
            result = self._error_response(ctx, e.error_code, e.message)
        except Exception:
            self._log.exception("handler failed", api_key=ctx.api_key, api_version=ctx.api_version)
            result = self._error_response(ctx, ErrorCode.unknown_server_error, None)
        timed = isinstance(pending, _Timed)
        if self.client_quotas.active and (ctx.api_key <= FETCH or timed
                                          or ctx.api_key in MUTATION_STRICT_SINCE):
            result = self._throttled(ctx, request, result,
                                     pending.seconds if isinstance(pending, _Timed) else None)
        finished = self._finish(ctx, result, started)
        return await finished if inspect.isawaitable(finished) else finished

    def _fetch_within_quota(self, ctx: RequestContext, request: Any) -> Any:
        """A consumer's fetch asks for no more than its quota allows in the windows, as
        Kafka bounds fetch.max.bytes, so one answer is never throttled away whole."""
        if fetch_replica_id(request) >= 0:
            return request
        limit = self.client_quotas.max_bytes_in_window(
            CONSUMER_BYTE_RATE, ctx.session.principal, ctx.client_id)
        if limit is None or request.max_bytes <= limit:
            return request
        max_bytes = int(limit)
        return dataclasses.replace(request, max_bytes=max_bytes,
                                   min_bytes=min(request.min_bytes, max_bytes))

    def _throttled(self, ctx: RequestContext, request: Any, response: Any,
                   handler_s: float | None) -> Any:
        """The client's quotas, as Kafka's: Produce request bytes and Fetch record bytes
        against its byte rate (a follower's fetch is exempt), with ``handler_s``
        (request_percentage applies) the handler's time against its request quota, and
        the partitions a topic mutation took against its controller mutation quota. Over
        any, the answer carries the larger throttle time and the connection is muted
        that long once it is written (KIP-219); a throttled fetch answers no partitions
        (_throttled_fetch). A follower's fetch is exempt from every client quota."""
        quotas, session, client_id = self.client_quotas, ctx.session, ctx.client_id
        if ctx.api_key == FETCH and fetch_replica_id(request) >= 0:
            return response  # Kafka exempts a follower's fetch from client quotas
        byte_ms, fetched = 0, 0
        if ctx.api_key == PRODUCE:
            byte_ms = quotas.record(PRODUCER_BYTE_RATE, session.principal, client_id,
                                    ctx.size)
        elif ctx.api_key == FETCH and response is not None:
            fetched = sum(len(p.records or b"") for t in response.responses
                          for p in t.partitions)
            byte_ms = quotas.record(CONSUMER_BYTE_RATE, session.principal, client_id, fetched)
        request_ms = 0 if handler_s is None else quotas.record(
            REQUEST_PERCENTAGE, session.principal, client_id, handler_s * 100)
        mutation_ms = quotas.mutations_recorded(ctx.mutation_quota)
        throttle_ms = max(byte_ms, request_ms, mutation_ms)
        if throttle_ms <= 0:
            return response
        session.throttle_after_response_ms = throttle_ms
        if response is None:  # acks=0: no answer, the mute alone throttles
            return None
        throttle_time = datetime.timedelta(milliseconds=throttle_ms)
        if ctx.api_key == FETCH:
            return self._throttled_fetch(ctx, request, response, throttle_time, fetched)
        if has_field(type(response), "throttle_time"):
            return dataclasses.replace(response, throttle_time=throttle_time)
        return response

    def _throttled_fetch(self, ctx: RequestContext, request: Any, response: Any,
                         throttle_time: datetime.timedelta, fetched: int) -> Any:
        """Kafka's getThrottledResponse: no partitions (their bytes are taken back from
        the rate and their slices released now); a full fetch's session is not kept
        (session id 0), an incremental one's takes back the answer."""
        if fetched:
            self.client_quotas.unrecord(CONSUMER_BYTE_RATE, ctx.session.principal,
                                        ctx.client_id, fetched)
        for topic in response.responses:
            for partition in topic.partitions:
                release = getattr(partition.records, "release", None)
                if release is not None:
                    release()
        values: dict[str, Any] = {"throttle_time": throttle_time, "responses": ()}
        session_id = getattr(response, "session_id", INVALID_SESSION_ID)
        if session_id != INVALID_SESSION_ID:
            values["session_id"] = self._services.fetch_sessions.throttled(
                session_id, request.session_epoch)
        return dataclasses.replace(response, **values)

    def _finish(self, ctx: RequestContext, body: Any,
                started: float) -> ResponseBytes | Awaitable[ResponseBytes]:
        if body is None:
            self._metrics.request_done(ctx.api_key, time.perf_counter() - started, ctx.size, 0)
            return None
        if (ctx.size >= OFF_LOOP_FRAME_BYTES or ctx.big_answer) and \
                ctx.api_key not in RECORD_APIS:
            return self._encoded_off_loop(ctx, body, started)
        frame = self.recent_responses.encode(ctx.api_key, ctx.api_version, ctx.correlation_id,
                                             body)
        return self._sent(ctx, body, frame, started)

    async def _encoded_off_loop(self, ctx: RequestContext, body: Any,
                                started: float) -> ResponseBytes:
        """The answer to a big request is encoded in a thread: kio's entities are
        immutable, and encoding reads nothing else."""
        frame = await asyncio.get_running_loop().run_in_executor(
            self._codec_threads, encode_response_frame, ctx.api_key, ctx.api_version,
            ctx.correlation_id, body)
        return self._sent(ctx, body, frame, started)

    def _sent(self, ctx: RequestContext, body: Any, frame: bytes | ResponseFrame,
              started: float) -> ResponseBytes:
        size = len(frame) if type(frame) is bytes else frame.size
        self._metrics.request_done(ctx.api_key, time.perf_counter() - started, ctx.size, size)
        code = getattr(body, "error_code", None)
        if code:
            self._metrics.error(code)
        return frame

    def _error_response(self, ctx: RequestContext, code: ErrorCode, message: str | None) -> Any:
        """Kafka's top-level error answer; APIs without a top-level error code get their
        empty response (handlers of those report errors per item themselves)."""
        cls = response_class(ctx.api_key, ctx.api_version)
        values: dict[str, Any] = {}
        if has_field(cls, "error_code"):
            values["error_code"] = code
        if message is not None and has_field(cls, "error_message"):
            values["error_message"] = message
        if not values:
            self._metrics.error(code)
        return default_entity(cls, **values)

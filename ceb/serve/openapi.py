"""The OpenAPI 3.1 document of ``ceb serve`` (served at ``GET /openapi.json``)."""

from __future__ import annotations

from typing import Any

from ceb.serve.payloads import MAX_HISTORY
from ceb.version import __version__

__all__ = ["openapi_document"]

_STR = {"type": "string"}
_OPT_STR = {"type": ["string", "null"]}

_STEP = {
    "type": "object",
    "description": "A step of SCHEMA.md (version 1). label and reward are accepted and dropped.",
    "required": ["state", "action", "observation"],
    "properties": {
        "state": _STR,
        "action": {"type": "string", "minLength": 1},
        "observation": _STR,
        "reasoning": _OPT_STR,
        "op": _OPT_STR,
        "element": _OPT_STR,
        "value": _OPT_STR,
        "reward": {"type": ["number", "null"]},
        "actor_logprobs": {"type": ["array", "null"], "items": {"type": "number", "maximum": 0}},
        "label": {"enum": [0, 1, None]},
    },
    "additionalProperties": False,
}

_TOOL_CALL = {
    "type": "object",
    "description": "A tool call; the action becomes `name {arguments as canonical JSON}`.",
    "required": ["name"],
    "properties": {"name": _STR, "arguments": {"type": ["object", "string"]}},
}

_MESSAGE = {
    "type": "object",
    "description": "An OpenAI-style chat message: each assistant tool call is an earlier action, the tool message "
    "answering it (tool_call_id) its observation; the system message is the actor's prompt.",
    "required": ["role"],
    "properties": {
        "role": {"enum": ["system", "developer", "user", "assistant", "tool"]},
        "content": {"type": ["string", "array", "null"]},
        "tool_calls": {"type": "array"},
        "tool_call_id": _STR,
    },
}

_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": _STR,
        "field": {"type": "string", "description": "The offending field, e.g. history[2].action"},
        "problems": {"type": "array", "items": {"type": "object"}},
    },
}

_STREAM = {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"}


def _errors(*codes: int) -> dict[str, Any]:
    text = {
        400: "The body is not JSON.",
        401: "Missing or wrong bearer token.",
        403: "Sent from a web page whose Origin is not in serve.allowed_origins.",
        408: "The body did not arrive within serve.body_timeout_s; the connection is closed.",
        413: "The body is over the size limit.",
        415: "The body is not sent as Content-Type: application/json.",
        421: "The Host header names neither the gate's address nor serve.allowed_hosts (DNS rebinding).",
        409: "Refused, and retrying unchanged will not help: a new stream beyond gate.max_streams (`field`: stream),"
        " or a trajectory id the stream accepted before with other content (`field`: trajectory.id).",
        422: "A field is missing, unknown or malformed (`field` names it).",
        503: "The stream has too many trajectories waiting, or serve.max_connections are open (retry after Retry-After"
        " seconds), or the state directory cannot be written (read-only, permissions); nothing was accepted.",
        507: "The state directory's disk is full; nothing was accepted: the same request succeeds once there is room.",
    }
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    return {str(c): {"description": text[c], "content": error} for c in codes}


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the service's endpoints."""
    score_request = {
        "type": "object",
        "required": ["stream", "trajectory_id", "task", "domain", "action"],
        "properties": {
            "stream": _STREAM,
            "trajectory_id": {"type": "string", "description": "The agent's run; name it again when it finishes."},
            "task": _STR,
            "domain": {"type": "string", "pattern": "^[a-z][a-z0-9_-]*$", "description": "web, mobile, shell, sql..."},
            "state": _STR,
            "action": {"oneOf": [{"type": "string", "minLength": 1}, _TOOL_CALL]},
            "reasoning": _OPT_STR,
            "op": _OPT_STR,
            "element": _OPT_STR,
            "value": _OPT_STR,
            "actor_logprobs": {"type": "array", "items": {"type": "number", "maximum": 0}},
            "history": {"type": "array", "items": _STEP, "maxItems": MAX_HISTORY},
            "messages": {"type": "array", "items": _MESSAGE, "maxItems": MAX_HISTORY},
            "actor_prompt": _STR,
        },
        "additionalProperties": False,
    }
    confidence = {
        "type": "object",
        "properties": {
            "stream": _STR,
            "trajectory_id": _STR,
            "step": {"type": "integer", "description": "t = len(history)"},
            "score": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
            "decision": {"enum": ["allow", "review", "block"]},
            "status": {"enum": ["scored", "failed", "not_available"]},
            "error": _OPT_STR,
            "precedents": {"type": "array", "items": {"type": "object"}},
            "repetition_flag": {"type": "boolean"},
            "bank_version": {"type": "integer"},
            "bank_size": {"type": "integer"},
            "latency_s": {"type": "number"},
            "critic_s": {"type": "number"},
            "retrieval_s": {"type": "number"},
            "overhead_s": {"type": "number", "description": "latency_s - critic_s: seconds the gate added"},
        },
    }
    trajectory_request = {
        "type": "object",
        "required": ["stream", "trajectory"],
        "properties": {
            "stream": _STREAM,
            "trajectory": {
                "type": "object",
                "description": "A finished trajectory (SCHEMA.md version 1), observations included.",
                "required": ["id", "task", "domain", "steps"],
                "properties": {
                    "id": _STR,
                    "task": _STR,
                    "domain": _STR,
                    "actor": _OPT_STR,
                    "env": _OPT_STR,
                    "steps": {"type": "array", "items": _STEP, "minItems": 1},
                    "meta": {"type": ["object", "null"]},
                },
                "additionalProperties": False,
            },
        },
        "additionalProperties": False,
    }

    def body(schema: str) -> dict[str, Any]:
        ref = {"$ref": f"#/components/schemas/{schema}"}
        return {"required": True, "content": {"application/json": {"schema": ref}}}

    def ok(description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"description": description}
        if schema is not None:
            out["content"] = {"application/json": {"schema": schema}}
        return out

    return {
        "openapi": "3.1.0",
        "info": {
            "title": "ceb gate",
            "version": __version__,
            "description": "Calibrated step-level confidence for LLM agents (Critic Experience Bank): score a "
            "proposed action before it runs; send the finished trajectory so the stream's bank learns from it.",
        },
        "components": {
            "schemas": {
                "ScoreRequest": score_request,
                "Confidence": confidence,
                "TrajectoryRequest": trajectory_request,
                "Error": _ERROR,
            },
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
        "paths": {
            "/v1/score": {
                "post": {
                    "summary": "Score a proposed action before it runs.",
                    "requestBody": body("ScoreRequest"),
                    "responses": {
                        "200": ok("The confidence.", {"$ref": "#/components/schemas/Confidence"}),
                        **_errors(400, 401, 403, 408, 409, 413, 415, 421, 422, 503),
                    },
                }
            },
            "/v1/trajectories": {
                "post": {
                    "summary": "Send a finished trajectory; acknowledged (202) once durable.",
                    "requestBody": body("TrajectoryRequest"),
                    "responses": {
                        "202": ok(
                            "Accepted and durable; hindsight and the bank update follow in seq order. The same id "
                            "and content sent again gets the same answer (header Idempotent-Replayed: true) and is "
                            "banked once."
                        ),
                        **_errors(400, 401, 403, 408, 409, 413, 415, 421, 422, 503, 507),
                    },
                }
            },
            "/v1/streams": {"get": {"summary": "Bank statistics of every stream.", "responses": {"200": ok("Stats.")}}},
            "/v1/streams/{stream}": {
                "get": {
                    "summary": "Bank statistics of one stream.",
                    "parameters": [{"name": "stream", "in": "path", "required": True, "schema": _STREAM}],
                    "responses": {"200": ok("Stats."), "404": ok("Unknown stream.")},
                }
            },
            "/health": {
                "get": {
                    "summary": "Liveness and the critic's state (no token needed).",
                    "security": [],
                    "responses": {
                        "200": ok("OK: `status` is `ok`."),
                        "503": ok(
                            "`status` is `error`: the state directory cannot be written (`state` says why); or "
                            "`degraded`: the critic keeps failing or was unreachable at start (`critic.reason`, "
                            "`critic.endpoint`, `critic.consecutive_failures`, `critic.last_error`, `critic.since`)."
                        ),
                    },
                }
            },
            "/metrics": {"get": {"summary": "Prometheus metrics.", "responses": {"200": ok("Text format.")}}},
            "/openapi.json": {"get": {"summary": "This document.", "responses": {"200": ok("OpenAPI 3.1.")}}},
        },
    }

"""The official Python SDKs pointed at `tamp proxy`, driven by tests/e2e/proxy.rs.

    python proxy_sdk.py anthropic|openai|responses BASE_URL CONVERSATION_FILE RUN_ID

Runs one scenario per SDK and prints what the SDK saw as one JSON object: a non-streaming
call with tools, a streaming call (events in order), count_tokens (Anthropic), a call the
upstream answers 429 once (the SDK's own retry), and one it answers 400 (the SDK's own error
type). `responses` drives the `openai` SDK's Responses API (`responses.create`, streaming and
not, its stream helper, `responses.compact`, a request continuing `previous_response_id`).
The key comes from TAMP_TEST_KEY; the Rust test checks what the upstream received.
"""

import json
import os
import sys
import time

KEY = os.environ["TAMP_TEST_KEY"]

ANTHROPIC_TOOLS = [
    {
        "name": "get_weather",
        "description": "The weather in a city.",
        "input_schema": {
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
        },
    }
]

OPENAI_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        },
    }
]


def anthropic_scenarios(base_url, conversation, run_id):
    import anthropic

    headers = {
        "anthropic-beta": "token-efficient-tools-2025-02-19",
        "x-client-marker": "marker-" + run_id,
        "x-tamp-thread-id": "sdk-thread-" + run_id,
    }
    client = anthropic.Anthropic(
        api_key=KEY, base_url=base_url, default_headers=headers, max_retries=0
    )
    request = dict(
        model="claude-test",
        max_tokens=256,
        system=conversation["system"],
        messages=conversation["messages"],
        tools=ANTHROPIC_TOOLS,
    )
    out = {}

    raw = client.messages.with_raw_response.create(**request)
    message = raw.parse()
    out["create"] = {
        "content": [block.model_dump() for block in message.content],
        "stop_reason": message.stop_reason,
        "compaction": raw.headers.get("x-tamp-compaction"),
        "request_id": raw.headers.get("request-id"),
    }

    # The raw events, in the order the SDK yields them.
    events, text = [], ""
    raw = client.messages.with_raw_response.create(stream=True, **request)
    compaction = raw.headers.get("x-tamp-compaction")
    for event in raw.parse():
        events.append(event.type)
        if event.type == "content_block_delta" and event.delta.type == "text_delta":
            text += event.delta.text
    out["stream"] = {"events": events, "text": text, "compaction": compaction}

    # The SDK's stream helper, which assembles the message (tool input included).
    with client.messages.stream(**request) as stream:
        final = stream.get_final_message()
    out["stream_helper"] = {
        "content": [block.model_dump() for block in final.content],
        "stop_reason": final.stop_reason,
    }

    raw = client.messages.with_raw_response.count_tokens(
        model="claude-test",
        system=conversation["system"],
        messages=conversation["messages"],
        tools=ANTHROPIC_TOOLS,
    )
    out["count_tokens"] = {
        "input_tokens": raw.parse().input_tokens,
        "compaction": raw.headers.get("x-tamp-compaction"),
    }

    hello = [{"role": "user", "content": "hello"}]
    retrying = anthropic.Anthropic(
        api_key=KEY,
        base_url=base_url,
        max_retries=2,
        default_headers={"x-mock-fail": "429:1:a429-" + run_id},
    )
    started = time.monotonic()
    message = retrying.messages.create(model="claude-test", max_tokens=16, messages=hello)
    out["retry"] = {
        "text": message.content[0].text,
        "seconds": time.monotonic() - started,
    }

    failing = anthropic.Anthropic(
        api_key=KEY,
        base_url=base_url,
        max_retries=2,
        default_headers={"x-mock-fail": "400:99:a400-" + run_id},
    )
    try:
        failing.messages.create(model="claude-test", max_tokens=16, messages=hello)
        out["bad_request"] = None
    except anthropic.BadRequestError as e:
        out["bad_request"] = {
            "class": type(e).__name__,
            "status": e.status_code,
            "type": e.body["error"]["type"],
            "message": e.body["error"]["message"],
        }
    return out


def openai_scenarios(base_url, conversation, run_id):
    import openai

    headers = {
        "x-client-marker": "marker-" + run_id,
        "x-tamp-thread-id": "sdk-thread-" + run_id,
    }
    client = openai.OpenAI(
        api_key=KEY, base_url=base_url + "/v1", default_headers=headers, max_retries=0
    )
    request = dict(model="gpt-test", messages=conversation["messages"], tools=OPENAI_TOOLS)
    out = {}

    raw = client.chat.completions.with_raw_response.create(**request)
    completion = raw.parse()
    message = completion.choices[0].message
    out["create"] = {
        "content": message.content,
        "tool_calls": [
            {"name": c.function.name, "arguments": c.function.arguments}
            for c in (message.tool_calls or [])
        ],
        "finish_reason": completion.choices[0].finish_reason,
        "compaction": raw.headers.get("x-tamp-compaction"),
        "request_id": raw.headers.get("x-request-id"),
    }

    chunks, text, arguments, finish, usage = 0, "", "", None, None
    raw = client.chat.completions.with_raw_response.create(
        stream=True, stream_options={"include_usage": True}, **request
    )
    compaction = raw.headers.get("x-tamp-compaction")
    for chunk in raw.parse():
        chunks += 1
        if chunk.usage is not None:
            usage = chunk.usage.total_tokens
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for call in choice.delta.tool_calls or []:
                arguments += call.function.arguments or ""
            finish = choice.finish_reason or finish
    out["stream"] = {
        "chunks": chunks,
        "text": text,
        "arguments": arguments,
        "finish_reason": finish,
        "usage": usage,
        "compaction": compaction,
    }

    hello = [{"role": "user", "content": "hello"}]
    retrying = openai.OpenAI(
        api_key=KEY,
        base_url=base_url + "/v1",
        max_retries=2,
        default_headers={"x-mock-fail": "429:1:o429-" + run_id},
    )
    started = time.monotonic()
    completion = retrying.chat.completions.create(model="gpt-test", messages=hello)
    out["retry"] = {
        "text": completion.choices[0].message.content,
        "seconds": time.monotonic() - started,
    }

    failing = openai.OpenAI(
        api_key=KEY,
        base_url=base_url + "/v1",
        max_retries=2,
        default_headers={"x-mock-fail": "400:99:o400-" + run_id},
    )
    try:
        failing.chat.completions.create(model="gpt-test", messages=hello)
        out["bad_request"] = None
    except openai.BadRequestError as e:
        out["bad_request"] = {
            "class": type(e).__name__,
            "status": e.status_code,
            "type": e.body["type"] if isinstance(e.body, dict) else None,
            "message": e.message,
        }
    return out


# The Responses API takes the same function tools, not nested under "function".
RESPONSES_TOOLS = [{"type": "function", **tool["function"]} for tool in OPENAI_TOOLS]


def responses_scenarios(base_url, conversation, run_id):
    import openai

    headers = {"x-client-marker": "marker-" + run_id}
    client = openai.OpenAI(
        api_key=KEY, base_url=base_url + "/v1", default_headers=headers, max_retries=0
    )
    request = dict(
        model="gpt-test",
        input=conversation["input"],
        tools=RESPONSES_TOOLS,
        store=False,
        prompt_cache_key="sdk-session-" + run_id,
    )
    out = {}

    raw = client.responses.with_raw_response.create(**request)
    response = raw.parse()
    out["create"] = {
        "text": response.output_text,
        "calls": [
            {"name": item.name, "arguments": item.arguments}
            for item in response.output
            if item.type == "function_call"
        ],
        "compaction": raw.headers.get("x-tamp-compaction"),
        "thread": raw.headers.get("x-tamp-thread"),
    }

    events, text = [], ""
    raw = client.responses.with_raw_response.create(stream=True, **request)
    compaction = raw.headers.get("x-tamp-compaction")
    for event in raw.parse():
        events.append(event.type)
        if event.type == "response.output_text.delta":
            text += event.delta
    out["stream"] = {"events": events, "text": text, "compaction": compaction}

    with client.responses.stream(**request) as stream:
        final = stream.get_final_response()
    out["stream_helper"] = {
        "text": final.output_text,
        "types": [item.type for item in final.output],
    }

    compacted = client.responses.compact(model="gpt-test", input=conversation["input"])
    out["compact"] = {
        "object": compacted.object,
        "types": [item.type for item in compacted.output],
    }

    raw = client.responses.with_raw_response.create(
        model="gpt-test", input="And then?", previous_response_id="resp_earlier"
    )
    out["previous"] = {
        "text": raw.parse().output_text,
        "compaction": raw.headers.get("x-tamp-compaction"),
    }

    failing = openai.OpenAI(
        api_key=KEY,
        base_url=base_url + "/v1",
        max_retries=2,
        default_headers={"x-mock-fail": "400:99:r400-" + run_id},
    )
    try:
        failing.responses.create(model="gpt-test", input="hello")
        out["bad_request"] = None
    except openai.BadRequestError as e:
        out["bad_request"] = {"class": type(e).__name__, "status": e.status_code}
    return out


def main():
    sdk, base_url, conversation_file, run_id = sys.argv[1:5]
    with open(conversation_file) as f:
        conversation = json.load(f)
    scenarios = {
        "anthropic": anthropic_scenarios,
        "openai": openai_scenarios,
        "responses": responses_scenarios,
    }[sdk]
    print(json.dumps(scenarios(base_url, conversation, run_id)))


if __name__ == "__main__":
    main()

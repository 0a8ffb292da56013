#!/usr/bin/env python3
"""Compare two llama.cpp servers' speed on the same recorded summarizer request.

    python3 compare-servers.py [ANSWERS.jsonl] [PORT_A=8094] [PORT_B=8093] [ROUNDS=2]

Sends the first request of a recording (default: planted-anchored-qwen.answers.jsonl, a
structured call of about 5,000 tokens) to each server in turn, ROUNDS times, and prints
each server's reading and writing rate from its own `timings`, then B's rates as a multiple
of A's. Each request opens with a nonce so that neither server reuses the prompt it read
last. Run it with nothing else on the machine: the two servers share its cores, one at a time.
For a portable build of llama.cpp's server (A) against serve-native.sh (B); standard
library only.
"""
import json
import sys
import urllib.request
import uuid
from pathlib import Path

here = Path(__file__).resolve().parent
answers = Path(sys.argv[1]) if len(sys.argv) > 1 else here / "planted-anchored-qwen.answers.jsonl"
ports = [int(sys.argv[2]) if len(sys.argv) > 2 else 8094, int(sys.argv[3]) if len(sys.argv) > 3 else 8093]
rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 2

request = json.loads(answers.read_text().splitlines()[0])["request"]


def body():
    # The request as tamp's OpenAI-compatible provider sends it, with a nonce first.
    messages = [
        {"role": "system", "content": f"[{uuid.uuid4()}] {request['system']}"},
        {"role": "user", "content": request["prompt"]},
    ]
    out = {
        "model": "qwen2.5-coder",
        "messages": messages,
        "max_tokens": request["max_output_tokens"],
        "temperature": request.get("temperature") or 0.0,
    }
    if request.get("response_schema_json"):
        out["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "summary", "strict": True, "schema": json.loads(request["response_schema_json"])},
        }
    return json.dumps(out).encode()


def timings(port):
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions", body(), {"content-type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=3600) as r:
        t = json.load(r)["timings"]
    return t["prompt_n"], t["prompt_ms"], t["predicted_n"], t["predicted_ms"]


totals = {port: [0, 0.0, 0, 0.0] for port in ports}
for round in range(rounds):
    for port in ports:
        got = timings(port)
        for i, v in enumerate(got):
            totals[port][i] += v
        print(f"round {round + 1}, :{port}: read {got[0]} tokens at {got[0] / got[1] * 1000:.1f}/s, "
              f"wrote {got[2]} at {got[2] / got[3] * 1000:.1f}/s", flush=True)

rates = {}
for port, (pn, pms, gn, gms) in totals.items():
    rates[port] = (pn / pms * 1000, gn / gms * 1000)
    print(f":{port} overall: read {rates[port][0]:.1f} tokens/s, wrote {rates[port][1]:.1f} tokens/s")
a, b = ports
print(f":{b} ÷ :{a}: reading {rates[b][0] / rates[a][0]:.2f}x, writing {rates[b][1] / rates[a][1]:.2f}x")

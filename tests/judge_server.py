"""A scripted OpenAI-compatible chat server on 127.0.0.1, for judge failure modes a real
LLM won't produce on demand: garbage JSON, 429 rate limits, 5xx, slow answers, outages.

Its answers come from a rule-based "judge": decomposition returns every capitalised
word or number of the answer as a claim; verification says "supported" when the claim
mentions a word of `truths`.  `script` (a list) overrides the next answers in order:
an int is an HTTP status, a float is a delay in seconds, a str is the raw content,
bytes are a raw HTTP 200 body (not JSON: a proxy's error page).  `down` (an HTTP
status) answers every request with it; a decomposition asked with fewer than
`min_tokens` tokens, or of an answer longer than `truncate_over` characters, is
cut off (finish_reason "length").
"""
from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ScriptedJudge:
    def __init__(self, truths: tuple[str, ...] = ("Canberra", "Paris", "1945")):
        self.truths = truths
        self.script: list = []
        self.down: int | None = None
        self.min_tokens = 0
        self.truncate_over: int | None = None
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> "ScriptedJudge":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- the rule-based judge ------------------------------------------------------------
    def answer(self, messages: list[dict]) -> str:
        user = messages[1]["content"]
        if "Answer:" in user:  # decomposition
            answer = user.split("Answer:", 1)[1].split("\n\nList every", 1)[0].strip()
            words = re.findall(r"\b(?:[A-Z][a-z]+|\d{3,4})\b", answer)
            return json.dumps({"claims": [{"claim": f"The answer mentions {w}.", "span": w} for w in words]})
        claim = user.split("Claim:", 1)[1].split("\n", 1)[0]
        verdict = "supported" if any(t in claim for t in self.truths) else "unsupported"
        return json.dumps({"verdict": verdict, "reason": "rule"})

    def _handler(self):
        judge = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _send(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._send(200, {"object": "list", "data": [{"id": "scripted-judge"}]})

            def do_POST(self):
                payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with judge.lock:
                    judge.requests.append({"payload": payload, "auth": self.headers.get("Authorization")})
                    step = judge.script.pop(0) if judge.script else None
                if step is None and judge.down is not None:
                    step = judge.down
                if isinstance(step, float):
                    time.sleep(step)
                    step = None
                if isinstance(step, int):
                    self._send(step, {"error": {"message": f"scripted {step}"}})
                    return
                if isinstance(step, bytes):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html")
                    self.send_header("Content-Length", str(len(step)))
                    self.end_headers()
                    self.wfile.write(step)
                    return
                content = step if isinstance(step, str) else judge.answer(payload["messages"])
                finish = "stop"
                user = payload["messages"][1]["content"]
                if step is None and "Answer:" in user:
                    answer = user.split("Answer:", 1)[1].split("\n\nList every", 1)[0].strip()
                    if payload.get("max_tokens", 0) < judge.min_tokens or (
                            judge.truncate_over is not None and len(answer) > judge.truncate_over):
                        content, finish = content[: len(content) // 2], "length"
                self._send(200, {"choices": [{"message": {"role": "assistant", "content": content},
                                              "finish_reason": finish}],
                                 "usage": {"prompt_tokens": 10, "completion_tokens": 5}})

        return Handler

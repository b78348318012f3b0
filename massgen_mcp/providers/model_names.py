"""Which model strings litellm can route, checked before a run writes anything.

litellm refuses a model whose provider it cannot tell (``opnai/gpt-4o-mini``, ``gpt4o``) only
when the first call is made, after the session folder exists, with a paragraph of text and a
link it mangles. :func:`model_problem` says the same thing up front, in one line, with the
string the user probably meant: as ``models`` or a config file loads (named as that input
names it, :mod:`massgen_mcp.team`), and in every run's preflight (:mod:`.preflight`).

litellm costs ~3 s to import, so nothing here imports it: the provider names are a copy of
litellm's ``provider_list`` (``tests/system/test_errors_first.py`` checks the copy against the
installed litellm), and bare model names (``gpt-4o``) are looked up in litellm's own model
map (:mod:`massgen_mcp.providers.model_map`; which provider serves them is
:func:`massgen_mcp.providers.kinds.provider_of`'s).
"""

from __future__ import annotations

import difflib
import sys

from massgen_mcp.providers.kinds import OWN_PREFIXES, kind_problem
from massgen_mcp.providers.model_map import bare_models, model_map

__all__ = ["bare_model_guess", "model_map", "model_problem"]

# litellm.provider_list of the litellm versions pyproject.toml allows (the union: a name that
# only a newer release routes still passes this check, and litellm itself then says so).
LITELLM_PROVIDERS = frozenset({
    "a2a", "a2a_agent", "abliteration", "ai21", "ai21_chat", "aiand", "aiml", "aiohttp_openai",
    "amazon_nova", "anthropic", "anthropic_text", "apertis", "assemblyai", "auto_router",
    "aws_polly", "aws_textract", "azure", "azure_ai", "azure_speech", "azure_text", "baseten",
    "bedrock", "bedrock_mantle", "bespoke", "bigmodel", "black_forest_labs", "bytez",
    "cerebras", "charity_engine", "chatgpt", "chutes", "clarifai", "clf_ai_gateway",
    "cloudflare", "codestral", "cognition", "cohere", "cohere_chat", "cometapi", "compactifai",
    "coralbricks", "cortecs", "cursor", "custom", "custom_openai", "darkbloom", "dashscope",
    "databricks", "databricks_agent", "datarobot", "deepgram", "deepinfra", "deepseek",
    "docker_model_runner", "dotprompt", "edenai", "elevenlabs", "empower", "eu_jev", "fal_ai",
    "featherless_ai", "fireworks_ai", "friendliai", "galadriel", "gdc", "gemini", "gigachat",
    "github", "github_copilot", "gradient_ai", "groq", "helicone", "heroku", "hosted_vllm",
    "hostinger_router", "huggingface", "humanloop", "hyperbolic", "inception", "inferenceapis",
    "infinity", "jina_ai", "kyma", "lambda_ai", "langflow", "langfuse", "langgraph", "laya",
    "lemonade", "libertai", "litellm_agent", "litellm_proxy", "llamafile", "lm_studio",
    "manus", "maritalk", "meta", "meta_llama", "microsoft_365_copilot", "milvus", "minimax",
    "mistral", "modelscope", "mongodb", "moonshot", "morph", "nace", "nadir", "nano-gpt",
    "nebius", "neosantara", "nlp_cloud", "novita", "nscale", "nvidia_nim", "nvidia_riva",
    "oci", "ollama", "ollama_chat", "oobabooga", "openai", "openai_like", "opencode_go",
    "openinfer", "openrouter", "opensearch", "ovhcloud", "parasail", "perplexity", "petals",
    "pg_vector", "pinstripes", "poe", "predibase", "prism", "publicai", "qwen_ai_platform",
    "qwencloud", "ragflow", "recraft", "reducto", "refuseless", "reka", "replicate",
    "runwayml", "s3_vectors", "sagemaker", "sagemaker_chat", "sagemaker_nova", "sail",
    "sambanova", "sap", "scaledown", "scaleway", "scx-ai", "snowflake", "soniox", "stability",
    "strands_decider", "streamlake", "synthetic", "tencent", "tensormesh",
    "text-completion-codestral", "text-completion-inception", "text-completion-openai",
    "together_ai", "topaz", "transcribe", "triton", "typesafe", "v0", "valkey",
    "vercel_ai_gateway", "vertex_ai", "vertex_ai_beta", "vllm", "volcengine", "voyage",
    "wandb", "watsonx", "watsonx_text", "xai", "xiaomi_mimo", "xinference", "zai", "zerogpu",
})
# Names people write for a provider that litellm spells otherwise (MassGen's backend types,
# company names): difflib would not find most of these.
_ALIASES = {
    "claude": "anthropic", "google": "gemini", "grok": "xai", "x-ai": "xai",
    "together": "together_ai", "fireworks": "fireworks_ai", "lmstudio": "lm_studio",
    "mistralai": "mistral", "azure_openai": "azure",
    "vertex": "vertex_ai", "vertexai": "vertex_ai", "kimi": "moonshot",
}
# Where a bare name's provider can be told from its start (for "did you mean xai/grok-3?").
_FAMILIES = (("gpt", "openai"), ("o1", "openai"), ("o3", "openai"), ("o4", "openai"),
             ("claude", "anthropic"), ("gemini", "gemini"), ("grok", "xai"),
             ("deepseek", "deepseek"), ("mistral", "mistral"), ("kimi", "moonshot"),
             ("glm", "zai"))
_EXAMPLES = "openai, anthropic, gemini, xai, openrouter, ollama_chat, hosted_vllm"
# The offline models that run in this process (local/<name>): the bundled one, then the
# catalog of ``models pull`` (providers.model_hub; a test keeps the two lists the same). A bare
# "smollm2" means one of these, not a model litellm routes.
EMBEDDED_MODELS = ("smollm2", "qwen2.5-1.5b", "qwen2.5-0.5b")


def model_problem(model: str, written: str | None = None) -> str | None:
    """Why litellm could not route ``model``, with the closest string it could, or None.

    ``written`` is the text to quote instead when the model came from the environment (a
    config's ``${VAR}``): then no part of the value is quoted and no guess is made from it,
    since a guess would repeat it."""
    prefix, slash, rest = model.partition("/")
    if slash:
        if prefix in OWN_PREFIXES:  # ours, not litellm's: the row says what the rest must be
            return kind_problem(model, written)
        if prefix in LITELLM_PROVIDERS or prefix in _registered():
            return None
        if written is not None:
            return (f"{written!r} does not start with a known provider (provider/model); "
                    f"use one such as {_EXAMPLES}")
        guess = _provider_guess(prefix)
        hint = (f"did you mean {guess + '/' + rest!r}?" if guess
                else f"use one litellm knows, e.g. {_EXAMPLES}")
        return f"unknown provider {prefix!r} in {model!r}; {hint}"
    known = bare_models()
    # Fine-tuned OpenAI models (ft:gpt-4o-mini:org::id) are routed by their prefix.
    if known is None or model in known or model.startswith("ft:"):
        return None
    guess = bare_model_guess(model) if written is None else None
    shown = model if written is None else written
    hint = f"did you mean {guess!r}?" if guess else (
        f"write it as provider/model: ollama_chat/{shown} for Ollama, openai/{shown} for "
        "another OpenAI-compatible server (with its base_url)")
    return f"cannot tell which provider serves {shown!r}; {hint}"


def _registered() -> list[str]:
    """Providers a script registered with litellm in this process (``custom_provider_map``);
    none unless litellm is already imported, and then asking costs nothing."""
    litellm = sys.modules.get("litellm")
    custom = getattr(litellm, "_custom_providers", None) if litellm else None
    return [str(name) for name in custom] if isinstance(custom, list) else []


def _provider_guess(prefix: str) -> str | None:
    lowered = prefix.lower()
    if lowered in LITELLM_PROVIDERS:
        return lowered
    if lowered in _ALIASES:
        return _ALIASES[lowered]
    close = difflib.get_close_matches(lowered, sorted(LITELLM_PROVIDERS), n=1, cutoff=0.75)
    return close[0] if close else None


def bare_model_guess(model: str) -> str | None:
    """The model string a bare name most likely meant (``gpt4o``: ``gpt-4o``, ``grok-3``:
    ``xai/grok-3``), or None."""
    lowered = model.lower()
    embedded = difflib.get_close_matches(lowered, EMBEDDED_MODELS, n=1, cutoff=0.8)
    if embedded:
        return f"local/{embedded[0]}"
    known = bare_models() or {}
    if lowered in known:
        return lowered
    chat = sorted(name for name in known if not name.startswith(("ft:", "text-embedding")))
    close = difflib.get_close_matches(lowered, chat, n=1, cutoff=0.8)
    if close:
        return close[0]
    for start, provider in _FAMILIES:  # "grok-3" is xai's
        if lowered.startswith(start):
            return f"{provider}/{model}"
    return None
